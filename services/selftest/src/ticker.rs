//! Runs before, during and after the faulting programs (the timer preempts it), to show that
//! their faults do not disturb it.
#![no_std]
#![no_main]

use holdfast_userlib as user;

fn main() -> u64 {
    let mut checksum: u64 = 0;
    for round in 0..4u64 {
        // Enough work to span several time slices under emulation.
        for step in 0..2_000_000u64 {
            checksum = checksum.wrapping_mul(31).wrapping_add(step ^ round);
            core::hint::black_box(checksum);
        }
        user::print(
            [
                "ticker: round 0\n",
                "ticker: round 1\n",
                "ticker: round 2\n",
                "ticker: round 3\n",
            ][round as usize],
        );
    }
    0
}

user::entry!(main);
