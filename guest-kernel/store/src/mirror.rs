//! The mirror set: one or two devices holding the same blocks. Writes go to every live
//! mirror; reads are verified by the caller's check and fall back to another mirror, and a
//! good copy is written back over a bad one. A mirror that fails is dropped (the store runs
//! degraded and says so); a blank, replaced or stale mirror is resilvered online
//! (`resilver.rs`) while writes already go to it.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice, DeviceError};
use crate::error::{Check, Corruption, Region, StoreError};
use crate::format::checksum;

/// At most two copies: the design duplexes ranges on a second disk.
pub const MIRROR_COUNT_MAX: usize = 2;

/// Blocks 0 and 1, copied last by resilvering.
pub(crate) const SUPERBLOCK_BLOCKS: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorState {
    Healthy,
    /// Failed or missing: neither read nor written until replaced.
    Failed(DeviceError),
    /// A replacement being filled. Its superblock slots get a resilver record first, then
    /// blocks from 2 up are copied in order, and read from it once copied; the superblocks
    /// are copied last and not written before, so a restart in the middle finds the record
    /// and starts the copy again (or, with the mirror alone, refuses it) rather than
    /// trusting a half-copied mirror.
    Resilvering {
        copied_blocks: u64,
    },
}

/// A copy of the store kept elsewhere: the pair's standby (`holdfast-replication`). It is
/// told every write the mirrors take, in the order they take them, and every flush as the
/// mirrors begin it — not a repair or a resilvering copy, which make one mirror
/// equal to what the others already hold. Because the store survives a crash that keeps any
/// subset of unflushed writes, a replica that makes the same writes and flushes in the same
/// order holds, at every moment, a store that can be opened.
pub trait Replica: Send {
    fn write(&mut self, first_block: u64, data: &[u8]);
    /// Everything written so far is being made durable here; the replica makes it durable
    /// there too, side by side. It does not wait for that: whoever acknowledges a commit
    /// does so once the mirrors' flush has returned and the replica says its flush has
    /// arrived (the kernel's journal, `pair::primary`). Told before the mirrors flush, the
    /// replica may hold a flushed write that the mirrors lost in a crash: a commit not yet
    /// acknowledged, in a store the same writes and flushes would have made here.
    fn flush(&mut self);
}

pub(crate) struct Mirror<D> {
    pub(crate) device: D,
    pub(crate) state: MirrorState,
    /// Resilvering, and its superblock slots hold the resilver record (`resilver.rs`).
    pub(crate) marked_incomplete: bool,
}

pub(crate) struct MirrorSet<D> {
    pub(crate) mirrors: Vec<Mirror<D>>,
    pub(crate) written_bytes_total: u64,
    pub(crate) repaired_blocks_total: u64,
    /// A mirror failed since the last superblock write; the next flush records it.
    pub(crate) failures_unrecorded: bool,
    /// Opened read-only: nothing is written or flushed, repairs included (bad copies stay
    /// for `check` to report and for the next read-write open to repair).
    pub(crate) read_only: bool,
    pub(crate) replica: Option<Box<dyn Replica>>,
}

impl<D: BlockDevice> MirrorSet<D> {
    pub(crate) fn new(devices: Vec<D>) -> Result<Self, StoreError> {
        if devices.is_empty() {
            return Err(StoreError::NoMirror);
        }
        if devices.len() > MIRROR_COUNT_MAX {
            return Err(StoreError::NoSuchMirror {
                mirror: MIRROR_COUNT_MAX,
            });
        }
        let mirrors = devices
            .into_iter()
            .map(|device| Mirror {
                device,
                state: MirrorState::Healthy,
                marked_incomplete: false,
            })
            .collect();
        Ok(Self {
            mirrors,
            written_bytes_total: 0,
            repaired_blocks_total: 0,
            failures_unrecorded: false,
            read_only: false,
            replica: None,
        })
    }

    pub(crate) fn states(&self) -> Vec<MirrorState> {
        self.mirrors.iter().map(|mirror| mirror.state).collect()
    }

    pub(crate) fn live_count(&self) -> usize {
        self.mirrors
            .iter()
            .filter(|mirror| !matches!(mirror.state, MirrorState::Failed(_)))
            .count()
    }

    /// Mirrors a run of `block_count` blocks from `first_block` can be read from.
    pub(crate) fn readable(&self, first_block: u64, block_count: u64) -> Vec<usize> {
        let end = first_block + block_count;
        (0..self.mirrors.len())
            .filter(|&index| match self.mirrors[index].state {
                MirrorState::Healthy => true,
                MirrorState::Resilvering { copied_blocks } => {
                    first_block >= SUPERBLOCK_BLOCKS && end <= SUPERBLOCK_BLOCKS + copied_blocks
                }
                MirrorState::Failed(_) => false,
            })
            .collect()
    }

    /// Records a device error. A mirror is dropped when it is gone or when another live
    /// mirror can carry on; the last live mirror is kept so that a transient I/O error does
    /// not make the store unusable, and the error is returned instead.
    pub(crate) fn fail(&mut self, index: usize, error: DeviceError) -> Result<(), StoreError> {
        if error == DeviceError::Gone || self.live_count() > 1 {
            self.mirrors[index].state = MirrorState::Failed(error);
            self.failures_unrecorded = true;
            if self.live_count() == 0 {
                return Err(StoreError::NoMirror);
            }
            Ok(())
        } else {
            Err(StoreError::Device {
                mirror: index,
                error,
            })
        }
    }

    /// Reads raw blocks from one mirror; a device error is recorded against it.
    pub(crate) fn read_from(
        &mut self,
        index: usize,
        first_block: u64,
        buf: &mut [u8],
    ) -> Result<(), DeviceError> {
        let result = self.mirrors[index].device.read(first_block, buf);
        self.note_read(index, result)
    }

    /// [`MirrorSet::read_from`] for several runs at once ([`BlockDevice::read_many`]).
    fn read_many_from(&mut self, index: usize, reads: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        let result = self.mirrors[index].device.read_many(reads);
        self.note_read(index, result)
    }

    /// A failed read is reported to the caller, which tries the next mirror; the mirror is
    /// only dropped when it is gone.
    fn note_read(&mut self, index: usize, result: Result<(), DeviceError>) -> Result<(), DeviceError> {
        if result == Err(DeviceError::Gone) {
            self.mirrors[index].state = MirrorState::Failed(DeviceError::Gone);
            self.failures_unrecorded = true;
        }
        result
    }

    /// Writes to every live mirror (resilvering ones included, so that copied blocks stay
    /// current).
    pub(crate) fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), StoreError> {
        self.write_each(first_block, data.len(), |device| device.write(first_block, data))?;
        if let Some(replica) = &mut self.replica {
            replica.write(first_block, data);
        }
        Ok(())
    }

    /// Writes like [`MirrorSet::write`], handing the buffer to the devices
    /// ([`BlockDevice::write_owned`]): they may still be writing when this returns.
    /// The mirrors' writes are under way before the replica is told, so that they go on
    /// while it sends.
    pub(crate) fn write_owned(&mut self, first_block: u64, data: Vec<u8>) -> Result<(), StoreError> {
        let data = Arc::new(data);
        self.write_each(first_block, data.len(), |device| device.write_owned(first_block, Arc::clone(&data)))?;
        if let Some(replica) = &mut self.replica {
            replica.write(first_block, &data);
        }
        Ok(())
    }

    /// `write` on every live mirror but a resilvering one's superblocks; an error drops the
    /// mirror if another can carry on.
    fn write_each(
        &mut self,
        first_block: u64,
        length: usize,
        mut write: impl FnMut(&mut D) -> Result<(), DeviceError>,
    ) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let mut written = false;
        for index in 0..self.mirrors.len() {
            match self.mirrors[index].state {
                MirrorState::Failed(_) => continue,
                MirrorState::Resilvering { .. } if first_block < SUPERBLOCK_BLOCKS => continue,
                _ => {}
            }
            match write(&mut self.mirrors[index].device) {
                Ok(()) => written = true,
                Err(error) => self.fail(index, error)?,
            }
        }
        if !written {
            return Err(StoreError::NoMirror);
        }
        self.written_bytes_total += length as u64;
        Ok(())
    }

    /// Asks every live mirror to start writing back ([`BlockDevice::flush_begin`]).
    pub(crate) fn flush_begin(&mut self) -> Result<(), StoreError> {
        self.flush_each(|device| device.flush_begin())
    }

    /// Writes to one mirror only, to repair it; a failure drops the mirror if it can be.
    /// Read-only, the repair is skipped (and not counted): the bad copy stays.
    pub(crate) fn write_to(
        &mut self,
        index: usize,
        first_block: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        match self.mirrors[index].device.write(first_block, data) {
            Ok(()) => {
                self.written_bytes_total += data.len() as u64;
                self.repaired_blocks_total += (data.len() / BLOCK_SIZE) as u64;
                Ok(())
            }
            Err(error) => self.fail(index, error),
        }
    }

    /// Makes every write so far durable on every live mirror. Each mirror's flush is under
    /// way before the first is waited for, so that their disks flush side by side; the
    /// replica is told first, so that the standby's disks flush beside them too.
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(replica) = &mut self.replica {
            replica.flush();
        }
        self.flush_each(|device| device.flush_submit())?;
        self.flush_each(|device| device.flush())
    }

    /// `flush` on every live mirror; an error drops the mirror if another can carry on.
    fn flush_each(&mut self, mut flush: impl FnMut(&mut D) -> Result<(), DeviceError>) -> Result<(), StoreError> {
        if self.read_only {
            // Nothing was written.
            return Ok(());
        }
        for index in 0..self.mirrors.len() {
            if matches!(self.mirrors[index].state, MirrorState::Failed(_)) {
                continue;
            }
            if let Err(error) = flush(&mut self.mirrors[index].device) {
                self.fail(index, error)?;
            }
        }
        if self.live_count() == 0 {
            return Err(StoreError::NoMirror);
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes from `first_block`, from the first mirror whose copy passes
    /// `verify`, and writes that copy over the mirrors whose copy failed. With every copy
    /// bad, names the block and the check; the bad data is never handed out.
    pub(crate) fn read_verified(
        &mut self,
        first_block: u64,
        buf: &mut [u8],
        region: Region,
        verify: impl Fn(&[u8]) -> Result<(), Check>,
    ) -> Result<(), StoreError> {
        let block_count = (buf.len() / BLOCK_SIZE) as u64;
        let mut bad_mirrors = Vec::new();
        let mut first_failure: Option<StoreError> = None;
        for index in self.readable(first_block, block_count) {
            let failure = match self.read_from(index, first_block, buf) {
                Ok(()) => match verify(buf) {
                    Ok(()) => {
                        for bad in bad_mirrors {
                            self.write_to(bad, first_block, buf)?;
                        }
                        return Ok(());
                    }
                    Err(check) => StoreError::Corrupt(Corruption {
                        region,
                        block: first_block,
                        check,
                    }),
                },
                Err(error) => StoreError::Device {
                    mirror: index,
                    error,
                },
            };
            bad_mirrors.push(index);
            // A checksum failure says more about the data than a device error does.
            if first_failure.is_none() || matches!(failure, StoreError::Corrupt(_)) {
                first_failure = Some(failure);
            }
        }
        // The buffer holds whatever the last mirror returned: clear it so that bad data
        // cannot be used by mistake.
        buf.fill(0);
        Err(first_failure.unwrap_or(StoreError::NoMirror))
    }

    /// Runs of consecutive blocks, `(first_block, checksums)` (one checksum a block), each
    /// checked against its checksum, read together from the first mirror that can give them
    /// all ([`BlockDevice::read_many`]); a block that fails there (or all of them, if the
    /// read does) is read alone as [`Self::read_verified`] reads, from the other mirrors,
    /// and repaired where it was bad.
    pub(crate) fn read_verified_runs(
        &mut self,
        runs: &[(u64, Vec<u32>)],
        region: Region,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut buffers: Vec<Vec<u8>> =
            runs.iter().map(|(_, checksums)| alloc::vec![0u8; checksums.len() * BLOCK_SIZE]).collect();
        let first_mirror = (0..self.mirrors.len()).find(|&index| {
            runs.iter().all(|(first_block, checksums)| self.readable(*first_block, checksums.len() as u64).contains(&index))
        });
        let whole = first_mirror.is_some_and(|index| {
            let mut reads: Vec<(u64, &mut [u8])> =
                runs.iter().map(|(first_block, _)| *first_block).zip(buffers.iter_mut().map(Vec::as_mut_slice)).collect();
            self.read_many_from(index, &mut reads).is_ok()
        });
        for ((first_block, checksums), buffer) in runs.iter().zip(&mut buffers) {
            for ((block_index, &expected), block) in
                (*first_block..).zip(checksums).zip(buffer.chunks_exact_mut(BLOCK_SIZE))
            {
                let matches = |bytes: &[u8]| if checksum(bytes) == expected { Ok(()) } else { Err(Check::DataChecksum) };
                if !whole || matches(block).is_err() {
                    self.read_verified(block_index, block, region, matches)?;
                }
            }
        }
        Ok(buffers)
    }
}
