//! Executes `ud2` twice with `exception-keeper` as its keeper, which steps it over each:
//! the program runs to its end.
//!
//! Capability registers: 0 console, 1 own process, 2 start capability to exception-keeper.
#![no_std]
#![no_main]

use holdfast_userlib::abi::methods::process;
use holdfast_userlib::{self as user, Invocation};

const KEEPER: u8 = 2;

fn main() -> u64 {
    let mut checks = user::check::Checks::new("exception-client");
    let set = Invocation::call(user::OWN_PROCESS, process::SET_KEEPER, [0; 4])
        .sending(&[KEEPER])
        .invoke(&mut []);
    checks.code("set the process keeper", set.code, 0);
    for _ in 0..2 {
        // SAFETY: ud2 raises #UD; the keeper moves rip past it and restarts this process.
        unsafe { core::arch::asm!("ud2") };
    }
    checks.check("two #UD stepped over by the keeper", true);
    checks.failures
}

user::entry!(main);
