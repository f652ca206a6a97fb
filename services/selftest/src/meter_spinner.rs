//! A tenant that spins forever, for the meters test (hypervisor-glue/holdfast/tests/
//! meters.rs, services/meter-manifest.toml): it reads the clock in a loop for a window and
//! counts the time it ran (gaps between reads shorter than a millisecond; a longer one is
//! time another process had) and its longest run without a gap: the scheduling quantum as
//! this run's timer gave it. Prints `meter-spinner: ran N permille of 3000 ms, its longest
//! run M us`. Then, for another window, it has a shared server spin for it (calls in a
//! loop, each answered with the time the server ran) and prints `meter-spinner: through a
//! server ran N permille of 3000 ms`; then spins on.
//!
//! Capability registers: 0 console, 2 the clock, 3 the spin server.
#![no_std]
#![no_main]

use holdfast_userlib::interface::clock;
use holdfast_userlib::spin::spin;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const CLOCK: CapReg = CapReg::new(2);
const SPIN_SERVER: u8 = 3;
const WINDOW_NS: u64 = 3_000_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    let spun = spin(WINDOW_NS, now);
    user::print_numbers(
        &[(b"meter-spinner: ran ", spun.ran_permille), (b" permille of 3000 ms, its longest run ", spun.longest_run_us)],
        b" us\n",
    );
    let (start, mut served_ns) = (now(), 0);
    while now() - start < WINDOW_NS {
        let reply = Invocation::call(SPIN_SERVER, 0, [0; 4]).invoke(&mut []);
        if reply.code != 0 {
            user::print("meter-spinner: MISMATCH: the spin server refused a call\n");
            return 1;
        }
        served_ns += reply.words[0];
    }
    let served_permille = served_ns * 1000 / (now() - start);
    user::print_numbers(&[(b"meter-spinner: through a server ran ", served_permille)], b" permille of 3000 ms\n");
    loop {
        core::hint::spin_loop();
    }
}

user::entry!(main);
