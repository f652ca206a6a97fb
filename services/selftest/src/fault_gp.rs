//! Executes `hlt`, privileged at CPL 3: a general-protection fault the kernel must contain.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    // SAFETY: not safe: hlt at CPL 3 raises #GP on purpose.
    unsafe { core::arch::asm!("hlt") };
    0
}

user::entry!(main);
