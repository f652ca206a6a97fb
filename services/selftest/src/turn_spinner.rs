//! One of the spinners of the turns test (hypervisor-glue/holdfast/tests/meters.rs,
//! services/turns-manifest.toml): it spins for a window, prints
//! `turn-spinner N: ran P permille of 2000 ms` (N the number in its register 3), then
//! spins on, so that the others' windows end with the same competition as they began.
//!
//! Capability registers: 0 console, 2 the clock, 3 a number capability naming it.
#![no_std]
#![no_main]

use holdfast_userlib::interface::{clock, number};
use holdfast_userlib::spin::spin;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user};

const CLOCK: CapReg = CapReg::new(2);
const NAME: CapReg = CapReg::new(3);
const WINDOW_NS: u64 = 2_000_000_000;

fn main() -> u64 {
    let spun = spin(WINDOW_NS, || clock::now(CLOCK).map_or(0, |now| now.nanoseconds));
    let name = number::value(NAME).map_or(0, |value| value.word0);
    user::print_numbers(&[(b"turn-spinner ", name), (b": ran ", spun.ran_permille)], b" permille of 2000 ms\n");
    loop {
        core::hint::spin_loop();
    }
}

user::entry!(main);
