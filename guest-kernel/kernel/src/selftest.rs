//! The boot self-test's checks and verdict: each part of the machine the kernel relies on
//! is checked as the boot ([`crate::boot`]) reaches it, one line per check; once the ring-3
//! programs of the initial image have run, how each ended; then a verdict line
//! (`HOLDFAST-SELFTEST PASS|FAIL`), and the VM exits with the matching status.

use core::sync::atomic::{AtomicBool, Ordering};
use holdfast_abi as abi;

use crate::arch::{self, timer};
use crate::println;
use crate::process::{self, ProcessState};

static FAILED: AtomicBool = AtomicBool::new(false);
static STAY_UP: AtomicBool = AtomicBool::new(false);

/// Whether [`finish`] stays up for control over QMP instead of ending the VM.
pub fn set_stay_up(stay_up: bool) {
    STAY_UP.store(stay_up, Ordering::Relaxed);
}

pub fn check(passed: bool) -> &'static str {
    if !passed {
        FAILED.store(true, Ordering::Relaxed);
    }
    if passed { "ok" } else { "FAILED" }
}

/// How each process of the self-test system must end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expected {
    /// Stopped with exit code 0 (its checks passed).
    Stop,
    /// Faulted with this vector, contained.
    Fault(u8),
    /// A server: waiting for the next message.
    Available,
}

fn expected(process: &str) -> Expected {
    match process {
        "fault-null" | "fault-kernel-read" => Expected::Fault(14),
        "fault-gp" | "fault-int" => Expected::Fault(13),
        "fault-ud" => Expected::Fault(6),
        "echo-server" | "zero-keeper" | "exception-keeper" | "meter-keeper" => Expected::Available,
        _ => Expected::Stop,
    }
}

/// The accelerator probe: a fixed loop of 10 million `dec/jnz`, then exit. The host times
/// it to tell a fast accelerator from a slow one.
pub fn accelerator_probe() -> ! {
    // SAFETY: a register-only loop.
    unsafe {
        core::arch::asm!("2:", "dec {0}", "jnz 2b", inout(reg) 10_000_000u64 => _);
    }
    arch::exit_qemu(abi::exit::VALUE_SUCCESS)
}

/// A deliberate kernel fault, so that tests can see the kernel's fault report.
pub fn kernel_fault(kind: &str) -> ! {
    println!("holdfast: raising a deliberate kernel fault ({kind})");
    match kind {
        "page" => {
            // SAFETY: not safe at all: this address is unmapped and the read faults on
            // purpose; the fault handler reports it and ends the VM.
            let value = unsafe { core::ptr::read_volatile(0xffff_9000_dead_0000 as *const u64) };
            println!("read {value}");
        }
        // SAFETY: ud2 raises #UD on purpose; the handler reports it and ends the VM.
        _ => unsafe { core::arch::asm!("ud2") },
    }
    arch::exit_qemu(abi::exit::VALUE_FAILURE)
}

/// Prints the timer's calibration and, with `measure`, checks the periodic interrupt's rate
/// over 20 ticks (200 ms).
pub fn timer_check(calibration: &timer::Calibration, measure: bool) {
    let tsc_mhz = calibration.tsc_hz / 1_000_000;
    let apic_mhz = calibration.apic_timer_hz / 1_000_000;
    if !measure {
        println!(
            "selftest: timer: TSC {tsc_mhz} MHz, local APIC timer {apic_mhz} MHz, periodic interrupt {} Hz requested, not measured on a restart",
            timer::TIMER_HZ
        );
        return;
    }
    let measured_millihertz = timer::measure_frequency_millihertz(20);
    let requested_millihertz = timer::TIMER_HZ * 1000;
    // Within a third: under an emulator on a busy host, ticks arrive late (81 Hz was seen
    // with three guests on two cores), while a wrong calibration is off by far more.
    let close = measured_millihertz.abs_diff(requested_millihertz) * 3 < requested_millihertz;
    println!(
        "selftest: timer: TSC {tsc_mhz} MHz, local APIC timer {apic_mhz} MHz, periodic interrupt {} Hz requested, {}.{:03} Hz measured [{}]",
        timer::TIMER_HZ,
        measured_millihertz / 1000,
        measured_millihertz % 1000,
        check(close)
    );
}

/// Reports how each process of the self-test system ended, then the verdict: what runs once
/// no process is runnable and there is no store.
pub fn report_processes() -> ! {
    process::restore_kernel_address_space();
    process::for_each_process(|process| match (process.state, expected(process.name)) {
        (ProcessState::Stopped { exit_code }, Expected::Stop) => println!(
            "selftest: ring3 {}: stopped with exit code {exit_code} after {} invocations [{}]",
            process.name,
            process.invocation_count,
            check(exit_code == 0)
        ),
        (ProcessState::Available, Expected::Available) => println!(
            "selftest: ring3 {}: serving, after {} invocations [{}]",
            process.name,
            process.invocation_count,
            check(true)
        ),
        (ProcessState::Faulted(report), Expected::Fault(vector)) => println!(
            "selftest: ring3 {}: contained {} [{}]",
            process.name,
            report,
            check(report.vector == vector)
        ),
        (state, _) => println!(
            "selftest: ring3 {}: unexpected end {state:?} [{}]",
            process.name,
            check(false)
        ),
    });
    finish()
}

/// Prints the verdict and ends the VM (or stays up, with `holdfast.after=stay`).
pub fn finish() -> ! {
    let passed = !FAILED.load(Ordering::Relaxed);
    println!(
        "{} {}",
        abi::serial::SELFTEST_MARKER,
        if passed { "PASS" } else { "FAIL" }
    );
    if STAY_UP.load(Ordering::Relaxed) {
        println!("holdfast: staying up (holdfast.after=stay); stop me over QMP");
        loop {
            x86_64::instructions::interrupts::enable_and_hlt();
        }
    }
    arch::exit_qemu(if passed {
        abi::exit::VALUE_SUCCESS
    } else {
        abi::exit::VALUE_FAILURE
    })
}
