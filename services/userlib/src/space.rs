//! Working on address-space trees from ring 3: a process's space is a height-7 tree of
//! nodes (5 bits of address per level) with 4 KiB pages as leaves, as the kernel walks it
//! (`holdfast_objects::space`).

use crate::abi::interface::{ObjectError, Type};
use crate::abi::methods::{node as node_order, process, space_flags};
use crate::bank;
use crate::interface::{IdentifyResults, identify, node, space};
use crate::syscall::{CapReg, Error};
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
        let reply = Invocation::call(from, node_order::FETCH, [slot(height, address), 0, 0, 0])
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
        Invocation::call(keeper_node, node_order::SWAP, [0; 4])
            .sending(&[space])
            .invoke(&mut []),
        Invocation::call(keeper_node, node_order::SWAP, [1, 0, 0, 0])
            .sending(&[keeper])
            .invoke(&mut []),
        Invocation::call(
            keeper_node,
            node_order::MAKE_SPACE,
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

/// The capability registers a copy of a space tree works in ([`TreeCopy::copy`]).
pub struct TreeCopy {
    /// A node whose slots `2 l` and `2 l + 1` hold the original and the copy at level `l`:
    /// the walk's stack, in a node because a capability has no other place to be kept.
    pub walk: CapReg,
    /// The bank the copy's nodes are bought from.
    pub bank: CapReg,
    pub source: CapReg,
    pub target: CapReg,
    /// Holds each of the original's slots in turn, for `leaf`.
    pub child: CapReg,
    pub made: CapReg,
    pub scratch: CapReg,
}

/// A space tree is at most this many levels deep (the ABI's space height 7, and one).
const TREE_LEVELS_MAX: u64 = 8;
const SPACE_SLOTS: u64 = 32;

impl TreeCopy {
    /// Copies the space in `original` into a tree of the same shape, its nodes new (bought
    /// from `bank`), and leaves the copy's space capability in `made`. Every space flag
    /// word passes `flags_ok` first. What the copy holds where the original holds anything
    /// but a space (in `child`) is `leaf`'s to say: the register with what to put there,
    /// or `None` to leave the slot empty. The constructor copies writable pages and shares
    /// read-only ones; the virtual copy shares them all, weakened.
    pub fn copy(
        &self,
        original: CapReg,
        flags_ok: &dyn Fn(u64) -> Result<(), Error>,
        leaf: &mut dyn FnMut(IdentifyResults) -> Result<Option<CapReg>, Error>,
    ) -> Result<(), Error> {
        node::swap(self.walk, 0, original, self.scratch)?;
        self.new_space(original, flags_ok)?;
        node::swap(self.walk, 1, self.made, self.scratch)?;
        self.copy_level(0, flags_ok, leaf)?;
        node::fetch(self.walk, 1, self.made)
    }

    /// A new space node in `made` of the shape of the space in `original`.
    fn new_space(&self, original: CapReg, flags_ok: &dyn Fn(u64) -> Result<(), Error>) -> Result<(), Error> {
        let shape = space::info(original)?;
        flags_ok(shape.flags)?;
        bank::buy_node(self.bank, self.made)?;
        node::make_space(self.made, shape.height, shape.flags, self.made)
    }

    fn copy_level(
        &self,
        level: u64,
        flags_ok: &dyn Fn(u64) -> Result<(), Error>,
        leaf: &mut dyn FnMut(IdentifyResults) -> Result<Option<CapReg>, Error>,
    ) -> Result<(), Error> {
        if level >= TREE_LEVELS_MAX {
            return Err(Error::Object(ObjectError::OutOfRange));
        }
        // Only the slots that hold something: three invocations for each of a node's 32
        // slots made the walk most of a constructor's yield (a program's tree is sparse).
        node::fetch(self.walk, 2 * level, self.source)?;
        let occupied = space::occupied(self.source)?;
        node::fetch(self.walk, 2 * level + 1, self.target)?;
        for slot in (0..SPACE_SLOTS).filter(|slot| occupied >> slot & 1 != 0) {
            space::fetch(self.source, slot, self.child)?;
            let Ok(identity) = identify(self.child) else { continue };
            let copied = if identity.type_code == Type::Space as u64 {
                self.new_space(self.child, flags_ok)?;
                node::swap(self.walk, 2 * (level + 1), self.child, self.scratch)?;
                node::swap(self.walk, 2 * (level + 1) + 1, self.made, self.scratch)?;
                self.copy_level(level + 1, flags_ok, leaf)?;
                // The level below used the registers: this level's nodes back, and the copy.
                node::fetch(self.walk, 2 * level, self.source)?;
                node::fetch(self.walk, 2 * level + 1, self.target)?;
                node::fetch(self.walk, 2 * (level + 1) + 1, self.made)?;
                self.made
            } else {
                match leaf(identity)? {
                    Some(copied) => copied,
                    None => continue,
                }
            };
            space::swap(self.target, slot, copied, self.scratch)?;
        }
        Ok(())
    }
}
