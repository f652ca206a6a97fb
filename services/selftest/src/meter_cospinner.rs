//! A second process of the spinning tenant, for the meters test (hypervisor-glue/holdfast/
//! tests/meters.rs, services/meter-manifest.toml): it spins on the same meter as
//! `meter-spinner`, so that the tenant has two processes that want the processor at once.
//! It measures two windows, as long as the spinner's two (spinning itself, then through a
//! server), prints `meter-cospinner: ran N permille, then M permille of 3000 ms`, then spins
//! on.
//!
//! Capability registers: 0 console, 2 the clock.
#![no_std]
#![no_main]

use holdfast_userlib::interface::clock;
use holdfast_userlib::spin::spin;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user};

const CLOCK: CapReg = CapReg::new(2);
const WINDOW_NS: u64 = 3_000_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    let first = spin(WINDOW_NS, now);
    let second = spin(WINDOW_NS, now);
    user::print_numbers(
        &[(b"meter-cospinner: ran ", first.ran_permille), (b" permille, then ", second.ran_permille)],
        b" permille of 3000 ms\n",
    );
    loop {
        core::hint::spin_loop();
    }
}

user::entry!(main);
