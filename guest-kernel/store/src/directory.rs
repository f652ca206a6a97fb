//! The log directory: where the newest committed copy of each log-resident block is.
//!
//! Kept as extents, not as one map entry per block. A record's blocks lie one after another
//! in the log and a checkpoint logs its pages in id order, so a record's pages with
//! consecutive ids become one extent of up to a record's 71 blocks. Entered one map entry
//! per page, a 1 GiB checkpoint spent about 0.36 s of its stabilization under TCG on the
//! map alone (a bulk build of the map measured no cheaper on the host); as extents, about
//! 0.12 s.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::format::log_record::{BlockKind, LogEntry};
use crate::store::{BlockKey, DirectoryEntry, Order};

/// What differs between the blocks of one extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockCopy {
    checksum: u32,
    versions: [u64; 4],
}

/// Blocks of one kind with consecutive indices, from one log record and one after another
/// in it: the extent's block `i` is at `position + i`, its order's entry `order.entry + i`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Extent {
    position: u64,
    order: Order,
    copies: Vec<BlockCopy>,
}

impl Extent {
    fn entry(&self, offset: usize) -> DirectoryEntry {
        let copy = self.copies[offset];
        DirectoryEntry {
            position: self.position + offset as u64,
            checksum: copy.checksum,
            versions: copy.versions,
            order: Order {
                entry: self.order.entry + offset as u32,
                ..self.order
            },
        }
    }

    /// Splits off the blocks from `offset` on as an extent of their own.
    fn split_off(&mut self, offset: usize) -> Extent {
        Extent {
            position: self.position + offset as u64,
            order: Order {
                entry: self.order.entry + offset as u32,
                ..self.order
            },
            copies: self.copies.split_off(offset),
        }
    }

    /// Whether `entry` is the block after this extent's last in the same record.
    fn continues_with(&self, entry: &DirectoryEntry) -> bool {
        let length = self.copies.len();
        entry.position == self.position + length as u64
            && entry.order
                == Order {
                    entry: self.order.entry + length as u32,
                    ..self.order
                }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Directory {
    /// By the key of each extent's first block; extents never overlap.
    extents: BTreeMap<BlockKey, Extent>,
    block_count: usize,
}

impl Directory {
    pub(crate) fn len(&self) -> usize {
        self.block_count
    }

    /// The extent holding `key`: its first block's key, and `key`'s offset in it.
    fn find(&self, (kind, index): BlockKey) -> Option<(BlockKey, usize)> {
        let (&first, extent) = self.extents.range(..=(kind, index)).next_back()?;
        if first.0 != kind {
            return None;
        }
        let offset = index - first.1;
        (offset < extent.copies.len() as u64).then_some((first, offset as usize))
    }

    pub(crate) fn get(&self, key: &BlockKey) -> Option<DirectoryEntry> {
        let (first, offset) = self.find(*key)?;
        Some(self.extents[&first].entry(offset))
    }

    pub(crate) fn contains_key(&self, key: &BlockKey) -> bool {
        self.find(*key).is_some()
    }

    pub(crate) fn remove(&mut self, key: &BlockKey) -> Option<DirectoryEntry> {
        let entry = self.get(key)?;
        self.remove_span(key.0, key.1..key.1 + 1);
        Some(entry)
    }

    /// Removes the blocks of `kind` with indices in `span`, splitting the extents they
    /// share with blocks outside it.
    fn remove_span(&mut self, kind: BlockKind, span: Range<u64>) {
        // From the extent holding the span's first block, if one does.
        let mut next = self
            .find((kind, span.start))
            .map_or((kind, span.start), |(first, _)| first);
        while let Some((&first, _)) = self.extents.range(next..(kind, span.end)).next() {
            // What is left of this extent goes back before `next` or at the span's end.
            next = (kind, span.start.max(first.1 + 1));
            let Some(mut before) = self.extents.remove(&first) else {
                break;
            };
            let end = first.1 + before.copies.len() as u64;
            let cut_from = span.start.max(first.1) - first.1;
            let cut_to = span.end.min(end) - first.1;
            let mut removed = before.split_off(cut_from as usize);
            let after = removed.split_off((cut_to - cut_from) as usize);
            self.block_count -= removed.copies.len();
            if !before.copies.is_empty() {
                self.extents.insert(first, before);
            }
            if !after.copies.is_empty() {
                self.extents.insert((kind, first.1 + cut_to), after);
            }
        }
    }

    /// Makes `entry` block `key`'s copy, whatever was there.
    pub(crate) fn insert(&mut self, key: BlockKey, entry: DirectoryEntry) {
        let copy = BlockCopy {
            checksum: entry.checksum,
            versions: entry.versions,
        };
        // A block alone in its extent (a page that journal commits write again and again:
        // a TP1 branch, its tellers, the history page in use) takes the new copy in place:
        // a restart enters every journal commit in the log, and removing and inserting its
        // extent each time was about half of building the directory.
        if self.extents.get(&key).is_some_and(|extent| extent.copies.len() == 1)
            && self.extent_joined(key, &entry).is_none()
            && let Some(alone) = self.extents.get_mut(&key)
        {
            alone.position = entry.position;
            alone.order = entry.order;
            alone.copies[0] = copy;
            return;
        }
        self.remove(&key);
        self.block_count += 1;
        if let Some(first) = self.extent_joined(key, &entry)
            && let Some(extent) = self.extents.get_mut(&first)
        {
            extent.copies.push(copy);
            return;
        }
        self.extents.insert(
            key,
            Extent {
                position: entry.position,
                order: entry.order,
                copies: vec![copy],
            },
        );
    }

    /// The extent that `entry`, as block `key`'s copy, would extend: the one ending with
    /// the block before `key`, whose last block is the one before `entry` in the same record.
    fn extent_joined(&self, key: BlockKey, entry: &DirectoryEntry) -> Option<BlockKey> {
        let (first, offset) = self.find((key.0, key.1.checked_sub(1)?))?;
        let extent = &self.extents[&first];
        (offset + 1 == extent.copies.len() && extent.continues_with(entry)).then_some(first)
    }

    /// Enters `entry` as block `key`'s copy where it is newer than the copy here. A journal
    /// copy made in a snapshot generation below `home_generation` is never entered: the
    /// checkpoint now at home moved every page it holds home as it was at that checkpoint's
    /// snapshot or newer. Such a commit is acknowledged when written but never read: one
    /// written late (queued at a snapshot taken at once, in a fault, then written after that
    /// checkpoint's migration) would otherwise bring back a page's older contents and
    /// version. Commits written in time were moved home by that migration.
    pub(crate) fn enter_if_newer(
        &mut self,
        home_generation: u64,
        key: BlockKey,
        entry: DirectoryEntry,
    ) {
        if entry.order.is_journal_before(home_generation) {
            return;
        }
        if self
            .get(&key)
            .is_none_or(|current| current.order < entry.order)
        {
            self.insert(key, entry);
        }
    }

    /// Enters the blocks of one log record as [`Directory::enter_if_newer`] does: its
    /// `entries` in the record's order, the first at log position `position` with order
    /// `order`, the next one block and one entry further on. A run of consecutive keys that
    /// no copy here overlaps (every page of a checkpoint, usually) goes in as one extent.
    pub(crate) fn enter_record(
        &mut self,
        home_generation: u64,
        position: u64,
        order: Order,
        entries: &[LogEntry],
    ) {
        if order.is_journal_before(home_generation) {
            return;
        }
        let mut start = 0;
        while let Some(first) = entries.get(start) {
            let length = entries[start..]
                .iter()
                .zip(first.index..)
                .take_while(|(entry, index)| entry.kind == first.kind && entry.index == *index)
                .count();
            let extent = Extent {
                position: position + start as u64,
                order: Order {
                    entry: order.entry + start as u32,
                    ..order
                },
                copies: entries[start..start + length]
                    .iter()
                    .map(|entry| BlockCopy {
                        checksum: entry.checksum,
                        versions: entry.versions,
                    })
                    .collect(),
            };
            self.enter_run(home_generation, (first.kind, first.index), extent);
            start += length;
        }
    }

    fn enter_run(&mut self, home_generation: u64, first: BlockKey, extent: Extent) {
        let last = (first.0, first.1 + extent.copies.len() as u64 - 1);
        let overlaps =
            self.extents
                .range(..=last)
                .next_back()
                .is_some_and(|(&(kind, index), before)| {
                    kind == first.0 && index + before.copies.len() as u64 > first.1
                });
        if overlaps {
            for offset in 0..extent.copies.len() {
                self.enter_if_newer(
                    home_generation,
                    (first.0, first.1 + offset as u64),
                    extent.entry(offset),
                );
            }
        } else {
            self.block_count += extent.copies.len();
            self.extents.insert(first, extent);
        }
    }

    /// Every block and its copy, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (BlockKey, DirectoryEntry)> + '_ {
        self.blocks_of(self.extents.iter())
    }

    /// The blocks after `after` (all of them for `None`) and their copies, in key order.
    pub(crate) fn iter_after(
        &self,
        after: Option<BlockKey>,
    ) -> impl Iterator<Item = (BlockKey, DirectoryEntry)> + '_ {
        // From the extent that may hold `after`, whose blocks up to it are skipped.
        let from = after
            .and_then(|key| self.extents.range(..=key).next_back())
            .map(|(first, _)| *first);
        let extents = match from {
            Some(first) => self.extents.range(first..),
            None => self.extents.range(..),
        };
        self.blocks_of(extents)
            .skip_while(move |(key, _)| after.is_some_and(|after| *key <= after))
    }

    fn blocks_of<'a>(
        &'a self,
        extents: impl Iterator<Item = (&'a BlockKey, &'a Extent)> + 'a,
    ) -> impl Iterator<Item = (BlockKey, DirectoryEntry)> + 'a {
        extents.flat_map(|(&(kind, first), extent)| {
            (0..extent.copies.len())
                .map(move |offset| ((kind, first + offset as u64), extent.entry(offset)))
        })
    }

    /// Removes each block whose copy is still the one `earlier` holds for it.
    pub(crate) fn remove_unchanged(&mut self, earlier: &Directory) {
        for (&(kind, first), extent) in &earlier.extents {
            if self.extents.get(&(kind, first)) == Some(extent) {
                self.extents.remove(&(kind, first));
                self.block_count -= extent.copies.len();
                continue;
            }
            // Runs of unchanged blocks, each removed at once: one at a time, every removal
            // split and copied what was left of the extent.
            let mut offset = 0;
            while offset < extent.copies.len() {
                let unchanged = |offset: usize| {
                    self.get(&(kind, first + offset as u64)) == Some(extent.entry(offset))
                };
                let length = (offset..extent.copies.len())
                    .take_while(|&offset| unchanged(offset))
                    .count();
                if length > 0 {
                    let start = first + offset as u64;
                    self.remove_span(kind, start..start + length as u64);
                }
                offset += length.max(1);
            }
        }
    }

    /// Drops the journal copies made in a snapshot generation below `home_generation`
    /// ([`Order::is_journal_before`]; the blocks of an extent share generation and source).
    pub(crate) fn drop_journal_before(&mut self, home_generation: u64) {
        let block_count = &mut self.block_count;
        self.extents.retain(|_, extent| {
            let dropped = extent.order.is_journal_before(home_generation);
            if dropped {
                *block_count -= extent.copies.len();
            }
            !dropped
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SOURCE_CHECKPOINT, SOURCE_JOURNAL};

    /// The directory as it was kept before extents: one map entry per block.
    type Model = BTreeMap<BlockKey, DirectoryEntry>;

    fn model_enter(model: &mut Model, home_generation: u64, key: BlockKey, entry: DirectoryEntry) {
        if entry.order.source == SOURCE_JOURNAL && entry.order.generation < home_generation {
            return;
        }
        if model
            .get(&key)
            .is_none_or(|current| current.order < entry.order)
        {
            model.insert(key, entry);
        }
    }

    /// A small deterministic generator (xorshift), so that a failure repeats.
    struct Random(u64);

    impl Random {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % bound
        }
    }

    fn log_entry(kind: BlockKind, index: u64, checksum: u32, versions: [u64; 4]) -> LogEntry {
        LogEntry {
            checksum,
            kind,
            index,
            journal_ticket: 0,
            versions,
        }
    }

    fn assert_same(directory: &Directory, model: &Model) {
        assert_eq!(directory.len(), model.len());
        assert!(
            directory
                .iter()
                .eq(model.iter().map(|(key, entry)| (*key, *entry)))
        );
    }

    /// The directory under test, the model beside it, and where the next record goes.
    #[derive(Default)]
    struct State {
        directory: Directory,
        model: Model,
        position: u64,
        sequence: u64,
        home_generation: u64,
    }

    impl State {
        /// A record: runs of consecutive keys, some of them again or out of order.
        fn enter_random_record(&mut self, random: &mut Random, round: u64) {
            let source = if random.below(2) == 0 {
                SOURCE_CHECKPOINT
            } else {
                SOURCE_JOURNAL
            };
            let order = Order::record(random.below(6), source, self.sequence);
            let kind = if random.below(4) == 0 {
                BlockKind::NodePot
            } else {
                BlockKind::Page
            };
            let mut index = random.below(200);
            let blocks: Vec<LogEntry> = (0..random.below(20) + 1)
                .map(|_| {
                    index = if random.below(5) == 0 {
                        random.below(200)
                    } else {
                        index + 1
                    };
                    log_entry(kind, index, random.below(1 << 32) as u32, [round, 0, 0, 1])
                })
                .collect();
            for (offset, block) in blocks.iter().enumerate() {
                let entry = DirectoryEntry {
                    position: self.position + offset as u64,
                    checksum: block.checksum,
                    versions: block.versions,
                    order: Order {
                        entry: offset as u32,
                        ..order
                    },
                };
                model_enter(
                    &mut self.model,
                    self.home_generation,
                    (block.kind, block.index),
                    entry,
                );
            }
            self.directory
                .enter_record(self.home_generation, self.position, order, &blocks);
            self.position += blocks.len() as u64 + 1;
            self.sequence += 1;
        }
    }

    #[test]
    fn agrees_with_a_map_of_every_block_through_records_removals_and_migrations() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        let mut state = State::default();
        for round in 0..3000 {
            match random.below(10) {
                0..=5 => state.enter_random_record(&mut random, round),
                6 => {
                    let key = (BlockKind::Page, random.below(220));
                    assert_eq!(state.directory.remove(&key), state.model.remove(&key));
                }
                7 => {
                    // A migration that began at some earlier state and ends now, after
                    // records that replaced, split or joined what it began with.
                    let earlier = state.directory.clone();
                    let earlier_model = state.model.clone();
                    for _ in 0..random.below(4) {
                        if random.below(2) == 0 {
                            state.enter_random_record(&mut random, round);
                        } else {
                            let key = (BlockKind::Page, random.below(220));
                            state.directory.remove(&key);
                            state.model.remove(&key);
                        }
                    }
                    state.directory.remove_unchanged(&earlier);
                    for (key, entry) in &earlier_model {
                        if state.model.get(key) == Some(entry) {
                            state.model.remove(key);
                        }
                    }
                    let home_generation = random.below(6);
                    state.home_generation = home_generation;
                    state.directory.drop_journal_before(home_generation);
                    state.model.retain(|_, entry| {
                        entry.order.source != SOURCE_JOURNAL
                            || entry.order.generation >= home_generation
                    });
                }
                _ => {
                    let after = (random.below(3) > 0).then(|| (BlockKind::Page, random.below(220)));
                    let expected = state.model.range((
                        after.map_or(core::ops::Bound::Unbounded, core::ops::Bound::Excluded),
                        core::ops::Bound::Unbounded,
                    ));
                    let expected = expected.map(|(key, entry)| (*key, *entry));
                    assert!(state.directory.iter_after(after).eq(expected));
                    for index in 0..220 {
                        let key = (BlockKind::NodePot, index);
                        assert_eq!(state.directory.get(&key), state.model.get(&key).copied());
                        assert_eq!(
                            state.directory.contains_key(&key),
                            state.model.contains_key(&key)
                        );
                    }
                }
            }
            assert_same(&state.directory, &state.model);
        }
        let directory = &state.directory;
        assert!(
            directory.extents.len() < directory.len(),
            "runs of a record became extents"
        );
    }

    #[test]
    fn a_span_across_extents_keeps_what_lies_outside_it_and_the_other_kinds_blocks() {
        let mut directory = Directory::default();
        let page = |index| log_entry(BlockKind::Page, index, index as u32, [index, 0, 0, 0]);
        for (record, indices) in [0..5u64, 5..10, 10..15].into_iter().enumerate() {
            let order = Order::record(1, SOURCE_CHECKPOINT, record as u64);
            let blocks: Vec<LogEntry> = indices.map(page).collect();
            directory.enter_record(0, record as u64 * 10, order, &blocks);
        }
        let pot = log_entry(BlockKind::NodePot, 7, 9, [1, 2, 3, 4]);
        directory.enter_record(0, 100, Order::record(1, SOURCE_CHECKPOINT, 3), &[pot]);
        directory.remove_span(BlockKind::Page, 3..12);
        let left: Vec<BlockKey> = directory.iter().map(|(key, _)| key).collect();
        let pages = [0, 1, 2, 12, 13, 14].map(|index| (BlockKind::Page, index));
        assert_eq!(left, [&[(BlockKind::NodePot, 7)][..], &pages[..]].concat());
        assert_eq!(directory.len(), 7);
        let entry = directory.get(&(BlockKind::Page, 12)).unwrap();
        assert_eq!((entry.position, entry.order.entry, entry.checksum), (22, 2, 12));
    }

    #[test]
    fn a_checkpoints_consecutive_pages_take_one_extent_per_record() {
        let mut directory = Directory::default();
        for record in 0..10u64 {
            let order = Order::record(1, SOURCE_CHECKPOINT, record);
            let blocks: Vec<LogEntry> = (0..71)
                .map(|offset| log_entry(BlockKind::Page, record * 71 + offset, 7, [1, 0, 0, 0]))
                .collect();
            directory.enter_record(0, record * 72 + 1, order, &blocks);
        }
        assert_eq!((directory.len(), directory.extents.len()), (710, 10));
        let entry = directory.get(&(BlockKind::Page, 75)).unwrap();
        assert_eq!(
            (entry.position, entry.order.sequence, entry.order.entry),
            (72 + 1 + 4, 1, 4)
        );
    }
}
