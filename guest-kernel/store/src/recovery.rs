//! Opening a store is recovery: the newest valid superblock on any mirror, then a scan of
//! the live log by sequence numbers (each record taken from a mirror that holds it whole and
//! repaired on the others), then the directory of log-resident blocks: every committed
//! checkpoint's blocks and every journal commit found, the newest copy of each block winning
//! (a checkpoint's snapshot is newer than the journal commits made before it was taken,
//! older than those made after).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice, DeviceError};
use crate::error::{Check, Corruption, Region, StoreError};
use crate::format::as_block;
use crate::format::checksum_chain;
use crate::format::log_record::RecordKind;
use crate::format::resilver_record::ResilverRecord;
use crate::format::superblock::{LogCursor, Superblock};
use crate::inspect::{Finding, Remedy};
use crate::journal::JournalQueue;
use crate::log::ScannedRecord;
use crate::mirror::{MirrorSet, MirrorState};
use crate::phase::Phase;
use crate::store::{DirectoryEntry, Order, SOURCE_CHECKPOINT, SOURCE_JOURNAL, Store, Totals};

impl<D: BlockDevice> Store<D> {
    /// Opens the store on its mirrors and recovers it: reads then return the newest
    /// committed checkpoint plus every journal commit durable after it. A mirror with no
    /// valid superblock is taken as blank and resilvered (see [`Store::resilver_step`]), as
    /// is one whose resilver was cut short (alone it is refused,
    /// [`StoreError::ResilverIncomplete`]); a mirror holding another store is refused. If
    /// the log holds blocks not yet home, the store starts in the migrating phase; call
    /// [`Store::migrate_step`] until done.
    ///
    /// Recovery writes: it repairs bad copies (superblock slots, log records a mirror
    /// lacks) and writes a new superblock for this boot. The superblock slots it found bad
    /// are listed by [`Store::recovery_findings`].
    pub fn open(devices: Vec<D>) -> Result<Self, StoreError> {
        Self::open_as(devices, false)
    }

    /// Recovers the store as [`Store::open`] does, in memory only: nothing is written or
    /// flushed on any device, no repair and no new superblock (the boot count stays). Bad
    /// copies stay on disk, for [`Store::check`] to report and for the next [`Store::open`]
    /// to repair; every call that would write returns [`StoreError::ReadOnly`]. For
    /// inspecting and checking images (`holdfast store inspect|check`).
    pub fn open_read_only(devices: Vec<D>) -> Result<Self, StoreError> {
        Self::open_as(devices, true)
    }

    fn open_as(devices: Vec<D>, read_only: bool) -> Result<Self, StoreError> {
        let mut mirrors = MirrorSet::new(devices)?;
        mirrors.read_only = read_only;
        let mut newest: Vec<Option<Superblock>> = Vec::new();
        // What each mirror holds in each slot (the generation, or the check it failed), to
        // report and repair a slot torn at a crash.
        let mut slots: Vec<[Result<u64, Check>; 2]> = Vec::new();
        let mut first_failure = None;
        let mut incomplete: Vec<(usize, ResilverRecord)> = Vec::new();
        for index in 0..mirrors.mirrors.len() {
            let mut pair = alloc::vec![0u8; 2 * BLOCK_SIZE];
            if let Err(error) = mirrors.read_from(index, 0, &mut pair) {
                mirrors.mirrors[index].state = MirrorState::Failed(error);
                first_failure.get_or_insert(StoreError::Device {
                    mirror: index,
                    error,
                });
                newest.push(None);
                slots.push([Err(Check::Bounds), Err(Check::Bounds)]);
                continue;
            }
            if let Some(record) = crate::resilver::resilver_record(&pair) {
                // A copy onto it was cut short: never trusted (see resilver.rs).
                incomplete.push((index, record));
                newest.push(None);
                slots.push([Err(Check::Magic), Err(Check::Magic)]);
                continue;
            }
            let mut best: Option<Superblock> = None;
            let mut found = [Err(Check::Bounds), Err(Check::Bounds)];
            for slot in 0..2u64 {
                let bytes = &pair[slot as usize * BLOCK_SIZE..(slot as usize + 1) * BLOCK_SIZE];
                match Superblock::decode(as_block(bytes), slot) {
                    Ok(superblock) => {
                        found[slot as usize] = Ok(superblock.generation);
                        if best.is_none_or(|current| current.generation < superblock.generation) {
                            best = Some(superblock);
                        }
                    }
                    Err(check) => {
                        found[slot as usize] = Err(check);
                        first_failure.get_or_insert(StoreError::Corrupt(Corruption {
                            region: Region::Superblock,
                            block: slot,
                            check,
                        }));
                    }
                }
            }
            newest.push(best);
            slots.push(found);
        }
        let Some(superblock) = newest
            .iter()
            .flatten()
            .copied()
            .max_by_key(|superblock| superblock.generation)
        else {
            if let Some(&(mirror, record)) = incomplete.first() {
                return Err(StoreError::ResilverIncomplete { mirror, source_generation: record.source_generation });
            }
            return Err(first_failure.unwrap_or(StoreError::NoMirror));
        };
        let layout = superblock.geometry.layout()?;
        if let Some(&(mirror, _)) = incomplete.iter().find(|(_, record)| record.geometry != superblock.geometry) {
            return Err(StoreError::Foreign { mirror });
        }
        for (index, found) in newest.iter().enumerate() {
            match found {
                Some(other) if other.geometry != superblock.geometry => {
                    return Err(StoreError::Foreign { mirror: index });
                }
                Some(other) if other.generation < superblock.degraded_generation => {
                    // It was out when the store ran degraded, and missed writes: copy it anew.
                    mirrors.mirrors[index].state = MirrorState::Resilvering { copied_blocks: 0 };
                }
                Some(_) => {}
                None if !matches!(mirrors.mirrors[index].state, MirrorState::Failed(_)) => {
                    // No valid superblock at all: a blank (or wholly unreadable) device.
                    mirrors.mirrors[index].state = MirrorState::Resilvering { copied_blocks: 0 };
                }
                None => {}
            }
            if mirrors.mirrors[index].device.block_count() < layout.block_count {
                mirrors.mirrors[index].state = MirrorState::Failed(DeviceError::OutOfRange);
            }
        }
        if !mirrors
            .mirrors
            .iter()
            .any(|mirror| mirror.state == MirrorState::Healthy)
        {
            return Err(StoreError::Geometry("no device holds the whole store"));
        }
        // On the mirrors kept as they are, every slot must hold a superblock and the current
        // slot the current one; anything else is a finding (resilvered mirrors are copied
        // whole, failed ones are not used).
        let current_slot = superblock.slot();
        let mut recovery_findings = Vec::new();
        for (index, found) in slots.iter().enumerate() {
            if mirrors.mirrors[index].state != MirrorState::Healthy {
                continue;
            }
            for slot in 0..2u64 {
                let check = match found[slot as usize] {
                    Err(check) => check,
                    Ok(generation)
                        if slot == current_slot && generation != superblock.generation =>
                    {
                        Check::Sequence
                    }
                    Ok(_) => continue,
                };
                recovery_findings.push(Finding::superblock_slot(
                    index,
                    slot,
                    check,
                    Remedy::NextOpen,
                ));
            }
        }
        let mut store = Store {
            mirrors,
            geometry: superblock.geometry,
            layout,
            superblock,
            tail: superblock.log_tail,
            head: superblock.log_tail,
            directory: BTreeMap::new(),
            phase: Phase::Idle,
            snapshot_generation: superblock.snapshot_generation,
            checkpoint_generation: superblock.home_generation,
            journal: JournalQueue::new(superblock.journal_ticket_next),
            table_sequence_next: (superblock.boot_count + 1) << 32,
            totals: Totals::default(),
            recovery_findings,
        };
        // Before anything else reaches a mirror to be resilvered (see resilver.rs).
        store.mark_incomplete_mirrors()?;
        if read_only {
            // The same scan, with its repairs skipped by the mirror set.
            store.recover_log()?;
            if !store.directory.is_empty()
                || store.checkpoint_generation > store.superblock.home_generation
            {
                store.start_migration();
            }
            return Ok(store);
        }
        // The slot open's own superblock write will not overwrite gets the current
        // superblock wherever it is missing, so both slots are valid on every mirror again.
        let mut current = crate::format::zeroed_block();
        superblock.encode(&mut current);
        for (index, found) in slots.iter().enumerate() {
            if store.mirrors.mirrors[index].state == MirrorState::Healthy
                && found[current_slot as usize] != Ok(superblock.generation)
            {
                store.mirrors.write_to(index, current_slot, &current[..])?;
            }
        }
        store.recover_log()?;
        // Repairs made by the scan are on disk before the new superblock names this boot.
        store.mirrors.flush()?;
        let snapshot_generation = store.snapshot_generation;
        let journal_ticket_next = store.journal.ticket_next;
        // Its slot is the other one: this write repairs it on every mirror.
        store.write_superblock(|superblock| {
            superblock.boot_count += 1;
            superblock.snapshot_generation = snapshot_generation;
            superblock.journal_ticket_next = journal_ticket_next;
        })?;
        // Repaired on the mirrors that took the writes; a mirror that failed meanwhile is
        // out of the store, and its finding says nothing of repair.
        for finding in &mut store.recovery_findings {
            finding.remedy = match store.mirrors.mirrors[finding.mirror].state {
                MirrorState::Healthy => Some(Remedy::Repaired),
                _ => None,
            };
        }
        if !store.directory.is_empty()
            || store.checkpoint_generation > store.superblock.home_generation
        {
            store.start_migration();
        }
        Ok(store)
    }

    /// Scans the log from the tail and rebuilds head, directory and generations.
    fn recover_log(&mut self) -> Result<(), StoreError> {
        let log_block_count = self.layout.log_block_count;
        let mut cursor = self.tail;
        let mut used_blocks = 0;
        let mut records: Vec<ScannedRecord> = Vec::new();
        while let Some(record) = self.read_record(&cursor)? {
            let record_blocks = record.header.block_count();
            // A record reaching into the tail cannot have been written after it: stale.
            if used_blocks + record_blocks > log_block_count - 1 {
                break;
            }
            used_blocks += record_blocks;
            cursor = LogCursor {
                position: (cursor.position + record_blocks) % log_block_count,
                sequence: cursor.sequence + 1,
                previous_header_checksum: record.header_checksum,
            };
            records.push(record);
        }
        self.head = cursor;

        // Which checkpoints committed, and which data records each commit covers.
        let mut data_records: BTreeMap<u64, Vec<(u64, u32)>> = BTreeMap::new();
        let mut committed: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for record in &records {
            let header = &record.header;
            match header.kind {
                RecordKind::CheckpointData => {
                    data_records
                        .entry(header.generation)
                        .or_default()
                        .push((header.sequence, record.header_checksum));
                }
                RecordKind::CheckpointCommit => {
                    let summary = header.commit;
                    let covered: Vec<&(u64, u32)> = data_records
                        .get(&header.generation)
                        .map(|list| {
                            list.iter()
                                .filter(|(sequence, _)| *sequence >= summary.first_sequence)
                                .collect()
                        })
                        .unwrap_or_default();
                    let chain = covered
                        .iter()
                        .fold(0, |chain, (_, checksum)| checksum_chain(chain, *checksum));
                    if covered.len() as u64 != summary.data_record_count
                        || chain != summary.data_header_checksum_chain
                    {
                        return Err(StoreError::Corrupt(Corruption {
                            region: Region::LogHeader,
                            block: self.layout.log_first_block + header.position,
                            check: Check::CommitChain,
                        }));
                    }
                    committed.insert(header.generation, (summary.first_sequence, header.sequence));
                }
                RecordKind::Journal | RecordKind::Padding => {}
            }
            if header.kind != RecordKind::Padding {
                self.snapshot_generation = self.snapshot_generation.max(header.generation);
            }
            for entry in &header.entries {
                self.journal.ticket_next = self.journal.ticket_next.max(entry.journal_ticket + 1);
            }
        }
        if let Some((generation, _)) = committed.last_key_value() {
            self.checkpoint_generation = self.checkpoint_generation.max(*generation);
        }

        for record in &records {
            let header = &record.header;
            let source = match header.kind {
                RecordKind::CheckpointData => match committed.get(&header.generation) {
                    Some((first, commit)) if (*first..*commit).contains(&header.sequence) => {
                        SOURCE_CHECKPOINT
                    }
                    _ => continue,
                },
                RecordKind::Journal => SOURCE_JOURNAL,
                RecordKind::CheckpointCommit | RecordKind::Padding => continue,
            };
            for (entry_index, entry) in header.entries.iter().enumerate() {
                let directory_entry = DirectoryEntry {
                    position: header.position + 1 + entry_index as u64,
                    checksum: entry.checksum,
                    versions: entry.versions,
                    order: Order {
                        generation: header.generation,
                        source,
                        sequence: header.sequence,
                        entry: entry_index as u32,
                    },
                };
                let key = (entry.kind, entry.index);
                if self
                    .directory
                    .get(&key)
                    .is_none_or(|current| current.order < directory_entry.order)
                {
                    self.directory.insert(key, directory_entry);
                }
            }
        }
        Ok(())
    }
}
