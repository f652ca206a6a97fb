//! The other process of the space test (`space_test.rs`): it changes a slot of a node in
//! the caller's space tree, which the caller has mapped, so that the caller can check that
//! its page tables follow a change made by another process as they follow its own.
//!
//! Capability registers: 0 console, 1 own process, 2 a page, into which it writes `C` at
//! the start. It waits with the capability received in 12 and the caller's resume
//! capability in 15.
//!
//! Each call: word 0 a slot, the capability sent a node; the page is swapped into that slot
//! and the reply's code is the swap's. It never stops: the self-test expects it to end
//! available.
#![no_std]
#![no_main]

use holdfast_userlib::interface::{node, page};
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::{self as user, Invocation};

const PAGE: CapReg = CapReg::new(2);
const RECEIVED: u8 = 12;
const NOTHING: u8 = 14;
const SCRATCH: CapReg = CapReg::new(13);
const RESUME: u8 = 15;

fn main() -> u64 {
    if page::write(PAGE, 0, b"C").is_err() {
        user::print("space-changer: cannot write its page\n");
    }
    let wait = |reply: Invocation<'_>| reply.receiving(&[RECEIVED]).resume_into(RESUME).invoke(&mut []);
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        let code = match node::swap(CapReg::new(RECEIVED), message.words[0], PAGE, SCRATCH) {
            Ok(()) => 0,
            Err(Error::Invocation(error)) => error as u64,
            Err(Error::Object(error)) => error as u64,
            Err(Error::Reply(code)) => code,
        };
        message = wait(Invocation::return_to(RESUME, code, [0; 4]));
    }
}

user::entry!(main);
