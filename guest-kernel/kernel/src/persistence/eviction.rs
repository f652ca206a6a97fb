//! Eviction: when memory runs short, clean pages and nodes are evicted ([`make_room`]),
//! after a whole checkpoint at once if too few pages are clean.

use alloc::string::String;
use alloc::vec::Vec;
use holdfast_objects::ObjectId;

use crate::memory;
use crate::objects::Objects;
use crate::process;
use super::PERSISTENCE;

/// Heap kept free for the pages loaded while the scheduler is held (which cannot evict)
/// and for copies on write: below it, clean pages are evicted before another is loaded.
fn heap_free_target_bytes() -> usize {
    (memory::heap_bytes() / 8).max(4 << 20)
}

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
    let Some(persistence) = guard.as_mut().filter(|persistence| !persistence.failed) else {
        return Ok(());
    };
    // A checkpoint's pages stay until stored.
    while persistence.stabilization.is_some() {
        persistence.stabilize_step(objects)?;
    }
    let mut victims = objects.cache.eviction_candidates(EVICTION_BATCH_PAGES, keep);
    if victims.len() < EVICTION_BATCH_PAGES / 2 {
        persistence.checkpoint_now(objects)?;
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
