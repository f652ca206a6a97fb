//! Scrubbing: every home block read and checked on every mirror, a bad copy rewritten from a
//! good one. Reads repair what they touch; a scrub reaches what nothing reads (a page no
//! process has used since the restart), so that a mirror is whole again before the other
//! fails. The caller drives it one checksum-table group at a time.

use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::error::{Check, Corruption, Region, StoreError};
use crate::format::checksum;
use crate::format::log_record::BlockKind;
use crate::home::data_region;
use crate::mirror::MirrorSet;
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
    /// Their copies checked, on every mirror.
    pub copies_checked: u64,
    /// Bad copies rewritten from a good one.
    pub copies_repaired: u64,
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
                if cursor.group == range.group_count {
                    // Counted once, however often the finished cursor is stepped again.
                    cursor.group += 1;
                    self.totals.scrub_passes += 1;
                }
                return Ok(false);
            }
            *cursor = ScrubCursor { in_pages: true, group: 0, ..*cursor };
            return Ok(true);
        }
        let group = cursor.group;
        cursor.group += 1;
        // From the mirrors, not the cache: the scrub checks every copy of the tables too.
        let table = self.read_table_from_mirrors(kind, group)?;
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
        let result = self.mirrors.scrub_blocks(first_block, checksums, data_region(kind));
        cursor.blocks_checked += checksums.len() as u64;
        cursor.copies_checked += result.copies_checked;
        cursor.copies_repaired += result.copies_repaired;
        result.failure.map_or(Ok(()), Err)
    }
}

/// What a scrub of one run found.
struct ScrubRun {
    copies_checked: u64,
    copies_repaired: u64,
    /// The first failure: a block with no good copy on any mirror, or a repair that could
    /// not be written (the rest of the run was still checked and repaired).
    failure: Option<StoreError>,
}

impl<D: BlockDevice> MirrorSet<D> {
    /// Checks every copy of `first_block..` on every readable mirror against its checksum
    /// and writes a good copy over each bad one. Unlike a read, which stops at the first
    /// good copy, this reads them all: a bad copy on a mirror no read reaches would
    /// otherwise stay until that mirror is the last one.
    fn scrub_blocks(&mut self, first_block: u64, expected_checksums: &[u32], region: Region) -> ScrubRun {
        let block_count = expected_checksums.len();
        let mut result = ScrubRun { copies_checked: 0, copies_repaired: 0, failure: None };
        // Each mirror's copy of the run; `None` where the read failed (every block bad).
        let copies: Vec<(usize, Option<Vec<u8>>)> = self
            .readable(first_block, block_count as u64)
            .into_iter()
            .map(|index| {
                let mut run = alloc::vec![0u8; block_count * BLOCK_SIZE];
                (index, self.read_from(index, first_block, &mut run).is_ok().then_some(run))
            })
            .collect();
        for (offset, &expected) in expected_checksums.iter().enumerate() {
            let bytes = offset * BLOCK_SIZE..(offset + 1) * BLOCK_SIZE;
            // Per mirror, whether its copy is good.
            let good: Vec<(usize, bool)> = copies
                .iter()
                .map(|(index, run)| (*index, run.as_ref().is_some_and(|run| checksum(&run[bytes.clone()]) == expected)))
                .collect();
            result.copies_checked += copies.len() as u64;
            let block = first_block + offset as u64;
            let Some(good_copy) = good
                .iter()
                .position(|&(_, good)| good)
                .and_then(|position| copies[position].1.as_ref())
                .map(|run| run[bytes.clone()].to_vec())
            else {
                result.failure.get_or_insert(StoreError::Corrupt(Corruption { region, block, check: Check::DataChecksum }));
                continue;
            };
            for (index, _) in good.into_iter().filter(|&(_, good)| !good) {
                match self.write_to(index, block, &good_copy) {
                    // Read-only, nothing was written.
                    Ok(()) => result.copies_repaired += u64::from(!self.read_only),
                    Err(error) => {
                        result.failure.get_or_insert(error);
                    }
                }
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{GEOMETRY, blank_mirrors, checkpoint_pages, migrate_all, read_page};
    use crate::{ScrubCursor, Store};

    /// The outside run's finding: damage on the second mirror only survived a completed
    /// scrub (it read the first mirror's good copy and stopped), and the second mirror
    /// alone could not load its objects.
    #[test]
    fn a_scrub_checks_and_repairs_the_copies_on_every_mirror() {
        let layout = GEOMETRY.layout().unwrap();
        let (a, b) = blank_mirrors();
        let mut store = Store::format(alloc::vec![a.clone(), b.clone()], GEOMETRY).unwrap();
        let pages: alloc::vec::Vec<(u64, u64, u8)> = (0..120).map(|id| (id, 1, id as u8 | 1)).collect();
        checkpoint_pages(&mut store, &pages);
        migrate_all(&mut store);
        // Damage on both mirrors, never the same block: every block has one good copy.
        for id in [5, 64, 118] {
            b.flip_bit(layout.page_ranges.data_first_block + id);
        }
        a.flip_bit(layout.page_ranges.data_first_block + 7);
        let mut cursor = ScrubCursor::default();
        assert_eq!(store.counters().scrub_passes_total, 0);
        while store.scrub_step(&mut cursor).unwrap() {}
        assert!(!store.scrub_step(&mut cursor).unwrap());
        assert_eq!(store.counters().scrub_passes_total, 1);
        assert_eq!((cursor.blocks_checked, cursor.copies_checked, cursor.copies_repaired), (120, 240, 4));
        assert_eq!(store.counters().mirror_repaired_blocks_total, 4);
        assert!(store.check().unwrap().is_clean());
        drop(store);
        // Each mirror alone holds every object.
        for mirror in [a, b] {
            let mut store = Store::open(alloc::vec![mirror]).unwrap();
            for &(id, version, fill) in &pages {
                assert_eq!(read_page(&mut store, id), (version, fill));
            }
        }
    }

    #[test]
    fn a_block_bad_on_every_mirror_is_named_and_the_others_are_still_repaired() {
        let layout = GEOMETRY.layout().unwrap();
        let (a, b) = blank_mirrors();
        let mut store = Store::format(alloc::vec![a.clone(), b.clone()], GEOMETRY).unwrap();
        let pages: alloc::vec::Vec<(u64, u64, u8)> = (0..10).map(|id| (id, 1, 0x40 | id as u8)).collect();
        checkpoint_pages(&mut store, &pages);
        migrate_all(&mut store);
        let both_bad = layout.page_ranges.data_first_block + 4;
        a.flip_bit(both_bad);
        b.flip_bit(both_bad);
        b.flip_bit(layout.page_ranges.data_first_block + 6);
        let mut cursor = ScrubCursor::default();
        let mut errors = alloc::vec::Vec::new();
        loop {
            match store.scrub_step(&mut cursor) {
                Ok(true) => {}
                Ok(false) => break,
                Err(error) => errors.push(alloc::format!("{error}")),
            }
        }
        assert_eq!(
            errors,
            [alloc::format!(
                "every copy is bad: block {both_bad} (page home block) failed the data checksum listed apart from the block check"
            )]
        );
        assert_eq!(cursor.copies_repaired, 1);
        assert_eq!(store.check().unwrap().finding_count, 2);
    }
}
