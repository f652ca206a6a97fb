//! The single-level store in the kernel: periodic system-wide checkpoints and the restart
//! from the newest one (EROS 3.5, KeyKOS "checkpoint"). The store itself — its disk format,
//! log, recovery and mirrors — is the portable `holdfast-store` crate; this module decides
//! what goes into each checkpoint and when.
//!
//! A checkpoint:
//! 1. **Snapshot**, with the world stopped (no process runs while the kernel does): every
//!    process's registers and run state are written into its root node, every translation
//!    is dropped so that no page can be written without a fault, the dirty nodes are encoded
//!    and the dirty pages listed (their contents stay where they are: copy on write).
//! 2. **Stabilization**, in steps of [`STEP_OBJECTS`] objects at each timer tick and in the
//!    idle loop: the checkpoint directory, the node images and the pages go to the log. A
//!    page about to be written before its turn is copied first ([`before_page_write`]).
//! 3. **Commit**: the store flushes, writes the commit record and flushes again.
//! 4. **Migration** home, in steps, until the log is free for the next checkpoint.
//!
//! A restart reads the checkpoint directory (page 0) and every node and page it counts, and
//! rebuilds the process table from the root nodes ([`crate::process::restore`]).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use holdfast_objects::cache::NodeSnapshot;
use holdfast_objects::directory::{DIRECTORY_BYTES, Directory, DirectoryProcess};
use holdfast_objects::image::NODE_IMAGE_BYTES;
use holdfast_objects::{Node, ObjectCache, ObjectId, Version};
use holdfast_store::{CheckpointPhase, NODE_SIZE, Store, StoreError};
use spin::Mutex;

use crate::arch::{self, timer};
use crate::drivers::Block;
use crate::memory::PAGE_BYTES;
use crate::objects::{Frame, OBJECTS, Objects};
use crate::{println, process};

const _: () = assert!(NODE_IMAGE_BYTES == NODE_SIZE && DIRECTORY_BYTES == PAGE_BYTES);

/// The checkpoint directory's page id: object ids start at 1.
const DIRECTORY_PAGE: ObjectId = ObjectId(0);
/// Objects written (or log blocks migrated) per step: bounds the time a step holds the
/// kernel (about 256 KiB of disk writes).
const STEP_OBJECTS: usize = 64;
/// A checkpoint is due this often unless the boot command line says otherwise
/// (`holdfast.checkpoint-interval-ms=N`).
pub const DEFAULT_INTERVAL_MS: u64 = 5000;
/// The log fill at which a checkpoint is taken at once (DESIGN.md).
const FORCED_LOG_FILL: f64 = 0.65;

/// A page of the snapshot not yet in the log.
enum SnapshotPage {
    /// Unchanged since the snapshot: its frame still holds the snapshot's contents.
    Live(Version),
    /// Written after the snapshot: the snapshot's contents, copied just before.
    Copied(Version, Box<[u8; PAGE_BYTES]>),
}

struct Stabilization {
    generation: u64,
    snapshot_tsc: u64,
    snapshot_pause_us: u64,
    directory: Option<Box<[u8; DIRECTORY_BYTES]>>,
    nodes: Vec<NodeSnapshot>,
    pages: BTreeMap<ObjectId, SnapshotPage>,
    node_count: usize,
    page_count: usize,
}

pub struct Persistence {
    store: Store<Block>,
    interval_ticks: u64,
    next_snapshot_tick: u64,
    stabilization: Option<Stabilization>,
    /// Set when a checkpoint failed: the store is no longer written, and the system says so.
    failed: bool,
}

static PERSISTENCE: Mutex<Option<Persistence>> = Mutex::new(None);

/// What the boot found on its disk.
pub enum Opened {
    /// No disk, or one that is not a Holdfast store: nothing persists.
    NoStore(String),
    /// A store with no checkpoint yet: build the initial system, then checkpoint it.
    Fresh(Store<Block>),
    /// A store with a committed checkpoint: restart from it.
    Checkpointed(Store<Block>),
}

/// Opens the store on the disks that hold it (see [`crate::mirrors::select`]: a blank disk
/// beside the store is resilvered, a foreign one refused and left untouched) and prints the
/// mirror status. No store on any disk is not an error (the system runs without persistence
/// and says so); a damaged store is, and nothing is started on it.
pub fn open(disks: Vec<Block>) -> Result<Opened, String> {
    let disks = match crate::mirrors::select(disks) {
        Ok(disks) => disks,
        Err(why) => return Ok(Opened::NoStore(why)),
    };
    match Store::open(disks) {
        Ok(store) => {
            crate::mirrors::opened(&store);
            Ok(if store.checkpoint_generation() == 0 { Opened::Fresh(store) } else { Opened::Checkpointed(store) })
        }
        Err(StoreError::Corrupt(corruption))
            if corruption.region == holdfast_store::Region::Superblock
                && corruption.check == holdfast_store::Check::Magic =>
        {
            Ok(Opened::NoStore("the disk is not a Holdfast store (left untouched)".to_string()))
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Reads the newest checkpoint into the object cache and the process table.
pub fn restore(store: &mut Store<Block>) -> Result<usize, String> {
    let failed = |what: &str, error: &dyn core::fmt::Display| alloc::format!("{what}: {error}");
    let mut block = Box::new([0u8; PAGE_BYTES]);
    store.read_page(DIRECTORY_PAGE, &mut block).map_err(|error| failed("reading the checkpoint directory", &error))?;
    let directory = Directory::decode(&block).map_err(|error| failed("checkpoint directory", &error))?;
    let mut objects = OBJECTS.lock();
    for id in (1..directory.next_node_id).map(ObjectId) {
        let (version, image) = store.read_node(id).map_err(|error| failed("reading a node", &error))?;
        let (node, resume_version) =
            Node::decode(&image).map_err(|error| alloc::format!("node {}: {error}", id.0))?;
        objects.cache.insert_stored_node(id, version, resume_version, node);
    }
    for id in (1..directory.next_page_id).map(ObjectId) {
        let mut frame = Frame::for_stored_page();
        let version = store.read_page(id, frame.bytes_mut()).map_err(|error| failed("reading a page", &error))?;
        if objects.cache.insert_stored_page(id, version, frame).is_err() {
            unreachable!("ids are read once each");
        }
    }
    objects.set_next_ids((directory.next_node_id, directory.next_page_id));
    let processes: Vec<(ObjectId, &'static str)> = directory
        .processes
        .into_iter()
        .map(|DirectoryProcess { root, name }| (root, &*String::leak(name)))
        .collect();
    process::restore(&objects, &processes)?;
    Ok(processes.len())
}

/// Starts checkpointing to `store`, the first checkpoint at once (a fresh store holds
/// nothing until then).
pub fn start(store: Store<Block>, interval_ms: u64) -> Result<(), String> {
    let geometry = store.geometry();
    let (next_node, next_page) = OBJECTS.lock().next_ids();
    if next_node > geometry.node_count || next_page > geometry.page_count {
        return Err(alloc::format!(
            "the system has {} nodes and {} pages; the store holds {} and {} (format a larger one)",
            next_node - 1,
            next_page - 1,
            geometry.node_count - 1,
            geometry.page_count - 1
        ));
    }
    *PERSISTENCE.lock() = Some(Persistence {
        store,
        interval_ticks: (interval_ms * timer::TIMER_HZ).div_ceil(1000).max(1),
        next_snapshot_tick: timer::ticks(),
        stabilization: None,
        failed: false,
    });
    Ok(())
}

/// Page `id` is about to be written (mapped writable, or written by the kernel): marks it
/// dirty and, if the checkpoint being stabilized has not stored it yet, copies its snapshot
/// contents first. The caller holds the object cache.
pub fn before_page_write(cache: &ObjectCache<Frame>, id: ObjectId) {
    cache.mark_page_dirty(id);
    let mut persistence = PERSISTENCE.lock();
    let Some(stabilization) = persistence.as_mut().and_then(|persistence| persistence.stabilization.as_mut()) else {
        return;
    };
    if let Some(page) = stabilization.pages.get_mut(&id)
        && let SnapshotPage::Live(version) = *page
        && let Some(frame) = cache.page_frame(id)
    {
        *page = SnapshotPage::Copied(version, Box::new(*frame.bytes()));
    }
}

/// One step of checkpoint work, if any is due: called at each timer tick (with no process
/// running) and from the idle loop. Returns whether it did anything.
pub fn step() -> bool {
    let mut objects = OBJECTS.lock();
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut().filter(|persistence| !persistence.failed) else {
        return false;
    };
    let result = persistence.step(&mut objects);
    match result {
        Ok(worked) => worked,
        Err(error) => {
            // The store is left as its last commit made it, and a restart comes back to
            // that; this run goes on without persistence rather than stop serving.
            println!("holdfast: checkpoint failed: {error}; no further checkpoints this run");
            persistence.failed = true;
            false
        }
    }
}

impl Persistence {
    fn step(&mut self, objects: &mut Objects) -> Result<bool, String> {
        // The mirrors: a blank or stale one resilvered in bounded steps beside the checkpoint
        // work, repairs and status changes reported.
        let resilvered = crate::mirrors::step(&mut self.store);
        if self.stabilization.is_some() {
            return self.stabilize_step(objects).map(|()| true);
        }
        if let CheckpointPhase::Migrating { .. } = self.store.checkpoint_phase() {
            self.store.migrate_step(STEP_OBJECTS).map_err(|error| error.to_string())?;
            return Ok(true);
        }
        let due = timer::ticks() >= self.next_snapshot_tick || self.store.log_fill_ratio() >= FORCED_LOG_FILL;
        if !due {
            return Ok(resilvered);
        }
        self.snapshot(objects)?;
        Ok(true)
    }

    fn snapshot(&mut self, objects: &mut Objects) -> Result<(), String> {
        let started = arch::read_tsc();
        process::write_back(objects);
        process::drop_all_translations(objects);
        let (next_node_id, next_page_id) = objects.next_ids();
        let directory = Directory {
            next_node_id,
            next_page_id,
            processes: process::roots_and_names()
                .into_iter()
                .map(|(root, name)| DirectoryProcess { root, name: name.to_string() })
                .collect(),
        };
        let directory = directory.encode().map_err(|error| error.to_string())?;
        let nodes = objects.cache.take_dirty_nodes();
        let pages: BTreeMap<ObjectId, SnapshotPage> = objects
            .cache
            .take_dirty_pages()
            .into_iter()
            .map(|(id, version)| (id, SnapshotPage::Live(version)))
            .collect();
        let generation = self.store.begin_checkpoint().map_err(|error| error.to_string())?;
        let snapshot_tsc = arch::read_tsc();
        self.stabilization = Some(Stabilization {
            generation,
            snapshot_tsc,
            snapshot_pause_us: timer::tsc_to_microseconds(snapshot_tsc - started),
            directory: Some(Box::new(directory)),
            node_count: nodes.len(),
            page_count: pages.len(),
            nodes,
            pages,
        });
        self.next_snapshot_tick = timer::ticks() + self.interval_ticks;
        Ok(())
    }

    fn stabilize_step(&mut self, objects: &Objects) -> Result<(), String> {
        let stabilization = self.stabilization.as_mut().expect("called while stabilizing");
        let store_error = |error: StoreError| error.to_string();
        let mut budget = STEP_OBJECTS;
        if let Some(directory) = stabilization.directory.take() {
            self.store.checkpoint_write_page(DIRECTORY_PAGE, Version(0), &directory).map_err(store_error)?;
            budget -= 1;
        }
        while budget > 0
            && let Some(node) = stabilization.nodes.pop()
        {
            self.store.checkpoint_write_node(node.id, node.version, &node.image).map_err(store_error)?;
            budget -= 1;
        }
        while budget > 0
            && let Some((id, page)) = stabilization.pages.pop_first()
        {
            match page {
                SnapshotPage::Live(version) => {
                    let frame = objects.cache.page_frame(id).expect("pages are never removed");
                    self.store.checkpoint_write_page(id, version, frame.bytes()).map_err(store_error)?;
                }
                SnapshotPage::Copied(version, bytes) => {
                    self.store.checkpoint_write_page(id, version, &bytes).map_err(store_error)?;
                }
            }
            budget -= 1;
        }
        if !stabilization.nodes.is_empty() || !stabilization.pages.is_empty() {
            return Ok(());
        }
        let generation = self.store.commit_checkpoint().map_err(store_error)?;
        debug_assert_eq!(generation, stabilization.generation);
        let stabilization_us = timer::tsc_to_microseconds(arch::read_tsc() - stabilization.snapshot_tsc);
        self.store.note_checkpoint_stabilization_seconds(stabilization_us as f64 / 1e6);
        println!(
            "holdfast: checkpoint {generation} committed: {} nodes, {} pages, snapshot pause {} us, stabilized in {} ms",
            stabilization.node_count,
            stabilization.page_count,
            stabilization.snapshot_pause_us,
            stabilization_us / 1000
        );
        self.stabilization = None;
        Ok(())
    }
}

/// What the kernel does when no process can run: checkpoint work, else wait for the timer.
pub fn idle() -> ! {
    loop {
        if process::any_runnable() {
            process::switch_to_next()
        }
        if !step() {
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
    }
}
