//! x86-64: boot, segments, interrupts, W^X (`protection`), the timer, the system call entry
//! and leaving the VM.
pub mod boot;
pub mod gdt;
pub mod idt;
pub mod protection;
pub mod syscall;
pub mod timer;

use x86_64::instructions::port::Port;

/// Ends the VM through QEMU's `isa-debug-exit` device with the given value.
pub fn exit_qemu(value: u32) -> ! {
    // SAFETY: the launcher always configures isa-debug-exit at this port; writing to it
    // ends the VM. Without the device the write is ignored and we halt below.
    unsafe { Port::<u32>::new(holdfast_abi::exit::DEBUG_EXIT_PORT).write(value) };
    halt_forever()
}

pub fn halt_forever() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

pub fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no side effects; CR4.TSD is clear so it is allowed at CPL 0.
    unsafe { core::arch::x86_64::_rdtsc() }
}
