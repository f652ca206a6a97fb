//! Reads the kernel's own image, which is mapped but not for ring 3: a protection page fault.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    // SAFETY: not safe: the kernel half is supervisor-only and the read faults on purpose.
    unsafe { core::ptr::read_volatile(0xffff_ffff_8010_0000 as *const u64) }
}

user::entry!(main);
