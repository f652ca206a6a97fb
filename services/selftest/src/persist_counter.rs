//! The restart test's workload (hypervisor-glue/holdfast/tests/restart.rs): counts forever,
//! leaving a trace of every step in memory, and checks at each report that its registers
//! and its pages agree — which they do after a restart only if the checkpoint caught them
//! at one consistent moment.
//!
//! Step `i` writes `mix(i)` into `TRACE[i % TRACE_WORDS]` (four pages), and the count is
//! kept both in a register (the loop variable) and in memory. Every `REPORT_STEPS` steps it
//! checks the whole trace, moves a capability between a node slot and a capability register
//! (so that which of them holds it says whether the report is odd), calls the echo server
//! with the count, and prints `persist-counter: <i>`; on any disagreement it prints what
//! differs and stops with exit code 1.
//!
//! Capability registers: 0 console, 1 the ledger node (slot 0 holds the number [1, 0] at
//! the start), 2 the echo server, 3 empty at the start.
#![no_std]
#![no_main]

use core::ptr::{addr_of, addr_of_mut};

use holdfast_userlib as user;
use user::interface::{node, number};
use user::syscall::CapReg;

const TRACE_WORDS: u64 = 2048;
const REPORT_STEPS: u64 = 1 << 22;

static mut TRACE: [u64; TRACE_WORDS as usize] = [0; TRACE_WORDS as usize];
static mut COUNT: u64 = 0;

fn mix(step: u64) -> u64 {
    (step ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1
}

fn print_with_number(prefix: &str, value: u64) {
    let mut digits = [0u8; 20];
    user::print_parts(&[prefix.as_bytes(), user::decimal(value, &mut digits), b"\n"]);
}

/// Whether the trace is what steps `0..count` leave.
fn trace_matches(count: u64) -> bool {
    (0..TRACE_WORDS).all(|index| {
        // The last step before `count` that wrote this word, if any.
        let expected = match count.checked_sub(1) {
            Some(last) if last >= index => mix(last - (last - index) % TRACE_WORDS),
            _ => 0,
        };
        // SAFETY: a single-threaded program; nothing else refers to TRACE.
        unsafe { (*addr_of!(TRACE))[index as usize] == expected }
    })
}

fn stored_count() -> u64 {
    // SAFETY: a single-threaded program; no reference to COUNT outlives a statement.
    unsafe { COUNT }
}

/// Step `count`: its trace word, then the count in memory.
fn record_step(count: u64) {
    // SAFETY: as for `stored_count`, for TRACE and COUNT.
    unsafe {
        (*addr_of_mut!(TRACE))[(count % TRACE_WORDS) as usize] = mix(count);
        COUNT = count + 1;
    }
}

const LEDGER: CapReg = CapReg::new(1);
const ECHO_SERVER: u8 = 2;
const MOVED: CapReg = CapReg::new(3);
/// The echo server's order that replies with the words (echo_server.rs).
const ECHO: u64 = 1;

/// Report `report`'s capability and IPC checks; `Err` says what disagreed.
fn check_capabilities(report: u64, count: u64) -> Result<(), &'static str> {
    // The number moves into register MOVED at odd reports and back into the slot at even ones.
    node::swap(LEDGER, 0, MOVED, MOVED).map_err(|_| "ledger swap refused")?;
    let moved = number::value(MOVED).map(|value| [value.word0, value.word1]);
    match (report % 2, moved) {
        (1, Ok([1, 0])) | (0, Err(_)) => {}
        _ => return Err("the ledger's number is not where the report count puts it"),
    }
    match user::call(ECHO_SERVER, ECHO, [count, report, 0, 0]) {
        Ok([echoed, echoed_report, 0, _badge]) if echoed == count && echoed_report == report => Ok(()),
        _ => Err("the echo server's reply does not match the call"),
    }
}

fn main() -> u64 {
    // The loop variable lives in a register: a restart must bring it back with the pages.
    let mut count = stored_count();
    if count != 0 {
        // Only a restart that lost the registers but kept the pages gets here.
        print_with_number("persist-counter: continuing at ", count);
    }
    loop {
        record_step(count);
        count += 1;
        if count.is_multiple_of(REPORT_STEPS) {
            let in_memory = stored_count();
            if in_memory != count || !trace_matches(count) {
                print_with_number("persist-counter: MISMATCH at register count ", count);
                print_with_number("persist-counter: memory count ", in_memory);
                return 1;
            }
            if let Err(what) = check_capabilities(count / REPORT_STEPS, count) {
                user::print_parts(&[b"persist-counter: MISMATCH: ", what.as_bytes(), b"\n"]);
                return 1;
            }
            print_with_number("persist-counter: ", count);
        }
    }
}

user::entry!(main);
