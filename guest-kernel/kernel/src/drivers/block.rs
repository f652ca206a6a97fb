//! The virtio-blk driver: the disks the single-level store will live on.
//!
//! Requests are synchronous and polled for now (the store will want interrupts and several
//! requests in flight; the crate's `*_nb` calls allow that without changing this type).
//!
//! The self-test writes only to a disk the host marked as a test disk
//! ([`holdfast_abi::test_disk`]); every other disk is left untouched.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use holdfast_abi::test_disk::{self, MAGIC as TEST_DISK_MAGIC, SECTORS as TEST_SECTORS};
use virtio_drivers::device::blk::{SECTOR_SIZE, VirtIOBlk};
use virtio_drivers::transport::pci::PciTransport;

use super::hal::KernelHal;
use holdfast_store::device::check_request;
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError};

pub struct Block {
    device: VirtIOBlk<KernelHal, PciTransport>,
}

impl Block {
    pub fn new(transport: PciTransport) -> Result<Self, String> {
        let mut device = VirtIOBlk::new(transport).map_err(|error| format!("{error}"))?;
        device.disable_interrupts();
        Ok(Self { device })
    }

    /// Capacity in 512-byte sectors.
    pub fn capacity(&self) -> u64 {
        self.device.capacity()
    }

    pub fn read(&mut self, sector: u64, buffer: &mut [u8]) -> Result<(), String> {
        self.device
            .read_blocks(sector as usize, buffer)
            .map_err(|error| format!("reading at sector {sector}: {error}"))
    }

    pub fn write(&mut self, sector: u64, buffer: &[u8]) -> Result<(), String> {
        self.device
            .write_blocks(sector as usize, buffer)
            .map_err(|error| format!("writing at sector {sector}: {error}"))
    }

    pub fn flush(&mut self) -> Result<(), String> {
        self.device
            .flush()
            .map_err(|error| format!("flushing: {error}"))
    }

    /// The self-test: returns whether it passed and what to report.
    pub fn self_test(&mut self) -> (bool, String) {
        let capacity = self.capacity();
        match self.test_disk(capacity) {
            Ok(Some(seed)) => (
                true,
                format!(
                    "{capacity} sectors, read host header (seed {seed}), wrote and read back {TEST_SECTORS} sectors"
                ),
            ),
            Ok(None) => (
                true,
                format!("{capacity} sectors, not a test disk (left untouched)"),
            ),
            Err(error) => (false, format!("{capacity} sectors, {error}")),
        }
    }

    /// Writes the pattern to a test disk and reads it back; `Ok(None)` if the disk is not a
    /// test disk.
    fn test_disk(&mut self, capacity: u64) -> Result<Option<u64>, String> {
        let mut header = [0u8; SECTOR_SIZE];
        self.read(0, &mut header)?;
        let Some(seed_bytes) = header.strip_prefix(TEST_DISK_MAGIC) else {
            return Ok(None);
        };
        let seed = u64::from_le_bytes(seed_bytes[..8].try_into().unwrap());
        let context = format!("read host header (seed {seed})");
        if capacity < 1 + TEST_SECTORS {
            return Err(format!("{context}, but the disk is too small for the test"));
        }
        if self.device.readonly() {
            return Err(format!("{context}, but the disk is read-only"));
        }
        let mut pattern = vec![0u8; TEST_SECTORS as usize * SECTOR_SIZE];
        for (index, byte) in pattern.iter_mut().enumerate() {
            let sector = 1 + (index / SECTOR_SIZE) as u64;
            *byte = test_disk::pattern_byte(seed, sector, (index % SECTOR_SIZE) as u64);
        }
        let io = |result: Result<(), String>| result.map_err(|error| format!("{context}, {error}"));
        io(self.write(1, &pattern))?;
        io(self.flush())?;
        let mut readback = vec![0u8; pattern.len()];
        io(self.read(1, &mut readback))?;
        let differing = pattern
            .iter()
            .zip(&readback)
            .filter(|(a, b)| a != b)
            .count();
        if let Some(first) = pattern.iter().zip(&readback).position(|(a, b)| a != b) {
            return Err(format!(
                "{context}, wrote {TEST_SECTORS} sectors but {differing} bytes read back differ, first at sector {} offset {} (wrote {:#04x}, read {:#04x})",
                1 + first / SECTOR_SIZE,
                first % SECTOR_SIZE,
                pattern[first],
                readback[first]
            ));
        }
        Ok(Some(seed))
    }
}

/// The store's view of the disk: 4096-byte blocks of eight sectors each.
impl BlockDevice for Block {
    fn block_count(&self) -> u64 {
        self.capacity() / SECTORS_PER_BLOCK
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, buf.len())?;
        self.device
            .read_blocks((first_block * SECTORS_PER_BLOCK) as usize, buf)
            .map_err(device_error)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, data.len())?;
        self.device
            .write_blocks((first_block * SECTORS_PER_BLOCK) as usize, data)
            .map_err(device_error)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.device.flush().map_err(device_error)
    }
}

const SECTORS_PER_BLOCK: u64 = (BLOCK_SIZE / SECTOR_SIZE) as u64;

/// A request the device refused may work again; a device that stopped answering will not.
fn device_error(error: virtio_drivers::Error) -> DeviceError {
    match error {
        virtio_drivers::Error::IoError => DeviceError::Io,
        _ => DeviceError::Gone,
    }
}
