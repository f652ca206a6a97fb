//! Eviction: when memory runs short, clean pages and nodes are evicted ([`make_room`]),
//! after a whole checkpoint at once if too few pages are clean.

use alloc::string::String;
use alloc::vec::Vec;
use holdfast_objects::ObjectId;

use crate::memory::{self, PAGE_BYTES};
use crate::objects::Objects;
use crate::process;
use super::PERSISTENCE;

/// Heap kept free for the pages loaded while the scheduler is held (which cannot evict)
/// and for copies on write: below it, clean pages are evicted before another is loaded.
fn heap_free_target_bytes() -> usize {
    (memory::heap_bytes() / 8).max(4 << 20)
}

/// Whether the heap has room for another process's tables beyond the reserve kept for page
/// loads and copies on write, once clean pages are evicted if a store holds them. Beyond
/// the reserve there must also be room for the byte allocator to take another span of
/// frames ([`memory::BYTE_SPAN_BYTES_MIN`]): the next checkpoint's snapshot of the dirty
/// nodes (every process's root node among them) takes one when the allocator's spans are
/// full, and a span taken from the reserve left it 3.3 MiB short (48 MiB guest, 2,192
/// processes, a snapshot of 10,338 nodes: free frames from 5.0 to 1.7 MiB).
pub fn room_for_process(objects: &mut Objects) -> bool {
    let needed = heap_free_target_bytes() + PROCESS_BYTES + memory::BYTE_SPAN_BYTES_MIN;
    let room = || memory::heap_free_bytes() >= needed;
    if room() {
        return true;
    }
    // Without room, nothing is made: the failure to make room is the refusal.
    let _ = make_room(objects, &[]);
    room()
}

/// A process's kernel memory: its top page table and its entry in the table, rounded up.
const PROCESS_BYTES: usize = 2 * PAGE_BYTES;

/// Pages evicted at once: each eviction drops every translation, so it is done in batches.
const EVICTION_BATCH_PAGES: usize = 512;

/// Nodes evicted with each batch of pages (about half a megabyte of them).
const EVICTION_BATCH_NODES: usize = 1024;

/// Makes room for pages to be loaded, if the heap runs low: evicts clean pages other than
/// `keep`, after a checkpoint if too few are clean (the world is stopped anyway), and clean
/// nodes other than the processes' root nodes. The caller holds the object cache but not
/// the scheduler.
///
/// Pages are evicted only when that is worth it: a batch's half, or enough to restore the
/// reserve. Fewer clean pages than that, with too few dirty ones for a checkpoint to add
/// to them, are the running processes' working set: evicting them (and taking a whole
/// checkpoint first) at every page fault made each fault evict the pages the next one
/// loads again, and a process below the reserve never ran two instructions on (the
/// make_process exhaustion test stalled so, checkpoints going on). The load then takes its
/// frame from the reserve, which is there for it: the pages so loaded count among the
/// clean or dirty ones, so at most half a batch (2 MiB) is loaded before evicting is
/// worth it again.
pub fn make_room(objects: &mut Objects, keep: &[ObjectId]) -> Result<(), String> {
    if memory::heap_free_bytes() >= heap_free_target_bytes() {
        return Ok(());
    }
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return Ok(());
    };
    // The store's cached home tables go first: they are read again when needed.
    persistence.store.drop_table_cache();
    // A checkpoint's pages stay until stored (or, if it fails, dirty again).
    while persistence.stabilization.is_some() {
        if let Err(failure) = persistence.stabilize_step(objects) {
            persistence.failed(objects, failure);
        }
    }
    let pages_short = heap_free_target_bytes().saturating_sub(memory::heap_free_bytes()).div_ceil(PAGE_BYTES);
    let worth_evicting = pages_short.clamp(1, EVICTION_BATCH_PAGES / 2);
    let mut victims = objects.cache.eviction_candidates(EVICTION_BATCH_PAGES, keep);
    let dirty = objects.cache.dirty_page_count();
    if victims.len() < EVICTION_BATCH_PAGES / 2 && dirty > 0 && victims.len() + dirty >= worth_evicting && !persistence.retry_pending() {
        if let Err(failure) = persistence.checkpoint_now(objects) {
            persistence.failed(objects, failure);
        }
        victims = objects.cache.eviction_candidates(EVICTION_BATCH_PAGES, keep);
    }
    if victims.len() < worth_evicting {
        victims.clear();
    }
    // Root nodes stay: the snapshot and the journal read them with the store held, when no
    // node may be loaded (see `load_node`).
    let roots: Vec<ObjectId> = process::roots_and_names().into_iter().map(|(root, _)| root).collect();
    // Translations go whether pages do or not: the tables are heap too, and memory is short
    // (a page still here is mapped again at its next fault, without a load).
    process::drop_all_translations(objects);
    crate::space::free_retired_tables(usize::MAX);
    for &id in &victims {
        drop(objects.cache.evict(id));
    }
    let counters = &mut persistence.kernel_counters;
    counters.evicted_pages_total += victims.len() as u64;
    counters.evicted_nodes_total += objects.cache.evict_nodes(EVICTION_BATCH_NODES, &roots) as u64;
    Ok(())
}
