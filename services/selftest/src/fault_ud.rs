//! Executes `ud2`: an invalid-opcode fault the kernel must contain.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    // SAFETY: ud2 raises #UD on purpose.
    unsafe { core::arch::asm!("ud2") };
    0
}

user::entry!(main);
