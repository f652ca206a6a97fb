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
//! A device that does not answer a request within [`answer_time_limit_ms`] (30 s unless the
//! command line says `holdfast.disk-answer-limit-ms=N`) is given up: every request it holds
//! is reported failed ([`DeviceError::Gone`]), their buffers are leaked rather than freed
//! (the device might still write into them), and every later request fails at once. The
//! store then drops that mirror and goes on with the others, instead of hanging.
//!
//! The self-test (run only under `holdfast.device-selftest`) writes only to a disk the host
//! marked as a test disk ([`holdfast_abi::test_disk`]); every other disk is left untouched.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use holdfast_abi::test_disk::{self, MAGIC as TEST_DISK_MAGIC, SECTORS as TEST_SECTORS};
use virtio_drivers::device::blk::SECTOR_SIZE;
use virtio_drivers::queue::VirtQueue;
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::{DeviceStatus, Transport};
use x86_64::instructions::interrupts;

use super::hal::KernelHal;
use holdfast_store::device::check_request;
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError};

/// Descriptors in the request queue: a write takes three (header, data, status), a flush
/// and a read of [`Block::read_many_sectors`] two; QEMU offers 256. Room for
/// [`READS_AT_ONCE_MAX`] reads at once.
const QUEUE_SIZE: usize = 64;
/// Reads [`Block::read_many_sectors`] has with the device at once.
const READS_AT_ONCE_MAX: usize = QUEUE_SIZE / 2;
/// Writes and flushes kept in flight at most: more would only hold more memory while the
/// host catches up.
const IN_FLIGHT_MAX: usize = 4;

/// Bytes of handed-over writes kept in flight at most: a sixteenth of the kernel heap
/// (object pages live there too), so that a small guest keeps one write in flight at a
/// time rather than run short of memory for pages.
fn in_flight_bytes_max() -> usize {
    crate::memory::heap_bytes() / 16
}

/// The kernel waiting for a disk to answer (halted or spinning): no process runs
/// meanwhile, since the kernel does not preempt itself.
pub static DISK_WAITS: crate::arch::timer::KernelTime = crate::arch::timer::KernelTime::new();

/// How long a request may go unanswered before its device is given up, in milliseconds.
static ANSWER_TIME_LIMIT_MS: AtomicU64 = AtomicU64::new(30_000);

/// Sets how long a disk may leave a request unanswered (`holdfast.disk-answer-limit-ms`).
pub fn set_answer_time_limit_ms(milliseconds: u64) {
    ANSWER_TIME_LIMIT_MS.store(milliseconds, Ordering::Relaxed);
}

pub fn answer_time_limit_ms() -> u64 {
    ANSWER_TIME_LIMIT_MS.load(Ordering::Relaxed)
}

/// The device did not answer within [`answer_time_limit_ms`].
struct Unanswered;

/// Feature bits (virtio 1.1 5.2.3 and 6): read-only, flush, event index, version 1.
const FEATURE_READ_ONLY: u64 = 1 << 5;
const FEATURE_FLUSH: u64 = 1 << 9;
const FEATURE_EVENT_INDEX: u64 = 1 << 29;
const FEATURE_VERSION_1: u64 = 1 << 32;
const FEATURES_SUPPORTED: u64 =
    FEATURE_READ_ONLY | FEATURE_FLUSH | FEATURE_EVENT_INDEX | FEATURE_VERSION_1;

/// Bytes of a request's header (virtio 1.1 5.2.6).
const HEADER_BYTES: usize = 16;

/// How a synchronous request went wrong before its status byte.
enum Waited {
    /// The queue refused the request or its answer.
    Queue,
    Unanswered,
}

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
    /// The device left a request unanswered past the time limit: it is not used again.
    given_up: bool,
    /// A flush is in flight (or done) that was sent once every write before it had been
    /// answered, and nothing was written since: it covers everything written, so the next
    /// [`BlockDevice::flush`] only waits for it ([`BlockDevice::flush_submit`]).
    flush_covers_writes: bool,
    /// What a synchronous request's header, status and read data go through
    /// ([`Block::request_and_wait`]): allocated once at start-up and grown only by a larger
    /// read than any before. A buffer allocated per request (2.25 MiB for a checkpoint run)
    /// failed to allocate in a guest paging under memory pressure, and the kernel panicked.
    bounce: Vec<u8>,
}

/// The data a synchronous read returns at most without growing [`Block::bounce`]: the
/// store reads runs of up to 64 blocks (migration, the scrub) and log records of up to 72.
const BOUNCE_DATA_BYTES: usize = 72 * BLOCK_SIZE;

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
            given_up: false,
            flush_covers_writes: false,
            bounce: vec![0u8; HEADER_BYTES + BOUNCE_DATA_BYTES + 1],
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

    /// Waits until the device has answered a request, or [`answer_time_limit_ms`] has
    /// passed. With its interrupts routed, the CPU halts meanwhile: under emulation a
    /// spinning vCPU is a busy host thread, which the host runs only in its turn once the
    /// answer is there (milliseconds on a loaded host) and which takes CPU time from QEMU's
    /// I/O threads while they write; a halted one is woken by the answer. A commit's write
    /// and flush are each such a wait.
    fn wait_for_answer(&self) -> Result<(), Unanswered> {
        self.counting_wait(Self::halt_for_answer)
    }

    /// Runs `wait` and counts its time in [`DISK_WAITS`] if no answer was there already.
    fn counting_wait(&self, wait: fn(&Self) -> Result<(), Unanswered>) -> Result<(), Unanswered> {
        let (started, waits) = (crate::arch::read_tsc(), !self.queue.can_pop());
        let answered = wait(self);
        if waits {
            DISK_WAITS.add_since(started);
        }
        answered
    }

    fn halt_for_answer(&self) -> Result<(), Unanswered> {
        if !self.interrupts || !crate::arch::timer::apic_ready() {
            return self.spin_for_answer();
        }
        let enabled = interrupts::are_enabled();
        let deadline = AnswerDeadline::start();
        // The check runs with interrupts off and `sti; hlt` takes a pending one only once
        // halted, so an answer that comes after the check still ends the halt. The timer
        // ends it too, so a lost interrupt costs a tick, never a hang, and the time limit
        // is checked at least once a tick.
        interrupts::disable();
        let mut answered = Ok(());
        while !self.queue.can_pop() {
            if deadline.passed() {
                answered = Err(Unanswered);
                break;
            }
            interrupts::enable_and_hlt();
            interrupts::disable();
        }
        if enabled {
            interrupts::enable();
        }
        answered
    }

    fn spin_for_answer(&self) -> Result<(), Unanswered> {
        let deadline = AnswerDeadline::start();
        while !self.queue.can_pop() {
            if deadline.passed() {
                return Err(Unanswered);
            }
            core::hint::spin_loop();
        }
        Ok(())
    }

    /// Gives the device up: what it holds is leaked, not freed (it might still write into
    /// it), and every request from now on fails with [`DeviceError::Gone`].
    fn give_up(&mut self) {
        if !self.given_up {
            crate::println!(
                "holdfast: virtio-blk: no answer within {} ms; the disk is given up",
                answer_time_limit_ms()
            );
        }
        self.given_up = true;
        self.failed_in_flight.get_or_insert(DeviceError::Gone);
        for request in self.in_flight.drain(..) {
            core::mem::forget(request);
        }
    }

    fn check_not_given_up(&self) -> Result<(), DeviceError> {
        if self.given_up { Err(DeviceError::Gone) } else { Ok(()) }
    }

    /// Waits for the oldest answer the device gave and pops it; a failure is kept for the
    /// next write or flush to report.
    ///
    /// This wait spins: it is the one stabilization makes while its writes are in flight,
    /// between checksumming pages, and with a halt here its throughput came out lower in
    /// most of a few (noisy) bench runs. The waits a journal commit makes alone with the
    /// device ([`Block::add_wait_pop`]) halt.
    fn complete_next(&mut self) {
        self.complete_next_by(Self::spin_for_answer);
    }

    /// [`Block::complete_next`], waiting by `wait`.
    fn complete_next_by(&mut self, wait: fn(&Self) -> Result<(), Unanswered>) {
        if self.counting_wait(wait).is_err() {
            self.give_up();
            return;
        }
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
        self.complete_all_by(Self::spin_for_answer);
    }

    /// [`Block::complete_all`], waiting by `wait`.
    fn complete_all_by(&mut self, wait: fn(&Self) -> Result<(), Unanswered>) {
        while !self.in_flight.is_empty() {
            self.complete_next_by(wait);
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
        self.check_not_given_up()?;
        let bytes = data.as_ref().map_or(0, |data| data.len());
        if request == REQUEST_WRITE {
            self.flush_covers_writes = false;
        }
        while !self.in_flight.is_empty()
            && (self.in_flight.len() >= IN_FLIGHT_MAX
                || self.in_flight_bytes() + bytes > in_flight_bytes_max())
        {
            self.complete_next();
        }
        self.check_not_given_up()?;
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

    /// A request that waits for its answer, after every request in flight. What the device
    /// writes (the status, and a read's data) goes through [`Block::bounce`] on the heap, so
    /// that a request left unanswered can be leaked whole (the device might still write into
    /// it) while the caller's buffer goes back to the caller. A write's data is given to the
    /// device in place: it only reads it, and a read after the disk was given up harms
    /// nothing (a checkpoint run is 2.25 MiB, too much to copy per write).
    fn request_and_wait(&mut self, request: u32, sector: u64, data_out: Option<&[u8]>, data_in: Option<&mut [u8]>) -> Result<(), DeviceError> {
        self.complete_all();
        self.check_not_given_up()?;
        let data_in_bytes = data_in.as_deref().map_or(0, <[u8]>::len);
        let needed = HEADER_BYTES + data_in_bytes + 1;
        if self.bounce.len() < needed {
            self.bounce = vec![0u8; needed];
        }
        // Taken out of `self` while the device holds it, and put back once it has answered.
        let mut buffer = core::mem::take(&mut self.bounce);
        buffer[..HEADER_BYTES].copy_from_slice(&request_header(request, sector)[..]);
        buffer[HEADER_BYTES + data_in_bytes] = STATUS_UNSET;
        // Exactly this request's bytes: the device writes the status into the last byte of
        // what it is given to write.
        let (header, rest) = buffer[..needed].split_at_mut(HEADER_BYTES);
        let (data, status) = rest.split_at_mut(data_in_bytes);
        let result = match (data_out, data_in.is_some()) {
            (Some(data_out), _) => self.add_wait_pop(&[&*header, data_out], &mut [status]),
            (None, true) => self.add_wait_pop(&[&*header], &mut [data, status]),
            (None, false) => self.add_wait_pop(&[&*header], &mut [status]),
        };
        let status = status[0];
        match result {
            Err(Waited::Unanswered) => {
                core::mem::forget(buffer);
                self.give_up();
                Err(DeviceError::Gone)
            }
            Err(Waited::Queue) => {
                self.bounce = buffer;
                Err(DeviceError::Gone)
            }
            Ok(()) if status != STATUS_OK => {
                self.bounce = buffer;
                Err(status_error(status))
            }
            Ok(()) => {
                if let Some(data_in) = data_in {
                    data_in.copy_from_slice(&buffer[HEADER_BYTES..HEADER_BYTES + data_in_bytes]);
                }
                self.bounce = buffer;
                Ok(())
            }
        }
    }

    /// The crate's `add_notify_wait_pop`, waiting by [`Block::wait_for_answer`]; the caller
    /// has waited for every request in flight, so the next answer is this one's.
    fn add_wait_pop<'a>(&mut self, inputs: &'a [&'a [u8]], outputs: &'a mut [&'a mut [u8]]) -> Result<(), Waited> {
        // SAFETY: the buffers are borrowed until this function returns, and it returns
        // either once the device has answered and the token is popped (or `add` failed,
        // leaving nothing with the device), or unanswered, after which the caller leaks the
        // outputs: the device never writes memory after it is freed. An input it might
        // still read after an unanswered return only goes to a disk that is given up.
        let token = unsafe { self.queue.add(inputs, outputs) }.map_err(|_| Waited::Queue)?;
        if self.queue.should_notify() {
            self.transport.notify(0);
        }
        self.wait_for_answer().map_err(|Unanswered| Waited::Unanswered)?;
        // SAFETY: the same buffers as given to `add` above, untouched since.
        unsafe { self.queue.pop_used(token, inputs, outputs) }.map(|_| ()).map_err(|_| Waited::Queue)
    }

    /// Reads of `(sector, buffer)`, up to [`READS_AT_ONCE_MAX`] with the device at once, after
    /// every request in flight: one wait for many answers. Each read goes through a buffer
    /// of its own on the heap (header, data, status in one), leaked if the device does not
    /// answer, as [`Block::request_and_wait`]'s bounce buffer is.
    fn read_many_sectors(&mut self, reads: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        self.complete_all();
        for batch in reads.chunks_mut(READS_AT_ONCE_MAX) {
            self.check_not_given_up()?;
            let mut buffers: Vec<(u16, Box<[u8]>, usize)> = Vec::with_capacity(batch.len());
            for (position, (sector, data)) in batch.iter().enumerate() {
                let mut buffer = vec![0u8; HEADER_BYTES + data.len() + 1].into_boxed_slice();
                buffer[..HEADER_BYTES].copy_from_slice(&request_header(REQUEST_READ, *sector)[..]);
                buffer[HEADER_BYTES + data.len()] = STATUS_UNSET;
                let (header, rest) = buffer.split_at_mut(HEADER_BYTES);
                // SAFETY: the buffer stays in `buffers` (on the heap: moving the box moves
                // none of its bytes), untouched, until its token is popped below, or is
                // leaked if the device does not answer; the device writes the data and then
                // the status into the last byte of what it is given to write.
                match unsafe { self.queue.add(&[header], &mut [rest]) } {
                    Ok(token) => buffers.push((token, buffer, position)),
                    Err(_) => break,
                }
            }
            // Always told: with event indices, the crate's `should_notify` compares the
            // ring's 16-bit index with the device's `avail_event` without wrapping, so for a
            // batch added across the index's wrap it says no and the device, never told,
            // never answers. (For one request added at a time its answer is right.) One
            // notification per batch costs little.
            self.transport.notify(0);
            // The queue is empty here and has room for the whole batch, so `add` does not
            // fail; if it did, the reads it refused are reported as failed, not the device.
            let mut failure = (buffers.len() < batch.len()).then_some(DeviceError::Io);
            while !buffers.is_empty() {
                // No answer in time, or an answer to nothing sent (the device is broken):
                // the device is given up, and what it holds leaks.
                let answered = self.wait_for_answer().is_ok().then(|| self.queue.peek_used()).flatten();
                let Some(index) = answered.and_then(|token| buffers.iter().position(|(sent, _, _)| *sent == token)) else {
                    for (_, buffer, _) in buffers.drain(..) {
                        core::mem::forget(buffer);
                    }
                    self.give_up();
                    return Err(DeviceError::Gone);
                };
                let (token, mut buffer, position) = buffers.swap_remove(index);
                let (header, rest) = buffer.split_at_mut(HEADER_BYTES);
                // SAFETY: the very buffers given to `add` for this token, untouched since.
                let popped = unsafe { self.queue.pop_used(token, &[header], &mut [rest]) };
                let data = &mut batch[position].1;
                match (popped, buffer[HEADER_BYTES + data.len()]) {
                    (Ok(_), STATUS_OK) => data.copy_from_slice(&buffer[HEADER_BYTES..HEADER_BYTES + data.len()]),
                    (Ok(_), status) => {
                        failure.get_or_insert(status_error(status));
                    }
                    (Err(_), _) => {
                        failure.get_or_insert(DeviceError::Gone);
                    }
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
        }
        Ok(())
    }

    fn read_sectors(&mut self, sector: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        check_sectors(self.capacity_sectors, sector, buffer.len())?;
        self.request_and_wait(REQUEST_READ, sector, None, Some(buffer))
    }

    fn write_sectors(&mut self, sector: u64, buffer: &[u8]) -> Result<(), DeviceError> {
        check_sectors(self.capacity_sectors, sector, buffer.len())?;
        self.take_failure()?;
        self.flush_covers_writes = false;
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
                    "{capacity} sectors, read host header (seed {seed}), wrote and read back {TEST_SECTORS} sectors, then read {READ_MANY_CHECK_READS} sectors {READS_AT_ONCE_MAX} at a time"
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
        io(self.read_many_check(&pattern).map_err(|error| format!("wrote and read back {TEST_SECTORS} sectors, {error}")))?;
        Ok(Some(seed))
    }

    /// Reads the test sectors back again one sector per read, [`READS_AT_ONCE_MAX`] reads
    /// with the device at a time, [`READ_MANY_CHECK_READS`] reads in all: more than the
    /// ring's 16-bit index counts, so that one batch is added across its wrap, where a
    /// notification is easiest to lose.
    fn read_many_check(&mut self, pattern: &[u8]) -> Result<(), String> {
        let mut sectors = vec![[0u8; SECTOR_SIZE]; TEST_SECTORS as usize];
        let rounds = READ_MANY_CHECK_READS.div_ceil(sectors.len());
        for round in 0..rounds {
            let mut reads: Vec<(u64, &mut [u8])> =
                sectors.iter_mut().enumerate().map(|(index, sector)| (1 + index as u64, &mut sector[..])).collect();
            self.read_many_sectors(&mut reads)
                .map_err(|error| format!("batched read {} of {rounds}: {error:?}", round + 1))?;
            if let Some(index) = sectors.iter().zip(pattern.chunks(SECTOR_SIZE)).position(|(read, written)| read[..] != *written) {
                return Err(format!("batched read {} of {rounds}: sector {} differs", round + 1, 1 + index));
            }
        }
        Ok(())
    }
}

/// Reads [`Block::read_many_check`] makes: past 65,536 wherever the ring's index starts.
const READ_MANY_CHECK_READS: usize = 66_000;

/// The store's view of the disk: 4096-byte blocks of eight sectors each.
impl BlockDevice for Block {
    fn block_count(&self) -> u64 {
        self.capacity() / SECTORS_PER_BLOCK
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, buf.len())?;
        self.read_sectors(first_block * SECTORS_PER_BLOCK, buf)
    }

    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        for (first_block, buf) in reads.iter() {
            check_request(self.block_count(), *first_block, buf.len())?;
        }
        let mut sectors: Vec<(u64, &mut [u8])> =
            reads.iter_mut().map(|(first_block, buf)| (*first_block * SECTORS_PER_BLOCK, &mut **buf)).collect();
        self.read_many_sectors(&mut sectors)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, data.len())?;
        self.write_sectors(first_block * SECTORS_PER_BLOCK, data)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if core::mem::take(&mut self.flush_covers_writes) {
            // Only the flush `flush_submit` sent is in flight: a commit's wait, so it halts.
            self.complete_all_by(Self::halt_for_answer);
            self.take_failure()?;
            return self.check_not_given_up();
        }
        self.complete_all();
        self.take_failure()?;
        self.check_not_given_up()?;
        if !self.flush_supported {
            // No write cache to flush: a completed write is on the media.
            return Ok(());
        }
        self.request_and_wait(REQUEST_FLUSH, 0, None, None)?;
        self.take_failure()
    }

    fn flush_submit(&mut self) -> Result<(), DeviceError> {
        // Halting: a commit's (or the standby's) wait for its writes, which a spinning vCPU
        // only slows under emulation (see `wait_for_answer`).
        self.complete_all_by(Self::halt_for_answer);
        self.take_failure()?;
        self.check_not_given_up()?;
        if !self.flush_supported {
            return Ok(());
        }
        // Every write has been answered, so the flush covers them all (virtio: a flush makes
        // durable the writes completed before it).
        self.submit(REQUEST_FLUSH, 0, None)?;
        self.flush_covers_writes = true;
        Ok(())
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

/// When a wait for an answer must end: [`answer_time_limit_ms`] after it started.
struct AnswerDeadline {
    tsc: u64,
}

impl AnswerDeadline {
    fn start() -> Self {
        let tsc_hz = crate::arch::timer::tsc_hz();
        // Before the timer's calibration there is no clock to wait by (no request waits
        // then: the disks are probed after it).
        let limit_tsc = if tsc_hz == 0 {
            u64::MAX
        } else {
            (u128::from(answer_time_limit_ms()) * u128::from(tsc_hz) / 1000).try_into().unwrap_or(u64::MAX)
        };
        Self { tsc: crate::arch::read_tsc().saturating_add(limit_tsc) }
    }

    fn passed(&self) -> bool {
        crate::arch::read_tsc() >= self.tsc
    }
}
