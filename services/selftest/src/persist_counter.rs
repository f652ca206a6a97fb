//! The restart test's workload (hypervisor-glue/holdfast/tests/restart.rs): counts forever,
//! leaving a trace of every step in memory, and checks at each report that its registers
//! and its pages agree — which they do after a restart only if the checkpoint caught them
//! at one consistent moment.
//!
//! Step `i` writes `mix(i)` into `TRACE[i % TRACE_WORDS]` (four pages), and the count is
//! kept both in a register (the loop variable) and in memory. Every `REPORT_STEPS` steps it
//! checks the whole trace and prints `persist-counter: <i>`; on a mismatch it prints what
//! differs and stops with exit code 1.
#![no_std]
#![no_main]

use core::ptr::{addr_of, addr_of_mut};

use holdfast_userlib as user;

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
            print_with_number("persist-counter: ", count);
        }
    }
}

user::entry!(main);
