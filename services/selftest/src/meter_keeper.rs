//! A meter keeper for the boot self-test (the program `meter-refiller`; the tenants' meter
//! keeper is services/meter-keeper): refills the meter each time it runs out and restarts
//! the process.
//!
//! Capability registers: 0 console, 1 own process, 2 the meter it keeps. Orders: a
//! `METER_EXHAUSTED` message refills the meter with `REFILL_MICROSECONDS` and replies;
//! `REPORT` replies with how many times the meter ran out.
#![no_std]
#![no_main]

use holdfast_userlib::abi::keeper::METER_EXHAUSTED;
use holdfast_userlib::abi::methods::meter;
use holdfast_userlib::{self as user, Invocation};

pub const REPORT: u64 = 100;
const METER: u8 = 2;
const REFILL_MICROSECONDS: u64 = 30_000;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;

fn main() -> u64 {
    let mut exhausted: u64 = 0;
    let wait = |reply: Invocation| reply.resume_into(RESUME).invoke(&mut []);
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        let reply = match message.code {
            METER_EXHAUSTED => {
                exhausted += 1;
                let refilled = user::call(METER, meter::REFILL, [REFILL_MICROSECONDS, 0, 0, 0]);
                Invocation::return_to(RESUME, u64::from(refilled.is_err()), [0; 4])
            }
            REPORT => Invocation::return_to(RESUME, 0, [exhausted, 0, 0, 0]),
            _ => Invocation::return_to(RESUME, 99, [0; 4]),
        };
        message = wait(reply);
    }
}

user::entry!(main);
