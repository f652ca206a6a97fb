//! The Holdfast kernel.
//!
//! Design principles, from KeyKOS and EROS:
//! - Capabilities are the only authority; invocation is the only system call.
//! - The kernel owns no state that is not a cache of pages and nodes, except the queues of
//!   stalled invocations; kernel operations are atomic and restartable, so there is one
//!   kernel stack and no process owns kernel state between entries.
//! - Simple, checked code over clever code: assertions stay on in release builds.
//!
//! Boot: `arch::boot` (PVH or multiboot2, 32-bit) → long mode → [`boot::kernel_main`],
//! which sets up the CPU, memory, time and devices, tells the host it is ready, restores
//! the system from the store or builds the initial system of the image's system table, and
//! runs its processes. The modules' layers are drawn in README.md; `ci/check-kernel-layers.py`
//! keeps them free of import cycles.
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
mod boot;
mod bootinfo;
mod console;
mod control;
mod drivers;
mod idle;
mod initial_system;
mod ipc;
mod memory;
mod message;
mod network;
mod methods;
mod objects;
mod pair;
mod persistence;
mod process;
mod range;
mod selftest;
mod services;
mod space;
mod traps;
mod user_memory;

use holdfast_abi as abi;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    x86_64::instructions::interrupts::disable();
    println!("holdfast: kernel panic: {info}");
    arch::exit_qemu(abi::exit::VALUE_FAILURE)
}
