//! A simulated disk with a volatile write cache. Writes since the last flush are pending;
//! reads see them. At a crash each pending block write independently reaches the media,
//! is torn (a random subset of its eight 512-byte sectors lands), or is lost. Silent faults
//! can be switched on per disk: lost writes (acknowledged, never stored) and misdirected
//! writes (stored at another block). Bit rot flips a bit on the media; a disk can vanish.
//!
//! Every disk of a run shares one [`World`] that counts device requests that change state
//! (writes and flushes), so that a run can crash at any such boundary: the request at the
//! crash point and everything after it fail as if the machine had stopped.

use std::cell::RefCell;
use std::rc::Rc;

use holdfast_store::device::check_request;
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError};

use crate::rng::Rng;

const SECTOR_SIZE: usize = 512;

#[derive(Debug, Default)]
pub struct World {
    /// Device writes and flushes issued in this run (all disks).
    pub device_requests_total: u64,
    /// The machine stops just before this write or flush (1-based) is issued.
    pub crash_point: Option<u64>,
    pub crashed: bool,
    /// Faults injected so far in this run (all disks, including replaced ones).
    pub faults: FaultCounts,
}

/// Faults injected, by kind: what the simulator's summary counts, and what each fault mode
/// must have injected for its runs to mean anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Cached block writes that a crash tore (some sectors landed) or dropped.
    pub torn_writes: u64,
    pub dropped_writes: u64,
    /// Silent faults: writes acknowledged and never stored, or stored at another block.
    pub lost_writes: u64,
    pub misdirected_writes: u64,
    /// Bits flipped on the media.
    pub rotted_blocks: u64,
    /// Disks that vanished.
    pub vanished_disks: u64,
    /// Durable log records damaged on every copy (by the scenario).
    pub log_records_damaged: u64,
    /// Restarts that opened the replica (the pair's standby) instead of the primary's disk.
    pub replicas_promoted: u64,
}

impl core::ops::AddAssign for FaultCounts {
    fn add_assign(&mut self, other: Self) {
        self.torn_writes += other.torn_writes;
        self.dropped_writes += other.dropped_writes;
        self.lost_writes += other.lost_writes;
        self.misdirected_writes += other.misdirected_writes;
        self.rotted_blocks += other.rotted_blocks;
        self.vanished_disks += other.vanished_disks;
        self.log_records_damaged += other.log_records_damaged;
        self.replicas_promoted += other.replicas_promoted;
    }
}

impl core::fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "faults injected: {} torn and {} dropped cached writes, {} lost and {} misdirected writes, {} blocks rotted, {} disks vanished, {} durable log records damaged on every copy, {} replicas promoted",
            self.torn_writes,
            self.dropped_writes,
            self.lost_writes,
            self.misdirected_writes,
            self.rotted_blocks,
            self.vanished_disks,
            self.log_records_damaged,
            self.replicas_promoted
        )
    }
}

/// Silent faults of one disk, in per-mille per block write.
#[derive(Clone, Copy, Debug, Default)]
pub struct SilentFaults {
    pub lost_write_per_mille: u64,
    pub misdirected_write_per_mille: u64,
}

struct DiskState {
    media: Vec<u8>,
    pending: Vec<(u64, Box<[u8; BLOCK_SIZE]>)>,
    gone: bool,
    faults: SilentFaults,
    /// The next block write gets this disk's silent fault whatever the odds.
    fault_next_write: bool,
    rng: Rng,
}

/// A handle to a simulated disk; clones share the disk.
#[derive(Clone)]
pub struct SimDisk {
    world: Rc<RefCell<World>>,
    state: Rc<RefCell<DiskState>>,
}

impl SimDisk {
    pub fn new(world: &Rc<RefCell<World>>, block_count: u64, seed: u64) -> Self {
        Self {
            world: Rc::clone(world),
            state: Rc::new(RefCell::new(DiskState {
                media: vec![0; block_count as usize * BLOCK_SIZE],
                pending: Vec::new(),
                gone: false,
                faults: SilentFaults::default(),
                fault_next_write: false,
                rng: Rng::new(seed),
            })),
        }
    }

    pub fn set_silent_faults(&self, faults: SilentFaults) {
        self.state.borrow_mut().faults = faults;
    }

    /// The next block write is lost or misdirected (as the disk's silent faults say), so
    /// that a run injects at least one whatever its odds.
    pub fn fault_next_write(&self) {
        self.state.borrow_mut().fault_next_write = true;
    }

    /// The disk disappears: every request fails with `Gone`.
    pub fn vanish(&self) {
        self.state.borrow_mut().gone = true;
        self.world.borrow_mut().faults.vanished_disks += 1;
    }

    /// The disk comes back with whatever it held when it vanished (now stale).
    pub fn reappear(&self) {
        self.state.borrow_mut().gone = false;
    }

    /// Flips one bit of a block on the media.
    pub fn rot(&self, block: u64, bit: u64) {
        let mut state = self.state.borrow_mut();
        let byte = block as usize * BLOCK_SIZE + (bit as usize / 8) % BLOCK_SIZE;
        state.media[byte] ^= 1 << (bit % 8);
        self.world.borrow_mut().faults.rotted_blocks += 1;
    }

    /// The power fails: each pending block write lands whole, torn or not at all.
    pub fn crash(&self, rng: &mut Rng) {
        let mut state = self.state.borrow_mut();
        let pending = std::mem::take(&mut state.pending);
        let mut world = self.world.borrow_mut();
        for (block, data) in pending {
            let start = block as usize * BLOCK_SIZE;
            match rng.below(10) {
                0..=3 => state.media[start..start + BLOCK_SIZE].copy_from_slice(&data[..]),
                4..=5 => {
                    world.faults.torn_writes += 1;
                    for sector in 0..BLOCK_SIZE / SECTOR_SIZE {
                        if rng.chance(500) {
                            let offset = sector * SECTOR_SIZE;
                            state.media[start + offset..start + offset + SECTOR_SIZE]
                                .copy_from_slice(&data[offset..offset + SECTOR_SIZE]);
                        }
                    }
                }
                _ => world.faults.dropped_writes += 1,
            }
        }
    }

    /// Counts a write or flush; at the crash point the machine stops before it.
    fn reach_boundary(&self) {
        let mut world = self.world.borrow_mut();
        if !world.crashed && world.crash_point == Some(world.device_requests_total + 1) {
            world.crashed = true;
        }
        if !world.crashed {
            world.device_requests_total += 1;
        }
    }

    fn check_alive(&self) -> Result<(), DeviceError> {
        if self.world.borrow().crashed || self.state.borrow().gone {
            return Err(DeviceError::Gone);
        }
        Ok(())
    }
}

impl BlockDevice for SimDisk {
    fn block_count(&self) -> u64 {
        (self.state.borrow().media.len() / BLOCK_SIZE) as u64
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check_alive()?;
        check_request(self.block_count(), first_block, buf.len())?;
        let state = self.state.borrow();
        let start = first_block as usize * BLOCK_SIZE;
        buf.copy_from_slice(&state.media[start..start + buf.len()]);
        // The cache holds newer copies than the media.
        let end_block = first_block + (buf.len() / BLOCK_SIZE) as u64;
        for (block, data) in &state.pending {
            if (first_block..end_block).contains(block) {
                let offset = (block - first_block) as usize * BLOCK_SIZE;
                buf[offset..offset + BLOCK_SIZE].copy_from_slice(&data[..]);
            }
        }
        Ok(())
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.reach_boundary();
        self.check_alive()?;
        let block_count = self.block_count();
        check_request(block_count, first_block, data.len())?;
        let mut state = self.state.borrow_mut();
        for (index, chunk) in data.chunks_exact(BLOCK_SIZE).enumerate() {
            let mut block = first_block + index as u64;
            let faults = state.faults;
            let forced = std::mem::take(&mut state.fault_next_write);
            if (forced && faults.lost_write_per_mille > 0)
                || state.rng.chance(faults.lost_write_per_mille)
            {
                self.world.borrow_mut().faults.lost_writes += 1;
                continue;
            }
            if (forced && faults.misdirected_write_per_mille > 0)
                || state.rng.chance(faults.misdirected_write_per_mille)
            {
                self.world.borrow_mut().faults.misdirected_writes += 1;
                block = state.rng.below(block_count);
            }
            let mut copy = Box::new([0u8; BLOCK_SIZE]);
            copy.copy_from_slice(chunk);
            state.pending.push((block, copy));
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.reach_boundary();
        self.check_alive()?;
        let mut state = self.state.borrow_mut();
        let pending = std::mem::take(&mut state.pending);
        for (block, data) in pending {
            let start = block as usize * BLOCK_SIZE;
            state.media[start..start + BLOCK_SIZE].copy_from_slice(&data[..]);
        }
        Ok(())
    }
}
