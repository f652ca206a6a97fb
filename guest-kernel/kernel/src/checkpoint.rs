//! The single-level store in the kernel: periodic system-wide checkpoints and the restart
//! from the newest one (EROS 3.5, KeyKOS "checkpoint"). The store itself — its disk format,
//! log, recovery and mirrors — is the portable `holdfast-store` crate; this module decides
//! what goes into each checkpoint and when.
//!
//! A checkpoint:
//! 1. **Snapshot**, with the world stopped (no process runs while the kernel does): a
//!    consistency check of the process table; every process's registers and run state
//!    written into its root node; every translation dropped, so that no page can be written
//!    without a fault (the page tables are freed later, a few at each step); the dirty
//!    nodes encoded and the list of dirty pages taken whole (their contents stay where they
//!    are: copy on write). Nothing here visits every page, so that the pause does not grow
//!    with memory.
//! 2. **Stabilization**, in steps of [`STEP_OBJECTS`] objects at each timer tick and in the
//!    idle loop: the checkpoint directory, the node images and the pages go to the log. A
//!    page about to be written before its turn is copied first ([`before_page_write`]).
//! 3. **Commit**: the store flushes, writes the commit record and flushes again.
//! 4. **Migration** home, in steps, until the log is free for the next checkpoint.
//!
//! A checkpoint is due at the end of the interval, when the log is 65 % full, and when the
//! dirty pages near what the log can take. A checkpoint that fails is abandoned (its
//! snapshot's objects are dirty again), counted, printed, and taken again at the next
//! interval; only a store that can no longer be written stops the system ([`Failure`]).
//! Each step also writes queued journal commits (group commit: a commit waits for a step
//! while other processes can run, and is written at once on its invoker's path otherwise,
//! [`journal_commit`]), resilvers and scrubs the mirrors. When memory runs short, clean
//! pages and nodes are evicted ([`make_room`]), after a whole checkpoint at once if too few
//! pages are clean.
//!
//! A restart reads the checkpoint directory (page 0 and the pages it chains) and rebuilds
//! the process table from the root nodes ([`crate::process::restore`]); every other node
//! is loaded when first used ([`load_node`]), each page's version when the page is first
//! named ([`load_page_version`]) and its bytes when used ([`read_page`]).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use holdfast_objects::cache::{NodeSnapshot, StoredNode};
use holdfast_objects::directory::{self, DIRECTORY_BYTES, Directory, DirectoryBlock, DirectoryProcess, DirectoryReader};
use holdfast_objects::image::NODE_IMAGE_BYTES;
use holdfast_objects::{Node, ObjectCache, ObjectId, Version};
use holdfast_store::{CheckpointPhase, NODE_SIZE, Store, StoreError};
use spin::Mutex;

use crate::arch::{self, timer};
use crate::drivers::Block;
use crate::memory::{self, PAGE_BYTES};
use crate::objects::{Frame, OBJECTS, Objects};
use crate::{println, process};

const _: () = assert!(NODE_IMAGE_BYTES == NODE_SIZE && DIRECTORY_BYTES == PAGE_BYTES);

/// The checkpoint directory's first page: object ids start at 1. Its other pages have ids
/// of their own, set aside when the directory grows ([`Persistence::directory_pages`]).
const DIRECTORY_PAGE: ObjectId = ObjectId(0);
/// Objects written (or log blocks migrated) per step: bounds the time a step holds the
/// kernel (about 256 KiB of disk writes).
const STEP_OBJECTS: usize = 64;
/// A checkpoint is due this often unless the boot command line says otherwise
/// (`holdfast.checkpoint-interval-ms=N`).
pub const DEFAULT_INTERVAL_MS: u64 = 5000;
/// The log fill at which a checkpoint is taken at once (DESIGN.md).
const FORCED_LOG_FILL: f64 = 0.65;
/// The log fill above which journal commits wait for the forced checkpoint's migration to
/// free the log: what is left is for the checkpoint itself.
const JOURNAL_LOG_FILL_MAX: f64 = 0.8;

struct Stabilization {
    generation: u64,
    snapshot_tsc: u64,
    snapshot_pause_us: u64,
    /// The directory's blocks and their pages, stored first.
    directory: Vec<(ObjectId, Box<DirectoryBlock>)>,
    nodes: Vec<NodeSnapshot>,
    /// Every node of the snapshot, to make dirty again if the checkpoint is abandoned.
    node_ids: Vec<ObjectId>,
    /// The snapshot's pages, stored in order from `next_page` on. A page not yet stored
    /// whose frame still holds the snapshot's contents is stored from its frame; one written
    /// since has its snapshot contents and version in `copies`.
    pages: Vec<ObjectId>,
    next_page: usize,
    copies: BTreeMap<ObjectId, (Version, Box<[u8; PAGE_BYTES]>)>,
    node_count: usize,
    page_count: usize,
}

pub struct Persistence {
    store: Store<Block>,
    interval_ms: u64,
    interval_ticks: u64,
    next_snapshot_tick: u64,
    stabilization: Option<Stabilization>,
    /// When each queued journal commit was made (TSC), by ticket: for its latency.
    journal_submitted_tsc: BTreeMap<u64, u64>,
    kernel_counters: KernelCounters,
    /// The scrub under way: one after every boot, a group of home blocks per step.
    scrub: Option<holdfast_store::ScrubCursor>,
    /// Timer ticks with processes running since the last scrub step.
    ticks_since_scrub: u32,
    /// The directory's pages after page 0, in chain order: set aside once, used again by
    /// every checkpoint, more set aside as the processes grow.
    directory_pages: Vec<ObjectId>,
    /// Checkpoints failed since the last commit: nothing since that commit is persisted
    /// (but the journal's commits) while this is not zero. `checkpoint status` says it.
    failures_since_commit: u64,
}

/// Why checkpoint or journal work failed.
struct Failure {
    what: String,
    /// The store can no longer be written (every mirror failed): the system stops.
    store_lost: bool,
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        // A device error reaches here only when no other mirror could take the request.
        let store_lost = matches!(error, StoreError::Device { .. } | StoreError::NoMirror);
        Self { what: error.to_string(), store_lost }
    }
}

impl Failure {
    /// A failure the next interval's checkpoint may not meet (a consistency check, a
    /// directory or an object the store has no room for).
    fn retry(what: String) -> Self {
        Self { what, store_lost: false }
    }
}

/// What the kernel measures about the store, beside the store's own counters.
#[derive(Default)]
struct KernelCounters {
    snapshot_pause_seconds_last: f64,
    snapshot_pause_seconds_max: f64,
    journal_commit_seconds_sum: f64,
    journal_commit_seconds_count: u64,
    /// Disk writes of journal commits: fewer than the commits when they share them.
    journal_writes_total: u64,
    /// Checkpoints (and journal writes) that failed and were retried.
    checkpoint_failures_total: u64,
    evicted_pages_total: u64,
    evicted_nodes_total: u64,
    loaded_nodes_total: u64,
}

static PERSISTENCE: Mutex<Option<Persistence>> = Mutex::new(None);

/// The checkpoint generation that fails once, with every object written, just before its
/// commit (`holdfast.test-checkpoint-failure=G`, for tests); 0 for none.
static INJECTED_FAILURE_GENERATION: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub fn inject_failure(generation: u64) {
    INJECTED_FAILURE_GENERATION.store(generation, core::sync::atomic::Ordering::Relaxed);
}

/// The store's boot count (0 without a store): the clock tells programs, so that they can
/// tell a restart.
static BOOT_COUNT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub fn boot_count() -> u64 {
    BOOT_COUNT.load(core::sync::atomic::Ordering::Relaxed)
}

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
    // `select` kept only disks of the store (or damaged ones, or a blank beside the store):
    // any error now is the store's.
    let store = Store::open(disks).map_err(|error| error.to_string())?;
    crate::mirrors::opened(&store);
    Ok(if store.checkpoint_generation() == 0 { Opened::Fresh(store) } else { Opened::Checkpointed(store) })
}

/// Hands `store` to the kernel: pages live on it from now on, and checkpoints go to it
/// once processes run (the first at once: a fresh store holds nothing until then, and a
/// restart's repairs and resilvering are kept).
pub fn attach(store: Store<Block>, interval_ms: u64) {
    BOOT_COUNT.store(store.inspect().boot_count, core::sync::atomic::Ordering::Relaxed);
    let mut objects = OBJECTS.lock();
    objects.set_store_backed();
    objects.cache.set_node_loader(load_node);
    objects.cache.set_page_version_loader(load_page_version);
    drop(objects);
    *PERSISTENCE.lock() = Some(Persistence {
        store,
        interval_ms,
        interval_ticks: interval_ticks(interval_ms),
        next_snapshot_tick: timer::ticks(),
        stabilization: None,
        journal_submitted_tsc: BTreeMap::new(),
        kernel_counters: KernelCounters::default(),
        scrub: Some(holdfast_store::ScrubCursor::default()),
        ticks_since_scrub: 0,
        directory_pages: Vec::new(),
        failures_since_commit: 0,
    });
}

/// Rebuilds the system of the newest checkpoint: the ids of its nodes and pages (each node
/// loaded when used, each page's version read when the page is first named and its bytes
/// when used), and the process table, whose root nodes are loaded now. Nothing here reads
/// per object, so that a restart takes the same time whatever the store holds.
pub fn restore() -> Result<usize, String> {
    let failed = |what: &str, error: &dyn core::fmt::Display| alloc::format!("{what}: {error}");
    let mut guard = PERSISTENCE.lock();
    let store = &mut guard.as_mut().expect("attached first").store;
    let mut block = Box::new([0u8; PAGE_BYTES]);
    store.read_page(DIRECTORY_PAGE, &mut block).map_err(|error| failed("reading the checkpoint directory", &error))?;
    let mut reader = DirectoryReader::new(&block, store.geometry().page_count)
        .map_err(|error| failed("checkpoint directory", &error))?;
    while let Some(page) = reader.next_page() {
        store.read_page(page, &mut block).map_err(|error| failed("reading the checkpoint directory", &error))?;
        reader.add(&block).map_err(|error| failed("checkpoint directory", &error))?;
    }
    let (directory, directory_pages) = reader.finish().map_err(|error| failed("checkpoint directory", &error))?;
    guard.as_mut().expect("attached first").directory_pages = directory_pages;
    let mut objects = OBJECTS.lock();
    objects.cache.know_stored_nodes(directory.next_node_id);
    objects.cache.know_stored_pages(directory.next_page_id);
    objects.set_next_ids((directory.next_node_id, directory.next_page_id));
    drop(guard);
    let processes: Vec<(ObjectId, &'static str)> = directory
        .processes
        .into_iter()
        .map(|DirectoryProcess { root, name }| (root, &*String::leak(name)))
        .collect();
    process::restore(&objects, &processes)?;
    Ok(processes.len())
}

/// Whether the objects made so far fit the store's home ranges.
pub fn check_capacity() -> Result<(), String> {
    let geometry = with_store(|persistence| persistence.store.geometry()).ok_or("no store")?;
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
    Ok(())
}

/// The cache's node loader: node `id`'s newest committed version and slots, read from the
/// store. A node that cannot be read or decoded is reported and left absent, so that its
/// capabilities act as void and its bad data is never used.
///
/// Nodes are loaded wherever a lookup finds one absent, which must never be while the
/// store is held: what runs under it (the snapshot, journal and eviction) touches only
/// process root nodes and dirty nodes, which are never evicted.
pub fn load_node(id: ObjectId) -> Option<StoredNode> {
    let mut guard = PERSISTENCE.try_lock().expect("node loaded while the store is held");
    let persistence = guard.as_mut()?;
    let loaded = persistence.store.read_node(id).map_err(|error| error.to_string()).and_then(|(version, image)| {
        let (node, resume_version) = Node::decode(&image).map_err(|error| error.to_string())?;
        Ok(StoredNode { version, resume_version, node })
    });
    match loaded {
        Ok(stored) => {
            persistence.kernel_counters.loaded_nodes_total += 1;
            Some(stored)
        }
        Err(error) => {
            println!("holdfast: node {}: {error}; its capabilities act as void", id.0);
            None
        }
    }
}

/// The cache's page-version loader: page `id`'s newest committed version, from the store's
/// log directory or checksum table. A version that cannot be read is reported; the page's
/// capabilities then act as void. Like [`load_node`], never called with the store held.
pub fn load_page_version(id: ObjectId) -> Option<Version> {
    let mut guard = PERSISTENCE.try_lock().expect("page version read while the store is held");
    match guard.as_mut()?.store.page_version(id) {
        Ok(version) => Some(version),
        Err(error) => {
            println!("holdfast: page {}: {error}; its capabilities act as void", id.0);
            None
        }
    }
}

/// Reads page `id`'s newest committed contents from the store into `bytes`; returns its
/// version.
pub fn read_page(id: ObjectId, bytes: &mut [u8; PAGE_BYTES]) -> Result<Version, String> {
    let result = with_store(|persistence| persistence.store.read_page(id, bytes));
    match result {
        None => Err("no store".to_string()),
        Some(Err(error)) => Err(alloc::format!("page {}: {error}", id.0)),
        Some(Ok(version)) => Ok(version),
    }
}

/// A page is about to become dirty in a fault (the world is stopped and the scheduler
/// free): if the dirty pages would outgrow what the log can take, a checkpoint comes first.
/// If it fails, the failure is handled as any other ([`Persistence::failed`]) and the page
/// is written all the same.
pub fn limit_dirty_pages(objects: &mut Objects) {
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return;
    };
    if (objects.cache.dirty_page_count() as u64) < persistence.dirty_pages_max() || persistence.retry_pending() {
        return;
    }
    if let Err(failure) = persistence.checkpoint_now(objects) {
        persistence.failed(objects, failure);
    }
}

/// Heap kept free for the pages loaded while the scheduler is held (which cannot evict)
/// and for copies on write: below it, clean pages are evicted before another is loaded.
fn heap_free_target_bytes() -> usize {
    (memory::heap_bytes() / 8).max(4 << 20)
}

/// Whether the heap has room for another process's tables beyond the reserve kept for page
/// loads and copies on write, once clean pages are evicted if a store holds them.
pub fn room_for_process(objects: &mut Objects) -> bool {
    let room = || memory::heap_free_bytes() >= heap_free_target_bytes() + PROCESS_BYTES;
    if room() {
        return true;
    }
    // Without room, nothing is made: the failure to make room is the refusal.
    let _ = make_room(objects, &[]);
    room()
}

/// A process's kernel memory: its top page table and its entry in the table, rounded up.
const PROCESS_BYTES: usize = 2 * PAGE_BYTES;

/// While processes run, the scrub takes a step at one timer tick in this many.
const SCRUB_TICKS_APART: u32 = 10;

/// Pages evicted at once: each eviction drops every translation, so it is done in batches.
const EVICTION_BATCH_PAGES: usize = 512;
/// Nodes evicted with each batch of pages (about half a megabyte of them).
const EVICTION_BATCH_NODES: usize = 1024;

/// Makes room for pages to be loaded, if the heap runs low: evicts clean pages other than
/// `keep`, after a checkpoint if too few are clean (the world is stopped anyway), and clean
/// nodes other than the processes' root nodes. The caller holds the object cache but not
/// the scheduler.
pub fn make_room(objects: &mut Objects, keep: &[ObjectId]) -> Result<(), String> {
    if memory::heap_free_bytes() >= heap_free_target_bytes() {
        return Ok(());
    }
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return Ok(());
    };
    // A checkpoint's pages stay until stored (or, if it fails, dirty again).
    while persistence.stabilization.is_some() {
        if let Err(failure) = persistence.stabilize_step(objects) {
            persistence.failed(objects, failure);
        }
    }
    let mut victims = objects.cache.eviction_candidates(EVICTION_BATCH_PAGES, keep);
    if victims.len() < EVICTION_BATCH_PAGES / 2 && !persistence.retry_pending() {
        if let Err(failure) = persistence.checkpoint_now(objects) {
            persistence.failed(objects, failure);
        }
        victims = objects.cache.eviction_candidates(EVICTION_BATCH_PAGES, keep);
    }
    // Root nodes stay: the snapshot and the journal read them with the store held, when no
    // node may be loaded (see `load_node`).
    let roots: Vec<ObjectId> = process::roots_and_names().into_iter().map(|(root, _)| root).collect();
    process::drop_all_translations(objects);
    // The tables are heap too, and memory is short.
    crate::space::free_retired_tables(usize::MAX);
    for &id in &victims {
        drop(objects.cache.evict(id));
    }
    let counters = &mut persistence.kernel_counters;
    counters.evicted_pages_total += victims.len() as u64;
    counters.evicted_nodes_total += objects.cache.evict_nodes(EVICTION_BATCH_NODES, &roots) as u64;
    Ok(())
}

fn interval_ticks(interval_ms: u64) -> u64 {
    (interval_ms * timer::TIMER_HZ).div_ceil(1000).max(1)
}

/// The store, unless there is none: what the checkpoint and journal capabilities act on.
fn with_store<T>(with: impl FnOnce(&mut Persistence) -> T) -> Option<T> {
    PERSISTENCE.lock().as_mut().map(with)
}

/// Checkpoints from now on every `interval_ms`; `None` without a store.
pub fn set_interval(interval_ms: u64) -> Option<()> {
    with_store(|persistence| {
        persistence.interval_ms = interval_ms;
        persistence.interval_ticks = interval_ticks(interval_ms);
        persistence.next_snapshot_tick = timer::ticks() + persistence.interval_ticks;
    })
}

/// A checkpoint at the next step.
pub fn request_now() -> Option<()> {
    with_store(|persistence| persistence.next_snapshot_tick = timer::ticks())
}

/// Checkpoints failed since the last commit, and in all since boot.
pub fn failures() -> Option<[u64; 4]> {
    with_store(|persistence| [persistence.failures_since_commit, persistence.kernel_counters.checkpoint_failures_total, 0, 0])
}

/// Newest committed generation, interval, log fill in thousandths, degraded (0 or 1).
pub fn status() -> Option<[u64; 4]> {
    with_store(|persistence| {
        let store = &persistence.store;
        [
            store.checkpoint_generation(),
            persistence.interval_ms,
            (store.log_fill_ratio() * 1000.0) as u64,
            u64::from(store.mirror_status().degraded),
        ]
    })
}

/// The store's and the kernel's counters in the Prometheus text format.
pub fn counters_text() -> Option<String> {
    with_store(|persistence| {
        use core::fmt::Write;
        let mut text = String::new();
        let kernel = &persistence.kernel_counters;
        let kernel_metrics = [
            ("holdfast_checkpoint_snapshot_pause_seconds", kernel.snapshot_pause_seconds_last),
            ("holdfast_checkpoint_snapshot_pause_seconds_max", kernel.snapshot_pause_seconds_max),
            ("holdfast_journal_commit_seconds_sum", kernel.journal_commit_seconds_sum),
            ("holdfast_journal_commit_seconds_count", kernel.journal_commit_seconds_count as f64),
            ("holdfast_journal_writes_total", kernel.journal_writes_total as f64),
            ("holdfast_checkpoint_failures_total", kernel.checkpoint_failures_total as f64),
            ("holdfast_checkpoint_failures_since_commit", persistence.failures_since_commit as f64),
            ("holdfast_evicted_pages_total", kernel.evicted_pages_total as f64),
            ("holdfast_evicted_nodes_total", kernel.evicted_nodes_total as f64),
            ("holdfast_loaded_nodes_total", kernel.loaded_nodes_total as f64),
        ];
        for (name, value) in persistence.store.counters().metrics().into_iter().chain(kernel_metrics) {
            let _ = writeln!(text, "{name} {value}");
        }
        text
    })
}

/// Where a journal commit stands when its invocation returns.
pub enum JournalCommit {
    /// On disk, flushed: the invoker gets its reply at once.
    Durable(u64),
    /// Queued: the invoker waits until a [`step`] has written commit `ticket`.
    Queued(u64),
}

/// Commits `pages` (live page capabilities, void ones skipped) through the journal. `None`
/// without a store, or when the commit was refused.
///
/// When no other process can run, the commit (with any queued before it) is written and
/// flushed at once, on the invoker's path: nothing could join its group before the next
/// step, and the detour through the idle loop only added that step's other work (a scrub
/// step, about 130 us under TCG, more with a cold host cache) to the commit's latency.
/// Otherwise it waits for a step, so that the processes that run meanwhile can share the
/// disk write (group commit).
pub fn journal_commit(objects: &mut Objects, pages: &[holdfast_objects::Capability]) -> Option<JournalCommit> {
    let mut guard = PERSISTENCE.lock();
    let persistence = guard.as_mut()?;
    let ticket = persistence.journal_submit(&objects.cache, pages)?;
    if process::others_runnable() || !persistence.journal_may_write() {
        return Some(JournalCommit::Queued(ticket));
    }
    match persistence.journal_write(objects) {
        Ok(Some(durable)) if durable >= ticket => Some(JournalCommit::Durable(ticket)),
        // Not known to be on disk, so not acknowledged: it stays queued and waits like any
        // other, for the write a later step retries.
        Ok(_) => Some(JournalCommit::Queued(ticket)),
        Err(failure) => {
            persistence.failed(objects, failure);
            Some(JournalCommit::Queued(ticket))
        }
    }
}

/// Page `id` is about to be written (mapped writable, or written by the kernel): if the
/// checkpoint being stabilized has not stored it yet, copies its snapshot contents first;
/// then marks it dirty. The caller holds the object cache.
pub fn before_page_write(cache: &ObjectCache<Frame>, id: ObjectId) {
    if cache.page_in_snapshot(id)
        && let Some(frame) = cache.page_frame(id)
        && let Some(version) = cache.page_version(id)
    {
        let mut persistence = PERSISTENCE.lock();
        let stabilization = persistence.as_mut().and_then(|persistence| persistence.stabilization.as_mut());
        // A page stays in the snapshot only while it is stabilized: an abandoned snapshot's
        // pages are dirty in the new epoch.
        if let Some(stabilization) = stabilization {
            stabilization.copies.insert(id, (version, Box::new(*frame.bytes())));
        }
    }
    cache.mark_page_dirty(id);
}

/// One step of checkpoint work, if any is due: called at each timer tick (with no process
/// running) and, with `idle`, from the idle loop. Returns whether it did anything.
pub fn step(idle: bool) -> bool {
    // Page tables dropped with the translations go back to the heap a few at a time.
    let freed = crate::space::free_retired_tables(1);
    let mut objects = OBJECTS.lock();
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return freed;
    };
    let result = persistence.step(&mut objects, idle);
    match result {
        Ok(worked) => worked || freed,
        Err(failure) => {
            persistence.failed(&mut objects, failure);
            true
        }
    }
}

impl Persistence {
    /// The dirty pages a checkpoint may have to write: three quarters of the free log, so
    /// that the log always holds a whole checkpoint with its nodes, record headers and the
    /// journal's commits meanwhile.
    fn dirty_pages_max(&self) -> u64 {
        let log_blocks = self.store.geometry().log_block_count;
        (log_blocks - self.store.log_used_blocks()) * 3 / 4
    }

    /// Scrubs one group of home blocks, if a scrub is under way; a block bad on every
    /// mirror is reported and the scrub goes on (what reads it gets the error).
    fn scrub_step(&mut self) -> bool {
        let Some(cursor) = self.scrub.as_mut() else {
            return false;
        };
        match self.store.scrub_step(cursor) {
            Ok(true) => {}
            Ok(false) => {
                println!("holdfast: store: scrubbed {} home blocks", cursor.blocks_checked);
                self.scrub = None;
            }
            Err(error) => println!("holdfast: store: scrub: {error}"),
        }
        true
    }

    /// Queues a commit of `pages`, skipping void ones, and returns its ticket; `None` when
    /// refused.
    fn journal_submit(&mut self, cache: &ObjectCache<Frame>, pages: &[holdfast_objects::Capability]) -> Option<u64> {
        let frames: Vec<holdfast_store::JournalPage<'_>> = pages
            .iter()
            .filter_map(|page| {
                let frame = cache.page(page).ok()?;
                Some(holdfast_store::JournalPage { id: page.object(), version: page.version(), data: frame.bytes() })
            })
            .collect();
        match self.store.journal_submit(&frames) {
            Ok(ticket) => {
                self.journal_submitted_tsc.insert(ticket.0, arch::read_tsc());
                Some(ticket.0)
            }
            // Hundreds of commits waiting (one per process at most), or a page the store has
            // no room for: this commit is refused; nothing was written, the store is fine.
            Err(error) => {
                println!("holdfast: journal commit refused: {error}");
                None
            }
        }
    }

    /// Whether queued commits may be written now: not while the log is nearly full, where
    /// the checkpoint forced at 65 % needs the rest and its migration frees the log.
    fn journal_may_write(&self) -> bool {
        self.store.journal_queued_commits() > 0 && self.store.log_fill_ratio() < JOURNAL_LOG_FILL_MAX
    }

    /// Writes every queued journal commit in one group and lets its processes run on;
    /// returns the newest ticket now durable, `None` if nothing was queued.
    fn journal_write(&mut self, objects: &mut Objects) -> Result<Option<u64>, Failure> {
        let Some(durable) = self.store.journal_write()? else {
            return Ok(None);
        };
        let now = arch::read_tsc();
        let counters = &mut self.kernel_counters;
        counters.journal_writes_total += 1;
        while let Some(entry) = self.journal_submitted_tsc.first_entry()
            && *entry.key() <= durable.0
        {
            let submitted = entry.remove();
            counters.journal_commit_seconds_sum += timer::tsc_to_nanoseconds(now - submitted) as f64 / 1e9;
            counters.journal_commit_seconds_count += 1;
        }
        process::journal_durable(objects, durable.0);
        Ok(Some(durable.0))
    }

    fn step(&mut self, objects: &mut Objects, idle: bool) -> Result<bool, Failure> {
        // Queued journal commits first: their processes wait for them, and nothing else
        // here is waited for (a scrub step before them added its reads to every commit).
        let mut worked = false;
        if self.journal_may_write() {
            self.journal_write(objects)?;
            worked = true;
        }
        // The mirrors: a blank or stale one resilvered in bounded steps beside the checkpoint
        // work, repairs and status changes reported.
        worked |= crate::mirrors::step(&mut self.store);
        // The scrub is what the store does when it has nothing else to do. It yields to
        // stabilization, which delays the checkpoint's durability (a scrub step beside every
        // stabilization step made a 64 MiB checkpoint a fifth slower); to migration, which
        // frees the log (a 1 GiB scrub beside it made a migration seven times longer); and
        // to the journal's committers, woken above but run only once this step is over; and
        // to the processes: while they run it takes one tick in SCRUB_TICKS_APART (a step at
        // every tick took most of the CPU from a program dirtying a 1 GiB array).
        let migrating = matches!(self.store.checkpoint_phase(), CheckpointPhase::Migrating { .. });
        if self.stabilization.is_none() && !migrating && !worked {
            self.ticks_since_scrub += 1;
            if idle || self.ticks_since_scrub >= SCRUB_TICKS_APART {
                self.ticks_since_scrub = 0;
                worked |= self.scrub_step();
            }
        }
        if self.retry_pending() {
            return Ok(worked);
        }
        if self.stabilization.is_some() {
            return self.stabilize_step(objects).map(|()| true);
        }
        if let CheckpointPhase::Migrating { .. } = self.store.checkpoint_phase() {
            self.store.migrate_step(STEP_OBJECTS)?;
            return Ok(true);
        }
        let due = timer::ticks() >= self.next_snapshot_tick
            || self.store.log_fill_ratio() >= FORCED_LOG_FILL
            || objects.cache.dirty_page_count() as u64 > self.dirty_pages_max();
        if !due {
            return Ok(worked);
        }
        self.snapshot(objects)?;
        Ok(true)
    }

    /// A whole checkpoint, now: finishes the migration before it, snapshots, stabilizes
    /// and commits. For memory pressure: afterwards every page is clean.
    fn checkpoint_now(&mut self, objects: &mut Objects) -> Result<(), Failure> {
        while self.stabilization.is_some() {
            self.stabilize_step(objects)?;
        }
        while let CheckpointPhase::Migrating { .. } = self.store.checkpoint_phase() {
            self.store.migrate_step(STEP_OBJECTS)?;
        }
        self.snapshot(objects)?;
        while self.stabilization.is_some() {
            self.stabilize_step(objects)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, objects: &mut Objects) -> Result<(), Failure> {
        let started = arch::read_tsc();
        process::check_consistency(objects).map_err(|error| Failure::retry(alloc::format!("consistency check: {error}")))?;
        process::write_back(objects);
        process::drop_all_translations(objects);
        let processes: Vec<DirectoryProcess> = process::roots_and_names()
            .into_iter()
            .map(|(root, name)| DirectoryProcess { root, name: name.to_string() })
            .collect();
        // The directory's pages beyond page 0: ids set aside the first time they are needed
        // (before the next page id is recorded), never handed to a program.
        let pages_needed = directory::block_count(processes.len()) - 1;
        while self.directory_pages.len() < pages_needed {
            self.directory_pages.push(objects.reserve_page_id());
        }
        let (next_node_id, next_page_id) = objects.next_ids();
        if next_page_id > self.store.geometry().page_count {
            return Err(Failure::retry(alloc::format!(
                "the checkpoint directory's pages reach page id {}; the store holds {} pages",
                next_page_id - 1,
                self.store.geometry().page_count - 1
            )));
        }
        let directory = Directory { next_node_id, next_page_id, processes }
            .encode(&self.directory_pages)
            .map_err(|error| Failure::retry(error.to_string()))?;
        let directory = core::iter::once(DIRECTORY_PAGE).chain(self.directory_pages.iter().copied()).zip(directory).collect();
        let generation = self.store.begin_checkpoint()?;
        let nodes = objects.cache.take_dirty_nodes();
        let pages = objects.cache.take_dirty_pages();
        let snapshot_tsc = arch::read_tsc();
        let snapshot_pause_us = timer::tsc_to_microseconds(snapshot_tsc - started);
        let counters = &mut self.kernel_counters;
        counters.snapshot_pause_seconds_last = snapshot_pause_us as f64 / 1e6;
        counters.snapshot_pause_seconds_max = counters.snapshot_pause_seconds_max.max(counters.snapshot_pause_seconds_last);
        self.stabilization = Some(Stabilization {
            generation,
            snapshot_tsc,
            snapshot_pause_us,
            directory,
            node_ids: nodes.iter().map(|node| node.id).collect(),
            node_count: nodes.len(),
            page_count: pages.len(),
            nodes,
            pages,
            next_page: 0,
            copies: BTreeMap::new(),
        });
        self.next_snapshot_tick = timer::ticks() + self.interval_ticks;
        Ok(())
    }

    fn stabilize_step(&mut self, objects: &Objects) -> Result<(), Failure> {
        let stabilization = self.stabilization.as_mut().expect("called while stabilizing");
        let mut budget = STEP_OBJECTS;
        while budget > 0
            && let Some((page, block)) = stabilization.directory.pop()
        {
            self.store.checkpoint_write_page(page, Version(0), &block)?;
            budget -= 1;
        }
        while budget > 0
            && let Some(node) = stabilization.nodes.pop()
        {
            self.store.checkpoint_write_node(node.id, node.version, &node.image)?;
            budget -= 1;
        }
        while budget > 0
            && let Some(&id) = stabilization.pages.get(stabilization.next_page)
        {
            if let Some((version, bytes)) = stabilization.copies.remove(&id) {
                self.store.checkpoint_write_page(id, version, &bytes)?;
            } else {
                // Not written since the snapshot, so neither evicted: dirty pages stay.
                let frame = objects.cache.page_frame(id).expect("a page of the snapshot is resident");
                let version = objects.cache.page_version(id).expect("pages are never removed");
                self.store.checkpoint_write_page(id, version, frame.bytes())?;
            }
            objects.cache.page_stored(id);
            stabilization.next_page += 1;
            budget -= 1;
        }
        if !stabilization.directory.is_empty()
            || !stabilization.nodes.is_empty()
            || stabilization.next_page < stabilization.pages.len()
        {
            return Ok(());
        }
        if INJECTED_FAILURE_GENERATION
            .compare_exchange(stabilization.generation, 0, core::sync::atomic::Ordering::Relaxed, core::sync::atomic::Ordering::Relaxed)
            .is_ok()
        {
            // Every object is written and its page marked stored: the abandon must make
            // them all dirty again.
            let generation = stabilization.generation;
            return Err(Failure::retry(alloc::format!("failure injected at commit of checkpoint {generation} (holdfast.test-checkpoint-failure)")));
        }
        let generation = self.store.commit_checkpoint()?;
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
        if self.failures_since_commit > 0 {
            println!("holdfast: checkpoints persist again after {} failed", self.failures_since_commit);
            self.failures_since_commit = 0;
        }
        Ok(())
    }

    /// Whether a failed checkpoint waits for the next interval: until then no checkpoint
    /// work is done (journal commits still are), so that a failure that repeats is not
    /// retried at every step.
    fn retry_pending(&self) -> bool {
        self.failures_since_commit > 0 && timer::ticks() < self.next_snapshot_tick
    }

    /// Checkpoint or journal work failed. If the store can no longer be written, the system
    /// stops: running on would lose, unseen, everything done from now on. Otherwise the
    /// checkpoint being stabilized is abandoned (its objects are dirty again, for the next
    /// one) and a new one is taken at the next interval; the store stays as its last commit
    /// left it, which is what a restart would come back to. Each failure is counted
    /// (`holdfast_checkpoint_failures_total`) and printed, and `checkpoint status` shows
    /// the failures since the last commit.
    fn failed(&mut self, objects: &mut Objects, failure: Failure) {
        let generation = self.store.checkpoint_generation();
        if failure.store_lost {
            println!(
                "holdfast: STORE LOST: {}; it can no longer be written, so the system stops here (a restart comes back to checkpoint {generation} and the journal commits acknowledged after it)",
                failure.what
            );
            arch::exit_qemu(holdfast_abi::exit::VALUE_FAILURE);
        }
        if let Some(stabilization) = self.stabilization.take() {
            // Its pages in the snapshot are all still here: the copies made of them stay
            // unused, their frames hold what was written since, which is newer.
            let _ = self.store.abandon_checkpoint();
            objects.cache.snapshot_abandoned(&stabilization.node_ids, &stabilization.pages);
        }
        self.failures_since_commit += 1;
        self.kernel_counters.checkpoint_failures_total += 1;
        self.next_snapshot_tick = timer::ticks() + self.interval_ticks;
        println!(
            "holdfast: checkpoint failed: {}; {} failed since checkpoint {generation}, the last committed; retried in {} ms",
            failure.what, self.failures_since_commit, self.interval_ms
        );
    }
}

/// What the kernel does when no process can run: checkpoint work, else wait for the timer.
pub fn idle() -> ! {
    loop {
        crate::control::wake_readers();
        if process::any_runnable() {
            process::switch_to_next()
        }
        if !step(true) {
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
    }
}
