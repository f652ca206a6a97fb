//! Runs on a meter with a keeper and works longer than the meter holds: it runs out, the
//! keeper refills it, and the program goes on to its end.
//!
//! Capability registers: 0 console, 1 own process, 2 its meter (30 ms), 3 start capability
//! to meter-keeper.
#![no_std]
#![no_main]

use holdfast_userlib::abi::methods::meter;
use holdfast_userlib::{self as user, Invocation};

const METER: u8 = 2;
const KEEPER: u8 = 3;
const REPORT: u64 = 100;
/// A slice of work: a few milliseconds under emulation.
const SLICE_STEPS: u64 = 1_000_000;
/// Slices before giving up: seconds of work, far beyond the meter's 30 ms.
const SLICES_MAX: u64 = 2_000;

fn main() -> u64 {
    let mut checks = user::check::Checks::new("meter-client");
    let set = Invocation::call(METER, meter::SET_KEEPER, [0; 4])
        .sending(&[KEEPER])
        .invoke(&mut []);
    checks.code("set the meter keeper", set.code, 0);
    // Work until the meter has run out and been refilled: in slices, asking the keeper after
    // each. A fixed amount of work was "several times the meter's 30 ms" on one host and less
    // on a faster or less busy one (meters are charged by timer tick).
    let refilled = (0..SLICES_MAX).any(|slice| {
        let mut value: u64 = slice;
        for step in 0..SLICE_STEPS {
            value = core::hint::black_box(value.wrapping_mul(31).wrapping_add(step));
        }
        user::call(KEEPER, REPORT, [0; 4]).is_ok_and(|words| words[0] >= 1)
    });
    checks.check("the meter ran out and its keeper refilled it", refilled);
    checks.failures
}

user::entry!(main);
