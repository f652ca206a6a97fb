//! Nodes: 32 capability slots, the only container of capabilities besides a process's
//! capability registers (which are themselves slots of its root node).

use crate::Capability;

pub const NODE_SLOT_COUNT: usize = 32;

/// A slot index known to be in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u8);

impl Slot {
    /// `None` when `index` is not below [`NODE_SLOT_COUNT`]: the caller answers with an
    /// invalid-slot error rather than trusting a program's number.
    pub fn new(index: u64) -> Option<Self> {
        (index < NODE_SLOT_COUNT as u64).then_some(Self(index as u8))
    }

    /// A slot index fixed in the code; out of range fails the build where used in a const.
    pub const fn constant(index: u8) -> Self {
        assert!(
            (index as usize) < NODE_SLOT_COUNT,
            "slot index beyond the node"
        );
        Self(index)
    }

    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    slots: [Capability; NODE_SLOT_COUNT],
}

impl Default for Node {
    fn default() -> Self {
        Self {
            slots: [Capability::VOID; NODE_SLOT_COUNT],
        }
    }
}

impl Node {
    pub fn get(&self, slot: Slot) -> Capability {
        self.slots[slot.index()]
    }

    /// Puts `capability` in `slot` and returns what was there.
    pub fn swap(&mut self, slot: Slot, capability: Capability) -> Capability {
        core::mem::replace(&mut self.slots[slot.index()], capability)
    }

    pub fn slots(&self) -> &[Capability; NODE_SLOT_COUNT] {
        &self.slots
    }
}

/// Where a process keeps its state in its root node (DESIGN.md: a process is a root node
/// holding registers, 16 capability registers, an address space, a keeper and a meter).
/// The kernel's process table is a cache of these slots.
pub mod process_root {
    use super::Slot;

    /// Capability registers 0..=15 are slots 0..=15.
    pub const CAPABILITY_REGISTERS: usize = 16;
    pub const SPACE: Slot = Slot(16);
    pub const KEEPER: Slot = Slot(17);
    pub const METER: Slot = Slot(18);
    /// A number: run state and exit code.
    pub const STATUS: Slot = Slot(19);
    /// Numbers holding the general registers, two words each: slots 20..=31 hold 24 words,
    /// enough for rax..r15, rip, rflags and fs base.
    pub const REGISTERS_FIRST: Slot = Slot(20);
    pub const REGISTER_WORDS: usize = 2 * (super::NODE_SLOT_COUNT - 20);
    // rax..r15, rip, rflags, fs base; and the fixed slots above the capability registers.
    const _: () = assert!(REGISTER_WORDS >= 19);
    const _: () = assert!(SPACE.index() >= CAPABILITY_REGISTERS);

    pub fn capability_register(index: u64) -> Option<Slot> {
        (index < CAPABILITY_REGISTERS as u64).then_some(Slot(index as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CapType, ObjectId, Version};

    #[test]
    fn slot_indices_stop_at_the_node_size() {
        assert_eq!(Slot::new(31).map(Slot::index), Some(31));
        assert_eq!(Slot::new(32), None);
        assert_eq!(Slot::new(u64::MAX), None);
    }

    #[test]
    fn swap_returns_the_old_capability() {
        let mut node = Node::default();
        let slot = Slot::new(3).unwrap();
        let page = Capability::new(CapType::Page, ObjectId(9), Version(0));
        assert!(node.swap(slot, page).is_void());
        assert_eq!(node.get(slot), page);
        assert_eq!(node.swap(slot, Capability::VOID), page);
        assert!(node.get(slot).is_void());
    }

    #[test]
    fn capability_registers_are_the_first_sixteen_slots() {
        assert_eq!(process_root::capability_register(15), Slot::new(15));
        assert_eq!(process_root::capability_register(16), None);
    }
}
