//! The block device the store runs on: the kernel implements it over virtio-blk, the
//! simulator over memory with a volatile write cache.

use alloc::sync::Arc;
use alloc::vec::Vec;

/// Every device block is 4096 bytes; so are pages, log records and checksum tables.
pub const BLOCK_SIZE: usize = 4096;

/// Why a device operation failed. The store turns these into [`crate::StoreError::Device`]
/// naming the mirror; a device that is [`DeviceError::Gone`] is dropped from the mirror set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The device reported an I/O error for this request; it may work again.
    Io,
    /// The device is no longer there (unplugged, failed, reset): every later request fails.
    Gone,
    /// The request reaches past the last block, or its length is not whole blocks.
    OutOfRange,
}

/// A block device with a volatile write cache.
///
/// Writes may sit in the device's cache until [`BlockDevice::flush`] returns; at a crash any
/// subset of unflushed writes may reach the media, some of them torn at sector granularity.
/// The store never relies on the order of unflushed writes.
pub trait BlockDevice {
    /// How many 4096-byte blocks the device holds.
    fn block_count(&self) -> u64;

    /// Reads `buf.len() / BLOCK_SIZE` contiguous blocks starting at `first_block`.
    /// `buf.len()` is a non-zero multiple of [`BLOCK_SIZE`].
    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError>;

    /// Reads several runs of contiguous blocks, each `(first_block, buf)` as in
    /// [`BlockDevice::read`], together: a device that takes many requests at once answers
    /// them in one wait rather than one wait each. The default reads them one by one.
    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        for (first_block, buf) in reads.iter_mut() {
            self.read(*first_block, buf)?;
        }
        Ok(())
    }

    /// Writes `data.len() / BLOCK_SIZE` contiguous blocks starting at `first_block`, in one
    /// request so that the device can stream it. `data.len()` is a non-zero multiple of
    /// [`BLOCK_SIZE`].
    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError>;

    /// Returns once every write that returned before the call is on stable media, those of
    /// [`BlockDevice::write_owned`] included.
    fn flush(&mut self) -> Result<(), DeviceError>;

    /// Writes like [`BlockDevice::write`], but may return before the device has the data:
    /// the device keeps the buffer until the write is done, so that the caller can prepare
    /// its next write meanwhile. The next [`BlockDevice::flush`] waits for the write and
    /// reports its failure (a later write or [`BlockDevice::flush_begin`] may report it
    /// first); a read returns the written data. The default writes at once.
    fn write_owned(&mut self, first_block: u64, data: Arc<Vec<u8>>) -> Result<(), DeviceError> {
        self.write(first_block, &data)
    }

    /// Waits for the writes under way, then starts a flush of everything written without
    /// waiting for it; the next [`BlockDevice::flush`] returns once that flush is done (or
    /// flushes again if something was written since). A mirror set starts every mirror's
    /// flush before waiting for the first, so that the mirrors' disks flush side by side.
    /// The default does nothing, leaving the work to `flush`.
    fn flush_submit(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    /// Asks the device to start putting what was written so far on stable media, without
    /// waiting: a device with a write-back cache then writes back while the caller works,
    /// and the next [`BlockDevice::flush`] has less to do. Nothing is durable until a flush
    /// returns. A device may ignore it while one it began is under way. The default does
    /// nothing.
    fn flush_begin(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}

/// Checks a request's shape the same way for every device, so that an implementation only
/// has to call it: whole blocks, not empty, within the device.
pub fn check_request(block_count: u64, first_block: u64, len: usize) -> Result<u64, DeviceError> {
    if len == 0 || !len.is_multiple_of(BLOCK_SIZE) {
        return Err(DeviceError::OutOfRange);
    }
    let blocks = (len / BLOCK_SIZE) as u64;
    match first_block.checked_add(blocks) {
        Some(end) if end <= block_count => Ok(blocks),
        _ => Err(DeviceError::OutOfRange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_must_be_whole_blocks_within_the_device() {
        assert_eq!(check_request(4, 0, BLOCK_SIZE * 4), Ok(4));
        assert_eq!(check_request(4, 3, BLOCK_SIZE), Ok(1));
        assert_eq!(
            check_request(4, 3, BLOCK_SIZE * 2),
            Err(DeviceError::OutOfRange)
        );
        assert_eq!(check_request(4, 0, 0), Err(DeviceError::OutOfRange));
        assert_eq!(check_request(4, 0, 100), Err(DeviceError::OutOfRange));
        assert_eq!(
            check_request(4, u64::MAX, BLOCK_SIZE),
            Err(DeviceError::OutOfRange)
        );
    }
}
