//! Address spaces are node trees and page tables only their cache: a page swapped into a
//! slot of this program's own space tree is seen at the next access, and so is its
//! replacement, and so is a page another process (`space-changer`) swaps in.
//!
//! Capability registers: 0 console, 1 own process, 3 and 4 two pages, 6 `space-changer`'s
//! start capability; it fetches its own space (height 7) into 2.
#![no_std]
#![no_main]

use holdfast_userlib::abi::methods::{node, page, process, space as space_order};
use holdfast_userlib::abi::{USER_STACK_BYTES, USER_STACK_TOP};
use holdfast_userlib::{self as user, Invocation, space};

const SPACE: u8 = 2;
const FIRST_PAGE: u8 = 3;
const SECOND_PAGE: u8 = 4;
const LEVEL: u8 = 5;
const CHANGER: u8 = 6;

/// Below the stack, in the same height-1 node (which covers 128 KiB; the stack is 64 KiB):
/// the loader made that node, and this slot of it is empty.
const ADDRESS: u64 = USER_STACK_TOP - USER_STACK_BYTES - 4096;

fn read_at_address() -> u8 {
    // SAFETY: ADDRESS is mapped by the time this runs (the checks say whether it is); the
    // volatile read makes each call touch memory, not a cached value.
    unsafe { core::ptr::read_volatile(ADDRESS as *const u8) }
}

fn main() -> u64 {
    let mut checks = user::check::Checks::new("space-test");
    let fetched = Invocation::call(user::OWN_PROCESS, process::FETCH_SPACE, [0; 4])
        .receiving(&[SPACE])
        .invoke(&mut []);
    // Down this program's own tree to the height-1 node that covers ADDRESS.
    let walked = fetched.code == 0 && space::fetch_leaf_node(SPACE, ADDRESS, LEVEL);
    checks.check("walk down the own space tree", walked);

    let first = Invocation::call(FIRST_PAGE, page::WRITE, [0; 4])
        .with_string(b"F")
        .invoke(&mut []);
    let second = Invocation::call(SECOND_PAGE, page::WRITE, [0; 4])
        .with_string(b"S")
        .invoke(&mut []);
    let swap = |page: u8| {
        Invocation::call(LEVEL, node::SWAP, [space::slot(1, ADDRESS), 0, 0, 0])
            .sending(&[page])
            .invoke(&mut [])
            .code
    };
    let occupied = || {
        let reply = Invocation::call(LEVEL, space_order::OCCUPIED, [0; 4]).invoke(&mut []);
        (reply.code == 0).then_some(reply.words[0] >> space::slot(1, ADDRESS) & 1 == 1)
    };
    let before = occupied();
    let swapped = swap(FIRST_PAGE);
    checks.check(
        "a page swapped into the tree is mapped",
        first.code == 0 && swapped == 0 && read_at_address() == b'F',
    );
    checks.check("space.occupied says the slot was empty and now holds the page", before == Some(false) && occupied() == Some(true));
    let swapped = swap(SECOND_PAGE);
    checks.check(
        "its replacement is seen at the next access",
        second.code == 0 && swapped == 0 && read_at_address() == b'S',
    );
    // The kernel drops only the page tables of the processes that translated through the
    // node changed: this one's, though another process changes it.
    let changed = Invocation::call(CHANGER, 0, [space::slot(1, ADDRESS), 0, 0, 0]).sending(&[LEVEL]).invoke(&mut []).code;
    checks.check("a page another process swaps into the tree is seen at the next access", changed == 0 && read_at_address() == b'C');
    checks.failures
}

user::entry!(main);
