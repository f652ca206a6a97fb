//! Runs on a meter with a keeper and works longer than the meter holds: it runs out, the
//! keeper refills it, and the program goes on. Then it gives its meter no keeper and a share
//! smaller than a timer tick (5 ms of every 100 ms period, where a tick of 10 ms is charged
//! whole), spins for 2 s and checks it ran: the debt each tick leaves is paid by the shares
//! of the periods after (a kernel that let a meter out of time keep its debt stopped such
//! a process for good), and the program goes on to its end.
//!
//! Capability registers: 0 console, 1 own process, 2 its meter (30 ms), 3 start capability
//! to meter-keeper, 4 the clock; 5 void.
#![no_std]
#![no_main]

use holdfast_userlib::abi::methods::meter;
use holdfast_userlib::interface::{clock, meter as meter_interface};
use holdfast_userlib::spin::spin;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const METER: u8 = 2;
const KEEPER: u8 = 3;
const CLOCK: CapReg = CapReg::new(4);
const NOTHING: CapReg = CapReg::new(5);
/// A share below a tick's 10 ms.
const SMALL_SHARE_US: u64 = 5_000;
const SMALL_SHARE_WINDOW_NS: u64 = 2_000_000_000;
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
    let small_share = meter_interface::set_keeper(CapReg::new(METER), NOTHING)
        .and_then(|()| meter_interface::set_share(CapReg::new(METER), SMALL_SHARE_US));
    checks.check("its meter took no keeper and a 5 ms share", small_share.is_ok());
    let spun = spin(SMALL_SHARE_WINDOW_NS, || clock::now(CLOCK).map_or(0, |now| now.nanoseconds));
    // One tick in two periods: 50 permille; more than a share's worth would be no limit.
    checks.check(
        "on a 5 ms share it ran a tick every other period, its debt paid",
        (20..=120).contains(&spun.ran_permille),
    );
    checks.failures
}

user::entry!(main);
