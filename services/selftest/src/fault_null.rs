//! Reads address 0, which no space maps: a page fault the kernel must contain.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    // SAFETY: not safe: the read faults on purpose.
    unsafe { core::ptr::read_volatile(core::ptr::null::<u64>()) }
}

user::entry!(main);
