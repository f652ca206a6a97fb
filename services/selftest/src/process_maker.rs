//! The many-processes test's workload (hypervisor-glue/holdfast/tests/store.rs): makes a
//! process of every leaf node of a tree it is given (`node.make_process`), gives each
//! registers of its own (rax holds its number), prints `process-maker: made <n> processes`
//! and waits. After a restart (the clock's boot count changed) it checks that every one of
//! them came back, with its registers, and prints `process-maker: after the restart, <n>
//! processes came back` or what is missing.
//!
//! The tree has three levels under the root node, 32 slots each (up to 32,768 leaves): the
//! root's slots hold nodes whose slots hold nodes whose slots hold the leaves, filled in
//! order; the first void slot ends a level. Each made process's capability goes into slot
//! 0 of its own root node (its capability register 0), where the check finds it: a
//! process that is not in the kernel's table refuses `read_registers`.
//!
//! If the kernel refuses a process for want of memory (`exhausted`), it prints
//! `process-maker: make_process refused (exhausted) after <n> processes` and waits, as
//! the system goes on.
//!
//! Capability registers: 0 console, 1 the tree's root node, 2 the clock; 3 to 6 are used
//! for the walk; 7, if a number, is how many nanoseconds to wait before making any (the
//! exhaustion test begins so just before the first checkpoint's snapshot).
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::interface::{clock, node, process};
use user::abi::interface::ObjectError;
use user::syscall::{CapReg, Error};

const TREE: CapReg = CapReg::new(1);
const CLOCK: CapReg = CapReg::new(2);
const LEVEL: [CapReg; 3] = [CapReg::new(3), CapReg::new(4), CapReg::new(5)];
const PROCESS: CapReg = CapReg::new(6);
const DELAY: CapReg = CapReg::new(7);
/// A register that stays void: a return through it waits for a message that never comes.
const NOTHING: CapReg = CapReg::new(15);
const SLOTS: u64 = 32;
const REGISTER_BYTES: usize = 18 * 8;
const EXHAUSTED: &str = "exhausted";

fn print_with_number(prefix: &str, value: u64, suffix: &str) {
    let mut digits = [0u8; 20];
    user::print_parts(&[prefix.as_bytes(), user::decimal(value, &mut digits), suffix.as_bytes()]);
}

/// Calls `with` on each leaf of the tree, fetched into `LEVEL[2]`, with its number; stops
/// at the first error `with` returns. Returns the number of leaves.
fn each_leaf(mut with: impl FnMut(u64) -> Result<(), &'static str>) -> Result<u64, (&'static str, u64)> {
    let mut leaves = 0;
    let fetched = |node: CapReg, slot: u64, into: CapReg| {
        node::fetch(node, slot, into).is_ok() && user::interface::identify(into).is_ok_and(|identity| identity.type_code != 0)
    };
    for first in 0..SLOTS {
        if !fetched(TREE, first, LEVEL[0]) {
            break;
        }
        for second in 0..SLOTS {
            if !fetched(LEVEL[0], second, LEVEL[1]) {
                break;
            }
            for third in 0..SLOTS {
                if !fetched(LEVEL[1], third, LEVEL[2]) {
                    break;
                }
                with(leaves).map_err(|what| (what, leaves))?;
                leaves += 1;
            }
        }
    }
    Ok(leaves)
}

/// The registers process `number` gets: rax its number, rip and rsp user addresses, as
/// `read_registers` returns them.
fn registers_of(number: u64) -> [u8; REGISTER_BYTES] {
    let mut bytes = [0u8; REGISTER_BYTES];
    bytes[0..8].copy_from_slice(&number.to_le_bytes());
    bytes[15 * 8..16 * 8].copy_from_slice(&user::abi::USER_ADDRESS_MIN.to_le_bytes());
    bytes[16 * 8..17 * 8].copy_from_slice(&user::abi::USER_STACK_TOP.to_le_bytes());
    // Interrupts on: the kernel sets the flag whatever is written.
    bytes[17 * 8..].copy_from_slice(&0x202u64.to_le_bytes());
    bytes
}

/// Spins for `nanoseconds` by the clock.
fn wait_nanoseconds(nanoseconds: u64) {
    let now = || clock::now(CLOCK).map_or(0, |now| now.nanoseconds);
    let until = now().saturating_add(nanoseconds);
    while now() < until {
        core::hint::spin_loop();
    }
}

fn main() -> u64 {
    let boot = clock::now(CLOCK).map_or(0, |now| now.boot);
    wait_nanoseconds(user::interface::number::value(DELAY).map_or(0, |value| value.word0));
    let made = each_leaf(|number| {
        node::make_process(LEVEL[2], PROCESS).map_err(|error| match error {
            Error::Object(ObjectError::Exhausted) => EXHAUSTED,
            _ => "make_process refused",
        })?;
        process::write_registers(PROCESS, &registers_of(number)).map_err(|_| "write_registers refused")?;
        node::swap(LEVEL[2], 0, PROCESS, PROCESS).map_err(|_| "storing the process capability failed")
    });
    let made = match made {
        Ok(made) => made,
        // The kernel's one limit on processes, refused cleanly: the system goes on (and
        // checkpoints) with those made.
        Err((EXHAUSTED, number)) => {
            print_with_number("process-maker: make_process refused (exhausted) after ", number, " processes\n");
            // Waits for good (it cannot stop itself: register 1 is the tree, not its own
            // process), using no time meanwhile.
            let _ = user::Invocation::return_to(NOTHING.index(), 0, [0; 4]).invoke(&mut []);
            return 0;
        }
        Err((what, number)) => {
            print_with_number("process-maker: MISMATCH: process ", number, ": ");
            user::print_parts(&[what.as_bytes(), b"\n"]);
            return 1;
        }
    };
    print_with_number("process-maker: made ", made, " processes\n");
    // Waits for a restart, reading the clock now and then.
    while clock::now(CLOCK).map_or(boot, |now| now.boot) == boot {
        for _ in 0..1_000_000 {
            core::hint::spin_loop();
        }
    }
    let back = each_leaf(|number| {
        node::fetch(LEVEL[2], 0, PROCESS).map_err(|_| "its capability is gone")?;
        let mut registers = [0u8; REGISTER_BYTES];
        process::read_registers(PROCESS, &mut registers).map_err(|_| "not in the process table")?;
        if registers != registers_of(number) {
            return Err("its registers differ");
        }
        Ok(())
    });
    match back {
        Ok(back) => print_with_number("process-maker: after the restart, ", back, " processes came back\n"),
        Err((what, number)) => {
            print_with_number("process-maker: MISMATCH: after the restart, process ", number, ": ");
            user::print_parts(&[what.as_bytes(), b"\n"]);
            return 1;
        }
    }
    0
}

user::entry!(main);
