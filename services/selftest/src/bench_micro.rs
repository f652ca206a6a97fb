//! `holdfast bench micro`, Holdfast side: times the cheapest invocation the kernel has
//! today and prints `HOLDFAST-MICRO trivial_invocation_tsc_cycles <median>`, the median
//! over rounds of the TSC cycles per invocation. The program has no clock capability and
//! cannot read the TSC's frequency, so the host converts with the frequency the kernel
//! calibrated and printed at boot (`selftest: timer: TSC <MHz> MHz`).
#![no_std]
#![no_main]

use holdfast_userlib::abi::methods::ObjectError;
use holdfast_userlib::{self as user};

/// Odd, so that the median is one round's figure.
const ROUNDS: usize = 11;
/// Per round: a few tens of milliseconds under TCG, so that a timer tick (100 Hz) costs a
/// round little and a slow spell of the shared host spoils few rounds.
const INVOCATIONS_PER_ROUND: u64 = 10_000;
/// An order no capability understands. The kernel answers it from its invocation path
/// with `InvalidOrder` and changes nothing (it only counts the invocation), which makes it
/// the trivial invocation: capability lookup and dispatch, no work.
const ORDER_UNDERSTOOD_BY_NONE: u64 = 0xFFFF;

fn read_tsc() -> u64 {
    // SAFETY: rdtsc only reads the time-stamp counter; ring 3 may (CR4.TSD is clear).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// `value` in decimal, into the end of `buffer`; returns the digits.
fn decimal(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut start = buffer.len();
    loop {
        start -= 1;
        buffer[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buffer[start..];
        }
    }
}

fn main() -> u64 {
    let mut cycles_per_invocation = [0u64; ROUNDS];
    let mut wrong_answers = 0u64;
    for round in cycles_per_invocation.iter_mut() {
        let start = read_tsc();
        for _ in 0..INVOCATIONS_PER_ROUND {
            let result = user::call(user::OWN_PROCESS, ORDER_UNDERSTOOD_BY_NONE, [0; 4]);
            if result != Err(ObjectError::InvalidOrder as u64) {
                wrong_answers += 1;
            }
        }
        *round = (read_tsc() - start) / INVOCATIONS_PER_ROUND;
    }
    if wrong_answers != 0 {
        // A figure for an invocation the kernel did not answer as expected would be wrong.
        user::print("HOLDFAST-MICRO-FAILED trivial invocation: not answered InvalidOrder\n");
        return 1;
    }
    cycles_per_invocation.sort_unstable();
    let mut buffer = [0u8; 20];
    let median = decimal(cycles_per_invocation[ROUNDS / 2], &mut buffer);
    user::print("HOLDFAST-MICRO trivial_invocation_tsc_cycles ");
    let _ = user::write_to(user::CONSOLE, median);
    user::print("\n");
    0
}

user::entry!(main);
