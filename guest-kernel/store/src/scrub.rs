//! Scrubbing: every home block read and checked on every mirror, a bad copy rewritten from a
//! good one. Reads repair what they touch; a scrub reaches what nothing reads (a page no
//! process has used since the restart), so that a mirror is whole again before the other
//! fails. The caller drives it one checksum-table group at a time.

use crate::device::BLOCK_SIZE;
use crate::device::BlockDevice;
use crate::error::{Check, StoreError};
use crate::format::checksum;
use crate::format::log_record::BlockKind;
use crate::home::data_region;
use crate::store::Store;

/// Where a scrub is: the next group of the node pots' range, then of the pages'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubCursor {
    in_pages: bool,
    group: u64,
    /// Home blocks checked so far.
    pub blocks_checked: u64,
}

impl<D: BlockDevice> Store<D> {
    /// Scrubs the next group (its checksum table and every block it says was written; a
    /// block the log holds newer is left to the migration that will rewrite it). Returns
    /// `false` once every group is done.
    pub fn scrub_step(&mut self, cursor: &mut ScrubCursor) -> Result<bool, StoreError> {
        let kind = if cursor.in_pages { BlockKind::Page } else { BlockKind::NodePot };
        let range = self.range_layout(kind);
        if cursor.group >= range.group_count {
            if cursor.in_pages {
                return Ok(false);
            }
            *cursor = ScrubCursor { in_pages: true, group: 0, ..*cursor };
            return Ok(true);
        }
        let group = cursor.group;
        cursor.group += 1;
        let table = self.read_table(kind, group)?;
        let first_index = group * crate::format::home_table::TABLE_ENTRIES_MAX as u64;
        let mut block = alloc::vec![0u8; BLOCK_SIZE];
        for (offset, entry) in table.entries.iter().enumerate().filter(|(_, entry)| entry.written) {
            let index = first_index + offset as u64;
            if self.directory.contains_key(&(kind, index)) {
                continue;
            }
            let expected = entry.checksum;
            self.mirrors.read_verified(range.data_first_block + index, &mut block, data_region(kind), |bytes| {
                if checksum(bytes) == expected { Ok(()) } else { Err(Check::DataChecksum) }
            })?;
            cursor.blocks_checked += 1;
        }
        Ok(true)
    }
}
