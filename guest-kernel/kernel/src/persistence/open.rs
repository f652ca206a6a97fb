//! What the boot finds on its disks: the store opened on them, or why not, and the store
//! handed to the kernel.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use holdfast_store::Store;

use crate::arch::timer;
use crate::drivers::Block;
use crate::objects::{OBJECTS, Objects};
use crate::objects::StoreAccess;
use super::checkpoint::{STEP_OBJECTS, interval_ticks, restart_migration_pace};
use super::eviction::make_room;
use super::metrics::KernelCounters;
use super::restore::{load_node, load_page_version, read_page};
use super::{PERSISTENCE, Persistence, mirror_disks, with_store};

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

/// Opens the store on the disks that hold it (see [`mirror_disks::select`]: a blank disk
/// beside the store is resilvered, a foreign one refused and left untouched) and prints the
/// mirror status. No store on any disk is not an error (the system runs without persistence
/// and says so); a damaged store is, and nothing is started on it.
pub fn open(disks: Vec<Block>, recover: holdfast_store::Recover) -> Result<Opened, String> {
    let disks = match mirror_disks::select(disks) {
        Ok(disks) => disks,
        Err(why) => return Ok(Opened::NoStore(why)),
    };
    // `select` kept only disks of the store (or damaged ones, or a blank beside the store):
    // any error now is the store's.
    let mut store = Store::open_with(disks, recover).map_err(|error| error.to_string())?;
    mirror_disks::opened(&store);
    if store.checkpoint_generation() != 0 {
        return Ok(Opened::Checkpointed(store));
    }
    // The rebuilt system's first checkpoint needs the whole log that `check_capacity`
    // counts on: the records of one a crash cut short are freed first (a few blocks' work).
    while let holdfast_store::MigrationProgress::Migrating { .. } =
        store.migrate_step(STEP_OBJECTS).map_err(|error| error.to_string())?
    {}
    Ok(Opened::Fresh(store))
}

/// Hands `store` to the kernel: pages live on it from now on, and checkpoints go to it
/// once processes run (the first at once: a fresh store holds nothing until then, and a
/// restart's repairs and resilvering are kept). `on_journal_durable` wakes the processes
/// waiting for journal commits up to a ticket (the invocation path's, which sits above).
pub fn attach(mut store: Store<Block>, interval_ms: u64, on_journal_durable: fn(&mut Objects, u64)) {
    // A sixty-fourth of the heap at most for home tables: pages come from it too (the
    // paging test's 32 MiB guest ran out of heap with the store's default).
    let table_cache_tables = crate::memory::heap_bytes() / 64 / holdfast_store::TABLE_CACHE_BYTES_PER_TABLE;
    store.set_table_cache_max(table_cache_tables.min(holdfast_store::TABLE_CACHE_MAX));
    BOOT_COUNT.store(store.inspect().boot_count, core::sync::atomic::Ordering::Relaxed);
    let migration_pace = restart_migration_pace(&store, interval_ticks(interval_ms));
    let mut objects = OBJECTS.lock();
    objects.set_store_backed(StoreAccess { make_room, read_page });
    objects.cache.set_node_loader(load_node);
    objects.cache.set_page_version_loader(load_page_version);
    drop(objects);
    *PERSISTENCE.lock() = Some(Persistence {
        store,
        interval_ms,
        interval_ticks: interval_ticks(interval_ms),
        next_snapshot_tick: timer::ticks(),
        retry_tick: 0,
        stabilization: None,
        migration_pace,
        journal_submitted: BTreeMap::new(),
        journal_newest_ticket: BTreeMap::new(),
        journal_awaiting_standby: alloc::collections::VecDeque::new(),
        kernel_counters: KernelCounters::default(),
        scrub: Some(holdfast_store::ScrubCursor::default()),
        ticks_since_scrub: 0,
        directory_pages: alloc::vec::Vec::new(),
        failures_since_commit: 0,
        on_journal_durable,
    });
    with_store(|persistence| persistence.note_dirty_pages_max());
}

/// Whether the objects made so far fit the store: their ids its home ranges, and the
/// checkpoint that stores them (the first, on a fresh store: the whole initial system) its
/// log, within the three quarters of it the dirty pages are held to while the system runs.
/// A system whose first checkpoint cannot commit would run unpersisted from the start.
pub fn check_capacity() -> Result<(), String> {
    let (geometry, log_room) = with_store(|persistence| (persistence.store.geometry(), persistence.dirty_pages_room()))
        .ok_or("no store")?;
    let objects = OBJECTS.lock();
    let (next_node, next_page) = objects.next_ids();
    if next_node > geometry.node_count || next_page > geometry.page_count {
        return Err(alloc::format!(
            "the system has {} nodes and {} pages; the store holds {} and {} (format a larger one)",
            next_node - 1,
            next_page - 1,
            geometry.node_count - 1,
            geometry.page_count - 1
        ));
    }
    let pages = objects.cache.dirty_page_count() as u64;
    let nodes = objects.cache.dirty_node_ids();
    let pots: BTreeSet<u64> = nodes.iter().map(|node| node.0 / holdfast_store::NODES_PER_POT).collect();
    let needed = holdfast_store::checkpoint_log_blocks_max(pages, pots.len() as u64);
    let nodes = nodes.len();
    if needed > log_room {
        // The log is an eighth of a store (`holdfast store format`), and a checkpoint may
        // take three quarters of it.
        let store_mib = (needed * 4 / 3 + 1) * 8 * holdfast_store::BLOCK_SIZE as u64;
        return Err(alloc::format!(
            "the system's first checkpoint ({pages} pages, {nodes} nodes) needs up to {needed} log blocks, \
             and this store's log has room for {log_room} (three quarters of its {} blocks); format a store of at least {} MiB",
            geometry.log_block_count,
            store_mib.div_ceil(1 << 20)
        ));
    }
    Ok(())
}
