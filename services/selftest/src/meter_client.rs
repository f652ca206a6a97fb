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

fn main() -> u64 {
    let mut checks = user::check::Checks::new("meter-client");
    let set = Invocation::call(METER, meter::SET_KEEPER, [0; 4])
        .sending(&[KEEPER])
        .invoke(&mut []);
    checks.code("set the meter keeper", set.code, 0);
    // Several times the meter's 30 ms under emulation.
    let mut value: u64 = 0;
    for step in 0..12_000_000u64 {
        value = core::hint::black_box(value.wrapping_mul(31).wrapping_add(step));
    }
    let report = user::call(KEEPER, REPORT, [0; 4]);
    checks.check(
        "the meter ran out and its keeper refilled it",
        report.is_ok_and(|words| words[0] >= 1),
    );
    checks.failures
}

user::entry!(main);
