//! Working on address-space trees from ring 3: a process's space is a height-7 tree of
//! nodes (5 bits of address per level) with 4 KiB pages as leaves, as the kernel walks it
//! (`holdfast_objects::space`).

use crate::abi::methods::{node, process, space_flags};
use crate::{Invocation, OWN_PROCESS};

/// The height of every program's space, as the loader makes it.
pub const SPACE_HEIGHT: u64 = 7;

/// The slot of a height-`height` space node that covers `address`.
pub fn slot(height: u64, address: u64) -> u64 {
    (address >> (12 + 5 * (height - 1))) & 31
}

/// Fetches into register `into` the height-1 node of the space in register `space` that
/// covers `address`; false if a level on the way refuses.
pub fn fetch_leaf_node(space: u8, address: u64, into: u8) -> bool {
    let mut from = space;
    for height in (2..=SPACE_HEIGHT).rev() {
        let reply = Invocation::call(from, node::FETCH, [slot(height, address), 0, 0, 0])
            .receiving(&[into])
            .invoke(&mut []);
        if reply.code != 0 {
            return false;
        }
        from = into;
    }
    true
}

/// Puts this process's space under a keeper: fetches the space into register `space`,
/// makes the node in `keeper_node` a keeper node (slot 0 the space, slot 1 the start
/// capability in `keeper`), makes a space of it in `wrapped` and runs on that. Faults the
/// space cannot resolve then go to the keeper. False if any step is refused.
pub fn wrap_own_space(space: u8, keeper_node: u8, keeper: u8, wrapped: u8) -> bool {
    let steps = [
        Invocation::call(OWN_PROCESS, process::FETCH_SPACE, [0; 4])
            .receiving(&[space])
            .invoke(&mut []),
        Invocation::call(keeper_node, node::SWAP, [0; 4])
            .sending(&[space])
            .invoke(&mut []),
        Invocation::call(keeper_node, node::SWAP, [1, 0, 0, 0])
            .sending(&[keeper])
            .invoke(&mut []),
        Invocation::call(
            keeper_node,
            node::MAKE_SPACE,
            [SPACE_HEIGHT, space_flags::KEEPER, 0, 0],
        )
        .receiving(&[wrapped])
        .invoke(&mut []),
        Invocation::call(OWN_PROCESS, process::SET_SPACE, [0; 4])
            .sending(&[wrapped])
            .invoke(&mut []),
    ];
    steps.iter().all(|reply| reply.code == 0)
}
