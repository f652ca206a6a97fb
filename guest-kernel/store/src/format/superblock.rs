//! The superblock: geometry, where the log's live part starts, and the checkpoint generation
//! whose objects are all at home. Two slots (blocks 0 and 1) are written alternately —
//! generation g goes to slot g % 2 — so a torn superblock write leaves the other slot valid;
//! the newest valid slot on any mirror wins.

use super::{Block, FORMAT_VERSION, check_envelope, get_u32, get_u64, put_u32, put_u64, seal};
use crate::error::Check;
use crate::geometry::Geometry;

pub const SUPERBLOCK_MAGIC: u32 = u32::from_le_bytes(*b"HFSB");

/// Where the next log record is (or the live log starts): its position in the log, its
/// sequence number, and the checksum of the record header before it, which it must name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LogCursor {
    pub position: u64,
    pub sequence: u64,
    pub previous_header_checksum: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    /// Counts superblock writes; the slot is `generation % 2`.
    pub generation: u64,
    /// The checkpoint generation whose objects (and the journal commits before its
    /// migration began) are all in the home ranges.
    pub home_generation: u64,
    /// The newest checkpoint generation ever begun, so that a generation whose checkpoint
    /// was cut by a crash is never reused.
    pub snapshot_generation: u64,
    /// The first record of the live log.
    pub log_tail: LogCursor,
    /// Counts opens; keeps checksum-table sequence numbers and log headers of different
    /// boots apart.
    pub boot_count: u64,
    pub journal_ticket_next: u64,
    /// The device blocks the layout needs; checked against the geometry.
    pub block_count: u64,
    /// The superblock generation at which a mirror was last found failed or missing (0 while
    /// every mirror is in sync). A mirror whose own newest superblock is older missed writes:
    /// it is resilvered, never trusted.
    pub degraded_generation: u64,
    /// How many mirrors the store has (1 or 2): opened with fewer devices, it runs degraded.
    pub mirror_count: u64,
    /// The last time the operator started the store from the last intact point of a damaged
    /// log (`holdfast.recover=truncate`); all zero if never.
    pub truncation: LogTruncation,
}

/// Records discarded at an open that truncated the log at damage no mirror could repair:
/// kept in every later superblock so that `inspect`, `check` and the boot say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LogTruncation {
    /// The boot count of the open that truncated (0: never truncated). Log records of
    /// earlier boots beyond the head are the discarded ones, never evidence of damage.
    pub boot_count: u64,
    /// The first record discarded (the damaged one) and the newest one found after it.
    pub first_sequence: u64,
    pub last_sequence: u64,
}

const FORMAT_VERSION_OFFSET: usize = 4;

impl Superblock {
    pub fn slot(&self) -> u64 {
        self.generation % 2
    }

    pub fn encode(&self, block: &mut Block) {
        block.fill(0);
        put_u32(block, 0, SUPERBLOCK_MAGIC);
        put_u32(block, FORMAT_VERSION_OFFSET, FORMAT_VERSION);
        put_u64(block, 8, self.geometry.store_id);
        put_u64(block, 16, self.generation);
        put_u64(block, 24, self.geometry.node_count);
        put_u64(block, 32, self.geometry.page_count);
        put_u64(block, 40, self.geometry.log_block_count);
        put_u64(block, 48, self.home_generation);
        put_u64(block, 56, self.snapshot_generation);
        put_u64(block, 64, self.log_tail.position);
        put_u64(block, 72, self.log_tail.sequence);
        put_u32(block, 80, self.log_tail.previous_header_checksum);
        put_u64(block, 88, self.boot_count);
        put_u64(block, 96, self.journal_ticket_next);
        put_u64(block, 104, self.block_count);
        put_u64(block, 112, self.degraded_generation);
        put_u64(block, 120, self.mirror_count);
        put_u64(block, 160, self.truncation.boot_count);
        put_u64(block, 168, self.truncation.first_sequence);
        put_u64(block, 176, self.truncation.last_sequence);
        seal(block);
    }

    /// Decodes the superblock read from `slot` (block 0 or 1).
    pub fn decode(block: &Block, slot: u64) -> Result<Self, Check> {
        check_envelope(block, SUPERBLOCK_MAGIC, Some(FORMAT_VERSION_OFFSET))?;
        let geometry = Geometry {
            store_id: get_u64(block, 8),
            node_count: get_u64(block, 24),
            page_count: get_u64(block, 32),
            log_block_count: get_u64(block, 40),
        };
        let superblock = Self {
            geometry,
            generation: get_u64(block, 16),
            home_generation: get_u64(block, 48),
            snapshot_generation: get_u64(block, 56),
            log_tail: LogCursor {
                position: get_u64(block, 64),
                sequence: get_u64(block, 72),
                previous_header_checksum: get_u32(block, 80),
            },
            boot_count: get_u64(block, 88),
            journal_ticket_next: get_u64(block, 96),
            block_count: get_u64(block, 104),
            degraded_generation: get_u64(block, 112),
            mirror_count: get_u64(block, 120),
            truncation: LogTruncation {
                boot_count: get_u64(block, 160),
                first_sequence: get_u64(block, 168),
                last_sequence: get_u64(block, 176),
            },
        };
        if superblock.slot() != slot {
            return Err(Check::Position);
        }
        let layout = geometry.layout().map_err(|_| Check::Geometry)?;
        if layout.block_count != superblock.block_count {
            return Err(Check::Geometry);
        }
        if superblock.log_tail.position >= geometry.log_block_count
            || superblock.home_generation > superblock.snapshot_generation
            || superblock.degraded_generation > superblock.generation
            || !(1..=2).contains(&superblock.mirror_count)
            || superblock.truncation.boot_count > superblock.boot_count
            || superblock.truncation.first_sequence > superblock.truncation.last_sequence
            || [
                superblock.generation,
                superblock.snapshot_generation,
                superblock.log_tail.sequence,
                superblock.boot_count,
                superblock.journal_ticket_next,
            ]
            .iter()
            .any(|counter| *counter >= super::COUNTER_MAX)
        {
            return Err(Check::Bounds);
        }
        Ok(superblock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{RECORD_CHECKSUM_OFFSET, zeroed_block};

    fn sample() -> Superblock {
        let geometry = Geometry {
            store_id: 0xfeed,
            node_count: 64,
            page_count: 32,
            log_block_count: 16,
        };
        Superblock {
            geometry,
            generation: 5,
            home_generation: 3,
            snapshot_generation: 4,
            log_tail: LogCursor {
                position: 7,
                sequence: 99,
                previous_header_checksum: 0xabcd,
            },
            boot_count: 2,
            journal_ticket_next: 11,
            block_count: geometry.layout().unwrap().block_count,
            degraded_generation: 4,
            mirror_count: 2,
            truncation: LogTruncation {
                boot_count: 2,
                first_sequence: 90,
                last_sequence: 95,
            },
        }
    }

    fn encoded(superblock: &Superblock) -> alloc::boxed::Box<Block> {
        let mut block = zeroed_block();
        superblock.encode(&mut block);
        block
    }

    #[test]
    fn round_trip() {
        let superblock = sample();
        assert_eq!(Superblock::decode(&encoded(&superblock), 1), Ok(superblock));
    }

    #[test]
    fn blank_and_foreign_blocks_fail_the_magic_check() {
        assert_eq!(Superblock::decode(&zeroed_block(), 0), Err(Check::Magic));
        let mut block = encoded(&sample());
        block[0] ^= 0xff;
        assert_eq!(Superblock::decode(&block, 1), Err(Check::Magic));
    }

    #[test]
    fn another_format_version_says_so() {
        let mut block = encoded(&sample());
        put_u32(&mut block, FORMAT_VERSION_OFFSET, FORMAT_VERSION + 1);
        assert_eq!(Superblock::decode(&block, 1), Err(Check::FormatVersion));
    }

    #[test]
    fn any_flipped_bit_fails_the_checksum() {
        for offset in [8, 16, 100, 2000, RECORD_CHECKSUM_OFFSET] {
            let mut block = encoded(&sample());
            block[offset] ^= 0x10;
            assert_eq!(
                Superblock::decode(&block, 1),
                Err(Check::Checksum),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn a_superblock_in_the_wrong_slot_is_misdirected() {
        assert_eq!(
            Superblock::decode(&encoded(&sample()), 0),
            Err(Check::Position)
        );
    }

    #[test]
    fn a_geometry_that_does_not_lay_out_is_refused() {
        let mut superblock = sample();
        superblock.geometry.node_count = 3;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Geometry)
        );
        let mut superblock = sample();
        superblock.block_count += 1;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Geometry)
        );
    }

    #[test]
    fn fields_out_of_their_bounds_are_refused() {
        let mut superblock = sample();
        superblock.log_tail.position = 16;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
        let mut superblock = sample();
        superblock.home_generation = 5;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
        let mut superblock = sample();
        superblock.degraded_generation = 6;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
        let mut superblock = sample();
        superblock.mirror_count = 3;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
        let mut superblock = sample();
        superblock.truncation.boot_count = 3;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
        let mut superblock = sample();
        superblock.boot_count = u64::MAX;
        assert_eq!(
            Superblock::decode(&encoded(&superblock), 1),
            Err(Check::Bounds)
        );
    }
}
