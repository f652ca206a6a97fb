//! The constructor test (hypervisor-glue/holdfast/tests/banks.rs, manifest
//! services/bank-manifest.toml): three constructors of `constructed`, their confinement
//! answers, and a yield paid for by a bank.
//!
//! - `confined`: components a number and a read-only page, no holes: confined.
//! - `with-console`: the same and the console, listed as a hole: confined (only the hole).
//! - `leaky`: the console as a hole and a writable node that is not: not confined, and the
//!   node's register is named.
//!
//! A yield that sends no bank, or a capability that is no bank, is refused as not a bank
//! before the constructor calls it (the space bank's verifier says so), and is not paid by
//! the previous requester's bank.
//!
//! Prints `constructor-test: passed` or `constructor-test: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 bank C, 3 a meter, 4 to 6 the three constructors,
//! 9 the space bank's verifier; 7 and 8 scratch.
#![no_std]
#![no_main]

use holdfast_userlib::bank;
use holdfast_userlib::check::verdict;
use holdfast_userlib::constructor::{is_confined, yield_process};
use holdfast_userlib::interface::process;
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::{self as user};

const BANK: CapReg = CapReg::new(2);
const METER: CapReg = CapReg::new(3);
const CONFINED: CapReg = CapReg::new(4);
const WITH_CONSOLE: CapReg = CapReg::new(5);
const LEAKY: CapReg = CapReg::new(6);
const MADE: CapReg = CapReg::new(7);
const FAKE_BANK: CapReg = CapReg::new(8);
const OWN_PROCESS: CapReg = CapReg::new(1);
const VERIFIER: CapReg = CapReg::new(9);
/// The leaky constructor's writable node goes into this register of what it yields.
const LEAKY_NODE_REGISTER: u64 = 3;

fn check() -> Result<(), &'static str> {
    let answer = |constructor| is_confined(constructor).map_err(|_| "is_confined refused");
    if answer(CONFINED)? != (true, 0) {
        return Err("a constructor of only safe components says it is not confined");
    }
    if answer(WITH_CONSOLE)? != (true, 0) {
        return Err("a constructor whose only unsafe component is a hole says it is not confined");
    }
    if answer(LEAKY)? != (false, 1 << LEAKY_NODE_REGISTER) {
        return Err("a constructor with a writable node that is no hole does not name it");
    }
    let before = bank::info(BANK).map_err(|_| "bank info refused")?;
    yield_process(WITH_CONSOLE, BANK, METER, MADE).map_err(|_| "yield refused")?;
    let after = bank::info(BANK).map_err(|_| "bank info refused")?;
    // A root node, a space copied node by node, pages the program can write, and the
    // process's own bank's forwarder: all bought from the requester's bank.
    if after.nodes < before.nodes + 3 || after.pages <= before.pages {
        return Err("the yielded process was not paid for by the requester's bank");
    }
    yield_process(WITH_CONSOLE, BANK, METER, MADE).map_err(|_| "a second yield refused")?;
    let held = bank::info(BANK).map_err(|_| "bank info refused")?;
    // A yield that sends no bank is paid by no one: the constructor's registers for the
    // requester's bank and meter hold void, not what the last requester sent.
    let unpaid = user::syscall::invoke(user::syscall::Invocation {
        receive: &[MADE],
        ..user::syscall::Invocation::call(WITH_CONSOLE, user::constructor::order::YIELD)
    });
    if unpaid.code != user::constructor::refusal::NOT_A_BANK {
        return Err("a yield that sent no bank was not refused");
    }
    if bank::info(BANK).map_err(|_| "bank info refused")? != held {
        return Err("a yield that sent no bank was paid for by the last requester's");
    }
    // A capability that is no bank is refused before it is called: this program's own start
    // capability, which would never answer (the program waits for the constructor).
    process::make_start(OWN_PROCESS, 0, FAKE_BANK).map_err(|_| "make_start refused")?;
    let fake = yield_process(WITH_CONSOLE, FAKE_BANK, METER, MADE);
    if fake != Err(Error::Reply(user::constructor::refusal::NOT_A_BANK)) {
        return Err("a yield sent a capability that is no bank was not refused as not a bank");
    }
    // The verifier itself is no bank either; a bank below a bank is one.
    if yield_process(WITH_CONSOLE, VERIFIER, METER, MADE) != fake {
        return Err("a yield sent the space bank's verifier was not refused as not a bank");
    }
    bank::create_child(BANK, 64, 64, FAKE_BANK).map_err(|_| "a bank below refused")?;
    yield_process(WITH_CONSOLE, FAKE_BANK, METER, MADE).map_err(|_| "a yield paid by a bank below the requester's refused")?;
    Ok(())
}

fn main() -> u64 {
    u64::from(!verdict("constructor-test", check()))
}

user::entry!(main);
