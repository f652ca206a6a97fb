//! Geometry (what the store holds) and the layout derived from it (where each range lies).
//!
//! Device layout, in blocks:
//!
//! | blocks | what |
//! |---|---|
//! | 0, 1 | superblock slots 0 and 1 |
//! | 2 .. 2 + log | the circular checkpoint log |
//! | then 2 × node groups | node checksum tables, two slots per group |
//! | then node pots | node home blocks, 4 nodes each |
//! | then 2 × page groups | page checksum tables, two slots per group |
//! | then pages | page home blocks |

use crate::error::StoreError;
use crate::format::home_table::TABLE_ENTRIES_MAX;

/// A node image is opaque to the store: 32 slots of 32-byte capabilities.
pub const NODE_SIZE: usize = 1024;
/// Nodes are stored four to a block (a "pot", after KeyKOS), so a block is the unit of both
/// log and home writes and migration never has to merge a node into a block on disk.
pub const NODES_PER_POT: u64 = 4;
/// The smallest log that can hold a full record and a commit with room to spare.
pub const LOG_BLOCK_COUNT_MIN: u64 = 8;

/// What a store holds; chosen at `format` and recorded in the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// A random id chosen at format; every record carries it so that a block of another
    /// store is never taken for one of this store's.
    pub store_id: u64,
    /// Nodes in the home range; a multiple of [`NODES_PER_POT`].
    pub node_count: u64,
    pub page_count: u64,
    pub log_block_count: u64,
}

/// Where the ranges of a [`Geometry`] lie on every mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub log_first_block: u64,
    pub log_block_count: u64,
    pub node_ranges: HomeRangeLayout,
    pub page_ranges: HomeRangeLayout,
    /// Blocks a device must have.
    pub block_count: u64,
}

/// One home range: its checksum tables (two slots per group) then its data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HomeRangeLayout {
    pub table_first_block: u64,
    pub group_count: u64,
    pub data_first_block: u64,
    pub data_block_count: u64,
}

impl HomeRangeLayout {
    fn new(first_block: u64, data_block_count: u64) -> Option<Self> {
        let group_count = data_block_count.div_ceil(TABLE_ENTRIES_MAX as u64);
        let data_first_block = first_block.checked_add(group_count.checked_mul(2)?)?;
        data_first_block.checked_add(data_block_count)?;
        Some(Self {
            table_first_block: first_block,
            group_count,
            data_first_block,
            data_block_count,
        })
    }

    fn end_block(&self) -> u64 {
        self.data_first_block + self.data_block_count
    }

    /// The device block of a table slot.
    pub fn table_block(&self, group: u64, slot: u8) -> u64 {
        self.table_first_block + group * 2 + u64::from(slot)
    }

    /// The group whose table covers a data block, and the entry within it.
    pub fn group_of(data_index: u64) -> (u64, usize) {
        let per_group = TABLE_ENTRIES_MAX as u64;
        (data_index / per_group, (data_index % per_group) as usize)
    }

    /// How many entries a group's table covers (the last group may be short).
    pub fn entries_in_group(&self, group: u64) -> usize {
        let per_group = TABLE_ENTRIES_MAX as u64;
        let first = group * per_group;
        self.data_block_count.saturating_sub(first).min(per_group) as usize
    }
}

impl Geometry {
    pub fn node_pot_count(&self) -> u64 {
        self.node_count / NODES_PER_POT
    }

    /// The layout, or why this geometry cannot be stored.
    pub fn layout(&self) -> Result<Layout, StoreError> {
        if !self.node_count.is_multiple_of(NODES_PER_POT) {
            return Err(StoreError::Geometry("node count is not a multiple of 4"));
        }
        if self.log_block_count < LOG_BLOCK_COUNT_MIN {
            return Err(StoreError::Geometry("log is smaller than 8 blocks"));
        }
        let too_large = StoreError::Geometry("geometry overflows a 64-bit block number");
        let log_first_block = 2;
        let node_first = log_first_block + self.log_block_count;
        let node_ranges =
            HomeRangeLayout::new(node_first, self.node_pot_count()).ok_or(too_large)?;
        let page_ranges =
            HomeRangeLayout::new(node_ranges.end_block(), self.page_count).ok_or(too_large)?;
        Ok(Layout {
            log_first_block,
            log_block_count: self.log_block_count,
            node_ranges,
            page_ranges,
            block_count: page_ranges.end_block(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_places_ranges_back_to_back() {
        let geometry = Geometry {
            store_id: 7,
            node_count: 400,
            page_count: 200,
            log_block_count: 64,
        };
        let layout = geometry.layout().unwrap();
        assert_eq!(layout.log_first_block, 2);
        assert_eq!(layout.node_ranges.table_first_block, 66);
        assert_eq!(layout.node_ranges.group_count, 2); // 100 pots / 84 per table
        assert_eq!(layout.node_ranges.data_first_block, 70);
        assert_eq!(layout.page_ranges.table_first_block, 170);
        assert_eq!(layout.page_ranges.group_count, 3);
        assert_eq!(layout.page_ranges.data_first_block, 176);
        assert_eq!(layout.block_count, 376);
        assert_eq!(layout.page_ranges.entries_in_group(2), 200 - 168);
    }

    #[test]
    fn bad_geometries_are_refused() {
        let odd = Geometry {
            store_id: 1,
            node_count: 3,
            page_count: 1,
            log_block_count: 64,
        };
        assert!(matches!(odd.layout(), Err(StoreError::Geometry(_))));
        let small_log = Geometry {
            store_id: 1,
            node_count: 4,
            page_count: 1,
            log_block_count: 2,
        };
        assert!(matches!(small_log.layout(), Err(StoreError::Geometry(_))));
        let huge = Geometry {
            store_id: 1,
            node_count: 4,
            page_count: u64::MAX,
            log_block_count: 8,
        };
        assert!(matches!(huge.layout(), Err(StoreError::Geometry(_))));
    }
}
