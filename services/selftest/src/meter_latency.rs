//! A tenant that measures how long its calls take while another tenant spins, for the
//! meters test (hypervisor-glue/holdfast/tests/meters.rs): it calls the echo server in a
//! loop for a window as long as both of the spinner's (spinning itself, then through a
//! server) and prints `meter-latency: N calls, the slowest M us (A us in the first half, B us
//! in the second)`.
//!
//! Capability registers: 0 console, 2 the clock, 3 the echo server.
#![no_std]
#![no_main]

use holdfast_userlib::interface::clock;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const CLOCK: CapReg = CapReg::new(2);
const ECHO_SERVER: u8 = 3;
const ECHO: u64 = 1;
const WINDOW_NS: u64 = 6_000_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    let start = now();
    // The slowest call in each half: while the spinner spins itself, then through a server.
    let (mut calls, mut slowest_ns) = (0u64, [0u64; 2]);
    let mut last = start;
    while last - start < WINDOW_NS {
        let before = now();
        if Invocation::call(ECHO_SERVER, ECHO, [calls, 0, 0, 0]).invoke(&mut []).code != 0 {
            user::print("meter-latency: MISMATCH: the echo server refused a call\n");
            return 1;
        }
        last = now();
        let half = usize::from(before - start >= WINDOW_NS / 2);
        slowest_ns[half] = slowest_ns[half].max(last - before);
        calls += 1;
    }
    user::print_numbers(
        &[
            (b"meter-latency: ", calls),
            (b" calls, the slowest ", slowest_ns[0].max(slowest_ns[1]) / 1000),
            (b" us (", slowest_ns[0] / 1000),
            (b" us in the first half, ", slowest_ns[1] / 1000),
        ],
        b" us in the second)\n",
    );
    0
}

user::entry!(main);
