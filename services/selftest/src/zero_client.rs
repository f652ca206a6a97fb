//! Faults on pages nobody mapped, under a keeper node whose keeper is `zero-keeper`: each
//! fault is resolved with a zeroed page and the program goes on.
//!
//! Capability registers: 0 console, 1 own process, 3 a spare node (becomes the keeper
//! node), 4 start capability to zero-keeper; it fetches its own space into 2.
#![no_std]
#![no_main]

use holdfast_userlib::abi::{USER_STACK_BYTES, USER_STACK_TOP};
use holdfast_userlib::{self as user, Invocation};

const SPACE: u8 = 2;
const KEEPER_NODE: u8 = 3;
const KEEPER: u8 = 4;
const WRAPPED: u8 = 5;
const REGISTER: u64 = 1;

fn main() -> u64 {
    let mut checks = user::check::Checks::new("zero-client");
    let wrapped = user::space::wrap_own_space(SPACE, KEEPER_NODE, KEEPER, WRAPPED);
    let registered = Invocation::call(KEEPER, REGISTER, [0; 4])
        .sending(&[SPACE])
        .invoke(&mut []);
    checks.check(
        "wrap the own space in a keeper node",
        wrapped && registered.code == 0,
    );
    // Three pages below the stack, in its height-1 node, that nobody mapped.
    let mut all_zero_then_kept = true;
    for page in 1..=3u64 {
        let address = (USER_STACK_TOP - USER_STACK_BYTES - page * 4096) as *mut u64;
        // SAFETY: the first access faults and the keeper maps a zeroed page there; the
        // volatile accesses make every read and write reach memory.
        unsafe {
            all_zero_then_kept &= core::ptr::read_volatile(address) == 0;
            core::ptr::write_volatile(address, page * 1111);
            all_zero_then_kept &= core::ptr::read_volatile(address) == page * 1111;
        }
    }
    checks.check(
        "three faults resolved by the keeper with zeroed pages",
        all_zero_then_kept,
    );
    checks.failures
}

user::entry!(main);
