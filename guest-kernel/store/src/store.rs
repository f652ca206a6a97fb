//! The store engine: its state, format, object reads and the superblock. Checkpoints, the
//! journal, migration and recovery extend `Store` in their own modules.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use holdfast_objects::{ObjectId, Version};

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::directory::Directory;
use crate::error::StoreError;
use crate::format::home_table::{HomeTable, TablePlace};
use crate::format::log_record::BlockKind;
use crate::format::superblock::{LogCursor, Superblock};
use crate::format::{Block, zeroed_block};
use crate::geometry::{Geometry, HomeRangeLayout, Layout, NODE_SIZE, NODES_PER_POT};
use crate::inspect::{Finding, RecoveryNote};
use crate::journal::JournalQueue;
use crate::mirror::{MirrorSet, MirrorState};
use crate::phase::Phase;

/// A block of the store: a node pot or a page, by pot index or page id.
pub type BlockKey = (BlockKind, u64);

/// Orders the copies of one block in the log: a checkpoint's snapshot is newer than every
/// journal commit made before it was taken, and older than those made after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Order {
    /// The checkpoint generation, or for a journal commit the snapshot it follows.
    pub(crate) generation: u64,
    /// 0 for checkpoint data, 1 for the journal.
    pub(crate) source: u8,
    pub(crate) sequence: u64,
    pub(crate) entry: u32,
}

impl Order {
    /// The order of a record's first block (entry 0).
    pub(crate) fn record(generation: u64, source: u8, sequence: u64) -> Self {
        Self { generation, source, sequence, entry: 0 }
    }

    /// A journal copy made in a snapshot generation below `home_generation`: never entered
    /// in the directory, nor kept there (see [`crate::directory::Directory::enter_if_newer`]).
    pub(crate) fn is_journal_before(&self, home_generation: u64) -> bool {
        self.source == SOURCE_JOURNAL && self.generation < home_generation
    }
}

pub(crate) const SOURCE_CHECKPOINT: u8 = 0;
pub(crate) const SOURCE_JOURNAL: u8 = 1;

/// Where the newest committed copy of a log-resident block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirectoryEntry {
    /// Block offset within the log.
    pub(crate) position: u64,
    pub(crate) checksum: u32,
    pub(crate) versions: [u64; 4],
    pub(crate) order: Order,
}

/// The four nodes of a pot, each with its version and image.
pub type NodePot = [(Version, Box<[u8; NODE_SIZE]>); NODES_PER_POT as usize];

/// Whether the store has all its mirrors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorStatus {
    /// The mirrors the store was opened with (a missing one is not listed).
    pub mirrors: Vec<MirrorState>,
    /// The mirrors the store has, as its superblock records.
    pub mirrors_expected: usize,
    /// Fewer healthy mirrors than slots: one more failure may lose data.
    pub degraded: bool,
}

/// The persistent single-level store over a mirror set of one or two devices.
pub struct Store<D: BlockDevice> {
    pub(crate) mirrors: MirrorSet<D>,
    pub(crate) geometry: Geometry,
    pub(crate) layout: Layout,
    /// The last superblock written.
    pub(crate) superblock: Superblock,
    /// The first live record: freed space ends here.
    pub(crate) tail: LogCursor,
    /// Where the next record goes.
    pub(crate) head: LogCursor,
    /// Newest committed copy of every block whose newest copy is in the log; bounded by the
    /// log's size. Blocks not here are at home.
    pub(crate) directory: Directory,
    pub(crate) phase: Phase,
    /// The newest checkpoint generation begun (committed or not).
    pub(crate) snapshot_generation: u64,
    /// The newest committed checkpoint generation.
    pub(crate) checkpoint_generation: u64,
    pub(crate) journal: JournalQueue,
    pub(crate) table_sequence_next: u64,
    /// Home tables as last read or written, at most [`TABLE_CACHE_MAX`]: a page or node
    /// loaded from home then takes one read instead of three (its table's two slots on every
    /// mirror, then the block), which a restart's first seconds are made of. Only migration
    /// writes tables, and it updates them here; the scrub reads them from the mirrors.
    pub(crate) table_cache: BTreeMap<(BlockKind, u64), HomeTable>,
    /// How many tables the cache keeps at most ([`Store::set_table_cache_max`]).
    pub(crate) table_cache_max: usize,
    pub(crate) totals: Totals,
    /// Superblock slots open found bad or stale on the mirrors it kept.
    pub(crate) recovery_findings: Vec<Finding>,
    /// What else recovery has to say: a torn tail, damage it could not repair, a history it
    /// discarded, a truncation recorded.
    pub(crate) recovery_notes: Vec<RecoveryNote>,
    /// Every record with a lower sequence number is on the media of every live mirror
    /// (flushed); written into each new record header.
    pub(crate) durable_sequence_next: u64,
}

/// Home tables kept in [`Store::table_cache`] unless the owner says fewer: about 4 MiB of
/// them, the tables of 86,000 blocks, more than a TP1 database's working set at scale 1.
pub const TABLE_CACHE_MAX: usize = 1024;

/// What one cached home table takes in memory, about: for sizing the cache.
pub const TABLE_CACHE_BYTES_PER_TABLE: usize = crate::format::home_table::TABLE_ENTRIES_MAX
    * core::mem::size_of::<crate::format::home_table::TableEntry>()
    + core::mem::size_of::<HomeTable>();

/// Running totals behind [`crate::StoreCounters`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Totals {
    pub(crate) checkpoint_objects_written: u64,
    pub(crate) journal_commits: u64,
    pub(crate) migrated_blocks: u64,
    pub(crate) checkpoint_stabilization_seconds_last: f64,
    pub(crate) checkpoint_stabilization_seconds: crate::SecondsHistogram,
    /// Scrubs run to their end ([`crate::Store::scrub_step`]).
    pub(crate) scrub_passes: u64,
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            checkpoint_objects_written: 0,
            journal_commits: 0,
            migrated_blocks: 0,
            checkpoint_stabilization_seconds_last: 0.0,
            checkpoint_stabilization_seconds: crate::SecondsHistogram::new(
                crate::histogram::STABILIZATION_BOUNDS_SECONDS,
            ),
            scrub_passes: 0,
        }
    }
}

impl<D: BlockDevice> Store<D> {
    /// Writes an empty store onto `devices` (one, or two mirrors) and opens it. Home data
    /// blocks are not written: their tables say "never written", which reads as zeros with
    /// version 0, so formatting a large store is quick.
    pub fn format(devices: Vec<D>, geometry: Geometry) -> Result<Self, StoreError> {
        let layout = geometry.layout()?;
        let mut mirrors = MirrorSet::new(devices)?;
        for mirror in &mirrors.mirrors {
            if mirror.device.block_count() < layout.block_count {
                return Err(StoreError::Geometry("a device is smaller than the store"));
            }
        }
        for (kind, range) in [
            (BlockKind::NodePot, layout.node_ranges),
            (BlockKind::Page, layout.page_ranges),
        ] {
            write_empty_tables(&mut mirrors, geometry.store_id, kind, &range)?;
        }
        let mut superblock = Superblock {
            geometry,
            generation: 0,
            home_generation: 0,
            snapshot_generation: 0,
            log_tail: LogCursor {
                position: 0,
                sequence: 1,
                previous_header_checksum: 0,
            },
            boot_count: 0,
            journal_ticket_next: 1,
            block_count: layout.block_count,
            degraded_generation: 0,
            mirror_count: mirrors.mirrors.len() as u64,
            truncation: Default::default(),
        };
        // Both slots valid from the start, so that any later damage to either is a finding.
        for generation in 0..2 {
            superblock.generation = generation;
            let mut block = zeroed_block();
            superblock.encode(&mut block);
            mirrors.write(superblock.slot(), &block[..])?;
        }
        mirrors.flush()?;
        let devices = mirrors
            .mirrors
            .into_iter()
            .map(|mirror| mirror.device)
            .collect();
        Self::open(devices)
    }

    /// Streams every later write and flush to `replica` as well (the pair's standby).
    pub fn set_replica(&mut self, replica: alloc::boxed::Box<dyn crate::mirror::Replica>) {
        self.mirrors.replica = Some(replica);
    }

    /// Reads whole blocks as they are on the devices, from the first mirror that has them,
    /// unverified: for a full copy to a replica, which must see exactly what a mirror holds.
    pub fn read_device_blocks(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let mut last_error = StoreError::NoMirror;
        for index in self.mirrors.readable(first_block, (buf.len() / crate::BLOCK_SIZE) as u64) {
            match self.mirrors.read_from(index, first_block, buf) {
                Ok(()) => return Ok(()),
                Err(error) => last_error = StoreError::Device { mirror: index, error },
            }
        }
        Err(last_error)
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Superblock slots that open found torn, corrupt or stale (an older generation in the
    /// current slot than another mirror holds) on a mirror it kept: repaired by
    /// [`Store::open`], left on disk by [`Store::open_read_only`]. The other slot and the
    /// other mirrors still held the superblock, so nothing was lost, but the disks were
    /// damaged or a superblock write was cut off.
    pub fn recovery_findings(&self) -> &[Finding] {
        &self.recovery_findings
    }

    /// What recovery found beyond bad superblock slots, one line each for the console and
    /// `holdfast store inspect|check`: a torn tail (records never acknowledged that reached
    /// some mirrors only), log damage no mirror could repair (read-only opens only: a
    /// read-write open refuses it unless told to truncate), a mirror's history discarded
    /// after the mirrors ran apart, and the last truncation of the log.
    pub fn recovery_notes(&self) -> &[RecoveryNote] {
        &self.recovery_notes
    }

    /// Whether the store was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.mirrors.read_only
    }

    /// The newest committed checkpoint generation.
    pub fn checkpoint_generation(&self) -> u64 {
        self.checkpoint_generation
    }

    /// The ticket the next journal commit gets: the journal's position.
    pub fn journal_ticket_next(&self) -> u64 {
        self.journal.ticket_next
    }

    pub fn mirror_status(&self) -> MirrorStatus {
        let mirrors = self.mirrors.states();
        let degraded = mirrors.iter().any(|state| *state != MirrorState::Healthy)
            || (mirrors.len() as u64) < self.superblock.mirror_count;
        MirrorStatus {
            mirrors,
            mirrors_expected: self.superblock.mirror_count as usize,
            degraded,
        }
    }

    /// Bad block copies rewritten from a good mirror since the store was opened.
    pub fn mirror_repaired_blocks_total(&self) -> u64 {
        self.mirrors.repaired_blocks_total
    }

    /// Blocks of the log between tail and head.
    pub fn log_used_blocks(&self) -> u64 {
        let length = self.layout.log_block_count;
        (self.head.position + length - self.tail.position) % length
    }

    /// How full the log is, 0.0 to 1.0; the kernel forces a checkpoint at 0.65.
    pub fn log_fill_ratio(&self) -> f64 {
        self.log_used_blocks() as f64 / self.layout.log_block_count as f64
    }

    /// The newest committed version and image of a node: the log directory first, else home.
    pub fn read_node(
        &mut self,
        id: ObjectId,
    ) -> Result<(Version, Box<[u8; NODE_SIZE]>), StoreError> {
        if id.0 >= self.geometry.node_count {
            return Err(StoreError::ObjectOutOfRange { id: id.0 });
        }
        let (versions, block) = self.read_block((BlockKind::NodePot, id.0 / NODES_PER_POT))?;
        let slot = (id.0 % NODES_PER_POT) as usize;
        let mut image = Box::new([0u8; NODE_SIZE]);
        image.copy_from_slice(&block[slot * NODE_SIZE..(slot + 1) * NODE_SIZE]);
        Ok((Version(versions[slot]), image))
    }

    /// The newest committed version of page `id`, without reading its contents: the log
    /// directory, else its group's checksum table. A restart reads no page's version until
    /// the page is first named, so that it takes the same time whatever the store holds.
    pub fn page_version(&mut self, id: ObjectId) -> Result<Version, StoreError> {
        if id.0 >= self.geometry.page_count {
            return Err(StoreError::ObjectOutOfRange { id: id.0 });
        }
        if let Some(entry) = self.directory.get(&(BlockKind::Page, id.0)) {
            return Ok(Version(entry.versions[0]));
        }
        let entry = self.home_entry((BlockKind::Page, id.0))?;
        Ok(Version(if entry.written { entry.versions[0] } else { 0 }))
    }

    /// The newest committed versions and images of the four nodes of pot `pot` (nodes
    /// `4 pot .. 4 pot + 4`), in one read: what a restart uses to read every node.
    pub fn read_node_pot(&mut self, pot: u64) -> Result<NodePot, StoreError> {
        if pot >= self.geometry.node_count.div_ceil(NODES_PER_POT) {
            return Err(StoreError::ObjectOutOfRange { id: pot * NODES_PER_POT });
        }
        let (versions, block) = self.read_block((BlockKind::NodePot, pot))?;
        Ok(core::array::from_fn(|slot| {
            let mut image = Box::new([0u8; NODE_SIZE]);
            image.copy_from_slice(&block[slot * NODE_SIZE..(slot + 1) * NODE_SIZE]);
            (Version(versions[slot]), image)
        }))
    }

    /// The newest committed version of a page, its contents copied into `data`.
    pub fn read_page(&mut self, id: ObjectId, data: &mut Block) -> Result<Version, StoreError> {
        if id.0 >= self.geometry.page_count {
            return Err(StoreError::ObjectOutOfRange { id: id.0 });
        }
        let (versions, block) = self.read_block((BlockKind::Page, id.0))?;
        data.copy_from_slice(&block[..]);
        Ok(Version(versions[0]))
    }

    /// The newest committed copy of a block.
    pub(crate) fn read_block(
        &mut self,
        key: BlockKey,
    ) -> Result<([u64; 4], Box<Block>), StoreError> {
        if let Some(entry) = self.directory.get(&key) {
            let block = self.read_log_data(entry.position, entry.checksum)?;
            return Ok((entry.versions, block));
        }
        self.read_home(key)
    }

    pub(crate) fn range_layout(&self, kind: BlockKind) -> HomeRangeLayout {
        match kind {
            BlockKind::NodePot => self.layout.node_ranges,
            BlockKind::Page => self.layout.page_ranges,
        }
    }

    /// Flushes every mirror; if a mirror failed since the last superblock, records that in
    /// a new one before returning, so that nothing is acknowledged while the failed mirror
    /// could still pass for current at the next open.
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        let head_sequence = self.head.sequence;
        self.mirrors.flush()?;
        self.durable_sequence_next = head_sequence;
        if self.mirrors.failures_unrecorded {
            self.write_superblock(|_| {})?;
        }
        Ok(())
    }

    /// Writes the next superblock (to the slot of its generation on every mirror) and
    /// flushes. The caller has flushed everything the superblock points at.
    pub(crate) fn write_superblock(
        &mut self,
        change: impl FnOnce(&mut Superblock),
    ) -> Result<(), StoreError> {
        let mut superblock = self.superblock;
        superblock.generation += 1;
        change(&mut superblock);
        // Mirrors that miss this superblock are stale from here on; once every mirror is
        // healthy again (resilvered), none is.
        superblock.mirror_count = superblock
            .mirror_count
            .max(self.mirrors.mirrors.len() as u64);
        let all_healthy = self
            .mirrors
            .mirrors
            .iter()
            .all(|mirror| mirror.state == MirrorState::Healthy)
            && self.mirrors.mirrors.len() as u64 >= superblock.mirror_count;
        if all_healthy {
            superblock.degraded_generation = 0;
        } else if superblock.degraded_generation == 0 || self.mirrors.failures_unrecorded {
            superblock.degraded_generation = superblock.generation;
        }
        self.mirrors.failures_unrecorded = false;
        let mut block = zeroed_block();
        superblock.encode(&mut block);
        self.mirrors.write(superblock.slot(), &block[..])?;
        let head_sequence = self.head.sequence;
        self.mirrors.flush()?;
        self.durable_sequence_next = head_sequence;
        self.superblock = superblock;
        Ok(())
    }

    /// A new table sequence number; boots never share one (boot count in the high half).
    pub(crate) fn next_table_sequence(&mut self) -> u64 {
        let sequence = self.table_sequence_next;
        self.table_sequence_next += 1;
        sequence
    }
}

/// Writes both slots of every group of a range, in large runs.
fn write_empty_tables<D: BlockDevice>(
    mirrors: &mut MirrorSet<D>,
    store_id: u64,
    kind: BlockKind,
    range: &HomeRangeLayout,
) -> Result<(), StoreError> {
    const GROUPS_PER_WRITE: u64 = 64;
    let mut group = 0;
    while group < range.group_count {
        let groups = (range.group_count - group).min(GROUPS_PER_WRITE);
        let mut run = alloc::vec![0u8; groups as usize * 2 * BLOCK_SIZE];
        for offset in 0..groups {
            for slot in 0..2u8 {
                let place = TablePlace {
                    kind,
                    store_id,
                    group: group + offset,
                    slot,
                    entry_count: range.entries_in_group(group + offset),
                };
                // Slot 0 is the newer, so the first migration overwrites slot 1.
                let table = HomeTable::empty(&place, u64::from(1 - slot));
                let start = (offset as usize * 2 + usize::from(slot)) * BLOCK_SIZE;
                let block: &mut Block = (&mut run[start..start + BLOCK_SIZE])
                    .try_into()
                    .map_err(|_| StoreError::Geometry("table run"))?;
                table.encode(block);
            }
        }
        mirrors.write(range.table_block(group, 0), &run)?;
        group += groups;
    }
    Ok(())
}
