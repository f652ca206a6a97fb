//! Opening a store is recovery: the newest valid superblock on any mirror, then a scan of
//! the live log by sequence numbers (each record taken from a mirror that holds it whole and
//! repaired on the others), then the directory of log-resident blocks: every committed
//! checkpoint's blocks and every journal commit found, the newest copy of each block winning
//! (a checkpoint's snapshot is newer than the journal commits made before it was taken,
//! older than those made after).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice, DeviceError};
use crate::directory::Directory;
use crate::error::{Check, Corruption, LogLoss, Region, StoreError};
use crate::format::log_record::{Expected, LOG_RECORD_DATA_BLOCKS_MAX, LogHeader, RecordKind};
use crate::format::resilver_record::ResilverRecord;
use crate::format::superblock::{LogCursor, LogTruncation, Superblock};
use crate::format::{as_block, checksum_chain, sealed_checksum, zeroed_block};
use crate::inspect::{Finding, RecoveryNote, Remedy};
use crate::journal::JournalQueue;
use crate::log::ScannedRecord;
use crate::mirror::{MirrorSet, MirrorState};
use crate::phase::Phase;
use crate::store::{Order, SOURCE_CHECKPOINT, SOURCE_JOURNAL, Store, Totals};

/// What a read-write open does when a log record that was durable is bad on every mirror.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recover {
    /// Refuse to open ([`StoreError::LogDamaged`] names what would be lost).
    #[default]
    Refuse,
    /// Start from the last intact point, losing the records named, and record that in the
    /// superblock (the operator's `holdfast.recover=truncate`).
    Truncate,
}

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
    ///
    /// A log record that a later record says was durable, and that no mirror holds whole,
    /// is damage, not a torn tail: the open is refused with [`StoreError::LogDamaged`].
    pub fn open(devices: Vec<D>) -> Result<Self, StoreError> {
        Self::open_as(devices, false, Recover::Refuse)
    }

    /// [`Store::open`], saying what to do with log damage no mirror can repair.
    pub fn open_with(devices: Vec<D>, recover: Recover) -> Result<Self, StoreError> {
        Self::open_as(devices, false, recover)
    }

    /// Recovers the store as [`Store::open`] does, in memory only: nothing is written or
    /// flushed on any device, no repair and no new superblock (the boot count stays). Bad
    /// copies stay on disk, for [`Store::check`] to report and for the next [`Store::open`]
    /// to repair; every call that would write returns [`StoreError::ReadOnly`]. For
    /// inspecting and checking images (`holdfast store inspect|check`).
    ///
    /// Log damage no mirror can repair does not stop it: it recovers up to the damage and
    /// says what lies beyond in [`Store::recovery_notes`].
    pub fn open_read_only(devices: Vec<D>) -> Result<Self, StoreError> {
        Self::open_as(devices, true, Recover::Refuse)
    }

    fn open_as(devices: Vec<D>, read_only: bool, recover: Recover) -> Result<Self, StoreError> {
        let mut mirrors = MirrorSet::new(devices)?;
        mirrors.read_only = read_only;
        let mut newest: Vec<Option<Superblock>> = Vec::new();
        // What each mirror holds in each slot (the generation, or the check it failed), to
        // report and repair a slot torn at a crash.
        let mut slots: Vec<[Result<u64, Check>; 2]> = Vec::new();
        let mut first_failure = None;
        let mut incomplete: Vec<(usize, ResilverRecord)> = Vec::new();
        // Every valid superblock slot, with its mirror: to tell a mirror that missed the last
        // writes of the winner's history from one that ran a history of its own.
        let mut every_valid: Vec<(usize, Superblock)> = Vec::new();
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
                        every_valid.push((index, superblock));
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
        let mut recovery_notes = Vec::new();
        for (index, found) in newest.iter().enumerate() {
            match found {
                Some(other) if other.geometry != superblock.geometry => {
                    return Err(StoreError::Foreign { mirror: index });
                }
                Some(other)
                    if superblock.degraded_generation != 0
                        && other.generation >= superblock.degraded_generation
                        && *other != superblock
                        && !every_valid
                            .iter()
                            .any(|(mirror, copy)| *mirror != index && copy == other) =>
                {
                    // Written at a generation at which the winner ran without it, and no other
                    // mirror holds that superblock (a resilver's copy of the winner's would
                    // be): the two ran apart (each booted alone). The longer history wins;
                    // this one is copied over, and said so.
                    let diverged_generation = match other.degraded_generation {
                        0 => superblock.degraded_generation,
                        own => own.min(superblock.degraded_generation),
                    };
                    recovery_notes.push(RecoveryNote::HistoryDiscarded {
                        mirror: index,
                        diverged_generation,
                        discarded_generation: other.generation,
                        discarded_boot_count: other.boot_count,
                        discarded_checkpoint_generation: other.snapshot_generation,
                        kept_generation: superblock.generation,
                        remedy: if read_only { Remedy::NextOpen } else { Remedy::Repaired },
                    });
                    mirrors.mirrors[index].state = MirrorState::Resilvering { copied_blocks: 0 };
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
            directory: Directory::default(),
            phase: Phase::Idle,
            snapshot_generation: superblock.snapshot_generation,
            checkpoint_generation: superblock.home_generation,
            journal: JournalQueue::new(superblock.journal_ticket_next),
            table_sequence_next: (superblock.boot_count + 1) << 32,
            table_cache: BTreeMap::new(),
            table_cache_max: crate::store::TABLE_CACHE_MAX,
            totals: Totals::default(),
            recovery_findings,
            recovery_notes,
            durable_sequence_next: superblock.log_tail.sequence,
        };
        // Before anything else reaches a mirror to be resilvered (see resilver.rs).
        store.mark_incomplete_mirrors()?;
        if read_only {
            // The same scan, with its repairs skipped by the mirror set.
            store.recover_log(true, recover)?;
            store.note_truncation();
            if store.log_used_blocks() > 0 {
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
        let truncated = store.recover_log(false, recover)?;
        // Repairs made by the scan are on disk before the new superblock names this boot.
        store.mirrors.flush()?;
        let snapshot_generation = store.snapshot_generation;
        let journal_ticket_next = store.journal.ticket_next;
        // Its slot is the other one: this write repairs it on every mirror.
        store.write_superblock(|superblock| {
            superblock.boot_count += 1;
            superblock.snapshot_generation = snapshot_generation;
            superblock.journal_ticket_next = journal_ticket_next;
            if let Some(loss) = truncated {
                superblock.truncation = LogTruncation {
                    boot_count: superblock.boot_count,
                    first_sequence: loss.first_sequence,
                    last_sequence: loss.last_sequence,
                };
            }
        })?;
        store.note_truncation();
        // Repaired on the mirrors that took the writes; a mirror that failed meanwhile is
        // out of the store, and its finding says nothing of repair.
        for finding in &mut store.recovery_findings {
            finding.remedy = match store.mirrors.mirrors[finding.mirror].state {
                MirrorState::Healthy => Some(Remedy::Repaired),
                _ => None,
            };
        }
        // Also where the log holds only records of a checkpoint a crash cut short: the
        // migration frees them as it does an abandoned checkpoint's. Left there, they took
        // the room the next checkpoint needed (a crash in a small store's first checkpoint
        // left too little log for the rebuilt system's).
        if store.log_used_blocks() > 0 {
            store.start_migration();
        }
        Ok(store)
    }

    /// The last truncation the superblock records, as a note.
    fn note_truncation(&mut self) {
        let truncation = self.superblock.truncation;
        if truncation.boot_count != 0 {
            self.recovery_notes.push(RecoveryNote::Truncated(truncation));
        }
    }

    /// Scans the log from the tail and rebuilds head, directory and generations. Where the
    /// scan stops, tells a torn tail from damage (see [`Store::look_past_end`]); damage is
    /// refused, noted (read-only) or, with [`Recover::Truncate`], returned to be recorded.
    fn recover_log(
        &mut self,
        read_only: bool,
        recover: Recover,
    ) -> Result<Option<LogLoss>, StoreError> {
        let log_block_count = self.layout.log_block_count;
        let mut cursor = self.tail;
        let mut used_blocks = 0;
        let mut records: Vec<ScannedRecord> = Vec::new();
        let mut stopped_by_tail = false;
        let mut ahead = crate::log::LogReadAhead::new(self.mirrors.mirrors.len());
        while let Some(record) = self.read_record(&cursor, &mut ahead)? {
            let record_blocks = record.header.block_count();
            // A record reaching into the tail cannot have been written after it: stale.
            if used_blocks + record_blocks > log_block_count - 1 {
                stopped_by_tail = true;
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
        // Records at or past the newest claim of durability may never have been flushed:
        // missing from a mirror, they are a torn tail, copied from the mirror that has them.
        let durable_sequence_next = records
            .iter()
            .map(|record| record.header.durable_sequence_next)
            .fold(self.tail.sequence, u64::max);
        self.durable_sequence_next = durable_sequence_next;
        for mirror in 0..self.mirrors.mirrors.len() {
            let mut lacking = records.iter().filter(|record| {
                record.header.sequence >= durable_sequence_next && record.lacking.contains(&mirror)
            });
            if let Some(first) = lacking.next() {
                let last = lacking.next_back().unwrap_or(first);
                self.recovery_notes.push(RecoveryNote::TornTail {
                    mirror,
                    first_sequence: first.header.sequence,
                    last_sequence: last.header.sequence,
                    remedy: if read_only { Remedy::NextOpen } else { Remedy::Repaired },
                });
            }
        }
        let mut truncated = None;
        if !stopped_by_tail && let Some(loss) = self.look_past_end(&cursor, used_blocks)? {
            if read_only {
                self.recovery_notes.push(RecoveryNote::LogDamaged(loss));
            } else if recover == Recover::Truncate {
                truncated = Some(loss);
            } else {
                return Err(StoreError::LogDamaged(loss));
            }
            // Never reuse what the lost records named.
            self.snapshot_generation = self.snapshot_generation.max(loss.generations.1);
            if let Some((_, last)) = loss.journal_tickets {
                self.journal.ticket_next = self.journal.ticket_next.max(last + 1);
            }
        }

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
            let order = Order::record(header.generation, source, header.sequence);
            let home_generation = self.superblock.home_generation;
            self.directory.enter_record(home_generation, header.position + 1, order, &header.entries);
        }
        Ok(truncated)
    }

    /// The recovery scan stopped at `stop`, where no mirror holds the expected record whole.
    /// If that record was never flushed, this is a torn tail: the crash cut the newest,
    /// never-acknowledged write. But if the record after it is on disk and it, or one after
    /// it, says the record at `stop` was durable when it was written
    /// ([`LogHeader::durable_sequence_next`]), the record at `stop` is damage, and starting
    /// here would lose everything from it on: the loss is returned. Only records written
    /// since the last truncation count (the records a truncation discarded stay on disk).
    /// Reads only; finds the next record when the damaged one's header or its data is bad,
    /// not when two records in a row are.
    fn look_past_end(
        &mut self,
        stop: &LogCursor,
        used_blocks: u64,
    ) -> Result<Option<LogLoss>, StoreError> {
        let log_block_count = self.layout.log_block_count;
        let log_first_block = self.layout.log_first_block;
        let boot_count_min = self.superblock.truncation.boot_count;
        // The stopped record's own header, if a mirror holds it (its data was bad).
        let mut stopped: Option<LogHeader> = None;
        let expected = self.expected_at(stop);
        for index in self.mirrors.readable(log_first_block + stop.position, 1) {
            let mut block = zeroed_block();
            if self
                .mirrors
                .read_from(index, log_first_block + stop.position, &mut block[..])
                .is_ok()
                && let Ok(header) = LogHeader::decode(&block, &expected)
            {
                stopped = Some(header);
                break;
            }
        }
        // Where the next record may start: right after the stopped one if its length is
        // known, else anywhere a record of at most the longest size could end, or at the
        // start of the log (after padding or a record that ended the log).
        let (window_start, window_end) = match &stopped {
            Some(header) => {
                let next = (stop.position + header.block_count()) % log_block_count;
                (next, next + 1)
            }
            None => (
                stop.position + 1,
                (stop.position + 2 + LOG_RECORD_DATA_BLOCKS_MAX as u64).min(log_block_count),
            ),
        };
        let mut next: Option<(LogHeader, u32)> = None;
        for index in 0..self.mirrors.mirrors.len() {
            for (start, end) in [(window_start, window_end), (0, 1)] {
                if start >= end
                    || !self
                        .mirrors
                        .readable(log_first_block + start, end - start)
                        .contains(&index)
                {
                    continue;
                }
                let mut window = alloc::vec![0u8; ((end - start) as usize) * BLOCK_SIZE];
                if self.mirrors.read_from(index, log_first_block + start, &mut window).is_err() {
                    continue;
                }
                for (offset, bytes) in window.chunks_exact(BLOCK_SIZE).enumerate() {
                    let block = as_block(bytes);
                    let expected = Expected {
                        position: start + offset as u64,
                        ..expected
                    };
                    let Ok(header) = LogHeader::decode_unchained(block, &expected) else {
                        continue;
                    };
                    if header.sequence == stop.sequence + 1
                        && header.boot_count >= boot_count_min
                        && next.as_ref().is_none_or(|(found, _)| found.boot_count < header.boot_count)
                    {
                        next = Some((header, sealed_checksum(block)));
                    }
                }
            }
        }
        let Some((first_after, first_after_checksum)) = next else {
            return Ok(None);
        };
        // Follow the chain from there (headers only) to see what it claims and holds.
        let mut loss = LogLoss {
            block: log_first_block + stop.position,
            first_sequence: stop.sequence,
            last_sequence: stop.sequence,
            generations: (u64::MAX, 0),
            checkpoint_committed: None,
            journal_tickets: None,
        };
        let mut claimed = 0;
        let mut walked_blocks = used_blocks + stopped.as_ref().map_or(1, LogHeader::block_count);
        let mut record = first_after;
        let mut record_checksum = first_after_checksum;
        let mut lost = Vec::new();
        if let Some(header) = stopped {
            lost.push(header);
        }
        loop {
            walked_blocks += record.block_count();
            if walked_blocks > log_block_count - 1 {
                break;
            }
            claimed = claimed.max(record.durable_sequence_next);
            let cursor = LogCursor {
                position: (record.position + record.block_count()) % log_block_count,
                sequence: record.sequence + 1,
                previous_header_checksum: record_checksum,
            };
            lost.push(record);
            let expected = self.expected_at(&cursor);
            let mut following = None;
            for index in self.mirrors.readable(log_first_block + cursor.position, 1) {
                let mut block = zeroed_block();
                if self
                    .mirrors
                    .read_from(index, log_first_block + cursor.position, &mut block[..])
                    .is_ok()
                    && let Ok(header) = LogHeader::decode(&block, &expected)
                {
                    following = Some((header, sealed_checksum(&block)));
                    break;
                }
            }
            let Some((header, checksum)) = following else {
                break;
            };
            record = header;
            record_checksum = checksum;
        }
        if claimed <= stop.sequence {
            return Ok(None);
        }
        for header in &lost {
            loss.last_sequence = loss.last_sequence.max(header.sequence);
            if header.kind == RecordKind::Padding {
                continue;
            }
            loss.generations.0 = loss.generations.0.min(header.generation);
            loss.generations.1 = loss.generations.1.max(header.generation);
            if header.kind == RecordKind::CheckpointCommit {
                loss.checkpoint_committed = loss.checkpoint_committed.max(Some(header.generation));
            }
            for entry in header.entries.iter().filter(|entry| entry.journal_ticket != 0) {
                let (first, last) = loss
                    .journal_tickets
                    .unwrap_or((entry.journal_ticket, entry.journal_ticket));
                loss.journal_tickets =
                    Some((first.min(entry.journal_ticket), last.max(entry.journal_ticket)));
            }
        }
        if loss.generations.0 > loss.generations.1 {
            loss.generations = (0, 0);
        }
        Ok(Some(loss))
    }
}
