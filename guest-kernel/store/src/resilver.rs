//! Resilvering: copying the store onto a blank, replaced or stale mirror while the store
//! runs. Writes already go to the mirror being filled; this copies, block range by block
//! range, everything else from a healthy mirror.
//!
//! The mirror says on disk that it is incomplete: before anything is written to it (the
//! open that finds it stale, [`Store::replace_mirror`]), each of its superblock slots gets a
//! [`ResilverRecord`] (each flushed), and only the last step, after every other block is
//! on the media, copies the superblocks over it. A copy cut short at any point therefore
//! leaves a mirror that opens nowhere alone (its store refuses it, `check` names it) and
//! that the store copies again when it is opened beside the mirror it came from.

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::error::StoreError;
use crate::format::resilver_record::ResilverRecord;
use crate::format::zeroed_block;
use crate::mirror::{MIRROR_COUNT_MAX, Mirror, MirrorSet, MirrorState, SUPERBLOCK_BLOCKS};
use crate::store::Store;

impl<D: BlockDevice> Store<D> {
    /// Puts a blank device into mirror slot `mirror` (a failed one, or a new second slot);
    /// [`Store::resilver_step`] then copies the store onto it while it runs.
    pub fn replace_mirror(&mut self, mirror: usize, device: D) -> Result<(), StoreError> {
        if self.mirrors.read_only {
            return Err(StoreError::ReadOnly);
        }
        if device.block_count() < self.layout.block_count {
            return Err(StoreError::Geometry("the replacement is smaller than the store"));
        }
        self.mirrors.replace(mirror, device)?;
        self.mark_incomplete_mirrors()
    }

    /// Writes the resilver record onto every mirror about to be resilvered that lacks it,
    /// before anything else is written to it: the store's own writes reach a resilvering
    /// mirror from the start (open's checkpoint, the journal), and a stale mirror's old
    /// superblock must not vouch for them. Called by open and [`Store::replace_mirror`],
    /// and by the first resilver step.
    pub(crate) fn mark_incomplete_mirrors(&mut self) -> Result<(), StoreError> {
        let record = self.resilver_record();
        self.mirrors.mark_incomplete(&record)
    }

    fn resilver_record(&self) -> ResilverRecord {
        ResilverRecord {
            geometry: self.geometry,
            source_generation: self.superblock.generation,
        }
    }

    /// Copies up to `block_count_max` blocks to a resilvering mirror; returns the blocks
    /// still to copy (0 once every mirror is healthy).
    pub fn resilver_step(&mut self, block_count_max: u64) -> Result<u64, StoreError> {
        self.mark_incomplete_mirrors()?;
        let left = self.mirrors.resilver_step(self.layout.block_count, block_count_max)?;
        if left == 0 && self.superblock.degraded_generation != 0 && !self.mirror_status().degraded {
            // Whole again: the next superblock, on both mirrors, says so.
            self.write_superblock(|_| {})?;
        }
        Ok(left)
    }
}

impl<D: BlockDevice> MirrorSet<D> {
    /// Adds a blank device or replaces a failed one; it is resilvered by
    /// [`MirrorSet::resilver_step`].
    pub(crate) fn replace(&mut self, index: usize, device: D) -> Result<(), StoreError> {
        let mirror = Mirror {
            device,
            state: MirrorState::Resilvering { copied_blocks: 0 },
            marked_incomplete: false,
        };
        if index < self.mirrors.len() {
            if !matches!(self.mirrors[index].state, MirrorState::Failed(_)) && self.live_count() == 1 {
                // Replacing the only live mirror would leave nothing to copy from.
                return Err(StoreError::NoMirror);
            }
            self.mirrors[index] = mirror;
            Ok(())
        } else if index == self.mirrors.len() && index < MIRROR_COUNT_MAX {
            self.mirrors.push(mirror);
            Ok(())
        } else {
            Err(StoreError::NoSuchMirror { mirror: index })
        }
    }

    /// The resilver record onto each resilvering mirror not marked yet: slot 0, flush,
    /// slot 1, flush, one at a time so that a crash tears at most one (a mirror marked
    /// again after a crash keeps a whole record in the other slot). A mirror that fails
    /// meanwhile is dropped.
    fn mark_incomplete(&mut self, record: &ResilverRecord) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        for target in 0..self.mirrors.len() {
            let mirror = &self.mirrors[target];
            if mirror.marked_incomplete || !matches!(mirror.state, MirrorState::Resilvering { .. }) {
                continue;
            }
            let mut marked = true;
            for slot in 0..SUPERBLOCK_BLOCKS {
                let mut block = zeroed_block();
                record.encode(&mut block, slot);
                marked = marked && self.copy_to(target, slot, &block[..])? && self.flush_target(target)?;
            }
            self.mirrors[target].marked_incomplete = marked;
        }
        Ok(())
    }

    /// Copies up to `block_count_max` blocks to the first resilvering mirror (marked
    /// incomplete first) from a healthy one: blocks 2 and up in order, then the
    /// superblocks. Returns the blocks still to copy (0 when no mirror is resilvering).
    pub(crate) fn resilver_step(&mut self, store_block_count: u64, block_count_max: u64) -> Result<u64, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let Some(target) = self
            .mirrors
            .iter()
            .position(|mirror| matches!(mirror.state, MirrorState::Resilvering { .. }))
        else {
            return Ok(0);
        };
        let MirrorState::Resilvering { copied_blocks } = self.mirrors[target].state else {
            return Ok(0);
        };
        let Some(source) = self.mirrors.iter().position(|mirror| mirror.state == MirrorState::Healthy) else {
            return Err(StoreError::NoMirror);
        };
        if !self.mirrors[target].marked_incomplete {
            // The caller marks first ([`Store::resilver_step`]); a mirror it could not mark
            // was dropped. Nothing is copied onto a mirror that could look whole.
            return Err(StoreError::WrongPhase);
        }
        let body_blocks = store_block_count - SUPERBLOCK_BLOCKS;
        let (first_block, count) = if copied_blocks < body_blocks {
            (
                SUPERBLOCK_BLOCKS + copied_blocks,
                (body_blocks - copied_blocks).min(block_count_max.max(1)),
            )
        } else {
            // Everything else is in place: the superblocks make the mirror whole.
            (0, SUPERBLOCK_BLOCKS)
        };
        // Everything the superblocks vouch for must be on the media before they are: at a
        // crash the cache could keep the superblocks and lose copied blocks.
        if first_block == 0 && !self.flush_target(target)? {
            return Ok(0);
        }
        let mut buf = alloc::vec![0u8; count as usize * BLOCK_SIZE];
        if let Err(error) = self.read_from(source, first_block, &mut buf) {
            return Err(StoreError::Device { mirror: source, error });
        }
        if !self.copy_to(target, first_block, &buf)? {
            return Ok(0);
        }
        if first_block == 0 {
            if !self.flush_target(target)? {
                return Ok(0);
            }
            self.mirrors[target].state = MirrorState::Healthy;
            self.mirrors[target].marked_incomplete = false;
            return Ok(0);
        }
        let copied_blocks = copied_blocks + count;
        self.mirrors[target].state = MirrorState::Resilvering { copied_blocks };
        Ok(store_block_count - copied_blocks)
    }

    /// Writes a copy to the mirror being filled; `false` if it failed and was dropped.
    fn copy_to(&mut self, target: usize, first_block: u64, data: &[u8]) -> Result<bool, StoreError> {
        self.write_to(target, first_block, data)?;
        if matches!(self.mirrors[target].state, MirrorState::Failed(_)) {
            return Ok(false);
        }
        // Copies are not repairs; keep that counter for real ones.
        self.repaired_blocks_total -= (data.len() / BLOCK_SIZE) as u64;
        Ok(true)
    }

    /// Flushes the mirror being filled; `false` if it failed and was dropped.
    fn flush_target(&mut self, target: usize) -> Result<bool, StoreError> {
        if let Err(error) = self.mirrors[target].device.flush() {
            self.fail(target, error)?;
            return Ok(false);
        }
        Ok(true)
    }
}

/// The resilver record in either superblock slot of `slots` (blocks 0 and 1 of a mirror):
/// one slot is enough to call the mirror incomplete, whichever copy step a crash cut (the
/// record's own write, or the superblocks' at the end).
pub(crate) fn resilver_record(slots: &[u8]) -> Option<ResilverRecord> {
    slots
        .chunks_exact(BLOCK_SIZE)
        .enumerate()
        .find_map(|(slot, bytes)| ResilverRecord::decode(crate::format::as_block(bytes), slot as u64).ok())
}

#[cfg(test)]
mod tests {
    use crate::format::resilver_record::ResilverRecord;
    use crate::format::superblock::Superblock;
    use crate::tests::{GEOMETRY, MemoryDevice, blank_mirrors, checkpoint_pages, migrate_all, read_page};
    use crate::{MirrorState, Store, StoreError};

    /// A mirrored store whose second mirror is stale (it missed a checkpoint while the
    /// store ran without it) and is being resilvered, cut after `steps` steps of 16 blocks.
    fn cut_resilver(steps: u64) -> (MemoryDevice, MemoryDevice, u64) {
        let (a, b) = blank_mirrors();
        let mut store = Store::format(alloc::vec![a.clone(), b.clone()], GEOMETRY).unwrap();
        checkpoint_pages(&mut store, &[(3, 1, 0x31), (9, 1, 0x91)]);
        migrate_all(&mut store);
        drop(store);
        let mut store = Store::open(alloc::vec![a.clone()]).unwrap();
        checkpoint_pages(&mut store, &[(3, 2, 0x32), (150, 1, 0xf1)]);
        migrate_all(&mut store);
        drop(store);
        // The pair's open marks mirror 1 before it writes anything, its own superblock
        // included: the record names the generation it recovered.
        let source_generation = Store::open_read_only(alloc::vec![a.clone()]).unwrap().inspect().superblock_generation;
        let mut store = Store::open(alloc::vec![a.clone(), b.clone()]).unwrap();
        for _ in 0..steps {
            store.resilver_step(16).unwrap();
        }
        assert!(matches!(store.mirror_status().mirrors[1], MirrorState::Resilvering { .. }));
        // Cut: the process ends, the devices keep what they were given.
        (a, b, source_generation)
    }

    #[test]
    fn a_mirror_is_marked_incomplete_on_disk_before_anything_is_written_to_it() {
        let (_, b, source_generation) = cut_resilver(0);
        for slot in 0..2u64 {
            let block: alloc::vec::Vec<u8> = b.block(slot);
            let block = crate::format::as_block(&block);
            assert!(Superblock::decode(block, slot).is_err());
            assert_eq!(
                ResilverRecord::decode(block, slot),
                Ok(ResilverRecord { geometry: GEOMETRY, source_generation })
            );
        }
    }

    #[test]
    fn a_mirror_whose_resilver_was_cut_is_refused_alone_at_any_cut_point() {
        let block_count = GEOMETRY.layout().unwrap().block_count;
        for steps in [0, 1, 3, block_count / 32, block_count / 16 - 1] {
            let (_, b, source_generation) = cut_resilver(steps);
            for open in [Store::open, Store::open_read_only] {
                assert_eq!(
                    open(alloc::vec![b.clone()]).err(),
                    Some(StoreError::ResilverIncomplete { mirror: 0, source_generation }),
                    "cut after {steps} steps"
                );
            }
            let message = alloc::format!("{}", StoreError::ResilverIncomplete { mirror: 0, source_generation });
            assert!(message.starts_with("mirror 0 is incomplete: its resilver"), "{message}");
        }
    }

    #[test]
    fn beside_its_source_a_cut_resilver_starts_again_and_finishes_whole() {
        let (a, b, _) = cut_resilver(5);
        // A read-only open (store check) sees it as not whole and leaves it as it is.
        let before = b.contents();
        let mut store = Store::open_read_only(alloc::vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(store.mirror_status().mirrors[1], MirrorState::Resilvering { copied_blocks: 0 });
        assert!(store.check().unwrap().is_clean());
        drop(store);
        assert!(b.contents() == before);

        let mut store = Store::open(alloc::vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(store.mirror_status().mirrors[1], MirrorState::Resilvering { copied_blocks: 0 });
        while store.resilver_step(40).unwrap() > 0 {}
        assert!(!store.mirror_status().degraded);
        drop(store);
        let mut store = Store::open(alloc::vec![b]).unwrap();
        assert_eq!(read_page(&mut store, 3), (2, 0x32));
        assert_eq!(read_page(&mut store, 9), (1, 0x91));
        assert_eq!(read_page(&mut store, 150), (1, 0xf1));
        assert!(store.check().unwrap().is_clean());
    }

    #[test]
    fn a_cut_resilver_of_another_store_beside_a_store_is_foreign() {
        let (_, b, _) = cut_resilver(2);
        let other = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
        drop(Store::format(alloc::vec![other.clone()], crate::Geometry { store_id: 7, ..GEOMETRY }).unwrap());
        assert!(matches!(Store::open(alloc::vec![other, b]).err(), Some(StoreError::Foreign { mirror: 1 })));
    }
}
