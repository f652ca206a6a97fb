//! The Holdfast kernel.
//!
//! Design principles, from KeyKOS and EROS:
//! - Capabilities are the only authority; invocation is the only system call.
//! - The kernel owns no state that is not a cache of pages and nodes, except the queues of
//!   stalled invocations; kernel operations are atomic and restartable, so there is one
//!   kernel stack and no process owns kernel state between entries.
//! - Simple, checked code over clever code: assertions stay on in release builds.
//!
//! Boot: `arch::boot` (PVH or multiboot2, 32-bit) → long mode → [`kernel_main`], which sets
//! up the CPU, memory, time and devices, tells the host it is ready, builds the initial
//! system of the image's system table, runs its processes and reports how each ended.
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
mod bootinfo;
mod checkpoint;
mod console;
mod control;
mod drivers;
mod initial_system;
mod ipc;
mod memory;
mod methods;
mod mirrors;
mod objects;
mod process;
mod selftest;
mod services;
mod space;
mod user_memory;

use holdfast_abi as abi;

/// What the command line asks of this boot (`holdfast.<key>=<value>` words).
pub struct BootOptions {
    /// Stay up after the self-test (for control over QMP) instead of exiting.
    pub stay_up: bool,
    /// A deliberate kernel fault, to show the fault report: `ud` or `page`.
    pub kernel_fault: Option<&'static str>,
    /// How often a checkpoint is taken when the disk holds a store.
    pub checkpoint_interval_ms: u64,
}

impl BootOptions {
    fn parse(command_line: &'static str) -> Self {
        let mut options = Self {
            stay_up: false,
            kernel_fault: None,
            checkpoint_interval_ms: checkpoint::DEFAULT_INTERVAL_MS,
        };
        for word in command_line.split_ascii_whitespace() {
            match word.split_once('=') {
                Some(("holdfast.after", "stay")) => options.stay_up = true,
                Some(("holdfast.kernel-fault", kind)) => options.kernel_fault = Some(kind),
                Some(("holdfast.checkpoint-interval-ms", value)) => match value.parse() {
                    Ok(milliseconds) if milliseconds > 0 => {
                        options.checkpoint_interval_ms = milliseconds;
                    }
                    _ => println!("holdfast: ignoring {word}: not a positive number of milliseconds"),
                },
                // Test scaffolding (hypervisor-glue/holdfast/tests/control.rs): checkpoint G
                // fails once, to show that a failed checkpoint is retried.
                Some(("holdfast.test-checkpoint-failure", value)) => match value.parse() {
                    Ok(generation) => checkpoint::inject_failure(generation),
                    _ => println!("holdfast: ignoring {word}: not a checkpoint generation"),
                },
                _ => {}
            }
        }
        options
    }
}

pub fn kernel_main(boot_magic: u32, boot_information_physical: u64) -> ! {
    console::init();
    control::init();
    // SAFETY: these are the registers the boot loader handed to `start32`.
    let boot = unsafe { bootinfo::read(boot_magic, boot_information_physical) };
    if boot
        .command_line
        .split_ascii_whitespace()
        .any(|word| word == "holdfast.probe")
    {
        selftest::accelerator_probe();
    }
    println!(
        "holdfast: kernel {} (abi {}) booted by {}",
        env!("CARGO_PKG_VERSION"),
        abi::ABI_VERSION,
        boot.protocol.name()
    );
    let options = BootOptions::parse(boot.command_line);
    arch::gdt::init();
    arch::idt::init();
    arch::syscall::init();
    let kernel_end_physical = memory::virtual_to_physical(arch::boot::kernel_end_address());
    let mut reserved = [(0, 0); bootinfo::RANGES_MAX + 1];
    reserved[0] = (0, kernel_end_physical);
    reserved[1..=boot.reserved_ranges().len()].copy_from_slice(boot.reserved_ranges());
    memory::init_heap(
        boot.usable_ranges(),
        &reserved[..=boot.reserved_ranges().len()],
    );
    let calibration = arch::timer::init();
    let devices = drivers::probe();
    let ready_us = arch::timer::tsc_to_microseconds(arch::read_tsc() - arch::boot::tsc_at_entry());
    println!("{} {ready_us}", abi::serial::READY_MARKER);
    x86_64::instructions::interrupts::enable();

    if let Some(kind) = options.kernel_fault {
        selftest::kernel_fault(kind);
    }
    selftest::run(&boot, &calibration, devices, options)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    x86_64::instructions::interrupts::disable();
    println!("holdfast: kernel panic: {info}");
    arch::exit_qemu(abi::exit::VALUE_FAILURE)
}
