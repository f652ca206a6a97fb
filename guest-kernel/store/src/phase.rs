//! Checkpoints in steps, driven by the kernel (there is no thread): begin (the snapshot is
//! taken), write the snapshot's dirty nodes and pages into the log in large records, commit
//! (flush, commit record, flush), then migrate the log's live blocks home in steps; the last
//! step writes the superblock that frees the log up to where migration began.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use holdfast_objects::{ObjectId, Version};

use crate::device::BlockDevice;
use crate::directory::Directory;
use crate::error::StoreError;
use crate::format::home_table::{HomeTable, TableEntry};
use crate::format::log_record::{
    BlockKind, CommitSummary, LOG_RECORD_DATA_BLOCKS_MAX, LogEntry, RecordKind,
};
use crate::format::superblock::LogCursor;
use crate::format::{Block, checksum, checksum_chain};
use crate::geometry::{HomeRangeLayout, NODE_SIZE, NODES_PER_POT};
use crate::log::RecordRun;
use crate::store::{BlockKey, DirectoryEntry, Order, SOURCE_CHECKPOINT, Store};

pub(crate) enum Phase {
    Idle,
    Stabilizing(Box<Stabilization>),
    Migrating(Box<Migration>),
}

/// Which step of the checkpoint cycle the store is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointPhase {
    /// Ready to begin a checkpoint.
    Idle,
    /// Checkpoint `generation` begun: dirty objects are being written to the log.
    Stabilizing { generation: u64 },
    /// Migrating the log's live blocks home; `backlog_blocks` to go.
    Migrating { backlog_blocks: u64 },
}

/// What a migration step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationProgress {
    /// Nothing to migrate.
    Idle,
    /// More steps needed; `backlog_blocks` blocks still to move.
    Migrating { backlog_blocks: u64 },
    /// Everything is home and the log is freed up to where this migration began.
    Done,
}

pub(crate) struct Stabilization {
    generation: u64,
    /// Node pots changed by this checkpoint and not yet in `run` (nodes arrive one at a
    /// time and share pots); at most a record's worth before they are written.
    pots: BTreeMap<u64, ([u64; 4], Box<Block>)>,
    /// Records of this checkpoint not yet written: pages are copied straight into it and it
    /// goes to the log in one device write once its buffer ([`RUN_RECORDS_MAX`] records, or
    /// one when memory is short) is full.
    run: RecordRun,
    /// Where this checkpoint's blocks are in the log (a later copy of a block replaces an
    /// earlier one; a later node of a pot written already starts from its copy); becomes
    /// the directory at commit. A directory, not a list sorted at commit: the list and the
    /// sort's scratch were each one contiguous allocation as large as the checkpoint, which a
    /// heap full of object pages could not always give (the paging test's 32 MiB guest
    /// failed a 4,139-page checkpoint's 704 KiB list).
    pending: Directory,
    first_sequence: Option<u64>,
    data_record_count: u64,
    data_header_checksum_chain: u32,
}

/// Full checkpoint-data records gathered before they are written: 8 records of 71 blocks
/// (576 blocks, 2.25 MiB) per device write. Few large requests are what a virtio disk under
/// emulation streams fastest; the bound keeps a step's write short and the buffer small.
const RUN_RECORDS_MAX: usize = 8;

/// The most log blocks a checkpoint of `pages` pages and nodes in `pots` pots (four nodes
/// to a pot, [`NODES_PER_POT`]) can take, from any place in the log: a data block each, a
/// header for every record, one more part-filled record for the pots and one for the
/// pages, the padding before the log's end when a record does not fit there, and the
/// commit record. The kernel refuses to boot a system whose first checkpoint would not fit.
pub fn checkpoint_log_blocks_max(pages: u64, pots: u64) -> u64 {
    let record_blocks = LOG_RECORD_DATA_BLOCKS_MAX as u64;
    let data = pages + pots;
    let headers = data.div_ceil(record_blocks) + 2;
    let padding = 1 + record_blocks;
    data + headers + padding + 1
}
/// Log blocks migration reads at once (256 KiB).
const MIGRATION_READ_BLOCKS_MAX: usize = 64;

pub(crate) struct Migration {
    /// The directory as it was when migration began, moved home in key (home) order. A
    /// copy of the directory, not a list: no allocation as large as the directory.
    work: Directory,
    /// The last block moved home, and how many have been.
    moved_last: Option<BlockKey>,
    moved: usize,
    /// The head when migration began: the new tail once everything before it is home.
    tail_after: LogCursor,
    /// Tables changed so far, each written once (to its older slot) at the end.
    tables: BTreeMap<(BlockKind, u64), HomeTable>,
}

impl Stabilization {
    /// Checksums a block and copies it into the run (its only copy), starting a record when
    /// the last one is full.
    fn push_block(&mut self, kind: BlockKind, index: u64, versions: [u64; 4], data: &Block) {
        if self.run.is_empty() {
            // The devices may still hold the last run's buffer: a new run gets its own.
            self.run
                .reserve_blocks(RUN_RECORDS_MAX * (1 + LOG_RECORD_DATA_BLOCKS_MAX));
        }
        if self.run.last_record_room() == 0 {
            self.run
                .begin_record(RecordKind::CheckpointData, self.generation, CommitSummary::default());
        }
        let entry = LogEntry {
            checksum: checksum(data),
            kind,
            index,
            journal_ticket: 0,
            versions,
        };
        self.run.push_block(entry, data);
    }
}

impl Migration {
    fn backlog_blocks(&self) -> u64 {
        (self.work.len() - self.moved) as u64
    }
}

impl<D: BlockDevice> Store<D> {
    pub fn checkpoint_phase(&self) -> CheckpointPhase {
        match &self.phase {
            Phase::Idle => CheckpointPhase::Idle,
            Phase::Stabilizing(stabilization) => CheckpointPhase::Stabilizing {
                generation: stabilization.generation,
            },
            Phase::Migrating(migration) => CheckpointPhase::Migrating {
                backlog_blocks: migration.backlog_blocks(),
            },
        }
    }

    /// The newest checkpoint generation begun; journal commits made now follow it.
    pub fn snapshot_generation(&self) -> u64 {
        self.snapshot_generation
    }

    /// Begins checkpoint generation G (returned): call it right after the snapshot is
    /// taken, then write every object dirty in the snapshot. Journal commits from now on
    /// are newer than this checkpoint. Only when idle: the previous checkpoint's migration
    /// must have finished, which keeps at most one checkpoint's blocks in the log.
    pub fn begin_checkpoint(&mut self) -> Result<u64, StoreError> {
        if !matches!(self.phase, Phase::Idle) {
            return Err(StoreError::WrongPhase);
        }
        self.snapshot_generation += 1;
        self.phase = Phase::Stabilizing(Box::new(Stabilization {
            generation: self.snapshot_generation,
            pots: BTreeMap::new(),
            run: RecordRun::new(),
            pending: Directory::default(),
            first_sequence: None,
            data_record_count: 0,
            data_header_checksum_chain: 0,
        }));
        Ok(self.snapshot_generation)
    }

    /// Adds a node of the snapshot to the checkpoint. Nodes travel in pots of four: the
    /// pot's other nodes are taken from this checkpoint or the newest committed state.
    pub fn checkpoint_write_node(
        &mut self,
        id: ObjectId,
        version: Version,
        image: &[u8; NODE_SIZE],
    ) -> Result<(), StoreError> {
        if id.0 >= self.geometry.node_count {
            return Err(StoreError::ObjectOutOfRange { id: id.0 });
        }
        let key = (BlockKind::NodePot, id.0 / NODES_PER_POT);
        let slot = (id.0 % NODES_PER_POT) as usize;
        self.with_stabilization(|store, stabilization| {
            if !stabilization.pots.contains_key(&key.1) {
                // Pots leave `pots` only to be written at once (below), so the pot's newest
                // copy is this checkpoint's in the log, or else the committed one.
                let base = match stabilization.pending.get(&key) {
                    Some(entry) => (
                        entry.versions,
                        store.read_log_data(entry.position, entry.checksum)?,
                    ),
                    None => store.read_block(key)?,
                };
                stabilization.pots.insert(key.1, base);
            }
            if let Some((versions, block)) = stabilization.pots.get_mut(&key.1) {
                versions[slot] = version.0;
                block[slot * NODE_SIZE..(slot + 1) * NODE_SIZE].copy_from_slice(image);
            }
            store.totals.checkpoint_objects_written += 1;
            if stabilization.pots.len() >= LOG_RECORD_DATA_BLOCKS_MAX {
                store.write_pots(stabilization)?;
            }
            Ok(())
        })
    }

    /// Adds a page of the snapshot to the checkpoint.
    pub fn checkpoint_write_page(
        &mut self,
        id: ObjectId,
        version: Version,
        data: &Block,
    ) -> Result<(), StoreError> {
        if id.0 >= self.geometry.page_count {
            return Err(StoreError::ObjectOutOfRange { id: id.0 });
        }
        self.with_stabilization(|store, stabilization| {
            stabilization.push_block(BlockKind::Page, id.0, [version.0, 0, 0, 0], data);
            store.totals.checkpoint_objects_written += 1;
            if stabilization.run.last_record_room() == 0 && !stabilization.run.has_room_for_record()
            {
                store.write_run(stabilization)?;
            }
            Ok(())
        })
    }

    /// Writes what is left, flushes, writes the commit record and flushes again: the
    /// checkpoint is durable when this returns its generation. Migration begins.
    pub fn commit_checkpoint(&mut self) -> Result<u64, StoreError> {
        let (generation, directory) = self.with_stabilization(|store, stabilization| {
            store.write_pots(stabilization)?;
            // Every data record on the media before the commit record that vouches for them.
            store.flush()?;
            let mut commit = RecordRun::new();
            commit.begin_record(
                RecordKind::CheckpointCommit,
                stabilization.generation,
                CommitSummary {
                    first_sequence: stabilization.first_sequence.unwrap_or(0),
                    data_record_count: stabilization.data_record_count,
                    data_header_checksum_chain: stabilization.data_header_checksum_chain,
                },
            );
            store.append_run(&mut commit)?;
            store.flush()?;
            // Built once the devices have given back the runs' buffers: built while they
            // still wrote them, the directory on top of theirs ran the paging test's 32 MiB
            // guest out of heap. The commit is durable: nothing fails from here on, so
            // the pending blocks are taken, not copied.
            let directory = store.directory_with(core::mem::take(&mut stabilization.pending));
            Ok((stabilization.generation, directory))
        })?;
        self.phase = Phase::Idle;
        self.directory = directory;
        self.checkpoint_generation = generation;
        self.start_migration();
        Ok(generation)
    }

    /// Gives up the checkpoint being stabilized, after a failure the caller will retry: the
    /// store is as its last commit left it. What this checkpoint wrote stays in the log
    /// without a commit record, which recovery ignores (a commit covers only records of its
    /// own generation); the next checkpoint takes the next generation, so journal commits
    /// made meanwhile stay ordered between the last committed snapshot and the next.
    ///
    /// A migration begins, which the retry waits for: it moves the journal's commits home
    /// (the directory holds nothing else once the last checkpoint has migrated) and frees
    /// the log, the abandoned records with it. Left in the log, they and the journal's
    /// commits made meanwhile took the room the retry needed, which found the log full at
    /// every interval from then on (a 16 MiB store journaling 70-page commits).
    pub fn abandon_checkpoint(&mut self) -> Result<(), StoreError> {
        match self.phase {
            Phase::Stabilizing(_) => {
                self.start_migration();
                Ok(())
            }
            _ => Err(StoreError::WrongPhase),
        }
    }

    /// The directory, taken, once a checkpoint's blocks `pending` join it: of each block's
    /// copies, the newest (a journal commit made after the snapshot stays newer than the
    /// snapshot's copy; [`Directory::enter_if_newer`]). The directory holds only journal
    /// commits here (the last migration finished before this checkpoint began), mostly far
    /// fewer than the checkpoint's blocks, so they go into the checkpoint's directory rather
    /// than it into theirs.
    fn directory_with(&mut self, mut pending: Directory) -> Directory {
        let home_generation = self.superblock.home_generation;
        for (key, entry) in core::mem::take(&mut self.directory).iter() {
            pending.enter_if_newer(home_generation, key, entry);
        }
        pending
    }

    /// Records how long the caller's stabilization took (the store has no clock), for the
    /// counters: the last one and the histogram of all since open.
    pub fn note_checkpoint_stabilization_seconds(&mut self, seconds: f64) {
        self.totals.checkpoint_stabilization_seconds_last = seconds;
        self.totals.checkpoint_stabilization_seconds.observe(seconds);
    }

    /// Moves up to `block_count_max` log-resident blocks home. The last step flushes, writes
    /// every changed checksum table once, flushes, and writes the superblock that frees the
    /// log.
    pub fn migrate_step(
        &mut self,
        block_count_max: usize,
    ) -> Result<MigrationProgress, StoreError> {
        let mut migration = match core::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Migrating(migration) => migration,
            Phase::Idle => return Ok(MigrationProgress::Idle),
            other => {
                self.phase = other;
                return Err(StoreError::WrongPhase);
            }
        };
        match self.migrate_some(&mut migration, block_count_max.max(1)) {
            Ok(true) => Ok(MigrationProgress::Done),
            Ok(false) => {
                let backlog_blocks = migration.backlog_blocks();
                self.phase = Phase::Migrating(migration);
                Ok(MigrationProgress::Migrating { backlog_blocks })
            }
            Err(error) => {
                self.phase = Phase::Migrating(migration);
                Err(error)
            }
        }
    }

    pub(crate) fn start_migration(&mut self) {
        self.phase = Phase::Migrating(Box::new(Migration {
            work: self.directory.clone(),
            moved_last: None,
            moved: 0,
            tail_after: self.head,
            tables: BTreeMap::new(),
        }));
    }

    fn with_stabilization<T>(
        &mut self,
        step: impl FnOnce(&mut Self, &mut Stabilization) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut stabilization = match core::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Stabilizing(stabilization) => stabilization,
            other => {
                self.phase = other;
                return Err(StoreError::WrongPhase);
            }
        };
        let result = step(self, &mut stabilization);
        self.phase = Phase::Stabilizing(stabilization);
        result
    }

    /// Moves the changed pots into the run and writes it, so that a later node of one of
    /// them reads this copy back from the log (its `pending` entry).
    fn write_pots(&mut self, stabilization: &mut Stabilization) -> Result<(), StoreError> {
        if !stabilization.run.has_room_for_record() {
            // A record's worth of pots must fit the run's buffer without growing it.
            self.write_run(stabilization)?;
        }
        for (pot, (versions, block)) in core::mem::take(&mut stabilization.pots) {
            stabilization.push_block(BlockKind::NodePot, pot, versions, &block);
        }
        self.write_run(stabilization)
    }

    /// Writes the run's records, without flushing, and notes where their blocks landed.
    fn write_run(&mut self, stabilization: &mut Stabilization) -> Result<(), StoreError> {
        if stabilization.run.is_empty() {
            return Ok(());
        }
        let placed = self.append_run_handing_over(&mut stabilization.run)?;
        // The device writes the run back while the next one is gathered.
        self.mirrors.flush_begin()?;
        for (record_index, place) in placed.iter().enumerate() {
            let order = Order::record(stabilization.generation, SOURCE_CHECKPOINT, place.sequence);
            // A later copy of a block in this checkpoint is in a later record: newer.
            let entries = stabilization.run.entries(record_index);
            let home_generation = self.superblock.home_generation;
            stabilization.pending.enter_record(home_generation, place.position + 1, order, entries);
            stabilization.first_sequence.get_or_insert(place.sequence);
            stabilization.data_record_count += 1;
            stabilization.data_header_checksum_chain =
                checksum_chain(stabilization.data_header_checksum_chain, place.header_checksum);
        }
        stabilization.run.clear();
        Ok(())
    }

    /// Returns true when migration is complete.
    fn migrate_some(
        &mut self,
        migration: &mut Migration,
        block_count_max: usize,
    ) -> Result<bool, StoreError> {
        let step: Vec<(BlockKey, DirectoryEntry)> =
            migration.work.iter_after(migration.moved_last).take(block_count_max).collect();
        let end = step.len();
        let mut run_start: Option<(BlockKind, u64)> = None;
        let mut run: Vec<u8> = Vec::new();
        // Blocks consecutive in the log (a checkpoint logs its pages in order) are read in
        // one request, and the step's requests all at once: blocks the journal committed
        // lie scattered in the log, and one wait on the device per block held every
        // process for a disk round trip each (a TP1 load's 3,700 journaled pages).
        let mut reads: Vec<(u64, Vec<u32>)> = Vec::new();
        for (_, entry) in &step {
            match reads.last_mut() {
                Some((first_position, checksums))
                    if entry.position == *first_position + checksums.len() as u64
                        && checksums.len() < MIGRATION_READ_BLOCKS_MAX =>
                {
                    checksums.push(entry.checksum);
                }
                _ => reads.push((entry.position, alloc::vec![entry.checksum])),
            }
        }
        let read = self.read_log_data_runs(reads)?;
        let blocks = read.iter().flat_map(|run| run.chunks_exact(crate::BLOCK_SIZE));
        for (item, block) in (0..end).zip(blocks) {
            let ((kind, index), entry) = step[item];
            let (group, entry_index) = HomeRangeLayout::group_of(index);
            if let alloc::collections::btree_map::Entry::Vacant(vacant) =
                migration.tables.entry((kind, group))
            {
                // Written to the older slot, so a torn table write leaves the newer one.
                let mut table = self.read_table(kind, group)?;
                table.slot = 1 - table.slot;
                table.sequence = self.next_table_sequence();
                vacant.insert(table);
            }
            if let Some(table) = migration.tables.get_mut(&(kind, group))
                && let Some(table_entry) = table.entries.get_mut(entry_index)
            {
                *table_entry = TableEntry {
                    written: true,
                    checksum: entry.checksum,
                    sequence: table.sequence,
                    versions: entry.versions,
                };
            }
            // Consecutive home blocks go out in one write.
            let continues = run_start.is_some_and(|(run_kind, first)| {
                run_kind == kind && first + (run.len() / crate::BLOCK_SIZE) as u64 == index
            });
            if !continues {
                self.write_home_run(run_start, &run)?;
                run.clear();
                run_start = Some((kind, index));
            }
            run.extend_from_slice(block);
        }
        self.write_home_run(run_start, &run)?;
        self.totals.migrated_blocks += end as u64;
        migration.moved += end;
        migration.moved_last = step.last().map(|(key, _)| *key).or(migration.moved_last);
        if migration.moved < migration.work.len() {
            return Ok(false);
        }
        self.flush()?;
        let mut table_block = crate::format::zeroed_block();
        for ((kind, group), table) in &migration.tables {
            // Out of the cache until written: after a failed write, the table is read
            // again from the mirrors.
            self.table_cache.remove(&(*kind, *group));
            table.encode(&mut table_block);
            let device_block = self.range_layout(*kind).table_block(*group, table.slot);
            self.mirrors.write(device_block, &table_block[..])?;
        }
        self.flush()?;
        for table in migration.tables.values() {
            self.cache_table(table.clone());
        }
        let home_generation = self.checkpoint_generation;
        let snapshot_generation = self.snapshot_generation;
        let journal_ticket_next = self.journal.ticket_next;
        let tail = migration.tail_after;
        self.write_superblock(|superblock| {
            superblock.home_generation = home_generation;
            superblock.snapshot_generation = snapshot_generation;
            superblock.journal_ticket_next = journal_ticket_next;
            superblock.log_tail = tail;
        })?;
        self.tail = tail;
        self.directory.remove_unchanged(&migration.work);
        // Journal copies written during this migration but made before the snapshot now at
        // home: `enter_if_newer` took them while home was older, and refuses them from now
        // on, as a restart would.
        self.directory.drop_journal_before(home_generation);
        Ok(true)
    }

    fn write_home_run(
        &mut self,
        run_start: Option<(BlockKind, u64)>,
        run: &[u8],
    ) -> Result<(), StoreError> {
        let Some((kind, first)) = run_start else {
            return Ok(());
        };
        if run.is_empty() {
            return Ok(());
        }
        let device_block = self.range_layout(kind).data_first_block + first;
        self.mirrors.write(device_block, run)
    }
}
