//! A server for the IPC checks: echoes what it is called with.
//!
//! Capability registers: 0 console, 1 own process. It waits with capabilities received in
//! 12 and 13 and the caller's resume capability in 15.
//!
//! Orders: `ECHO` replies with the words (word 3 replaced by the badge it was invoked
//! through), the string and the capability received first; `SLOW` spins a while
//! first, so that a caller meanwhile finds it busy; `REPLY_TWICE` replies, then tries the
//! same resume capability again and reports a failure unless the kernel refuses;
//! `TIMESTAMP` replies with word 0 the TSC read right after the message arrived (for
//! `bench-micro`'s one-way IPC); `CONSOLE` replies with its own console capability
//! (register 0, which no caller can change, unlike register 12: `hostile` calls this
//! server too); `RESUME_COPY` replies with a copy of the resume capability it replies
//! through (`hostile` invokes such copies: the kernel must refuse a used one). Anything
//! else gets reply code 99. It never stops: the self-test expects it to end available.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, Invocation, abi::InvocationError};

pub const ECHO: u64 = 1;
pub const SLOW: u64 = 2;
pub const REPLY_TWICE: u64 = 3;
pub const TIMESTAMP: u64 = 5;
pub const CONSOLE: u64 = 6;
pub const RESUME_COPY: u64 = 7;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;

/// The string buffers, in .bss rather than on the stack: two 4 KiB arrays in `main`'s frame
/// spread its other locals over three stack pages, and each page the server touches per
/// message costs a TLB flush when it is switched out and a refill when it is switched in.
static mut RECEIVED: [u8; 4096] = [0; 4096];
static mut OUT: [u8; 4096] = [0; 4096];

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: these are
    // the only references to the two buffers for the program's life.
    let (received, out) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(RECEIVED),
            &mut *core::ptr::addr_of_mut!(OUT),
        )
    };
    // Never returns: each round replies and waits for the next message.
    let wait = |buffer: &mut [u8]| {
        Invocation::return_to(NOTHING, 0, [0; 4])
            .receiving(&[12, 13])
            .resume_into(RESUME)
            .invoke(buffer)
    };
    let mut message = wait(received);
    loop {
        // SAFETY: rdtsc only reads the time-stamp counter; ring 3 may (CR4.TSD is clear).
        let received_at = unsafe { core::arch::x86_64::_rdtsc() };
        let length = message.string_length;
        // Most messages carry no string: no call of `memcpy` (through the GOT, a page of its
        // own) for nothing.
        if length > 0 {
            out[..length].copy_from_slice(&received[..length]);
        }
        let [word0, word1, word2, _] = message.words;
        let echo = [word0, word1, word2, message.badge];
        let reply = match message.code {
            ECHO => Invocation::return_to(RESUME, 0, echo)
                .with_string(&out[..length])
                .sending(&[12]),
            SLOW => {
                spin();
                Invocation::return_to(RESUME, 0, echo)
            }
            REPLY_TWICE => {
                let first = Invocation::send(RESUME, 0, echo).invoke(&mut []);
                let second = Invocation::send(RESUME, 0, echo).invoke(&mut []);
                // After a send there is no resume capability and both fail; after a call
                // the first reply must arrive and the second be refused.
                if first.code == 0 && second.invocation_error() != Some(InvocationError::Void) {
                    user::print("echo-server: a resume capability worked twice [FAILED]\n");
                }
                Invocation::return_to(NOTHING, 0, [0; 4])
            }
            TIMESTAMP => Invocation::return_to(RESUME, 0, [received_at, 0, 0, 0]),
            CONSOLE => Invocation::return_to(RESUME, 0, echo).sending(&[user::CONSOLE]),
            RESUME_COPY => Invocation::return_to(RESUME, 0, echo).sending(&[RESUME]),
            _ => Invocation::return_to(RESUME, 99, [0; 4]),
        };
        message = reply
            .receiving(&[12, 13])
            .resume_into(RESUME)
            .invoke(received);
    }
}

/// A fixed amount of work, a few milliseconds under emulation: long enough for a caller to
/// find the server busy.
fn spin() {
    let mut value: u64 = 0;
    for step in 0..1_000_000 {
        value = core::hint::black_box(value.wrapping_mul(31).wrapping_add(step));
    }
}

user::entry!(main);
