//! Tries `int 0x80`: interrupt gates are not open to ring 3 (DPL 0), so this is a
//! general-protection fault, not a way into the kernel. `syscall` is the only way in.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    // SAFETY: raises #GP on purpose.
    unsafe { core::arch::asm!("int 0x80") };
    0
}

user::entry!(main);
