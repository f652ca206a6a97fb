//! The checkpoint: when one is due, and its work in steps.
//!
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
//! 4. **Migration** home, in steps, until the log is free for the next checkpoint: in the
//!    idle loop as fast as it goes, at timer ticks paced to be done before the next
//!    snapshot ([`tick_budget`]).
//!
//! A checkpoint is due at the end of the interval, when the log is 65 % full, and when the
//! dirty pages near what the log can take. Each step also writes queued journal commits
//! (`journal`), resilvers the mirrors (`mirror_disks`) and scrubs (`scrub`). A checkpoint
//! that fails is abandoned, counted, printed and taken again at the next interval
//! (`failure`).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::ToString;
use alloc::vec::Vec;
use holdfast_objects::cache::NodeSnapshot;
use holdfast_objects::directory::{self, Directory, DirectoryBlock, DirectoryProcess};
use holdfast_objects::{ObjectCache, ObjectId, Version};
use holdfast_store::{CheckpointPhase, Pace};

use crate::arch::{self, timer};
use crate::memory::PAGE_BYTES;
use crate::objects::{Frame, OBJECTS, Objects};
use crate::{println, process};
use super::failure::{Failure, INJECTED_FAILURE_GENERATION};
use super::{DIRECTORY_PAGE, PERSISTENCE, Persistence, mirror_disks, with_store};

/// Objects written (or log blocks migrated) per step: bounds the time a step holds the
/// kernel (about 256 KiB of disk writes).
pub(super) const STEP_OBJECTS: usize = 64;

/// A checkpoint is due this often unless the boot command line says otherwise
/// (`holdfast.checkpoint-interval-ms=N`).
pub const DEFAULT_INTERVAL_MS: u64 = 5000;

/// The log fill at which a checkpoint is taken at once (DESIGN.md).
const FORCED_LOG_FILL: f64 = 0.65;

pub(super) struct Stabilization {
    generation: u64,
    snapshot_tsc: u64,
    snapshot_pause_us: u64,
    /// The directory's blocks and their pages, stored first.
    directory: Vec<(ObjectId, Box<DirectoryBlock>)>,
    nodes: Vec<NodeSnapshot>,
    /// Every node of the snapshot, to make dirty again if the checkpoint is abandoned.
    pub(super) node_ids: Vec<ObjectId>,
    /// The snapshot's pages, stored in order from `next_page` on. A page not yet stored
    /// whose frame still holds the snapshot's contents is stored from its frame; one written
    /// since has its snapshot contents and version in `copies`.
    pub(super) pages: Vec<ObjectId>,
    /// `pages` sorted, and rid of pages outside the snapshot
    /// ([`ObjectCache::settle_snapshot_pages`]), by the first step that reaches them.
    pages_settled: bool,
    next_page: usize,
    copies: BTreeMap<ObjectId, (Version, Box<[u8; PAGE_BYTES]>)>,
    node_count: usize,
    page_count: usize,
}

/// A page is about to become dirty (in a fault, or at the start of an invocation that may
/// write pages; the world is stopped, the scheduler free and the current process's
/// registers in its table entry, pointing at what a restart runs again): if the dirty pages
/// would outgrow what the log can take, a checkpoint comes first, even while a failed one
/// waits for its retry. Skipping it then let the dirty pages grow past the log, so that no
/// retry could ever commit again (a 512 MiB store under TP1). If it fails, the failure is
/// handled as any other ([`Persistence::failed`]) and the page is written all the same.
pub fn limit_dirty_pages(objects: &mut Objects) {
    if dirty_blocks(objects) < DIRTY_PAGES_MAX.load(core::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return;
    };
    if dirty_blocks(objects) < persistence.dirty_pages_max() {
        persistence.note_dirty_pages_max();
        return;
    }
    if let Err(failure) = persistence.checkpoint_now(objects) {
        persistence.failed(objects, failure);
    }
    persistence.note_dirty_pages_max();
}

/// The log blocks the dirty objects may take: a page each, and a node each at worst (four
/// share a pot when their ids are near, but a program can dirty one node in each of many
/// pots).
fn dirty_blocks(objects: &Objects) -> u64 {
    (objects.cache.dirty_page_count() + objects.cache.dirty_node_ids().len()) as u64
}

/// [`Persistence::dirty_pages_max`] as last computed (no limit without a store): one load
/// and a compare on the invocation path, which takes the lock only when it is passed. It
/// is computed again after every checkpoint step, so it trails the log's use by one step,
/// which the quarter of the log kept beside the dirty pages covers.
static DIRTY_PAGES_MAX: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(u64::MAX);

/// Whether the checkpoint directory can name one more process beside `processes`: its
/// pages after the first are set aside when first needed, here rather than at the next
/// snapshot, so that a store with no page id left refuses the process (`exhausted`) instead
/// of failing every checkpoint from then on. True without a store.
pub fn directory_room_for_process(objects: &mut Objects, processes: usize) -> bool {
    with_store(|persistence| {
        let pages_needed = directory::block_count(processes + 1) - 1;
        while persistence.directory_pages.len() < pages_needed {
            if objects.next_ids().1 >= persistence.store.geometry().page_count {
                return false;
            }
            persistence.directory_pages.push(objects.reserve_page_id());
        }
        true
    })
    .unwrap_or(true)
}

/// The fewest blocks a paced migration step at a tick moves: an eighth of a full step, so
/// that a small checkpoint's migration is done in a few ticks, as before pacing.
const TICK_BLOCKS_MIN: usize = STEP_OBJECTS / 8;

/// The log fill from which migration goes at full pace at every tick.
const PACED_LOG_FILL_MAX: f64 = 1.0 / 3.0;

/// The longest a migration is spread over (2 s): a checkpoint asked for under a long
/// interval (an hour, in some tests) is still home within seconds while processes run.
const PACE_TICKS_MAX: u64 = 2 * timer::TIMER_HZ;

/// The blocks a migration step at a tick moves with `backlog_blocks` to go: what is behind
/// its pace's line ([`Pace::behind`]), at least [`TICK_BLOCKS_MIN`], at most
/// [`STEP_OBJECTS`]. Every process waits while a tick's step runs, and the disk requests it
/// makes are ahead of the journal's commits: at full pace at every tick, a TP1 load's
/// checkpoint (3,700 pages) stopped the world for half of each second until it was home,
/// and the service, offered 80 % of its best rate, fell behind by 700 ms. The idle loop's
/// steps, where no process waits, move [`STEP_OBJECTS`] and keep ahead of the line when
/// there is time for them.
fn tick_budget(pace: &Pace, backlog_blocks: u64) -> usize {
    pace.behind(backlog_blocks, timer::ticks()).clamp(TICK_BLOCKS_MIN as u64, STEP_OBJECTS as u64) as usize
}

/// The pace of a migration the store began at its open (a restart's log holds blocks not
/// home yet), at ticks: three quarters of an interval, at most [`PACE_TICKS_MAX`]. A
/// committed checkpoint's migration is paced to end a quarter of an interval before the
/// next snapshot; the restart's first checkpoint is due at once and waits for this one. At full pace at every tick it
/// took 3-6 ms of each 10 ms tick under TCG just when a promoted standby's processes fault
/// their pages in and its clients come back (1,800 blocks after a 16-client failover drill).
pub(super) fn restart_migration_pace(store: &holdfast_store::Store<crate::drivers::Block>, interval_ticks: u64) -> Option<Pace> {
    match store.checkpoint_phase() {
        CheckpointPhase::Migrating { backlog_blocks } => {
            Some(Pace::new(backlog_blocks, timer::ticks(), (interval_ticks * 3 / 4).min(PACE_TICKS_MAX)))
        }
        _ => None,
    }
}

pub(super) fn interval_ticks(interval_ms: u64) -> u64 {
    (interval_ms * timer::TIMER_HZ).div_ceil(1000).max(1)
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

/// Page `id` is about to be written (mapped writable, or written by the kernel): if the
/// checkpoint being stabilized has not stored it yet, copies its snapshot contents first;
/// then marks it dirty. The caller holds the object cache.
pub fn before_page_write(cache: &ObjectCache<Frame>, id: ObjectId) {
    keep_snapshot_copy(cache, id);
    cache.mark_page_dirty(id);
}

/// [`before_page_write`] for a write that a journal commit of the whole page follows
/// (`journal.write`): once that commit is durable, the page may be clean
/// ([`ObjectCache::page_journal_durable`]).
pub fn before_journaled_page_write(cache: &ObjectCache<Frame>, id: ObjectId) {
    keep_snapshot_copy(cache, id);
    cache.mark_page_journaled(id);
}

/// If the checkpoint being stabilized has not stored page `id` yet, copies its snapshot
/// contents first.
fn keep_snapshot_copy(cache: &ObjectCache<Frame>, id: ObjectId) {
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
}

/// A lower limit on the dirty pages than the log's (`holdfast.test-dirty-pages-max=N`, for
/// tests; 0 for none): with it, most checkpoints are taken in the middle of a page fault, as
/// they are when the log is nearly full.
static TEST_DIRTY_PAGES_MAX: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub fn set_test_dirty_pages_max(pages: u64) {
    TEST_DIRTY_PAGES_MAX.store(pages, core::sync::atomic::Ordering::Relaxed);
}

/// One step of checkpoint work, if any is due: called at each timer tick (with no process
/// running) and, with `idle`, from the idle loop. Returns whether it did anything.
pub fn step(idle: bool) -> bool {
    let started = arch::read_tsc();
    let worked = step_untimed(idle);
    if worked {
        let time = if idle { &super::metrics::STEPS_IDLE } else { &super::metrics::STEPS_AT_TICKS };
        time.add_since(started);
    }
    worked
}

fn step_untimed(idle: bool) -> bool {
    // Page tables dropped with the translations go back to the heap a few at a time.
    let freed = crate::space::free_retired_tables(1);
    let mut objects = OBJECTS.lock();
    let mut guard = PERSISTENCE.lock();
    let Some(persistence) = guard.as_mut() else {
        return freed;
    };
    let result = persistence.step(&mut objects, idle);
    persistence.note_dirty_pages_max();
    match result {
        Ok(worked) => worked || freed,
        Err(failure) => {
            persistence.failed(&mut objects, failure);
            true
        }
    }
}

impl Persistence {
    /// The dirty pages and nodes a checkpoint may have to write: three quarters of the free log, so
    /// that the log always holds a whole checkpoint with its nodes, record headers and the
    /// journal's commits meanwhile.
    ///
    /// While a failed checkpoint waits for its retry, the whole log's three quarters: the
    /// abandoned checkpoint's records still fill the log until the migration that frees it
    /// is done, and held to the free log the limit forced the retry at once instead of at
    /// the next interval (and before `checkpoint status` could say it had failed).
    fn dirty_pages_max(&self) -> u64 {
        let log_pages = if self.retry_pending() {
            self.store.geometry().log_block_count * 3 / 4
        } else {
            self.dirty_pages_room()
        };
        match TEST_DIRTY_PAGES_MAX.load(core::sync::atomic::Ordering::Relaxed) {
            0 => log_pages,
            test => log_pages.min(test),
        }
    }

    /// Three quarters of the free log: what a checkpoint's dirty objects may take.
    pub(super) fn dirty_pages_room(&self) -> u64 {
        let log_blocks = self.store.geometry().log_block_count;
        (log_blocks - self.store.log_used_blocks()) * 3 / 4
    }

    pub(super) fn note_dirty_pages_max(&self) {
        DIRTY_PAGES_MAX.store(self.dirty_pages_max(), core::sync::atomic::Ordering::Relaxed);
    }

    fn step(&mut self, objects: &mut Objects, idle: bool) -> Result<bool, Failure> {
        // Queued journal commits first: their processes wait for them, and nothing else
        // here is waited for (a scrub step before them added its reads to every commit).
        // Groups the standby has now (its acknowledgement's interrupt woke the idle loop).
        let mut worked = self.journal_release(objects);
        if self.journal_may_write() {
            self.journal_write(objects)?;
            worked = true;
        }
        // The mirrors: a blank or stale one resilvered in bounded steps beside the checkpoint
        // work, repairs and status changes reported.
        worked |= mirror_disks::step(&mut self.store);
        // The pair's stream: a full copy in bounded steps, acknowledgements, the heartbeat.
        worked |= crate::pair::primary::step(&mut self.store);
        worked |= self.scrub_if_due(idle, worked);
        if self.retry_pending() {
            return Ok(worked);
        }
        if self.stabilization.is_some() {
            return self.stabilize_step(objects).map(|()| true);
        }
        if let CheckpointPhase::Migrating { backlog_blocks } = self.store.checkpoint_phase() {
            // Paced at ticks only while the log has room to spare: the journal's commits and
            // the pages dirtied meanwhile need it (the dirty pages' limit is what the free log
            // takes), and a failed checkpoint's retry must find room for itself.
            let paced = !idle
                && self.failures_since_commit == 0
                && self.store.log_fill_ratio() < PACED_LOG_FILL_MAX
                && dirty_blocks(objects) * 2 < self.dirty_pages_max();
            let budget = match &self.migration_pace {
                Some(pace) if paced => tick_budget(pace, backlog_blocks),
                _ => STEP_OBJECTS,
            };
            self.store.migrate_step(budget)?;
            return Ok(true);
        }
        let due = timer::ticks() >= self.next_snapshot_tick
            || self.store.log_fill_ratio() >= FORCED_LOG_FILL
            || dirty_blocks(objects) > self.dirty_pages_max();
        if !due {
            return Ok(worked);
        }
        self.snapshot(objects)?;
        Ok(true)
    }

    /// A whole checkpoint, now: finishes the migration before it, snapshots, stabilizes
    /// and commits. For memory pressure: afterwards every page is clean.
    pub(super) fn checkpoint_now(&mut self, objects: &mut Objects) -> Result<(), Failure> {
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
        // The tables the snapshot dropped, at once: the world is stopped for the whole
        // checkpoint anyway, and the steps' one table each fell behind checkpoints taken in
        // page faults one after another (the heap ran out after 21,683 of them).
        crate::space::free_retired_tables(usize::MAX);
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
        // From the TSC's nanoseconds: a pause of tens of microseconds under KVM falls in
        // the histogram's lowest buckets, which whole microseconds would blur.
        let snapshot_pause_seconds = timer::tsc_to_nanoseconds(snapshot_tsc - started) as f64 / 1e9;
        counters.snapshot_pause_last_seconds = snapshot_pause_seconds;
        counters.snapshot_pause_seconds_max = counters.snapshot_pause_seconds_max.max(snapshot_pause_seconds);
        counters.snapshot_pause_seconds.observe(snapshot_pause_seconds);
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
            pages_settled: false,
            next_page: 0,
            copies: BTreeMap::new(),
        });
        self.next_snapshot_tick = timer::ticks() + self.interval_ticks;
        Ok(())
    }

    pub(super) fn stabilize_step(&mut self, objects: &Objects) -> Result<(), Failure> {
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
        if budget > 0 && !stabilization.pages_settled {
            // The pages go to the log in id order, the order migration moves them home in,
            // so that it reads them back in runs: in the order a program dirtied them (at
            // random, say) it read them a block at a time, a disk wait each. Sorted here,
            // at the first step to reach them, rather than in the snapshot's pause, and
            // rid of the pages durable journal commits made clean before the snapshot.
            let copies = &stabilization.copies;
            objects.cache.settle_snapshot_pages(&mut stabilization.pages, |id| copies.contains_key(&id));
            stabilization.page_count = stabilization.pages.len();
            stabilization.pages_settled = true;
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
        let stabilization_ns = timer::tsc_to_nanoseconds(arch::read_tsc() - stabilization.snapshot_tsc);
        let stabilization_us = stabilization_ns / 1000;
        self.store.note_checkpoint_stabilization_seconds(stabilization_ns as f64 / 1e9);
        println!(
            "holdfast: checkpoint {generation} committed: {} nodes, {} pages, snapshot pause {} us, stabilized in {} ms",
            stabilization.node_count,
            stabilization.page_count,
            stabilization.snapshot_pause_us,
            stabilization_us / 1000
        );
        self.stabilization = None;
        // The migration's steps at ticks: done a quarter of an interval before the next
        // snapshot, which waits for it.
        if let CheckpointPhase::Migrating { backlog_blocks } = self.store.checkpoint_phase() {
            let ticks = self.next_snapshot_tick.saturating_sub(timer::ticks() + self.interval_ticks / 4);
            self.migration_pace = Some(Pace::new(backlog_blocks, timer::ticks(), ticks.min(PACE_TICKS_MAX)));
        }
        if self.failures_since_commit > 0 {
            println!("holdfast: checkpoints persist again after {} failed", self.failures_since_commit);
            self.failures_since_commit = 0;
        }
        Ok(())
    }

}
