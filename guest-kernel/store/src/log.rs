//! The circular log: appending records (several per device write, padding at the end so a
//! record never wraps), reading a logged data block, and scanning the live log at recovery.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice, DeviceError};
use crate::error::{Check, Region, StoreError};
use crate::format::log_record::{
    CommitSummary, Expected, LOG_RECORD_DATA_BLOCKS_MAX, LogEntry, LogHeader, RecordKind,
};
use crate::format::superblock::LogCursor;
use crate::format::{Block, as_block, checksum, sealed_checksum, zeroed_block};
use crate::store::Store;

/// Records laid out back to back as they go to the log: each record's header block (filled
/// in by [`Store::append_run`], which alone knows where the record lands) followed by its
/// data blocks. Data is copied in once and written from here in one device write per
/// contiguous stretch of the log, so that a checkpoint's pages are copied once in all.
pub(crate) struct RecordRun {
    /// Every record's header block (zeros until appended) and data blocks, in log order.
    bytes: Vec<u8>,
    records: Vec<RunRecord>,
}

/// The header fields of a record in a run that its writer chooses.
struct RunRecord {
    kind: RecordKind,
    generation: u64,
    commit: CommitSummary,
    /// One per data block, in the order of the blocks.
    entries: Vec<LogEntry>,
}

impl RecordRun {
    pub(crate) fn new() -> Self {
        Self {
            bytes: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Starts a record; its data blocks are added with [`RecordRun::push_block`].
    pub(crate) fn begin_record(&mut self, kind: RecordKind, generation: u64, commit: CommitSummary) {
        self.bytes.extend_from_slice(&[0u8; BLOCK_SIZE]);
        // A checkpoint's data records fill up; others (journal, commit) are mostly small.
        let entries_expected = if kind == RecordKind::CheckpointData {
            LOG_RECORD_DATA_BLOCKS_MAX
        } else {
            0
        };
        self.records.push(RunRecord {
            kind,
            generation,
            commit,
            entries: Vec::with_capacity(entries_expected),
        });
    }

    /// Adds a data block to the last record begun; `entry.checksum` must be `data`'s (not
    /// checked here: checksumming every page twice would double stabilization's main cost,
    /// and a wrong checksum is caught by the first read of the block).
    pub(crate) fn push_block(&mut self, entry: LogEntry, data: &Block) {
        let record = self
            .records
            .last_mut()
            .expect("a record is begun before its blocks");
        assert!(
            record.entries.len() < LOG_RECORD_DATA_BLOCKS_MAX,
            "a record holds at most {LOG_RECORD_DATA_BLOCKS_MAX} data blocks"
        );
        record.entries.push(entry);
        self.bytes.extend_from_slice(data);
    }

    /// Data blocks the last record begun can still take (0 when there is none).
    pub(crate) fn last_record_room(&self) -> usize {
        self.records
            .last()
            .map_or(0, |record| LOG_RECORD_DATA_BLOCKS_MAX - record.entries.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The entries of record `index`, in the order of its data blocks.
    pub(crate) fn entries(&self, index: usize) -> &[LogEntry] {
        &self.records[index].entries
    }

    /// Empties the run, keeping its buffer (if it still has it) for the next records.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
    }

    /// Gives an empty run a buffer of `blocks` blocks, or if memory is short of that, of one
    /// whole record (what the store needed before runs); a run is written before it
    /// outgrows its buffer ([`RecordRun::has_room_for_record`]), so pages are never copied
    /// again by its growing. Returns the blocks the buffer holds.
    pub(crate) fn reserve_blocks(&mut self, blocks: usize) -> usize {
        let record_bytes = (1 + LOG_RECORD_DATA_BLOCKS_MAX) * BLOCK_SIZE;
        if self.bytes.try_reserve_exact(blocks * BLOCK_SIZE).is_err() {
            self.bytes.reserve_exact(record_bytes);
        }
        self.bytes.capacity() / BLOCK_SIZE
    }

    /// Whether the buffer can take another whole record without growing.
    pub(crate) fn has_room_for_record(&self) -> bool {
        self.bytes.capacity() - self.bytes.len() >= (1 + LOG_RECORD_DATA_BLOCKS_MAX) * BLOCK_SIZE
    }
}

/// Where an appended record landed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlacedRecord {
    pub(crate) position: u64,
    pub(crate) sequence: u64,
    pub(crate) header_checksum: u32,
}

/// Blocks a log scan reads at once from each mirror ([`LogReadAhead`]): one whole record
/// at most, what the scan allocated for a record before it read ahead. A 512 KiB window
/// ran the paging test's 32 MiB guest out of heap later on (its later allocation of 704
/// KiB found no span with room once the window's had been taken and freed).
const READ_AHEAD_BLOCKS: u64 = 1 + LOG_RECORD_DATA_BLOCKS_MAX as u64;

/// What a log scan has read ahead: one window of blocks per mirror, by mirror index.
pub(crate) struct LogReadAhead {
    windows: Vec<Option<(u64, Vec<u8>)>>,
}

impl LogReadAhead {
    pub(crate) fn new(mirror_count: usize) -> Self {
        Self { windows: (0..mirror_count).map(|_| None).collect() }
    }

    /// `block_count` blocks from `first_block` as mirror `index`'s window holds them, if it
    /// holds them all.
    fn slice(&self, index: usize, first_block: u64, block_count: u64) -> Option<&[u8]> {
        let (start, window) = self.windows[index].as_ref()?;
        let offset = usize::try_from(first_block.checked_sub(*start)?).ok()? * BLOCK_SIZE;
        window.get(offset..offset + block_count as usize * BLOCK_SIZE)
    }
}

/// A record found by the recovery scan.
pub(crate) struct ScannedRecord {
    pub(crate) header: LogHeader,
    pub(crate) header_checksum: u32,
    /// The mirrors that did not hold it whole (rewritten unless the store is read-only).
    pub(crate) lacking: Vec<usize>,
}

impl<D: BlockDevice> Store<D> {
    pub(crate) fn expected_at(&self, cursor: &LogCursor) -> Expected {
        Expected {
            store_id: self.geometry.store_id,
            position: cursor.position,
            sequence: cursor.sequence,
            previous_header_checksum: cursor.previous_header_checksum,
            log_block_count: self.layout.log_block_count,
            node_pot_count: self.geometry.node_pot_count(),
            page_count: self.geometry.page_count,
        }
    }

    fn header_at(&self, cursor: &LogCursor, kind: RecordKind, data_block_count: u32) -> LogHeader {
        LogHeader {
            kind,
            store_id: self.geometry.store_id,
            sequence: cursor.sequence,
            position: cursor.position,
            generation: 0,
            boot_count: self.superblock.boot_count,
            previous_header_checksum: cursor.previous_header_checksum,
            durable_sequence_next: self.durable_sequence_next,
            data_block_count,
            commit: CommitSummary::default(),
            entries: Vec::new(),
        }
    }

    /// Appends a run of records after the head without flushing, filling in their headers:
    /// consecutive records go out in one device write (two when the run meets the end of the
    /// log, where a padding record is written so that no record wraps). The head moves only
    /// once every write has returned. The run is left as it was given, headers filled in.
    pub(crate) fn append_run(&mut self, run: &mut RecordRun) -> Result<Vec<PlacedRecord>, StoreError> {
        self.append_run_with(run, false)
    }

    /// [`Store::append_run`], but a run written in one piece is handed to the devices
    /// ([`BlockDevice::write_owned`]), which may still be writing it when this returns: the
    /// run keeps its records and loses its bytes.
    pub(crate) fn append_run_handing_over(
        &mut self,
        run: &mut RecordRun,
    ) -> Result<Vec<PlacedRecord>, StoreError> {
        self.append_run_with(run, true)
    }

    fn append_run_with(
        &mut self,
        run: &mut RecordRun,
        hand_over: bool,
    ) -> Result<Vec<PlacedRecord>, StoreError> {
        let log_block_count = self.layout.log_block_count;
        let mut cursor = self.head;
        // Stretches of the run to write, as (log position, byte range of the run).
        let mut pieces: Vec<(u64, core::ops::Range<usize>)> = Vec::new();
        let mut padding: Option<(u64, Box<Block>)> = None;
        let mut piece_start = (cursor.position, 0usize);
        let mut offset = 0usize;
        let mut placed = Vec::with_capacity(run.records.len());
        let mut needed_blocks = 0u64;
        for record in &mut run.records {
            let record_blocks = 1 + record.entries.len() as u64;
            if record_blocks >= log_block_count {
                return Err(StoreError::LogFull {
                    needed_blocks: record_blocks,
                    free_blocks: self.log_free_blocks(),
                });
            }
            if cursor.position + record_blocks > log_block_count {
                // Pad to the end of the log: only the padding header is written.
                let padding_blocks = log_block_count - cursor.position;
                let header =
                    self.header_at(&cursor, RecordKind::Padding, (padding_blocks - 1) as u32);
                let mut header_block = zeroed_block();
                header.encode(&mut header_block);
                if offset > piece_start.1 {
                    pieces.push((piece_start.0, piece_start.1..offset));
                }
                needed_blocks += padding_blocks;
                cursor = LogCursor {
                    position: 0,
                    sequence: cursor.sequence + 1,
                    previous_header_checksum: sealed_checksum(&header_block),
                };
                padding = Some((log_block_count - padding_blocks, header_block));
                piece_start = (0, offset);
            }
            let mut header = self.header_at(&cursor, record.kind, record.entries.len() as u32);
            header.generation = record.generation;
            header.commit = record.commit;
            header.entries = core::mem::take(&mut record.entries);
            let header_block: &mut Block = (&mut run.bytes[offset..offset + BLOCK_SIZE])
                .try_into()
                .expect("a run holds a whole header block for every record");
            header.encode(header_block);
            record.entries = header.entries;
            let header_checksum = sealed_checksum(header_block);
            placed.push(PlacedRecord {
                position: cursor.position,
                sequence: cursor.sequence,
                header_checksum,
            });
            needed_blocks += record_blocks;
            offset += record_blocks as usize * BLOCK_SIZE;
            cursor = LogCursor {
                position: (cursor.position + record_blocks) % log_block_count,
                sequence: cursor.sequence + 1,
                previous_header_checksum: header_checksum,
            };
            if cursor.position == 0 {
                pieces.push((piece_start.0, piece_start.1..offset));
                piece_start = (0, offset);
            }
        }
        debug_assert_eq!(offset, run.bytes.len());
        if offset > piece_start.1 {
            pieces.push((piece_start.0, piece_start.1..offset));
        }
        let free_blocks = self.log_free_blocks();
        if needed_blocks > free_blocks {
            return Err(StoreError::LogFull {
                needed_blocks,
                free_blocks,
            });
        }
        if hand_over && padding.is_none() && pieces.len() == 1 {
            let (position, _) = pieces[0];
            self.mirrors.write_owned(
                self.layout.log_first_block + position,
                core::mem::take(&mut run.bytes),
            )?;
            self.head = cursor;
            return Ok(placed);
        }
        if let Some((position, header_block)) = &padding {
            self.mirrors
                .write(self.layout.log_first_block + position, &header_block[..])?;
        }
        for (position, range) in pieces {
            self.mirrors
                .write(self.layout.log_first_block + position, &run.bytes[range])?;
        }
        self.head = cursor;
        Ok(placed)
    }

    /// Blocks that can be appended: one is always left so that a full log and an empty one
    /// look different.
    pub(crate) fn log_free_blocks(&self) -> u64 {
        self.layout.log_block_count - 1 - self.log_used_blocks()
    }

    /// A logged data block, verified against the checksum its header listed.
    pub(crate) fn read_log_data(
        &mut self,
        position: u64,
        expected_checksum: u32,
    ) -> Result<Box<Block>, StoreError> {
        let mut block = zeroed_block();
        self.mirrors.read_verified(
            self.layout.log_first_block + position,
            &mut block[..],
            Region::LogData,
            |bytes| {
                if checksum(bytes) == expected_checksum {
                    Ok(())
                } else {
                    Err(Check::DataChecksum)
                }
            },
        )?;
        Ok(block)
    }

    /// Runs of consecutive logged data blocks, `(first_position, checksums)` (one checksum
    /// a block), read together and verified
    /// ([`MirrorSet::read_verified_runs`](crate::mirror::MirrorSet::read_verified_runs)).
    pub(crate) fn read_log_data_runs(&mut self, mut runs: Vec<(u64, Vec<u32>)>) -> Result<Vec<Vec<u8>>, StoreError> {
        for (position, _) in &mut runs {
            *position += self.layout.log_first_block;
        }
        self.mirrors.read_verified_runs(&runs, Region::LogData)
    }

    /// `block_count` blocks of the log on mirror `index` from `first_block`, out of
    /// `ahead`'s window for that mirror, which is read anew when they are not in it: at
    /// least [`READ_AHEAD_BLOCKS`] (within the log), or only the blocks asked for if the
    /// mirror cannot give the whole window (damaged or not yet resilvered further on).
    fn log_blocks<'a>(
        &mut self,
        ahead: &'a mut LogReadAhead,
        index: usize,
        first_block: u64,
        block_count: u64,
    ) -> Result<&'a [u8], DeviceError> {
        if ahead.slice(index, first_block, block_count).is_none() {
            let log_end = self.layout.log_first_block + self.layout.log_block_count;
            let window_blocks = READ_AHEAD_BLOCKS.max(block_count).min(log_end.saturating_sub(first_block));
            // The last window's buffer, reused: a fresh one was zeroed first, which under
            // emulation cost as much as the read.
            let mut window = ahead.windows[index].take().map(|(_, window)| window).unwrap_or_default();
            window.resize(window_blocks as usize * BLOCK_SIZE, 0);
            let whole = self.mirrors.readable(first_block, window_blocks).contains(&index)
                && self.mirrors.read_from(index, first_block, &mut window).is_ok();
            if !whole {
                window.resize(block_count as usize * BLOCK_SIZE, 0);
                self.mirrors.read_from(index, first_block, &mut window)?;
            }
            ahead.windows[index] = Some((first_block, window));
        }
        Ok(ahead.slice(index, first_block, block_count).expect("the window was just read"))
    }

    /// Reads the record `cursor` expects from the first mirror that holds it whole (header
    /// and every data block), and writes it over the mirrors that do not. `None` is the end
    /// of the log. The reads go through `ahead`, and the record is checked where it lies in
    /// the window: a scan of many small records (journal groups) took two or three device
    /// reads a record, and as many copies, most of a restart's time.
    pub(crate) fn read_record(
        &mut self,
        cursor: &LogCursor,
        ahead: &mut LogReadAhead,
    ) -> Result<Option<ScannedRecord>, StoreError> {
        let expected = self.expected_at(cursor);
        let first_block = self.layout.log_first_block + cursor.position;
        let mut lacking = Vec::new();
        // The record, and the mirror whose window holds it whole.
        let mut found: Option<(ScannedRecord, usize, u64)> = None;
        let readable = self.mirrors.readable(first_block, 1);
        for &index in &readable {
            if let Some((_, holder, record_blocks)) = &found {
                // A record that reached only some mirrors before a crash must be copied to
                // the others now, or losing the first mirror later would cut the log here.
                // Compared where both windows hold it: no copy of every record scanned.
                let (holder, record_blocks) = (*holder, *record_blocks);
                let in_place = self.mirrors.readable(first_block, record_blocks).contains(&index)
                    && self.log_blocks(ahead, index, first_block, record_blocks).is_ok()
                    && matches!(
                        (ahead.slice(index, first_block, record_blocks), ahead.slice(holder, first_block, record_blocks)),
                        (Some(copy), Some(record)) if copy == record
                    );
                if !in_place {
                    lacking.push(index);
                }
                continue;
            }
            let Ok(header_block) = self.log_blocks(ahead, index, first_block, 1) else {
                continue;
            };
            let Ok(header) = LogHeader::decode(as_block(header_block), &expected) else {
                lacking.push(index);
                continue;
            };
            let header_checksum = sealed_checksum(as_block(header_block));
            let data_blocks = match header.kind {
                RecordKind::Padding => 0,
                _ => u64::from(header.data_block_count),
            };
            let whole = self.mirrors.readable(first_block, 1 + data_blocks).contains(&index)
                && self
                    .log_blocks(ahead, index, first_block, 1 + data_blocks)
                    .is_ok_and(|record| data_matches(&header, &record[BLOCK_SIZE..]));
            if !whole {
                lacking.push(index);
                continue;
            }
            let scanned = ScannedRecord { header, header_checksum, lacking: Vec::new() };
            found = Some((scanned, index, 1 + data_blocks));
        }
        let Some((mut scanned, holder, record_blocks)) = found else {
            return Ok(None);
        };
        if !lacking.is_empty() {
            let record = ahead.slice(holder, first_block, record_blocks).map(<[u8]>::to_vec).expect("the holder's window");
            for &index in &lacking {
                self.mirrors.write_to(index, first_block, &record)?;
                // Its window no longer holds what the mirror does.
                ahead.windows[index] = None;
            }
        }
        scanned.lacking = lacking;
        Ok(Some(scanned))
    }
}

/// Whether every data block matches the checksum its header lists.
fn data_matches(header: &LogHeader, data: &[u8]) -> bool {
    header
        .entries
        .iter()
        .zip(data.chunks_exact(BLOCK_SIZE))
        .all(|(entry, block)| checksum(as_block(block)) == entry.checksum)
}
