//! Writes an instruction (`ud2`) onto its stack and jumps to it: the stack is mapped
//! no-execute (W^X), so the fetch is a page fault the kernel must contain. Were the page
//! executable, `ud2` would raise #UD instead, which the self-test would call wrong.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    let code = [0x0fu8, 0x0b];
    let code = core::hint::black_box(&code);
    // SAFETY: not safe: the jump onto the stack faults on purpose.
    let code: extern "C" fn() = unsafe { core::mem::transmute(code.as_ptr()) };
    code();
    1
}

user::entry!(main);
