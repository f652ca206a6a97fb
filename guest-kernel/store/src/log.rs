//! The circular log: appending records (several per device write, padding at the end so a
//! record never wraps), reading a logged data block, and scanning the live log at recovery.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::error::{Check, Region, StoreError};
use crate::format::log_record::{CommitSummary, Expected, LogEntry, LogHeader, RecordKind};
use crate::format::superblock::LogCursor;
use crate::format::{Block, as_block, checksum, sealed_checksum, zeroed_block};
use crate::store::Store;

/// A record to append: the header fields the writer does not fill in, and its data.
pub(crate) struct OutgoingRecord {
    pub(crate) kind: RecordKind,
    pub(crate) generation: u64,
    pub(crate) commit: CommitSummary,
    pub(crate) entries: Vec<LogEntry>,
    /// `entries.len()` blocks.
    pub(crate) data: Vec<u8>,
}

/// Where an appended record landed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlacedRecord {
    pub(crate) position: u64,
    pub(crate) sequence: u64,
    pub(crate) header_checksum: u32,
}

/// A record found by the recovery scan.
pub(crate) struct ScannedRecord {
    pub(crate) header: LogHeader,
    pub(crate) header_checksum: u32,
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
            data_block_count,
            commit: CommitSummary::default(),
            entries: Vec::new(),
        }
    }

    /// Appends records after the head without flushing: consecutive records go out in one
    /// device write. The head moves only once every write has returned.
    pub(crate) fn append_records(
        &mut self,
        records: Vec<OutgoingRecord>,
    ) -> Result<Vec<PlacedRecord>, StoreError> {
        let log_block_count = self.layout.log_block_count;
        let mut cursor = self.head;
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut run_start = cursor.position;
        let mut run: Vec<u8> = Vec::new();
        let mut placed = Vec::with_capacity(records.len());
        let mut needed_blocks = 0u64;
        let mut header_block = zeroed_block();
        for record in records {
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
                header.encode(&mut header_block);
                run.extend_from_slice(&header_block[..]);
                runs.push((run_start, core::mem::take(&mut run)));
                needed_blocks += padding_blocks;
                cursor = LogCursor {
                    position: 0,
                    sequence: cursor.sequence + 1,
                    previous_header_checksum: sealed_checksum(&header_block),
                };
                run_start = 0;
            }
            let mut header = self.header_at(&cursor, record.kind, record.entries.len() as u32);
            header.generation = record.generation;
            header.commit = record.commit;
            header.entries = record.entries;
            header.encode(&mut header_block);
            let header_checksum = sealed_checksum(&header_block);
            run.extend_from_slice(&header_block[..]);
            run.extend_from_slice(&record.data);
            placed.push(PlacedRecord {
                position: cursor.position,
                sequence: cursor.sequence,
                header_checksum,
            });
            needed_blocks += record_blocks;
            cursor = LogCursor {
                position: (cursor.position + record_blocks) % log_block_count,
                sequence: cursor.sequence + 1,
                previous_header_checksum: header_checksum,
            };
            if cursor.position == 0 {
                runs.push((run_start, core::mem::take(&mut run)));
                run_start = 0;
            }
        }
        if !run.is_empty() {
            runs.push((run_start, run));
        }
        let free_blocks = self.log_free_blocks();
        if needed_blocks > free_blocks {
            return Err(StoreError::LogFull {
                needed_blocks,
                free_blocks,
            });
        }
        for (position, bytes) in runs {
            self.mirrors
                .write(self.layout.log_first_block + position, &bytes)?;
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

    /// Reads the record `cursor` expects from the first mirror that holds it whole (header
    /// and every data block), and writes it over the mirrors that do not. `None` is the end
    /// of the log.
    pub(crate) fn read_record(
        &mut self,
        cursor: &LogCursor,
    ) -> Result<Option<ScannedRecord>, StoreError> {
        let expected = self.expected_at(cursor);
        let first_block = self.layout.log_first_block + cursor.position;
        let mut lacking = Vec::new();
        let mut found: Option<(ScannedRecord, Vec<u8>)> = None;
        let readable = self.mirrors.readable(first_block, 1);
        for &index in &readable {
            if let Some((_, record)) = &found {
                // A record that reached only some mirrors before a crash must be copied to
                // the others now, or losing the first mirror later would cut the log here.
                let mut copy = alloc::vec![0u8; record.len()];
                let in_place = self
                    .mirrors
                    .readable(first_block, (record.len() / BLOCK_SIZE) as u64)
                    .contains(&index)
                    && self
                        .mirrors
                        .read_from(index, first_block, &mut copy)
                        .is_ok()
                    && copy == *record;
                if !in_place {
                    lacking.push(index);
                }
                continue;
            }
            let mut header_block = zeroed_block();
            if self
                .mirrors
                .read_from(index, first_block, &mut header_block[..])
                .is_err()
            {
                continue;
            }
            let Ok(header) = LogHeader::decode(&header_block, &expected) else {
                lacking.push(index);
                continue;
            };
            let mut record = header_block.to_vec();
            if header.kind != RecordKind::Padding && header.data_block_count > 0 {
                let mut data = alloc::vec![0u8; header.data_block_count as usize * BLOCK_SIZE];
                if self
                    .mirrors
                    .readable(first_block + 1, u64::from(header.data_block_count))
                    .contains(&index)
                    && self
                        .mirrors
                        .read_from(index, first_block + 1, &mut data)
                        .is_ok()
                    && data_matches(&header, &data)
                {
                    record.extend_from_slice(&data);
                } else {
                    lacking.push(index);
                    continue;
                }
            }
            let header_checksum = sealed_checksum(&header_block);
            found = Some((
                ScannedRecord {
                    header,
                    header_checksum,
                },
                record,
            ));
        }
        let Some((scanned, record)) = found else {
            return Ok(None);
        };
        for index in lacking {
            self.mirrors.write_to(index, first_block, &record)?;
        }
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
