//! The virtio-blk driver: the disks the single-level store lives on.
//!
//! Answers are found by looking at the used ring; the device's MSI-X interrupt (routed by
//! [`super::pci::route_queue_interrupt`] when it can be) only wakes a CPU halted in a
//! synchronous wait ([`Block::wait_for_answer`]). The crate's `VirtIOBlk` keeps
//! one request at a time and has no way to send a flush without waiting, so this driver
//! runs the virtqueue itself (the crate's [`VirtQueue`] and PCI transport), with the
//! request layout of the virtio 1.1 specification (5.2.6): a 16-byte header, the data, a
//! status byte. Writes of buffers handed over ([`BlockDevice::write_owned`]) and flushes
//! begun with [`BlockDevice::flush_begin`] stay in flight, up to [`IN_FLIGHT_MAX`], while
//! the kernel works on: under emulation the host copies and writes back a checkpoint's run
//! while the guest checksums the next. Every other request first waits for all of them,
//! so that a read never overtakes a write and [`BlockDevice::flush`] covers them.
//!
//! The self-test writes only to a disk the host marked as a test disk
//! ([`holdfast_abi::test_disk`]); every other disk is left untouched.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use holdfast_abi::test_disk::{self, MAGIC as TEST_DISK_MAGIC, SECTORS as TEST_SECTORS};
use virtio_drivers::device::blk::SECTOR_SIZE;
use virtio_drivers::queue::VirtQueue;
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::{DeviceStatus, Transport};
use x86_64::instructions::interrupts;

use super::hal::KernelHal;
use holdfast_store::device::check_request;
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError};

/// Descriptors in the request queue: a request takes three (header, data, status), a flush
/// two; QEMU offers 256, 16 is what the crate's own driver uses.
const QUEUE_SIZE: usize = 16;
/// Requests kept in flight at most (12 of the 16 descriptors): more would only hold more
/// memory while the host catches up.
const IN_FLIGHT_MAX: usize = 4;

/// Bytes of handed-over writes kept in flight at most: a sixteenth of the kernel heap
/// (object pages live there too), so that a small guest keeps one write in flight at a
/// time rather than run short of memory for pages.
fn in_flight_bytes_max() -> usize {
    crate::memory::heap_bytes() / 16
}

/// Feature bits (virtio 1.1 5.2.3 and 6): read-only, flush, event index, version 1.
const FEATURE_READ_ONLY: u64 = 1 << 5;
const FEATURE_FLUSH: u64 = 1 << 9;
const FEATURE_EVENT_INDEX: u64 = 1 << 29;
const FEATURE_VERSION_1: u64 = 1 << 32;
const FEATURES_SUPPORTED: u64 =
    FEATURE_READ_ONLY | FEATURE_FLUSH | FEATURE_EVENT_INDEX | FEATURE_VERSION_1;

/// Request types and the status that says a request succeeded (virtio 1.1 5.2.6).
const REQUEST_READ: u32 = 0;
const REQUEST_WRITE: u32 = 1;
const REQUEST_FLUSH: u32 = 4;
const STATUS_OK: u8 = 0;
/// What the status byte holds until the device writes it: not a status the device uses.
const STATUS_UNSET: u8 = 0xff;

/// A request the device has and has not answered yet: what it reads and writes, kept here
/// (on the heap, so moving the entry moves none of it) until the answer is popped.
struct InFlight {
    token: u16,
    header: Box<[u8; 16]>,
    data: Option<Arc<Vec<u8>>>,
    status: Box<[u8; 1]>,
}

pub struct Block {
    transport: PciTransport,
    queue: VirtQueue<KernelHal, QUEUE_SIZE>,
    capacity_sectors: u64,
    read_only: bool,
    flush_supported: bool,
    /// In submission order; the device may answer them in any order.
    in_flight: VecDeque<InFlight>,
    /// How the first request that failed in flight failed, until a write or flush reports it.
    failed_in_flight: Option<DeviceError>,
    /// The device's answers raise [`crate::arch::idt::BLOCK_VECTOR`]: a wait halts until
    /// one comes rather than spin ([`Block::wait_for_answer`]).
    interrupts: bool,
}

fn request_header(request: u32, sector: u64) -> Box<[u8; 16]> {
    let mut header = Box::new([0u8; 16]);
    header[..4].copy_from_slice(&request.to_le_bytes());
    header[8..].copy_from_slice(&sector.to_le_bytes());
    header
}

fn status_error(status: u8) -> DeviceError {
    // IOERR and UNSUPP: this request failed, another may work. Anything else (the device did
    // not write the status) is a device that no longer follows the protocol.
    if status == 1 || status == 2 { DeviceError::Io } else { DeviceError::Gone }
}

impl Block {
    pub fn new(mut transport: PciTransport) -> Result<Self, String> {
        // Virtio 1.1 3.1.1: reset, acknowledge, negotiate features, set up the queue, go.
        transport.set_status(DeviceStatus::empty());
        transport.set_status(DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER);
        let features = transport.read_device_features() & FEATURES_SUPPORTED;
        transport.write_driver_features(features);
        transport.set_status(
            DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER | DeviceStatus::FEATURES_OK,
        );
        if !transport.get_status().contains(DeviceStatus::FEATURES_OK) {
            return Err(format!("the device refused features {features:#x}"));
        }
        transport.set_guest_page_size(memory_page_bytes());
        let capacity_sectors = transport
            .read_consistent(|| {
                let low: u32 = transport.read_config_space(0)?;
                let high: u32 = transport.read_config_space(4)?;
                Ok(u64::from(low) | (u64::from(high) << 32))
            })
            .map_err(|error| format!("reading the capacity: {error}"))?;
        let mut queue = VirtQueue::new(&mut transport, 0, false, features & FEATURE_EVENT_INDEX != 0)
            .map_err(|error| format!("setting up the request queue: {error}"))?;
        queue.set_dev_notify(false);
        transport.finish_init();
        Ok(Self {
            transport,
            queue,
            capacity_sectors,
            read_only: features & FEATURE_READ_ONLY != 0,
            flush_supported: features & FEATURE_FLUSH != 0,
            in_flight: VecDeque::new(),
            failed_in_flight: None,
            interrupts: false,
        })
    }

    /// Capacity in 512-byte sectors.
    pub fn capacity(&self) -> u64 {
        self.capacity_sectors
    }

    pub fn read(&mut self, sector: u64, buffer: &mut [u8]) -> Result<(), String> {
        self.read_sectors(sector, buffer)
            .map_err(|error| format!("reading at sector {sector}: {error:?}"))
    }

    pub fn write(&mut self, sector: u64, buffer: &[u8]) -> Result<(), String> {
        self.write_sectors(sector, buffer)
            .map_err(|error| format!("writing at sector {sector}: {error:?}"))
    }

    pub fn flush(&mut self) -> Result<(), String> {
        BlockDevice::flush(self).map_err(|error| format!("flushing: {error:?}"))
    }

    /// From now on the device's answers raise an interrupt (routed by the caller), and waits
    /// halt until one comes.
    pub fn use_interrupts(&mut self) {
        self.interrupts = true;
    }

    /// Waits until the device has answered a request. With its interrupts routed, the CPU
    /// halts meanwhile: under emulation a spinning vCPU is a busy host thread, which the
    /// host runs only in its turn once the answer is there (milliseconds on a loaded host)
    /// and which takes CPU time from QEMU's I/O threads while they write; a halted one is
    /// woken by the answer. A commit's write and flush are each such a wait.
    fn wait_for_answer(&self) {
        if !self.interrupts || !crate::arch::timer::apic_ready() {
            self.spin_for_answer();
            return;
        }
        let enabled = interrupts::are_enabled();
        // The check runs with interrupts off and `sti; hlt` takes a pending one only once
        // halted, so an answer that comes after the check still ends the halt. The timer
        // ends it too, so a lost interrupt costs a tick, never a hang.
        interrupts::disable();
        while !self.queue.can_pop() {
            interrupts::enable_and_hlt();
            interrupts::disable();
        }
        if enabled {
            interrupts::enable();
        }
    }

    fn spin_for_answer(&self) {
        while !self.queue.can_pop() {
            core::hint::spin_loop();
        }
    }

    /// Waits for the oldest answer the device gave and pops it; a failure is kept for the
    /// next write or flush to report.
    ///
    /// This wait spins: it is the one stabilization makes while its writes are in flight,
    /// between checksumming pages, and with a halt here its throughput came out lower in
    /// most of a few (noisy) bench runs. The waits a journal commit makes alone with the
    /// device ([`Block::add_wait_pop`]) halt.
    fn complete_next(&mut self) {
        self.spin_for_answer();
        let token = self.queue.peek_used();
        let Some(index) = self.in_flight.iter().position(|request| Some(request.token) == token)
        else {
            // An answer to nothing this driver sent: the device is broken, and nothing it
            // still holds can be trusted to complete.
            // Its buffers are leaked, not freed: the device might still write into them.
            self.failed_in_flight.get_or_insert(DeviceError::Gone);
            for request in self.in_flight.drain(..) {
                core::mem::forget(request);
            }
            return;
        };
        let Some(mut request) = self.in_flight.remove(index) else {
            return;
        };
        let header = &request.header[..];
        let status = &mut request.status[..];
        // SAFETY: `request` holds the very buffers `submit` gave `VirtQueue::add` for this
        // token, untouched since; the device has answered, so it no longer uses them.
        let popped = unsafe {
            match &request.data {
                Some(data) => self.queue.pop_used(request.token, &[header, &data[..]], &mut [status]),
                None => self.queue.pop_used(request.token, &[header], &mut [status]),
            }
        };
        let outcome = match popped {
            Ok(_) if request.status[0] == STATUS_OK => None,
            Ok(_) => Some(status_error(request.status[0])),
            Err(_) => Some(DeviceError::Gone),
        };
        if let Some(error) = outcome {
            self.failed_in_flight.get_or_insert(error);
        }
    }

    fn in_flight_bytes(&self) -> usize {
        self.in_flight.iter().filter_map(|request| request.data.as_ref()).map(|data| data.len()).sum()
    }

    /// Waits for every request in flight.
    fn complete_all(&mut self) {
        while !self.in_flight.is_empty() {
            self.complete_next();
        }
    }

    /// Reports (once) a request that failed in flight.
    fn take_failure(&mut self) -> Result<(), DeviceError> {
        match self.failed_in_flight.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Puts a write of `data` (or a flush, without data) in flight.
    fn submit(&mut self, request: u32, sector: u64, data: Option<Arc<Vec<u8>>>) -> Result<(), DeviceError> {
        let bytes = data.as_ref().map_or(0, |data| data.len());
        while !self.in_flight.is_empty()
            && (self.in_flight.len() >= IN_FLIGHT_MAX
                || self.in_flight_bytes() + bytes > in_flight_bytes_max())
        {
            self.complete_next();
        }
        let header = request_header(request, sector);
        let mut status = Box::new([STATUS_UNSET]);
        // SAFETY: the header, data and status buffers move into `self.in_flight` below and
        // stay there, unread and unwritten (the data is shared read-only through its `Arc`),
        // until `complete_next` pops this token; `Drop` waits for every request in flight,
        // so none is freed while the device may use it.
        let added = unsafe {
            match &data {
                Some(data) => self.queue.add(&[&header[..], &data[..]], &mut [&mut status[..]]),
                None => self.queue.add(&[&header[..]], &mut [&mut status[..]]),
            }
        };
        let token = added.map_err(|_| DeviceError::Gone)?;
        self.in_flight.push_back(InFlight { token, header, data, status });
        if self.queue.should_notify() {
            self.transport.notify(0);
        }
        Ok(())
    }

    /// A request that waits for its answer, after every request in flight.
    fn request_and_wait(&mut self, request: u32, sector: u64, data_out: Option<&[u8]>, data_in: Option<&mut [u8]>) -> Result<(), DeviceError> {
        self.complete_all();
        let header = request_header(request, sector);
        let mut status = [STATUS_UNSET];
        let result = match (data_out, data_in) {
            (Some(data), _) => self.add_wait_pop(&[&header[..], data], &mut [&mut status[..]]),
            (None, Some(data)) => self.add_wait_pop(&[&header[..]], &mut [data, &mut status[..]]),
            (None, None) => self.add_wait_pop(&[&header[..]], &mut [&mut status[..]]),
        };
        match result {
            Ok(_) if status[0] == STATUS_OK => Ok(()),
            Ok(_) => Err(status_error(status[0])),
            Err(_) => Err(DeviceError::Gone),
        }
    }

    /// The crate's `add_notify_wait_pop`, waiting by [`Block::wait_for_answer`]; the caller
    /// has waited for every request in flight, so the next answer is this one's.
    fn add_wait_pop<'a>(&mut self, inputs: &'a [&'a [u8]], outputs: &'a mut [&'a mut [u8]]) -> virtio_drivers::Result<u32> {
        // SAFETY: the buffers are borrowed until this function returns, and it returns only
        // once the device has answered and the token is popped (or `add` failed, leaving
        // nothing with the device), so the device never uses them after they are freed.
        let token = unsafe { self.queue.add(inputs, outputs) }?;
        if self.queue.should_notify() {
            self.transport.notify(0);
        }
        self.wait_for_answer();
        // SAFETY: the same buffers as given to `add` above, untouched since.
        unsafe { self.queue.pop_used(token, inputs, outputs) }
    }

    fn read_sectors(&mut self, sector: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        check_sectors(self.capacity_sectors, sector, buffer.len())?;
        self.request_and_wait(REQUEST_READ, sector, None, Some(buffer))
    }

    fn write_sectors(&mut self, sector: u64, buffer: &[u8]) -> Result<(), DeviceError> {
        check_sectors(self.capacity_sectors, sector, buffer.len())?;
        self.take_failure()?;
        let result = self.request_and_wait(REQUEST_WRITE, sector, Some(buffer), None);
        self.take_failure()?;
        result
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
        if self.read_only {
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
        self.read_sectors(first_block * SECTORS_PER_BLOCK, buf)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, data.len())?;
        self.write_sectors(first_block * SECTORS_PER_BLOCK, data)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.complete_all();
        self.take_failure()?;
        if !self.flush_supported {
            // No write cache to flush: a completed write is on the media.
            return Ok(());
        }
        self.request_and_wait(REQUEST_FLUSH, 0, None, None)?;
        self.take_failure()
    }

    fn write_owned(&mut self, first_block: u64, data: Arc<Vec<u8>>) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, data.len())?;
        self.take_failure()?;
        self.submit(REQUEST_WRITE, first_block * SECTORS_PER_BLOCK, Some(data))
    }

    fn flush_begin(&mut self) -> Result<(), DeviceError> {
        self.take_failure()?;
        // One flush under way is enough to keep the host writing back, and the host runs
        // flushes one at a time: more would only take the slots the next writes need and
        // tie the kernel to the host disk's flush latency.
        let flushing = self.in_flight.iter().any(|request| request.data.is_none());
        if !self.flush_supported || flushing {
            return Ok(());
        }
        self.submit(REQUEST_FLUSH, 0, None)
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // The device may still read buffers of requests in flight: they live until answered.
        self.complete_all();
    }
}

const SECTORS_PER_BLOCK: u64 = (BLOCK_SIZE / SECTOR_SIZE) as u64;

/// Whole sectors, not empty, within the disk.
fn check_sectors(capacity_sectors: u64, sector: u64, len: usize) -> Result<(), DeviceError> {
    if len == 0 || !len.is_multiple_of(SECTOR_SIZE) {
        return Err(DeviceError::OutOfRange);
    }
    match sector.checked_add((len / SECTOR_SIZE) as u64) {
        Some(end) if end <= capacity_sectors => Ok(()),
        _ => Err(DeviceError::OutOfRange),
    }
}

fn memory_page_bytes() -> u32 {
    crate::memory::PAGE_BYTES as u32
}
