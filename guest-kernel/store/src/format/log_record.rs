//! Log records. Every record starts with a header block; checkpoint-data and journal records
//! are followed by their data blocks, whose checksums, object ids and versions the header
//! lists (checksums apart from the blocks they cover: a lost or misdirected data write shows
//! as a mismatch). Records are chained: each header carries its sequence number, its place in
//! the log and the checksum of the header before it, so a scan stops at the first record
//! that was not written in this order.

use alloc::vec::Vec;

use super::{Block, check_envelope, get_u8, get_u32, get_u64, put_u8, put_u32, put_u64, seal};
use crate::error::Check;

pub const LOG_HEADER_MAGIC: u32 = u32::from_le_bytes(*b"HFLG");

const ENTRIES_OFFSET: usize = 96;
const ENTRY_SIZE: usize = 56;
/// Data blocks one record can carry: as many entries as fit in the header block.
pub const LOG_RECORD_DATA_BLOCKS_MAX: usize =
    (super::RECORD_CHECKSUM_OFFSET - ENTRIES_OFFSET) / ENTRY_SIZE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Node pots and pages of checkpoint `generation`, not yet committed.
    CheckpointData = 1,
    /// Checkpoint `generation` is complete: its data records are the ones listed.
    CheckpointCommit = 2,
    /// Whole journal commits made after snapshot `generation` was taken.
    Journal = 3,
    /// Fills the end of the log so that the next record starts at position 0.
    Padding = 4,
}

impl RecordKind {
    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::CheckpointData,
            2 => Self::CheckpointCommit,
            3 => Self::Journal,
            4 => Self::Padding,
            _ => return None,
        })
    }
}

/// What a block holds: four nodes or one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockKind {
    NodePot = 1,
    Page = 2,
}

impl BlockKind {
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::NodePot),
            2 => Some(Self::Page),
            _ => None,
        }
    }
}

/// One data block of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub checksum: u32,
    pub kind: BlockKind,
    /// The pot index (node id / 4) or the page id.
    pub index: u64,
    /// The journal commit this page belongs to; 0 in checkpoint data.
    pub journal_ticket: u64,
    /// Object versions: four nodes of a pot, or the page in `versions[0]`.
    pub versions: [u64; 4],
}

/// Present in commit records only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CommitSummary {
    /// Sequence of the checkpoint's first data record (0 when it has none).
    pub first_sequence: u64,
    pub data_record_count: u64,
    /// [`super::checksum_chain`] over the header checksums of the data records, in order.
    pub data_header_checksum_chain: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHeader {
    pub kind: RecordKind,
    pub store_id: u64,
    pub sequence: u64,
    /// Block offset of this header within the log.
    pub position: u64,
    /// Checkpoint generation (data, commit), or the snapshot a journal record follows.
    pub generation: u64,
    pub boot_count: u64,
    pub previous_header_checksum: u32,
    /// Every record with a lower sequence number was flushed before this one was written (so
    /// it may have been acknowledged). A record the recovery scan cannot read is a torn tail
    /// (never acknowledged) unless a later record claims it here; then it is damage.
    pub durable_sequence_next: u64,
    /// Blocks after the header that belong to this record (data, or skipped by padding).
    pub data_block_count: u32,
    pub commit: CommitSummary,
    pub entries: Vec<LogEntry>,
}

/// What a scan expects of the next record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub store_id: u64,
    pub position: u64,
    pub sequence: u64,
    pub previous_header_checksum: u32,
    pub log_block_count: u64,
    pub node_pot_count: u64,
    pub page_count: u64,
}

impl LogHeader {
    /// Blocks the record occupies in the log, header included.
    pub fn block_count(&self) -> u64 {
        1 + u64::from(self.data_block_count)
    }

    pub fn encode(&self, block: &mut Block) {
        block.fill(0);
        put_u32(block, 0, LOG_HEADER_MAGIC);
        put_u8(block, 4, self.kind as u8);
        put_u64(block, 8, self.store_id);
        put_u64(block, 16, self.sequence);
        put_u64(block, 24, self.position);
        put_u64(block, 32, self.generation);
        put_u64(block, 40, self.boot_count);
        put_u32(block, 48, self.previous_header_checksum);
        put_u64(block, 88, self.durable_sequence_next);
        put_u32(block, 52, self.data_block_count);
        put_u32(block, 56, self.entries.len() as u32);
        put_u64(block, 64, self.commit.first_sequence);
        put_u64(block, 72, self.commit.data_record_count);
        put_u32(block, 80, self.commit.data_header_checksum_chain);
        for (index, entry) in self.entries.iter().enumerate() {
            let offset = ENTRIES_OFFSET + index * ENTRY_SIZE;
            put_u32(block, offset, entry.checksum);
            put_u8(block, offset + 4, entry.kind as u8);
            put_u64(block, offset + 8, entry.index);
            put_u64(block, offset + 16, entry.journal_ticket);
            for (version_index, version) in entry.versions.iter().enumerate() {
                put_u64(block, offset + 24 + version_index * 8, *version);
            }
        }
        seal(block);
    }

    /// Decodes a header and checks it is the record `expected` describes.
    pub fn decode(block: &Block, expected: &Expected) -> Result<Self, Check> {
        check_envelope(block, LOG_HEADER_MAGIC, None)?;
        if get_u64(block, 8) != expected.store_id {
            return Err(Check::StoreId);
        }
        if get_u64(block, 24) != expected.position {
            return Err(Check::Position);
        }
        if get_u64(block, 16) != expected.sequence
            || get_u32(block, 48) != expected.previous_header_checksum
        {
            return Err(Check::Sequence);
        }
        let kind = RecordKind::from_code(get_u8(block, 4)).ok_or(Check::Kind)?;
        let data_block_count = get_u32(block, 52);
        let entry_count = get_u32(block, 56) as usize;
        let entries_expected = match kind {
            RecordKind::CheckpointData | RecordKind::Journal => data_block_count as usize,
            RecordKind::CheckpointCommit | RecordKind::Padding => 0,
        };
        let data_blocks_fit = expected
            .position
            .checked_add(1 + u64::from(data_block_count))
            .is_some_and(|end| end <= expected.log_block_count);
        if entry_count != entries_expected
            || get_u64(block, 32) >= super::COUNTER_MAX
            || get_u64(block, 40) >= super::COUNTER_MAX
            || get_u64(block, 88) > expected.sequence
            || entry_count > LOG_RECORD_DATA_BLOCKS_MAX
            || !data_blocks_fit
            || (kind == RecordKind::CheckpointCommit && data_block_count != 0)
        {
            return Err(Check::Bounds);
        }
        let mut entries = Vec::with_capacity(entry_count);
        for index in 0..entry_count {
            let offset = ENTRIES_OFFSET + index * ENTRY_SIZE;
            let entry_kind = BlockKind::from_code(get_u8(block, offset + 4)).ok_or(Check::Kind)?;
            if kind == RecordKind::Journal && entry_kind != BlockKind::Page {
                return Err(Check::Kind);
            }
            let entry_index = get_u64(block, offset + 8);
            let range_count = match entry_kind {
                BlockKind::NodePot => expected.node_pot_count,
                BlockKind::Page => expected.page_count,
            };
            if entry_index >= range_count || get_u64(block, offset + 16) >= super::COUNTER_MAX {
                return Err(Check::Bounds);
            }
            let mut versions = [0u64; 4];
            for (version_index, version) in versions.iter_mut().enumerate() {
                *version = get_u64(block, offset + 24 + version_index * 8);
            }
            entries.push(LogEntry {
                checksum: get_u32(block, offset),
                kind: entry_kind,
                index: entry_index,
                journal_ticket: get_u64(block, offset + 16),
                versions,
            });
        }
        Ok(Self {
            kind,
            store_id: expected.store_id,
            sequence: expected.sequence,
            position: expected.position,
            generation: get_u64(block, 32),
            boot_count: get_u64(block, 40),
            previous_header_checksum: expected.previous_header_checksum,
            durable_sequence_next: get_u64(block, 88),
            data_block_count,
            commit: CommitSummary {
                first_sequence: get_u64(block, 64),
                data_record_count: get_u64(block, 72),
                data_header_checksum_chain: get_u32(block, 80),
            },
            entries,
        })
    }
}

impl LogHeader {
    /// Decodes a header found at `expected.position` whatever its sequence number and link:
    /// what recovery uses to look past a record it could not read.
    pub fn decode_unchained(block: &Block, expected: &Expected) -> Result<Self, Check> {
        let expected = Expected {
            sequence: get_u64(block, 16),
            previous_header_checksum: get_u32(block, 48),
            ..*expected
        };
        if expected.sequence >= super::COUNTER_MAX {
            return Err(Check::Bounds);
        }
        Self::decode(block, &expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::zeroed_block;

    const EXPECTED: Expected = Expected {
        store_id: 42,
        position: 10,
        sequence: 7,
        previous_header_checksum: 0x1234,
        log_block_count: 100,
        node_pot_count: 16,
        page_count: 64,
    };

    fn journal_header(entry_count: usize) -> LogHeader {
        LogHeader {
            kind: RecordKind::Journal,
            store_id: 42,
            sequence: 7,
            position: 10,
            generation: 3,
            boot_count: 1,
            previous_header_checksum: 0x1234,
            durable_sequence_next: 5,
            data_block_count: entry_count as u32,
            commit: CommitSummary::default(),
            entries: (0..entry_count as u64)
                .map(|index| LogEntry {
                    checksum: 0xdead_0000 + index as u32,
                    kind: BlockKind::Page,
                    index,
                    journal_ticket: 100 + index / 2,
                    versions: [index + 1, 0, 0, 0],
                })
                .collect(),
        }
    }

    fn encoded(header: &LogHeader) -> alloc::boxed::Box<Block> {
        let mut block = zeroed_block();
        header.encode(&mut block);
        block
    }

    /// Rewrites one field and reseals, so that the check under test is the one that fires.
    fn resealed(header: &LogHeader, change: impl FnOnce(&mut Block)) -> alloc::boxed::Box<Block> {
        let mut block = encoded(header);
        change(&mut block);
        seal(&mut block);
        block
    }

    #[test]
    fn round_trip_of_every_kind() {
        let journal = journal_header(LOG_RECORD_DATA_BLOCKS_MAX.min(60));
        assert_eq!(
            LogHeader::decode(&encoded(&journal), &EXPECTED),
            Ok(journal.clone())
        );
        let mut data = journal_header(3);
        data.kind = RecordKind::CheckpointData;
        data.entries[1].kind = BlockKind::NodePot;
        data.entries[1].versions = [1, 2, 3, 4];
        assert_eq!(LogHeader::decode(&encoded(&data), &EXPECTED), Ok(data));
        let mut commit = journal_header(0);
        commit.kind = RecordKind::CheckpointCommit;
        commit.commit = CommitSummary {
            first_sequence: 3,
            data_record_count: 4,
            data_header_checksum_chain: 5,
        };
        assert_eq!(LogHeader::decode(&encoded(&commit), &EXPECTED), Ok(commit));
        let mut padding = journal_header(0);
        padding.kind = RecordKind::Padding;
        padding.data_block_count = 89;
        assert_eq!(
            LogHeader::decode(&encoded(&padding), &EXPECTED),
            Ok(padding)
        );
    }

    #[test]
    fn record_capacity_is_71_blocks() {
        assert_eq!(LOG_RECORD_DATA_BLOCKS_MAX, 71);
    }

    #[test]
    fn corruption_is_named() {
        let header = journal_header(4);
        assert_eq!(
            LogHeader::decode(&zeroed_block(), &EXPECTED),
            Err(Check::Magic)
        );
        let mut torn = encoded(&header);
        torn[ENTRIES_OFFSET + 3] ^= 1;
        assert_eq!(LogHeader::decode(&torn, &EXPECTED), Err(Check::Checksum));
        let foreign = resealed(&header, |block| put_u64(block, 8, 43));
        assert_eq!(LogHeader::decode(&foreign, &EXPECTED), Err(Check::StoreId));
        let misdirected = resealed(&header, |block| put_u64(block, 24, 11));
        assert_eq!(
            LogHeader::decode(&misdirected, &EXPECTED),
            Err(Check::Position)
        );
        let stale = resealed(&header, |block| put_u64(block, 16, 6));
        assert_eq!(LogHeader::decode(&stale, &EXPECTED), Err(Check::Sequence));
        let unlinked = resealed(&header, |block| put_u32(block, 48, 0));
        assert_eq!(
            LogHeader::decode(&unlinked, &EXPECTED),
            Err(Check::Sequence)
        );
        let unknown_kind = resealed(&header, |block| put_u8(block, 4, 9));
        assert_eq!(
            LogHeader::decode(&unknown_kind, &EXPECTED),
            Err(Check::Kind)
        );
        let node_in_journal = resealed(&header, |block| put_u8(block, ENTRIES_OFFSET + 4, 1));
        assert_eq!(
            LogHeader::decode(&node_in_journal, &EXPECTED),
            Err(Check::Kind)
        );
        let count_mismatch = resealed(&header, |block| put_u32(block, 56, 3));
        assert_eq!(
            LogHeader::decode(&count_mismatch, &EXPECTED),
            Err(Check::Bounds)
        );
        let past_log_end = resealed(&header, |block| {
            put_u32(block, 52, 95);
            put_u32(block, 56, 95);
        });
        assert_eq!(
            LogHeader::decode(&past_log_end, &EXPECTED),
            Err(Check::Bounds)
        );
        let page_out_of_range = resealed(&header, |block| put_u64(block, ENTRIES_OFFSET + 8, 64));
        assert_eq!(
            LogHeader::decode(&page_out_of_range, &EXPECTED),
            Err(Check::Bounds)
        );
        let generation_overflows = resealed(&header, |block| put_u64(block, 32, u64::MAX));
        assert_eq!(
            LogHeader::decode(&generation_overflows, &EXPECTED),
            Err(Check::Bounds)
        );
        let claims_itself_durable = resealed(&header, |block| put_u64(block, 88, 8));
        assert_eq!(
            LogHeader::decode(&claims_itself_durable, &EXPECTED),
            Err(Check::Bounds)
        );
        let unchained = resealed(&header, |block| {
            put_u64(block, 16, 9);
            put_u32(block, 48, 0);
        });
        assert_eq!(
            LogHeader::decode_unchained(&unchained, &EXPECTED).map(|found| found.sequence),
            Ok(9)
        );
        let ticket_overflows = resealed(&header, |block| {
            put_u64(block, ENTRIES_OFFSET + 16, u64::MAX)
        });
        assert_eq!(
            LogHeader::decode(&ticket_overflows, &EXPECTED),
            Err(Check::Bounds)
        );
    }
}
