//! Time: the TSC and the local APIC timer, both calibrated against the PIT (whose 1.193182
//! MHz input is fixed by the PC architecture), and the periodic timer interrupt.

use core::sync::atomic::{AtomicU64, Ordering};
use spin::Mutex;
use x2apic::lapic::{LocalApic, LocalApicBuilder, TimerDivide, TimerMode};
use x86_64::instructions::port::Port;

/// The local APIC's vectors, which [`init`] programs and `idt` dispatches.
pub const TIMER_VECTOR: u8 = 32;
pub const APIC_ERROR_VECTOR: u8 = 0xfe;
pub const SPURIOUS_VECTOR: u8 = 0xff;

pub const TIMER_HZ: u64 = 100;
const PIT_HZ: u64 = 1_193_182;
const CALIBRATION_MS: u64 = 10;
const XAPIC_BASE_PHYSICAL: u64 = 0xfee0_0000;

static TICKS: AtomicU64 = AtomicU64::new(0);
/// Set once [`init`] has enabled the local APIC.
static APIC_READY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static LOCAL_APIC: Mutex<Option<OwnedApic>> = Mutex::new(None);

/// The local APIC of our one CPU.
struct OwnedApic(LocalApic);

// SAFETY: `LocalApic` is !Send only because it holds a register pointer; there is one CPU,
// and the pointer is used only under the LOCAL_APIC lock.
unsafe impl Send for OwnedApic {}

pub struct Calibration {
    pub tsc_hz: u64,
    pub apic_timer_hz: u64,
}

/// Masks the legacy 8259 PICs after moving them off the exception vectors, so that only the
/// local APIC interrupts us.
fn disable_legacy_pic() {
    // SAFETY: ports 0x20/0x21/0xa0/0xa1 are the 8259 pair on every PC QEMU models; the
    // initialisation sequence (ICW1..ICW4) then masking all lines has no other effect.
    unsafe {
        for (port, value) in [
            (0x20u16, 0x11u8),
            (0xa0, 0x11),
            (0x21, 0x20),
            (0xa1, 0x28),
            (0x21, 4),
            (0xa1, 2),
            (0x21, 1),
            (0xa1, 1),
            (0x21, 0xff),
            (0xa1, 0xff),
        ] {
            Port::<u8>::new(port).write(value);
        }
    }
}

/// Runs `during` while PIT channel 2 counts down `CALIBRATION_MS`, then returns.
fn pit_wait_calibration_interval(mut during: impl FnMut()) {
    let count = PIT_HZ * CALIBRATION_MS / 1000;
    // SAFETY: port 0x61 bit 0 gates PIT channel 2 and bit 1 the speaker (kept off); 0x43/0x42
    // program channel 2, which nothing else uses.
    unsafe {
        let mut gate = Port::<u8>::new(0x61);
        let value = gate.read() & !0x03;
        gate.write(value);
        Port::<u8>::new(0x43).write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0
        Port::<u8>::new(0x42).write(count as u8);
        Port::<u8>::new(0x42).write((count >> 8) as u8);
        gate.write(value | 1);
        during();
        while gate.read() & 0x20 == 0 {
            core::hint::spin_loop();
        }
    }
}

pub fn init() -> Calibration {
    disable_legacy_pic();
    let mut apic = LocalApicBuilder::new()
        .timer_vector(TIMER_VECTOR as usize)
        .error_vector(APIC_ERROR_VECTOR as usize)
        .spurious_vector(SPURIOUS_VECTOR as usize)
        .timer_mode(TimerMode::OneShot)
        .timer_divide(TimerDivide::Div16)
        .timer_initial(u32::MAX)
        .set_xapic_base(crate::memory::physical_to_virtual(XAPIC_BASE_PHYSICAL))
        .build()
        .expect("local APIC settings are complete");
    let mut tsc_start = 0;
    // SAFETY: interrupts are off; enabling the APIC arms a one-shot count from u32::MAX
    // that we only read; its vector has a handler.
    unsafe { apic.enable() };
    pit_wait_calibration_interval(|| tsc_start = super::read_tsc());
    let tsc_end = super::read_tsc();
    // SAFETY: reading the current count has no side effect.
    let apic_elapsed = u32::MAX - unsafe { apic.timer_current() };
    let tsc_hz = (tsc_end - tsc_start) * 1000 / CALIBRATION_MS;
    let apic_timer_hz = apic_elapsed as u64 * 1000 / CALIBRATION_MS;
    TSC_HZ.store(tsc_hz, Ordering::Relaxed);
    // SAFETY: reprogramming our own timer; the handler acknowledges each tick.
    unsafe {
        apic.set_timer_mode(TimerMode::Periodic);
        apic.set_timer_initial((apic_timer_hz / TIMER_HZ).max(1) as u32);
    }
    *LOCAL_APIC.lock() = Some(OwnedApic(apic));
    APIC_READY.store(true, Ordering::Release);
    Calibration {
        tsc_hz,
        apic_timer_hz,
    }
}

/// Called by the timer interrupt.
pub fn tick() {
    TICKS.fetch_add(1, Ordering::Relaxed);
    end_of_interrupt();
}

pub fn end_of_interrupt() {
    if let Some(apic) = LOCAL_APIC.lock().as_mut() {
        // SAFETY: we are in an interrupt handler of this APIC.
        unsafe { apic.0.end_of_interrupt() };
    }
}

/// Whether the local APIC takes interrupts: a driver may halt for one from now on.
pub fn apic_ready() -> bool {
    APIC_READY.load(Ordering::Acquire)
}

/// This CPU's local APIC id, where device interrupts (MSI-X) are sent.
pub fn local_apic_id() -> u8 {
    let register = crate::memory::physical_to_virtual(XAPIC_BASE_PHYSICAL + 0x20) as *const u32;
    // SAFETY: the direct map covers the xAPIC page (the APIC itself is set up through it,
    // above), and reading the ID register has no side effect.
    (unsafe { core::ptr::read_volatile(register) } >> 24) as u8
}

pub fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Nanoseconds in `tsc_delta` TSC ticks.
pub fn tsc_to_nanoseconds(tsc_delta: u64) -> u64 {
    (tsc_delta as u128 * 1_000_000_000 / tsc_hz().max(1) as u128) as u64
}

/// Microseconds between two TSC readings.
pub fn tsc_to_microseconds(tsc_delta: u64) -> u64 {
    (tsc_delta as u128 * 1_000_000 / tsc_hz().max(1) as u128) as u64
}

/// Measures the timer interrupt's frequency against the TSC over `tick_count` ticks.
/// Interrupts must be enabled. Returns millihertz.
pub fn measure_frequency_millihertz(tick_count: u64) -> u64 {
    let wait_for_next_tick = || {
        let start = ticks();
        while ticks() == start {
            x86_64::instructions::hlt();
        }
    };
    wait_for_next_tick();
    let tsc_start = super::read_tsc();
    let first = ticks();
    while ticks() < first + tick_count {
        x86_64::instructions::hlt();
    }
    let elapsed_us = tsc_to_microseconds(super::read_tsc() - tsc_start).max(1);
    tick_count * 1_000_000_000 / elapsed_us
}

/// Kernel time spent on one kind of work, in TSC cycles, and how many times: counted
/// without a lock (the fault path, the disk driver), so that the counters show what the
/// kernel took from the processes and on what (`holdfast_*_seconds_total`).
pub struct KernelTime {
    cycles: AtomicU64,
    count: AtomicU64,
}

impl KernelTime {
    pub const fn new() -> Self {
        Self { cycles: AtomicU64::new(0), count: AtomicU64::new(0) }
    }

    /// Counts one span that began at TSC `started`.
    pub fn add_since(&self, started: u64) {
        let cycles = super::read_tsc().saturating_sub(started);
        self.cycles.fetch_add(cycles, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn seconds(&self) -> f64 {
        tsc_to_nanoseconds(self.cycles.load(Ordering::Relaxed)) as f64 / 1e9
    }

    pub fn count(&self) -> f64 {
        self.count.load(Ordering::Relaxed) as f64
    }
}
