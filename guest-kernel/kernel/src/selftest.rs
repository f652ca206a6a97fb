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
        "fault-null" | "fault-kernel-read" | "fault-exec-data" | "fault-exec-stack" => {
            Expected::Fault(14)
        }
        "fault-gp" | "fault-int" => Expected::Fault(13),
        "fault-ud" => Expected::Fault(6),
        // Servers, which wait for calls for good: bench/services-manifest.toml's system
        // ends with the space bank, a constructor and its virtual copy keeper waiting.
        "echo-server" | "space-changer" | "zero-keeper" | "exception-keeper" | "meter-refiller" | "meter-keeper"
        | "space-bank" | "constructor" | "virtual-copy" => Expected::Available,
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
        "user-read" | "user-exec" => {
            // A user page, mapped in the live root as a process's would be: the kernel
            // touching it at its user address (not through the direct map) is a bug that
            // SMAP (a read) or SMEP (a call) must stop.
            let user_address = abi::USER_ADDRESS_MIN;
            let block = crate::memory::allocate_pages(1);
            // SAFETY: a fresh heap page, the kernel's own: `ret` as its first byte.
            unsafe { block.write(0xc3) };
            let frame = x86_64::structures::paging::PhysFrame::containing_address(
                x86_64::PhysAddr::new(crate::memory::virtual_to_physical(block as u64)),
            );
            let mut tables = crate::space::UserTables::new();
            tables.map_page(user_address, frame, crate::space::Access::Execute, true);
            crate::space::switch(None, &tables);
            if kind == "user-read" {
                // SAFETY: not safe at all: SMAP makes this read fault on purpose.
                let value = unsafe { core::ptr::read_volatile(user_address as *const u8) };
                println!("read {value} from a user page");
            } else {
                // SAFETY: not safe at all: SMEP makes this call fault on purpose.
                let code: extern "C" fn() = unsafe { core::mem::transmute(user_address as *const ()) };
                code();
                println!("ran a user page");
            }
        }
        "data-exec" => {
            // `ret`, in the kernel's writable data: no-execute, so the call faults.
            static RETURN_IN_DATA: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0xc3);
            let address = core::ptr::from_ref(&RETURN_IN_DATA) as *const ();
            // SAFETY: not safe at all: the no-execute page makes this call fault on purpose.
            let code: extern "C" fn() = unsafe { core::mem::transmute(address) };
            code();
            println!("ran kernel data");
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
    // Not done while a process out of time gets a share at the next period: wait for it.
    while process::waits_for_a_share() {
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
        process::meter_period_wake();
        if process::any_runnable() {
            process::switch_to_next()
        }
    }
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
