//! One seeded run: a random workload of node and page changes, checkpoints driven in steps,
//! journal commits, migration, planned restarts and the faults of the seed's fault mode,
//! checked against the model after every restart. A run may be given a crash point: the
//! machine stops just before that device write, the disks keep a random part of their
//! caches, and the store must recover a state the model allows.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use holdfast_objects::{ObjectId, Version};
use holdfast_store::format::log_record::{Expected, LogHeader, RecordKind};
use holdfast_store::format::superblock::Superblock;
use holdfast_store::mirror::Replica;
use holdfast_store::{
    BLOCK_SIZE, BlockDevice, CheckpointPhase, Geometry, JournalPage, MigrationProgress,
    MirrorState, RecoveryNote, Recover, Region, Store, StoreError,
};

use crate::disk::{FaultCounts, SilentFaults, SimDisk, World};
use crate::model::{
    CommitStatus, JournalCommit, Model, Object, Stabilizing, State, node_image, page_image,
    stamp_of,
};
use crate::rng::Rng;

const NODE_COUNT: u64 = 32;
const PAGE_COUNT: u64 = 48;
const LOG_BLOCK_COUNT: u64 = 160;
/// The kernel forces a checkpoint at 65 % log fill; the workload does at 50 % so that a
/// checkpoint of every object always fits.
const LOG_FILL_RATIO_FORCE_CHECKPOINT: f64 = 0.5;

/// Which faults a seed injects besides crashes, chosen by `seed % 10`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMode {
    /// One disk; crashes with torn and lost cached writes only.
    SingleDisk,
    /// Two mirrors; crashes only.
    Mirrored,
    /// Two mirrors; mirror 1 stores some writes at the wrong block.
    MisdirectedWrites,
    /// Two mirrors; mirror 0 silently drops some writes.
    LostWrites,
    /// Two mirrors; bits rot on mirror 0.
    BitRotOneMirror,
    /// Two mirrors; mirror 1 vanishes, a blank disk replaces it and is resilvered, then
    /// mirror 0 vanishes and the store must run from the resilvered disk alone.
    LostDiskReplaced,
    /// Two mirrors; a page's home block rots on both: reading it must fail with the block
    /// named, never return bad data.
    BitRotBothMirrors,
    /// Two mirrors; mirror 1 vanishes, the store runs on, then mirror 1 comes back with its
    /// stale contents at a restart: it must be resilvered, not trusted; then mirror 0
    /// vanishes and the store must run from mirror 1 alone.
    StaleMirrorReturns,
    /// Two mirrors; at the first restart whose log holds a record that a later record says
    /// was durable, that record (header or a data block) is damaged on both: the open must
    /// refuse, naming it among the records lost, or recover everything acknowledged; then
    /// the operator's truncate must open and record the truncation. Never silently less.
    MidLogDamage,
    /// As [`Self::StaleMirrorReturns`], but the resilver is cut by a power failure at a
    /// random point of the copy; at that cut, and at any crash while the copy is under way,
    /// mirror 1 alone must be refused ([`StoreError::ResilverIncomplete`]), by a read-write
    /// open and by the read-only one `store check` uses. Beside mirror 0 it is copied again.
    InterruptedResilver,
    /// One disk and a replica (the pair's standby: `holdfast_store::mirror::Replica`) that
    /// gets every write and flush in order; every restart (a crash or a planned power cut)
    /// is a failover: the store must open on the replica's disk, crashed with a random part
    /// of its cache, with everything acknowledged. The run goes on there with a new replica.
    Failover,
}

impl FaultMode {
    pub fn of_seed(seed: u64) -> Self {
        match seed % 11 {
            0 => Self::SingleDisk,
            1 => Self::Mirrored,
            2 => Self::MisdirectedWrites,
            3 => Self::LostWrites,
            4 => Self::BitRotOneMirror,
            5 => Self::LostDiskReplaced,
            6 => Self::BitRotBothMirrors,
            7 => Self::StaleMirrorReturns,
            8 => Self::MidLogDamage,
            9 => Self::InterruptedResilver,
            _ => Self::Failover,
        }
    }

    /// The fault counts of a seed's runs (all its crash points) show this mode's faults:
    /// else the runs tested nothing of what the mode is for.
    pub fn injected(self, faults: &FaultCounts) -> Result<(), String> {
        let (injected, what) = match self {
            Self::SingleDisk | Self::Mirrored => (
                faults.torn_writes + faults.dropped_writes,
                "torn or dropped cached writes",
            ),
            Self::MisdirectedWrites => (faults.misdirected_writes, "misdirected writes"),
            Self::LostWrites => (faults.lost_writes, "lost writes"),
            Self::BitRotOneMirror | Self::BitRotBothMirrors => {
                (faults.rotted_blocks, "rotted blocks")
            }
            // The interrupted resilver's cuts are counted apart (incomplete_mirrors_refused).
            Self::LostDiskReplaced | Self::StaleMirrorReturns | Self::InterruptedResilver => {
                (faults.vanished_disks, "vanished disks")
            }
            Self::MidLogDamage => (faults.log_records_damaged, "damaged log records"),
            Self::Failover => (faults.replicas_promoted, "promoted replicas"),
        };
        if injected == 0 {
            return Err(format!("fault mode {self:?} injected no {what}"));
        }
        Ok(())
    }

    fn mirror_count(self) -> usize {
        if matches!(self, Self::SingleDisk | Self::Failover) { 1 } else { 2 }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Device writes and flushes issued by the run (all disks, after format): its crash
    /// points.
    pub device_requests_total: u64,
    /// Restarts whose recovered state was checked against the model.
    pub crash_points_checked: u64,
    /// Reads that failed with the block and check named, as they must for rot on both.
    pub corruption_reported: u64,
    pub checkpoints_committed: u64,
    pub journal_commits_acknowledged: u64,
    pub mirror_repairs: u64,
    pub faults: FaultCounts,
    /// Opens refused for mid-log damage, naming the damaged record among those lost.
    pub log_damage_refused: u64,
    /// Restarts in the middle of a resilver at which the part-copied mirror alone was
    /// refused, as it must be.
    pub incomplete_mirrors_refused: u64,
}

/// A run that broke an invariant; `command` replays it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub crash_point: Option<u64>,
    pub step_count: usize,
    pub message: String,
}

impl Failure {
    pub fn command(&self) -> String {
        let replay = format!(
            "cargo run -p holdfast-store-sim -- --seed {} --steps {}",
            self.seed, self.step_count
        );
        match self.crash_point {
            Some(write) => format!("{replay} --crash-point {write}"),
            None => replay,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed: {}\nreplay: {}",
            self.seed,
            self.message,
            self.command()
        )
    }
}

/// Why a workload step stopped.
enum Stop {
    /// The machine crashed (the crash point was reached).
    Crash,
    Fail(String),
}

type Step<T> = Result<T, Stop>;

pub struct Options {
    pub seed: u64,
    pub crash_point: Option<u64>,
    /// Workload steps before the final restart.
    pub step_count: usize,
    /// Print every step.
    pub trace: bool,
}

struct Run {
    mode: FaultMode,
    rng: Rng,
    world: Rc<RefCell<World>>,
    disks: Vec<SimDisk>,
    store: Option<Store<SimDisk>>,
    model: Model,
    geometry: Geometry,
    /// Home blocks rotted on both mirrors.
    poisoned_blocks: BTreeSet<u64>,
    report: RunReport,
    trace: bool,
    disk_seed_next: u64,
    replaced: bool,
    /// The first disk has vanished after the resilver: the store runs on the replacement.
    original_vanished: bool,
    /// A restart is due before the next step (a disk came back).
    pending_restart: bool,
    /// The log was damaged on every copy (mid-log damage mode: once per run).
    log_damaged: bool,
    /// The open refused the damage and the truncated store was checked: the run ends.
    ended: bool,
    /// The blocks the copy onto mirror 1 still had to make at its last step, while it is
    /// under way ([`FaultMode::InterruptedResilver`]).
    resilver_left_blocks: Option<u64>,
    /// The step at which that copy is cut, and whether that is due before the next step.
    resilver_cut_step: usize,
    pending_resilver_cut: bool,
    /// [`FaultMode::Failover`]: what the replica holds — the disk as it was when the
    /// replica was set, and every write and flush since.
    replica: Option<ReplicaLog>,
}

/// The replica's disk as a log: a base image, then the store's writes and flushes in order.
struct ReplicaLog {
    base: Vec<u8>,
    operations: Arc<Mutex<Vec<ReplicaOperation>>>,
}

enum ReplicaOperation {
    Write { first_block: u64, data: Vec<u8> },
    Flush,
}

/// The store's replica in the simulator: records what the pair's standby would be sent.
struct RecordingReplica(Arc<Mutex<Vec<ReplicaOperation>>>);

impl Replica for RecordingReplica {
    fn write(&mut self, first_block: u64, data: &[u8]) {
        self.0.lock().expect("one thread").push(ReplicaOperation::Write { first_block, data: data.to_vec() });
    }

    fn flush(&mut self) {
        self.0.lock().expect("one thread").push(ReplicaOperation::Flush);
    }
}

pub fn run(options: &Options) -> Result<RunReport, Failure> {
    let fail = |message: String| Failure {
        seed: options.seed,
        crash_point: options.crash_point,
        step_count: options.step_count,
        message,
    };
    let mut run = Run::new(options.seed, options.trace).map_err(fail)?;
    let mut step_count = options.step_count;
    let mut step = 0;
    while step < step_count && !run.ended {
        step += 1;
        // A store may absorb a crash as a failed mirror and carry on; the machine is down all
        // the same.
        let result = run
            .step(step, step_count)
            .and_then(|()| run.crash_noticed());
        match result {
            Ok(()) => {}
            Err(Stop::Crash) => {
                run.trace(format_args!(
                    "crash before device request {}",
                    run.world.borrow().device_requests_total + 1
                ));
                run.restart().map_err(|stop| fail(stop_message(stop)))?;
                // After the injected crash, a few more steps show the recovered store works.
                step_count = step_count.min(step + 6);
            }
            Err(Stop::Fail(message)) => return Err(fail(message)),
        }
        if step == 1 {
            // Crash points count from here, so that writes of format are not among them.
            run.world.borrow_mut().crash_point = options.crash_point;
        }
    }
    if !run.ended {
        run.finish().map_err(|stop| fail(stop_message(stop)))?;
    }
    run.report.device_requests_total = run.world.borrow().device_requests_total;
    run.report.faults = run.world.borrow().faults;
    Ok(run.report)
}

fn stop_message(stop: Stop) -> String {
    match stop {
        Stop::Crash => "crashed while recovering from a crash".to_string(),
        Stop::Fail(message) => message,
    }
}

impl Run {
    fn new(seed: u64, trace: bool) -> Result<Self, String> {
        let mode = FaultMode::of_seed(seed);
        let mut rng = Rng::new(seed);
        let geometry = Geometry {
            store_id: rng.next_u64() | 1,
            node_count: NODE_COUNT,
            page_count: PAGE_COUNT,
            log_block_count: LOG_BLOCK_COUNT,
        };
        let block_count = geometry
            .layout()
            .map_err(|error| error.to_string())?
            .block_count;
        let world = Rc::new(RefCell::new(World::default()));
        let disks: Vec<SimDisk> = (0..mode.mirror_count())
            .map(|index| SimDisk::new(&world, block_count, seed * 16 + index as u64))
            .collect();
        let store =
            Store::format(disks.clone(), geometry).map_err(|error| format!("format: {error}"))?;
        match mode {
            FaultMode::MisdirectedWrites => {
                disks[1].set_silent_faults(SilentFaults {
                    misdirected_write_per_mille: 8,
                    ..SilentFaults::default()
                });
            }
            FaultMode::LostWrites => {
                disks[0].set_silent_faults(SilentFaults {
                    lost_write_per_mille: 8,
                    ..SilentFaults::default()
                });
            }
            _ => {}
        }
        world.borrow_mut().device_requests_total = 0;
        let run = Self {
            mode,
            rng,
            world,
            disks,
            store: Some(store),
            model: Model::new(NODE_COUNT as usize, PAGE_COUNT as usize, seed),
            geometry,
            poisoned_blocks: BTreeSet::new(),
            report: RunReport::default(),
            trace,
            disk_seed_next: seed * 16 + 8,
            replaced: false,
            original_vanished: false,
            pending_restart: false,
            log_damaged: false,
            ended: false,
            resilver_left_blocks: None,
            resilver_cut_step: 0,
            pending_resilver_cut: false,
            replica: None,
        };
        let mut run = run;
        run.set_replica();
        run.trace(format_args!("seed {seed}: {mode:?}, geometry {geometry:?}"));
        Ok(run)
    }

    fn trace(&self, args: fmt::Arguments<'_>) {
        if self.trace {
            println!("  {args}");
        }
    }

    fn store(&mut self) -> &mut Store<SimDisk> {
        self.store
            .as_mut()
            .expect("the store is open between restarts")
    }

    /// A store error: a crash if the machine stopped, else a broken invariant.
    fn stopped(&self, what: &str, error: StoreError) -> Stop {
        if self.world.borrow().crashed {
            Stop::Crash
        } else {
            Stop::Fail(format!("{what}: unexpected error: {error}"))
        }
    }

    /// Whether mirror 1 was replaced or came back, so that the run ends on it alone.
    fn disk_swapped(&self) -> bool {
        matches!(
            self.mode,
            FaultMode::LostDiskReplaced | FaultMode::StaleMirrorReturns | FaultMode::InterruptedResilver
        ) && self.replaced
    }

    fn crash_noticed(&self) -> Step<()> {
        if self.world.borrow().crashed {
            Err(Stop::Crash)
        } else {
            Ok(())
        }
    }

    fn step(&mut self, step: usize, step_count: usize) -> Step<()> {
        self.inject_faults(step, step_count);
        if std::mem::take(&mut self.pending_restart) {
            return self.planned_restart();
        }
        if std::mem::take(&mut self.pending_resilver_cut) {
            return self.cut_resilver();
        }
        let fill = self.store().log_fill_ratio();
        let phase = self.store().checkpoint_phase();
        if self.model.stabilizing.is_some() {
            return match self.rng.below(10) {
                0..=4 => self.write_snapshot_objects(),
                5..=6 => self.modify_objects(),
                7..=8 if fill < 0.6 => self.journal_commits(),
                _ => self.resilver(),
            };
        }
        if fill > LOG_FILL_RATIO_FORCE_CHECKPOINT {
            return if matches!(phase, CheckpointPhase::Migrating { .. }) {
                self.migrate()
            } else {
                self.begin_checkpoint()
            };
        }
        match self.rng.below(20) {
            0..=6 => self.modify_objects(),
            7..=9 => self.journal_commits(),
            10..=12 => {
                if phase == CheckpointPhase::Idle {
                    self.begin_checkpoint()
                } else {
                    self.migrate()
                }
            }
            13..=15 => self.migrate(),
            16 => self.planned_restart(),
            _ => self.resilver(),
        }
    }

    fn modify_objects(&mut self) -> Step<()> {
        for _ in 0..1 + self.rng.below(3) {
            let stamp = self.model.next_stamp();
            let bump = self.rng.chance(150);
            if self.rng.chance(400) {
                let id = self.rng.below(NODE_COUNT) as usize;
                let object = &mut self.model.current.nodes[id];
                object.stamp = stamp;
                object.version += u64::from(bump);
                self.model.dirty_nodes.insert(id);
            } else {
                let id = self.rng.below(PAGE_COUNT) as usize;
                let object = &mut self.model.current.pages[id];
                object.stamp = stamp;
                object.version += u64::from(bump);
                self.model.dirty_pages.insert(id);
            }
        }
        Ok(())
    }

    fn journal_commits(&mut self) -> Step<()> {
        let commit_count = 1 + self.rng.below(3);
        for _ in 0..commit_count {
            let mut ids: Vec<usize> = (0..1 + self.rng.below(3))
                .map(|_| self.rng.below(PAGE_COUNT) as usize)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let pages: Vec<(usize, Object)> = ids
                .iter()
                .map(|id| (*id, self.model.current.pages[*id]))
                .collect();
            let images: Vec<Box<[u8; BLOCK_SIZE]>> = pages
                .iter()
                .map(|(_, object)| page_image(object.stamp))
                .collect();
            let journal_pages: Vec<JournalPage<'_>> = pages
                .iter()
                .zip(&images)
                .map(|((id, object), image)| JournalPage {
                    id: ObjectId(*id as u64),
                    version: Version(object.version),
                    data: image,
                })
                .collect();
            let generation = self.store().snapshot_generation();
            let ticket = self
                .store()
                .journal_submit(&journal_pages)
                .map_err(|error| self.stopped("journal_submit", error))?;
            self.model.journal.push(JournalCommit {
                ticket: ticket.0,
                generation,
                pages,
                status: CommitStatus::InFlight,
            });
        }
        let durable = self
            .store()
            .journal_write()
            .map_err(|error| self.stopped("journal_write", error))?;
        let Some(durable) = durable else {
            return Err(Stop::Fail("journal_write acknowledged nothing".into()));
        };
        for commit in &mut self.model.journal {
            if commit.ticket <= durable.0 && commit.status == CommitStatus::InFlight {
                commit.status = CommitStatus::Acknowledged;
                self.report.journal_commits_acknowledged += 1;
            }
        }
        self.trace(format_args!(
            "journal: {commit_count} commits durable through ticket {}",
            durable.0
        ));
        Ok(())
    }

    fn begin_checkpoint(&mut self) -> Step<()> {
        if self.store().checkpoint_phase() != CheckpointPhase::Idle {
            return self.migrate();
        }
        let generation = self
            .store()
            .begin_checkpoint()
            .map_err(|error| self.stopped("begin_checkpoint", error))?;
        let mut nodes_to_write: Vec<usize> = std::mem::take(&mut self.model.dirty_nodes)
            .into_iter()
            .collect();
        let mut pages_to_write: Vec<usize> = std::mem::take(&mut self.model.dirty_pages)
            .into_iter()
            .collect();
        // The kernel writes in whatever order its cache gives; so does the model.
        shuffle(&mut self.rng, &mut nodes_to_write);
        shuffle(&mut self.rng, &mut pages_to_write);
        self.trace(format_args!(
            "begin checkpoint {generation}: {} nodes, {} pages dirty",
            nodes_to_write.len(),
            pages_to_write.len()
        ));
        self.model.stabilizing = Some(Stabilizing {
            generation,
            snapshot: self.model.current.clone(),
            nodes_to_write,
            pages_to_write,
        });
        Ok(())
    }

    fn write_snapshot_objects(&mut self) -> Step<()> {
        let Some(mut stabilizing) = self.model.stabilizing.take() else {
            return Ok(());
        };
        let result = self.write_snapshot_objects_from(&mut stabilizing);
        self.model.stabilizing = Some(stabilizing);
        result?;
        let done = self
            .model
            .stabilizing
            .as_ref()
            .is_some_and(|s| s.nodes_to_write.is_empty() && s.pages_to_write.is_empty());
        if done {
            let stabilizing = self.model.stabilizing.take().expect("checked above");
            self.model.checkpoint_in_flight =
                Some((stabilizing.generation, stabilizing.snapshot.clone()));
            let generation = self
                .store()
                .commit_checkpoint()
                .map_err(|error| self.stopped("commit_checkpoint", error))?;
            if generation != stabilizing.generation {
                return Err(Stop::Fail(format!(
                    "committed {generation}, began {}",
                    stabilizing.generation
                )));
            }
            self.model.checkpoint_in_flight = None;
            self.model.base = (generation, stabilizing.snapshot);
            self.model
                .journal
                .retain(|commit| commit.generation >= generation);
            self.report.checkpoints_committed += 1;
            self.trace(format_args!("commit checkpoint {generation}"));
        }
        Ok(())
    }

    fn write_snapshot_objects_from(&mut self, stabilizing: &mut Stabilizing) -> Step<()> {
        for _ in 0..1 + self.rng.below(8) {
            if let Some(id) = stabilizing.nodes_to_write.pop() {
                let object = stabilizing.snapshot.nodes[id];
                let image = node_image(object.stamp);
                self.store()
                    .checkpoint_write_node(ObjectId(id as u64), Version(object.version), &image)
                    .map_err(|error| self.stopped("checkpoint_write_node", error))?;
            } else if let Some(id) = stabilizing.pages_to_write.pop() {
                let object = stabilizing.snapshot.pages[id];
                let image = page_image(object.stamp);
                self.store()
                    .checkpoint_write_page(ObjectId(id as u64), Version(object.version), &image)
                    .map_err(|error| self.stopped("checkpoint_write_page", error))?;
            }
        }
        Ok(())
    }

    fn migrate(&mut self) -> Step<()> {
        let blocks = 1 + self.rng.below(24) as usize;
        let progress = self
            .store()
            .migrate_step(blocks)
            .map_err(|error| self.stopped("migrate_step", error))?;
        self.trace(format_args!("migrate {blocks}: {progress:?}"));
        Ok(())
    }

    fn resilver(&mut self) -> Step<()> {
        let blocks = 1 + self.rng.below(64);
        let left = self.resilver_step(blocks)?;
        if left > 0 {
            self.trace(format_args!("resilver {blocks}: {left} blocks left"));
        }
        Ok(())
    }

    /// A resilver step, its progress noted for [`Self::check_incomplete_mirror_refused`].
    fn resilver_step(&mut self, block_count_max: u64) -> Step<u64> {
        let left = self
            .store()
            .resilver_step(block_count_max)
            .map_err(|error| self.stopped("resilver_step", error))?;
        if self.mode == FaultMode::InterruptedResilver && self.replaced && !self.world.borrow().crashed {
            self.resilver_left_blocks = (left > 0).then_some(left);
        }
        Ok(left)
    }

    /// An open beside the returned mirror marks it incomplete before it writes anything to
    /// it (its checkpoints and journal reach it from then on): from here it must be refused
    /// alone, before its first resilver step too.
    fn note_resilver_begun(&mut self) {
        let resilvering = self
            .store
            .as_ref()
            .is_some_and(|store| matches!(store.mirror_status().mirrors.get(1), Some(MirrorState::Resilvering { .. })));
        if self.mode == FaultMode::InterruptedResilver && resilvering && self.resilver_left_blocks.is_none() {
            self.resilver_left_blocks = Some(self.geometry.layout().expect("laid out at format").block_count);
        }
    }

    /// Copies a random part of the store onto the returned mirror, then cuts the power.
    fn cut_resilver(&mut self) -> Step<()> {
        let block_count = self.geometry.layout().expect("laid out at format").block_count;
        let target_left = 3 + self.rng.below(block_count - 3);
        while self.resilver_left_blocks.is_none_or(|left| left > target_left) {
            let blocks = 1 + self.rng.below(64);
            if self.resilver_step(blocks)? == 0 {
                break;
            }
        }
        self.crash_noticed()?;
        self.trace(format_args!("power cut with {:?} blocks left to copy onto mirror 1", self.resilver_left_blocks));
        self.restart()
    }

    /// At a power cut while mirror 1 is being copied (before the copy's last step, which
    /// writes its superblocks), mirror 1 alone must be refused as incomplete, not opened
    /// on its old superblock over a part-copied body.
    fn check_incomplete_mirror_refused(&mut self) -> Step<()> {
        // Left 2: the last step (the superblocks) may have been under way; either outcome
        // is right.
        if self.resilver_left_blocks.is_none_or(|left| left <= 2) || self.original_vanished {
            return Ok(());
        }
        let alone = || vec![self.disks[1].clone()];
        let results = [Store::open_read_only(alone()).err(), Store::open(alone()).err()];
        for result in results {
            if !matches!(result, Some(StoreError::ResilverIncomplete { mirror: 0, .. })) {
                return Err(Stop::Fail(format!(
                    "mirror 1, cut with {:?} blocks left to copy, opened alone: {result:?}",
                    self.resilver_left_blocks
                )));
            }
        }
        self.trace(format_args!("mirror 1 alone is refused as incomplete"));
        self.report.incomplete_mirrors_refused += 1;
        Ok(())
    }

    fn inject_faults(&mut self, step: usize, step_count: usize) {
        // At least one silent fault in every run, whatever the odds give.
        if step == 1 {
            match self.mode {
                FaultMode::MisdirectedWrites => self.disks[1].fault_next_write(),
                FaultMode::LostWrites => self.disks[0].fault_next_write(),
                _ => {}
            }
        }
        match self.mode {
            FaultMode::BitRotOneMirror if self.rng.chance(150) => {
                let block = self.rng.below(
                    self.geometry
                        .layout()
                        .map_or(1, |layout| layout.block_count),
                );
                let bit = self.rng.next_u64();
                self.disks[0].rot(block, bit);
                self.trace(format_args!("rot block {block} on mirror 0"));
            }
            FaultMode::BitRotBothMirrors if self.rng.chance(60) || step == 1 => {
                let layout = self.geometry.layout().expect("laid out at format");
                let block = layout.page_ranges.data_first_block + self.rng.below(PAGE_COUNT);
                for disk in &self.disks {
                    let bit = self.rng.next_u64();
                    disk.rot(block, bit);
                }
                self.poisoned_blocks.insert(block);
                self.trace(format_args!("rot page home block {block} on both mirrors"));
            }
            FaultMode::InterruptedResilver if self.replaced && step == self.resilver_cut_step => {
                self.pending_resilver_cut = true;
            }
            FaultMode::StaleMirrorReturns | FaultMode::InterruptedResilver => {
                if step == step_count / 4 {
                    self.disks[1].vanish();
                    self.trace(format_args!("mirror 1 vanishes"));
                } else if step == step_count / 2 && !self.replaced {
                    self.disks[1].reappear();
                    self.replaced = true;
                    self.trace(format_args!("mirror 1 comes back, stale"));
                    self.pending_restart = true;
                    self.resilver_cut_step = step + 1 + self.rng.below(step_count as u64 / 4 + 1) as usize;
                }
            }
            FaultMode::LostDiskReplaced => {
                if step == step_count / 4 {
                    self.disks[1].vanish();
                    self.trace(format_args!("mirror 1 vanishes"));
                } else if step == step_count / 2 && !self.replaced {
                    let block_count = self.geometry.layout().expect("laid out").block_count;
                    self.disk_seed_next += 1;
                    let blank = SimDisk::new(&self.world, block_count, self.disk_seed_next);
                    self.disks[1] = blank.clone();
                    self.replaced = true;
                    match self.store().replace_mirror(1, blank) {
                        Ok(()) => self.trace(format_args!("a blank disk replaces mirror 1")),
                        Err(error) => self.trace(format_args!("replace refused: {error}")),
                    }
                }
            }
            _ => {}
        }
    }

    /// In [`FaultMode::Failover`], gives the open store a new replica: a copy of its disk
    /// as it is now, then every write and flush from here.
    fn set_replica(&mut self) {
        if self.mode != FaultMode::Failover {
            return;
        }
        let mut disk = self.disks[0].clone();
        let mut base = vec![0u8; disk.block_count() as usize * BLOCK_SIZE];
        disk.read(0, &mut base).expect("the primary's disk reads whole");
        let operations = Arc::new(Mutex::new(Vec::new()));
        self.store().set_replica(Box::new(RecordingReplica(Arc::clone(&operations))));
        self.replica = Some(ReplicaLog { base, operations });
    }

    /// In [`FaultMode::Failover`], at a restart: the replica's disk, built from its log —
    /// the base, then each write and flush in order, as the standby made them — and crashed
    /// like any disk (its writes since its last flush torn or lost) takes the primary's
    /// place. Its requests are not crash points (the machine that crashed was the primary).
    fn promote_replica(&mut self) {
        let Some(replica) = self.replica.take() else {
            return;
        };
        let (crash_point, requests) = {
            let mut world = self.world.borrow_mut();
            (world.crash_point.take(), world.device_requests_total)
        };
        let block_count = self.disks[0].block_count();
        let mut disk = SimDisk::new(&self.world, block_count, self.disk_seed_next);
        self.disk_seed_next += 1;
        disk.write(0, &replica.base).expect("the replica's disk takes its base");
        disk.flush().expect("and keeps it");
        for operation in replica.operations.lock().expect("one thread").iter() {
            match operation {
                ReplicaOperation::Write { first_block, data } => disk.write(*first_block, data),
                ReplicaOperation::Flush => disk.flush(),
            }
            .expect("the replica's disk takes the stream");
        }
        disk.crash(&mut self.rng);
        {
            let mut world = self.world.borrow_mut();
            world.crash_point = crash_point;
            world.device_requests_total = requests;
            world.faults.replicas_promoted += 1;
        }
        self.trace(format_args!("failover: the replica's disk takes the primary's place"));
        self.disks = vec![disk];
    }

    fn planned_restart(&mut self) -> Step<()> {
        self.trace(format_args!("restart (power cut)"));
        self.restart()
    }

    /// Cuts the power, reopens, and checks the recovered state against the model. A crash
    /// point inside recovery (its repairs and superblock write) cuts the power again.
    fn restart(&mut self) -> Step<()> {
        loop {
            self.store = None;
            for disk in &self.disks {
                disk.crash(&mut self.rng);
            }
            {
                let mut world = self.world.borrow_mut();
                if world.crashed {
                    world.crashed = false;
                    world.crash_point = None;
                }
            }
            self.promote_replica();
            self.check_incomplete_mirror_refused()?;
            let damaged = self.damage_a_durable_log_record();
            let opened = match Store::open(self.disks.clone()) {
                Err(StoreError::LogDamaged(loss)) if !self.world.borrow().crashed => {
                    return self.refused(damaged, loss);
                }
                result => result.map_err(|error| self.stopped("open", error)),
            };
            let checked = opened.and_then(|store| {
                self.store = Some(store);
                self.check_recovered()
            });
            match checked {
                Ok(()) => {
                    self.report.crash_points_checked += 1;
                    self.note_resilver_begun();
                    self.set_replica();
                    return Ok(());
                }
                Err(Stop::Crash) => self.trace(format_args!("crash during recovery")),
                Err(failure) => return Err(failure),
            }
        }
    }

    /// In mid-log damage mode, at the first restart whose log holds a record that a later
    /// record says was durable: damages that record (its header, or a data block) on every
    /// disk. Returns its sequence number and the newest record claiming it.
    fn damage_a_durable_log_record(&mut self) -> Option<(u64, u64)> {
        if self.mode != FaultMode::MidLogDamage || self.log_damaged {
            return None;
        }
        let layout = self.geometry.layout().expect("laid out at format");
        let mut disk = self.disks[0].clone();
        let mut superblock: Option<Superblock> = None;
        for candidate in &self.disks {
            let mut candidate = candidate.clone();
            for slot in 0..2u64 {
                let mut block = [0u8; BLOCK_SIZE];
                if candidate.read(slot, &mut block).is_ok()
                    && let Ok(found) = Superblock::decode(&block, slot)
                    && superblock.is_none_or(|best| best.generation < found.generation)
                {
                    superblock = Some(found);
                }
            }
        }
        let superblock = superblock?;
        let mut cursor = superblock.log_tail;
        let mut records: Vec<LogHeader> = Vec::new();
        let mut used_blocks = 0;
        loop {
            let expected = Expected {
                store_id: self.geometry.store_id,
                position: cursor.position,
                sequence: cursor.sequence,
                previous_header_checksum: cursor.previous_header_checksum,
                log_block_count: LOG_BLOCK_COUNT,
                node_pot_count: NODE_COUNT / 4,
                page_count: PAGE_COUNT,
            };
            let mut block = [0u8; BLOCK_SIZE];
            if disk
                .read(layout.log_first_block + cursor.position, &mut block)
                .is_err()
            {
                break;
            }
            let Ok(header) = LogHeader::decode(&block, &expected) else {
                break;
            };
            used_blocks += header.block_count();
            if used_blocks > LOG_BLOCK_COUNT - 1 {
                break;
            }
            cursor.position = (cursor.position + header.block_count()) % LOG_BLOCK_COUNT;
            cursor.sequence += 1;
            cursor.previous_header_checksum = holdfast_store::format::sealed_checksum(&block);
            records.push(header);
        }
        let claimed = records.iter().map(|header| header.durable_sequence_next).max()?;
        let claimant = records
            .iter()
            .find(|header| header.durable_sequence_next == claimed)?
            .sequence;
        let damageable: Vec<&LogHeader> = records
            .iter()
            .filter(|header| header.sequence < claimed)
            .collect();
        if damageable.is_empty() {
            return None;
        }
        let target = damageable[self.rng.below(damageable.len() as u64) as usize];
        let mut block = layout.log_first_block + target.position;
        if target.kind != RecordKind::Padding && target.data_block_count > 0 && self.rng.chance(500)
        {
            block += 1 + self.rng.below(u64::from(target.data_block_count));
        }
        for disk in &self.disks {
            let bit = self.rng.next_u64();
            disk.rot(block, bit);
        }
        self.log_damaged = true;
        self.world.borrow_mut().faults.log_records_damaged += 1;
        self.trace(format_args!(
            "damage log record {} (block {block}) on every disk; record {claimant} says it was durable",
            target.sequence
        ));
        Some((target.sequence, claimant))
    }

    /// The open refused for log damage: it must be the damage this run injected, named
    /// among the records lost up to the one that claimed it; the operator's truncate must
    /// then open the store and record what it discarded. The run ends there (the model does
    /// not follow a truncated history).
    fn refused(&mut self, damaged: Option<(u64, u64)>, loss: holdfast_store::LogLoss) -> Step<()> {
        let Some((sequence, claimant)) = damaged else {
            return Err(Stop::Fail(format!("open refused log damage nobody injected: {loss}")));
        };
        if loss.first_sequence != sequence || loss.last_sequence < claimant {
            return Err(Stop::Fail(format!(
                "damaged record {sequence} (claimed by {claimant}), but the open named: {loss}"
            )));
        }
        self.report.log_damage_refused += 1;
        self.trace(format_args!("open refused: {loss}"));
        // The truncating open is the operator's next boot; crash points stop before it.
        self.world.borrow_mut().crash_point = None;
        let store = Store::open_with(self.disks.clone(), Recover::Truncate)
            .map_err(|error| self.stopped("open with truncate", error))?;
        let recorded = store.recovery_notes().iter().any(|note| {
            matches!(note, RecoveryNote::Truncated(truncation)
                if truncation.first_sequence == sequence && truncation.last_sequence == loss.last_sequence)
        });
        if !recorded {
            return Err(Stop::Fail(format!(
                "truncated open did not record the truncation: {:?}",
                store.recovery_notes()
            )));
        }
        self.store = Some(store);
        self.ended = true;
        Ok(())
    }

    fn check_recovered(&mut self) -> Step<()> {
        let mut observed = State::new(NODE_COUNT as usize, PAGE_COUNT as usize);
        let mut unreadable_pages = BTreeSet::new();
        for id in 0..NODE_COUNT {
            let (version, image) = self
                .store()
                .read_node(ObjectId(id))
                .map_err(|error| self.stopped(&format!("node {id}"), error))?;
            let stamp = stamp_of(&image[..])
                .ok_or_else(|| Stop::Fail(format!("node {id}: corrupted image returned")))?;
            observed.nodes[id as usize] = Object {
                version: version.0,
                stamp,
            };
        }
        let mut page = Box::new([0u8; BLOCK_SIZE]);
        for id in 0..PAGE_COUNT {
            match self.store().read_page(ObjectId(id), &mut page) {
                Ok(version) => {
                    let stamp = stamp_of(&page[..])
                        .ok_or_else(|| Stop::Fail(format!("page {id}: corrupted data returned")))?;
                    observed.pages[id as usize] = Object {
                        version: version.0,
                        stamp,
                    };
                }
                Err(StoreError::Corrupt(corruption))
                    if corruption.region == Region::PageData
                        && self.poisoned_blocks.contains(&corruption.block) =>
                {
                    self.report.corruption_reported += 1;
                    unreadable_pages.insert(id as usize);
                }
                Err(error) => return Err(self.stopped(&format!("page {id}"), error)),
            }
        }
        let candidates = self.model.candidates();
        let matched = candidates.iter().find(|candidate| {
            candidate.nodes == observed.nodes
                && candidate.pages.iter().zip(&observed.pages).enumerate().all(
                    |(id, (expected, seen))| unreadable_pages.contains(&id) || expected == seen,
                )
        });
        let Some(matched) = matched.cloned() else {
            return Err(Stop::Fail(describe_mismatch(&candidates, &observed)));
        };
        // No run lets the mirrors run apart: a discarded history would be a false alarm
        // (and a stale mirror's history passed off as a split brain).
        if let Some(note) = self
            .store()
            .recovery_notes()
            .iter()
            .find(|note| matches!(note, RecoveryNote::HistoryDiscarded { .. }))
        {
            return Err(Stop::Fail(format!("no split brain was made, but: {note}")));
        }
        let generation = self.store().checkpoint_generation();
        let mirrors = self.store().mirror_status().mirrors;
        // STORE_SIM_DEBUG=1 prints the store's inspection at every restart of a replay.
        if std::env::var_os("STORE_SIM_DEBUG").is_some() {
            let inspection = self.store().inspect();
            self.trace(format_args!("{inspection}"));
        }
        self.trace(format_args!(
            "recovered checkpoint {generation} with its journal; state matches one of {} allowed; mirrors {mirrors:?}",
            candidates.len()
        ));
        if self.disk_swapped() {
            // Degraded until the replacement is resilvered; the store must say so.
            let status = self.store().mirror_status();
            if status
                .mirrors
                .iter()
                .any(|state| *state != holdfast_store::MirrorState::Healthy)
                != status.degraded
            {
                return Err(Stop::Fail(format!(
                    "mirror status inconsistent: {status:?}"
                )));
            }
        }
        self.model.restarted(matched, generation);
        Ok(())
    }

    /// A last restart, full migration, and for the clean modes a full check of every copy;
    /// a crash point in there starts it again.
    fn finish(&mut self) -> Step<()> {
        loop {
            match self.finish_once() {
                Err(Stop::Crash) => {
                    self.trace(format_args!("crash while finishing"));
                    self.restart()?;
                }
                other => return other,
            }
        }
    }

    fn finish_once(&mut self) -> Step<()> {
        if self.disk_swapped() && !self.original_vanished {
            while self.resilver_step(256)? > 0 {}
            self.crash_noticed()?;
            if self.store().mirror_status().degraded {
                return Err(Stop::Fail("still degraded after resilvering".into()));
            }
            // The original disk goes: everything must now come from the resilvered one.
            self.disks[0].vanish();
            self.original_vanished = true;
            self.trace(format_args!(
                "mirror 0 vanishes; running from the resilvered disk"
            ));
        }
        self.restart()?;
        while let MigrationProgress::Migrating { .. } = self
            .store()
            .migrate_step(64)
            .map_err(|error| self.stopped("migrate", error))?
        {}
        self.crash_noticed()?;
        self.report.mirror_repairs = self.store().counters().mirror_repaired_blocks_total;
        if matches!(self.mode, FaultMode::SingleDisk | FaultMode::Mirrored) {
            let report = self
                .store()
                .check()
                .map_err(|error| self.stopped("check", error))?;
            if !report.is_clean() {
                return Err(Stop::Fail(format!(
                    "check after recovery found damage: {:?}",
                    report.findings
                )));
            }
        }
        if self.disk_swapped() && !self.store().mirror_status().degraded {
            return Err(Stop::Fail(
                "running on one disk but not reported degraded".into(),
            ));
        }
        Ok(())
    }
}

fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for index in (1..items.len()).rev() {
        let other = rng.below(index as u64 + 1) as usize;
        items.swap(index, other);
    }
}

fn describe_mismatch(candidates: &[State], observed: &State) -> String {
    // Name the differences from the newest allowed state, which is the usual expectation.
    let Some(expected) = candidates.last() else {
        return "no allowed state".into();
    };
    let mut differences = Vec::new();
    for (id, (want, got)) in expected.nodes.iter().zip(&observed.nodes).enumerate() {
        if want != got {
            differences.push(format!("node {id}: want {want:?}, got {got:?}"));
        }
    }
    for (id, (want, got)) in expected.pages.iter().zip(&observed.pages).enumerate() {
        if want != got {
            differences.push(format!("page {id}: want {want:?}, got {got:?}"));
        }
    }
    differences.truncate(6);
    format!(
        "recovered state matches none of the {} allowed states; against the newest: {}",
        candidates.len(),
        differences.join("; ")
    )
}
