//! A shared server that spins for its callers, for the meters test (hypervisor-glue/
//! holdfast/tests/meters.rs): each call spins for `SERVE_NS` and replies with word 0 the
//! nanoseconds it ran meanwhile. It runs on no meter of its own, as the shared services do:
//! what it spins for a caller must be charged to the caller's meter, or a tenant would get
//! past its share by making it spin.
//!
//! Capability registers: 0 console, 1 own process, 2 the clock; it waits with the caller's
//! resume capability in 15.
#![no_std]
#![no_main]

use holdfast_userlib::interface::clock;
use holdfast_userlib::spin::spin;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const CLOCK: CapReg = CapReg::new(2);
const RESUME: u8 = 15;
const NOTHING: u8 = 14;
/// A request's length: short beside a 10 ms quantum, so that what it runs on its own
/// meter after its caller's runs out is small.
const SERVE_NS: u64 = 2_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn main() -> u64 {
    // Every order gets the same: the message itself is not read.
    Invocation::return_to(NOTHING, 0, [0; 4]).resume_into(RESUME).invoke(&mut []);
    loop {
        let spun = spin(SERVE_NS, now);
        Invocation::return_to(RESUME, 0, [spun.ran_ns, 0, 0, 0]).resume_into(RESUME).invoke(&mut []);
    }
}

user::entry!(main);
