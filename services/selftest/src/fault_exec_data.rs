//! Writes an instruction (`ud2`) into its .bss and jumps to it: data is mapped no-execute
//! (W^X), so the fetch is a page fault the kernel must contain. Were the page executable,
//! `ud2` would raise #UD instead, which the self-test would call wrong.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU8, Ordering};
use holdfast_userlib as user;

/// Room for `ud2` in writable data (.bss, a page of its own kind: never executable).
static CODE: [AtomicU8; 2] = [AtomicU8::new(0), AtomicU8::new(0)];

fn main() -> u64 {
    CODE[0].store(0x0f, Ordering::Relaxed);
    CODE[1].store(0x0b, Ordering::Relaxed);
    // SAFETY: not safe: the jump into data faults on purpose.
    let code: extern "C" fn() = unsafe { core::mem::transmute(CODE.as_ptr()) };
    code();
    1
}

user::entry!(main);
