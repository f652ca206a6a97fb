//! The resilver record: what a mirror being resilvered holds in its superblock slots
//! (blocks 0 and 1) from before anything is written to it until the copy is whole. A
//! half-copied mirror then has no superblock to be opened on: alone it is refused
//! ([`crate::StoreError::ResilverIncomplete`]), and beside the mirror it was copied from it
//! is copied again. Without it, a stale mirror kept its old valid superblock over a body
//! partly copied from a newer one, and looked whole.

use super::{Block, FORMAT_VERSION, check_envelope, get_u64, put_u32, put_u64, seal};
use crate::error::Check;
use crate::geometry::Geometry;

pub const RESILVER_RECORD_MAGIC: u32 = u32::from_le_bytes(*b"HFRS");

const FORMAT_VERSION_OFFSET: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResilverRecord {
    /// The store being copied onto this mirror (its id names it; a record of another store
    /// beside a store is foreign, as a superblock would be).
    pub geometry: Geometry,
    /// The superblock generation of the mirror copied from, when this copy began.
    pub source_generation: u64,
}

impl ResilverRecord {
    /// Encodes the record for superblock slot `slot` (0 or 1).
    pub fn encode(&self, block: &mut Block, slot: u64) {
        block.fill(0);
        put_u32(block, 0, RESILVER_RECORD_MAGIC);
        put_u32(block, FORMAT_VERSION_OFFSET, FORMAT_VERSION);
        put_u64(block, 8, self.geometry.store_id);
        put_u64(block, 16, slot);
        put_u64(block, 24, self.geometry.node_count);
        put_u64(block, 32, self.geometry.page_count);
        put_u64(block, 40, self.geometry.log_block_count);
        put_u64(block, 48, self.source_generation);
        seal(block);
    }

    /// Decodes the record read from superblock slot `slot`.
    pub fn decode(block: &Block, slot: u64) -> Result<Self, Check> {
        check_envelope(block, RESILVER_RECORD_MAGIC, Some(FORMAT_VERSION_OFFSET))?;
        if get_u64(block, 16) != slot {
            return Err(Check::Position);
        }
        let record = Self {
            geometry: Geometry {
                store_id: get_u64(block, 8),
                node_count: get_u64(block, 24),
                page_count: get_u64(block, 32),
                log_block_count: get_u64(block, 40),
            },
            source_generation: get_u64(block, 48),
        };
        record.geometry.layout().map_err(|_| Check::Geometry)?;
        if record.source_generation >= super::COUNTER_MAX {
            return Err(Check::Bounds);
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::superblock::Superblock;
    use crate::format::{RECORD_CHECKSUM_OFFSET, zeroed_block};

    fn sample() -> ResilverRecord {
        ResilverRecord {
            geometry: Geometry {
                store_id: 0xfeed,
                node_count: 64,
                page_count: 32,
                log_block_count: 16,
            },
            source_generation: 41,
        }
    }

    fn encoded(slot: u64) -> alloc::boxed::Box<Block> {
        let mut block = zeroed_block();
        sample().encode(&mut block, slot);
        block
    }

    #[test]
    fn round_trip_in_both_slots() {
        for slot in 0..2 {
            assert_eq!(ResilverRecord::decode(&encoded(slot), slot), Ok(sample()));
        }
    }

    #[test]
    fn it_is_never_taken_for_a_superblock_nor_a_superblock_for_it() {
        assert_eq!(Superblock::decode(&encoded(0), 0), Err(Check::Magic));
        assert_eq!(ResilverRecord::decode(&zeroed_block(), 0), Err(Check::Magic));
    }

    #[test]
    fn damage_a_wrong_slot_and_a_bad_geometry_are_refused() {
        let mut block = encoded(1);
        block[48] ^= 1;
        assert_eq!(ResilverRecord::decode(&block, 1), Err(Check::Checksum));
        let mut block = encoded(1);
        block[RECORD_CHECKSUM_OFFSET] ^= 1;
        assert_eq!(ResilverRecord::decode(&block, 1), Err(Check::Checksum));
        assert_eq!(ResilverRecord::decode(&encoded(1), 0), Err(Check::Position));
        let mut block = encoded(0);
        put_u32(&mut block, FORMAT_VERSION_OFFSET, FORMAT_VERSION + 1);
        assert_eq!(ResilverRecord::decode(&block, 0), Err(Check::FormatVersion));
        let mut record = sample();
        record.geometry.node_count = 3;
        let mut block = zeroed_block();
        record.encode(&mut block, 0);
        assert_eq!(ResilverRecord::decode(&block, 0), Err(Check::Geometry));
        let mut record = sample();
        record.source_generation = u64::MAX;
        record.encode(&mut block, 0);
        assert_eq!(ResilverRecord::decode(&block, 0), Err(Check::Bounds));
    }
}
