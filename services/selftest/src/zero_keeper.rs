//! A space keeper that resolves faults with fresh zeroed pages (demand zero).
//!
//! Capability registers: 0 console, 1 own process, 2 a node whose slots hold fresh pages.
//! A client first calls it with `REGISTER` and its space (the one under the keeper node)
//! as capability 0; then each fault under that space arrives as a `SPACE_FAULT` message,
//! and the reply restarts the faulting process.
#![no_std]
#![no_main]

use holdfast_userlib::abi::keeper::SPACE_FAULT;
use holdfast_userlib::abi::methods::{node, page};
use holdfast_userlib::{self as user, Invocation, space};

pub const REGISTER: u64 = 1;
const POOL: u8 = 2;
const CLIENT_SPACE: u8 = 3;
const LEVEL: u8 = 4;
const PAGE: u8 = 5;
const RECEIVED: u8 = 12;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;

/// Puts a fresh zeroed page from the pool under `address` in the client's space; false if
/// the pool is empty or the tree has no height-1 node there.
fn map_zero_page(address: u64, next_page: &mut u64) -> bool {
    if !space::fetch_leaf_node(CLIENT_SPACE, address, LEVEL) {
        return false;
    }
    let fetched = Invocation::call(POOL, node::FETCH, [*next_page, 0, 0, 0])
        .receiving(&[PAGE])
        .invoke(&mut []);
    *next_page += 1;
    let zeroed = user::call(PAGE, page::ZERO, [0; 4]);
    let slot = space::slot(1, address);
    let swapped = Invocation::call(LEVEL, node::SWAP, [slot, 0, 0, 0])
        .sending(&[PAGE])
        .invoke(&mut []);
    fetched.code == 0 && zeroed.is_ok() && swapped.code == 0
}

fn main() -> u64 {
    let mut next_page = 0;
    let wait = |reply: Invocation| {
        reply
            .receiving(&[RECEIVED])
            .resume_into(RESUME)
            .invoke(&mut [])
    };
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        let code = match message.code {
            REGISTER => {
                let moved = Invocation::call(
                    user::OWN_PROCESS,
                    holdfast_userlib::abi::methods::process::SWAP_REGISTER,
                    [u64::from(CLIENT_SPACE), 0, 0, 0],
                )
                .sending(&[RECEIVED])
                .invoke(&mut []);
                moved.code
            }
            SPACE_FAULT => {
                let address = message.words[3];
                if map_zero_page(address, &mut next_page) {
                    0
                } else {
                    1
                }
            }
            _ => 99,
        };
        message = wait(Invocation::return_to(RESUME, code, [0; 4]));
    }
}

user::entry!(main);
