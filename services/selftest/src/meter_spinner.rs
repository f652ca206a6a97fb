//! A tenant that spins forever, for the meters test (hypervisor-glue/holdfast/tests/
//! meters.rs, services/meter-manifest.toml): it reads the clock in a loop for a window and
//! counts the time it ran (gaps between reads shorter than a millisecond; a longer one is
//! time another process had) and its longest run without a gap: the scheduling quantum as
//! this run's timer gave it. Prints `meter-spinner: ran N permille of 3000 ms, its longest
//! run M us`, then spins on.
//!
//! Capability registers: 0 console, 2 the clock.
#![no_std]
#![no_main]

use holdfast_userlib::interface::clock;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user};

const CLOCK: CapReg = CapReg::new(2);
const WINDOW_NS: u64 = 3_000_000_000;
/// A gap between two clock reads longer than this was spent off the processor.
const RUNNING_GAP_NS: u64 = 1_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    let start = now();
    let mut last = start;
    let (mut ran_ns, mut run_ns, mut longest_run_ns) = (0, 0, 0);
    while last - start < WINDOW_NS {
        let read = now();
        if read - last < RUNNING_GAP_NS {
            ran_ns += read - last;
            run_ns += read - last;
            longest_run_ns = longest_run_ns.max(run_ns);
        } else {
            run_ns = 0;
        }
        last = read;
    }
    let mut digits = [[0u8; 20]; 2];
    let [permille_digits, longest_digits] = &mut digits;
    let permille = ran_ns * 1000 / (last - start);
    user::print_parts(&[
        b"meter-spinner: ran ",
        user::decimal(permille, permille_digits),
        b" permille of 3000 ms, its longest run ",
        user::decimal(longest_run_ns / 1000, longest_digits),
        b" us\n",
    ]);
    loop {
        core::hint::spin_loop();
    }
}

user::entry!(main);
