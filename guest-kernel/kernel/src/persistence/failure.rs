//! Failed checkpoint work: a checkpoint that fails is abandoned (its snapshot's objects are
//! dirty again), counted, printed and taken again at the next interval; only a store that
//! can no longer be written stops the system. No program can switch persistence off.

use alloc::string::{String, ToString};
use holdfast_store::StoreError;

use crate::arch::{self, timer};
use crate::objects::Objects;
use crate::println;
use super::Persistence;

/// Why checkpoint or journal work failed.
pub(super) struct Failure {
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
    pub(super) fn retry(what: String) -> Self {
        Self { what, store_lost: false }
    }
}

/// The checkpoint generation that fails once, with every object written, just before its
/// commit (`holdfast.test-checkpoint-failure=G`, for tests); 0 for none.
pub(super) static INJECTED_FAILURE_GENERATION: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub fn inject_failure(generation: u64) {
    INJECTED_FAILURE_GENERATION.store(generation, core::sync::atomic::Ordering::Relaxed);
}

impl Persistence {
    /// Whether a failed checkpoint waits for the next interval: until then no checkpoint
    /// work is done (journal commits still are), so that a failure that repeats is not
    /// retried at every step. Counted from the failure, not from the retry's snapshot: that
    /// one's stabilization once waited a whole interval too, while the journal's commits
    /// filled the log it needed, and failed "log full" at every retry from then on.
    pub(super) fn retry_pending(&self) -> bool {
        self.failures_since_commit > 0 && timer::ticks() < self.retry_tick
    }

    /// Checkpoint or journal work failed. If the store can no longer be written, the system
    /// stops: running on would lose, unseen, everything done from now on. Otherwise the
    /// checkpoint being stabilized is abandoned (its objects are dirty again, for the next
    /// one) and a new one is taken at the next interval; the store stays as its last commit
    /// left it, which is what a restart would come back to. Each failure is counted
    /// (`holdfast_checkpoint_failures_total`) and printed, and `checkpoint status` shows
    /// the failures since the last commit.
    pub(super) fn failed(&mut self, objects: &mut Objects, failure: Failure) {
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
        self.retry_tick = self.next_snapshot_tick;
        println!(
            "holdfast: checkpoint failed: {}; {} failed since checkpoint {generation}, the last committed; retried in {} ms",
            failure.what, self.failures_since_commit, self.interval_ms
        );
    }
}
