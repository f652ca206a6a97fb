//! Scrubbing: every home block read and checked on every mirror, a bad copy rewritten from a
//! good one. Reads repair what they touch; a scrub reaches what nothing reads (a page no
//! process has used since the restart), so that a mirror is whole again before the other
//! fails. The caller drives it one checksum-table group at a time.

use alloc::vec::Vec;

use crate::device::BlockDevice;
use crate::error::StoreError;
use crate::format::log_record::BlockKind;
use crate::home::data_region;
use crate::store::Store;

/// Home blocks a scrub reads at once (256 KiB).
const SCRUB_READ_BLOCKS_MAX: usize = 64;

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
        // Runs of consecutive blocks to check, read together: a read per block made a
        // group's step long enough to delay what waited behind it.
        let mut run: Option<(u64, Vec<u32>)> = None;
        for (offset, entry) in table.entries.iter().enumerate() {
            let index = first_index + offset as u64;
            let check = entry.written && !self.directory.contains_key(&(kind, index));
            if let Some((run_first, checksums)) = &mut run {
                if check && *run_first + checksums.len() as u64 == index && checksums.len() < SCRUB_READ_BLOCKS_MAX {
                    checksums.push(entry.checksum);
                    continue;
                }
                self.scrub_run(kind, *run_first, checksums, cursor)?;
                run = None;
            }
            if check {
                run = Some((index, alloc::vec![entry.checksum]));
            }
        }
        if let Some((run_first, checksums)) = &run {
            self.scrub_run(kind, *run_first, checksums, cursor)?;
        }
        Ok(true)
    }

    fn scrub_run(&mut self, kind: BlockKind, first_index: u64, checksums: &[u32], cursor: &mut ScrubCursor) -> Result<(), StoreError> {
        let first_block = self.range_layout(kind).data_first_block + first_index;
        self.mirrors.read_verified_blocks(first_block, checksums, data_region(kind))?;
        cursor.blocks_checked += checksums.len() as u64;
        Ok(())
    }
}
