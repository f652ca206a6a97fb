//! What the kernel measures about the store, beside the store's own counters, and the
//! `checkpoint status` and `counters` replies built from both.

use alloc::string::String;
use alloc::vec::Vec;
use holdfast_objects::ObjectId;
use holdfast_store::SecondsHistogram;
use holdfast_store::histogram;

use crate::arch::timer::KernelTime;
use super::with_store;

/// Background steps (journal groups, checkpoint stabilization and migration, mirrors,
/// scrub, the pair's stream) taken at ring 3's timer ticks: every process waits meanwhile.
pub static STEPS_AT_TICKS: KernelTime = KernelTime::new();
/// The same steps taken in the idle loop, when no process could run.
pub static STEPS_IDLE: KernelTime = KernelTime::new();
/// Page faults the kernel resolved by mapping a page (after a snapshot every first touch
/// of a page is one: the snapshot drops every translation).
pub static PAGE_FAULTS: KernelTime = KernelTime::new();


/// What the kernel measures about the store, beside the store's own counters.
pub(super) struct KernelCounters {
    pub(super) snapshot_pause_last_seconds: f64,
    pub(super) snapshot_pause_seconds_max: f64,
    pub(super) snapshot_pause_seconds: SecondsHistogram,
    /// From a commit's request to its acknowledgement.
    pub(super) journal_commit_seconds: SecondsHistogram,
    /// Disk writes of journal commits: fewer than the commits when they share them.
    pub(super) journal_writes_total: u64,
    /// Checkpoints (and journal writes) that failed and were retried.
    pub(super) checkpoint_failures_total: u64,
    pub(super) evicted_pages_total: u64,
    pub(super) evicted_nodes_total: u64,
    pub(super) loaded_nodes_total: u64,
    pub(super) loaded_pages_total: u64,
    /// Time spent reading those pages.
    pub(super) page_load_seconds_total: f64,
}

impl Default for KernelCounters {
    fn default() -> Self {
        Self {
            snapshot_pause_last_seconds: 0.0,
            snapshot_pause_seconds_max: 0.0,
            snapshot_pause_seconds: SecondsHistogram::new(histogram::SNAPSHOT_PAUSE_BOUNDS_SECONDS),
            journal_commit_seconds: SecondsHistogram::new(histogram::JOURNAL_COMMIT_BOUNDS_SECONDS),
            journal_writes_total: 0,
            checkpoint_failures_total: 0,
            evicted_pages_total: 0,
            evicted_nodes_total: 0,
            loaded_nodes_total: 0,
            loaded_pages_total: 0,
            page_load_seconds_total: 0.0,
        }
    }
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

/// The store's and the kernel's counters in the Prometheus text format, one string per
/// family (a scalar's line; a histogram's buckets, sum and count), all read under one lock:
/// `checkpoint.counters` pages through them without ever cutting a family.
pub fn counters_families() -> Option<Vec<String>> {
    // Before the store is locked: the scheduler is never taken under it.
    let mut invocations_total = 0;
    crate::process::for_each_process(|process| invocations_total += process.invocation_count);
    with_store(|persistence| {
        use core::fmt::Write;
        let kernel = &persistence.kernel_counters;
        let kernel_metrics = [
            ("holdfast_checkpoint_snapshot_pause_last_seconds", kernel.snapshot_pause_last_seconds),
            ("holdfast_checkpoint_snapshot_pause_seconds_max", kernel.snapshot_pause_seconds_max),
            ("holdfast_journal_writes_total", kernel.journal_writes_total as f64),
            ("holdfast_checkpoint_failures_total", kernel.checkpoint_failures_total as f64),
            ("holdfast_checkpoint_failures_since_commit", persistence.failures_since_commit as f64),
            ("holdfast_evicted_pages_total", kernel.evicted_pages_total as f64),
            ("holdfast_evicted_nodes_total", kernel.evicted_nodes_total as f64),
            ("holdfast_loaded_nodes_total", kernel.loaded_nodes_total as f64),
            ("holdfast_loaded_pages_total", kernel.loaded_pages_total as f64),
            ("holdfast_page_load_seconds_total", kernel.page_load_seconds_total),
            // Every process's, kept in its root node: they count across restarts.
            ("holdfast_invocations_total", invocations_total as f64),
            ("holdfast_background_steps_at_ticks_seconds_total", STEPS_AT_TICKS.seconds()),
            ("holdfast_background_steps_at_ticks_total", STEPS_AT_TICKS.count()),
            ("holdfast_background_steps_idle_seconds_total", STEPS_IDLE.seconds()),
            ("holdfast_disk_wait_seconds_total", crate::drivers::DISK_WAITS.seconds()),
            ("holdfast_disk_waits_total", crate::drivers::DISK_WAITS.count()),
            ("holdfast_page_faults_resolved_total", PAGE_FAULTS.count()),
            ("holdfast_page_fault_seconds_total", PAGE_FAULTS.seconds()),
        ];
        let store_counters = persistence.store.counters();
        let pair_metrics = crate::pair::primary::metrics();
        let mut families = Vec::new();
        for (name, value) in store_counters.metrics().into_iter().chain(kernel_metrics).chain(pair_metrics.into_iter().flatten()) {
            let mut line = String::new();
            let _ = writeln!(line, "{name} {value}");
            families.push(line);
        }
        let histograms = store_counters.histograms().into_iter().chain([
            ("holdfast_checkpoint_snapshot_pause_seconds", &kernel.snapshot_pause_seconds),
            ("holdfast_journal_commit_seconds", &kernel.journal_commit_seconds),
        ]);
        for (name, histogram) in histograms {
            let mut lines = String::new();
            histogram.write_text(name, &mut lines);
            families.push(lines);
        }
        families
    })
}

/// How many pages and nodes the store has room for, by id (`None` without a store): the
/// bound on the range's `create_page` and `create_node`.
pub fn object_capacity() -> Option<(u64, u64)> {
    with_store(|persistence| {
        let geometry = persistence.store.geometry();
        (geometry.page_count, geometry.node_count)
    })
}

/// Whether page `id` holds part of the checkpoint directory: kernel state, which no
/// capability may ever name.
pub fn is_directory_page(id: ObjectId) -> bool {
    id == super::DIRECTORY_PAGE || with_store(|persistence| persistence.directory_pages.contains(&id)).unwrap_or(false)
}
