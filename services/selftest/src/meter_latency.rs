//! A tenant that measures how long its calls take while another tenant spins, for the
//! meters test (hypervisor-glue/holdfast/tests/meters.rs): it calls the echo server in a
//! loop for a window and prints `meter-latency: N calls, the slowest M us`.
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
const WINDOW_NS: u64 = 3_000_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    let start = now();
    let (mut calls, mut slowest_ns) = (0u64, 0u64);
    let mut last = start;
    while last - start < WINDOW_NS {
        let before = now();
        if Invocation::call(ECHO_SERVER, ECHO, [calls, 0, 0, 0]).invoke(&mut []).code != 0 {
            user::print("meter-latency: MISMATCH: the echo server refused a call\n");
            return 1;
        }
        last = now();
        slowest_ns = slowest_ns.max(last - before);
        calls += 1;
    }
    let mut digits = [[0u8; 20]; 2];
    let [calls_digits, slowest_digits] = &mut digits;
    user::print_parts(&[
        b"meter-latency: ",
        user::decimal(calls, calls_digits),
        b" calls, the slowest ",
        user::decimal(slowest_ns / 1000, slowest_digits),
        b" us\n",
    ]);
    0
}

user::entry!(main);
