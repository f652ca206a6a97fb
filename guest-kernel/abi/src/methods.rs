//! Kernel objects' order codes and the errors their methods return.
//!
//! Capabilities are passed in the invocation's capability list (the first one is the
//! argument where a method takes one) and returned in the receive registers.

/// Every kernel object: word 0 its capability type, word 1 its rights.
pub const IDENTIFY: u64 = 0;

/// Why a kernel object refused a method. Small codes, unlike
/// [`crate::InvocationError`]'s.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectError {
    /// The capability's type has no method with this order code.
    InvalidOrder = 1,
    /// A slot or capability register index is out of range.
    InvalidSlot = 2,
    /// A method that changes the object, through a read-only or weak capability.
    ReadOnly = 3,
    /// An argument capability of the wrong type.
    WrongType = 4,
    /// An offset, length, height, flag or register value out of range.
    OutOfRange = 5,
    /// The method is not allowed here (e.g. a process writing its own registers).
    NoRight = 6,
}

impl ObjectError {
    pub const ALL: [Self; 6] = [
        Self::InvalidOrder,
        Self::InvalidSlot,
        Self::ReadOnly,
        Self::WrongType,
        Self::OutOfRange,
        Self::NoRight,
    ];

    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL.into_iter().find(|error| *error as u64 == code)
    }
}

pub mod number {
    /// Words 0 and 1: the number's two words.
    pub const VALUE: u64 = 1;
}

pub mod page {
    /// Word 0 offset, word 1 length: the bytes as the reply's string.
    pub const READ: u64 = 1;
    /// Word 0 offset: writes the string there.
    pub const WRITE: u64 = 2;
    pub const ZERO: u64 = 3;
    /// A read-only capability to the page.
    pub const WEAKEN: u64 = 4;
}

/// Node methods; fetch, swap, clear and weaken also apply to space capabilities.
pub mod node {
    /// Word 0 slot: the capability there (weakened through a weak capability).
    pub const FETCH: u64 = 1;
    /// Word 0 slot, capability 0: puts it there and returns the old one.
    pub const SWAP: u64 = 2;
    /// Word 0 slot: voids it.
    pub const CLEAR: u64 = 3;
    /// A read-only, weak capability to the node.
    pub const WEAKEN: u64 = 4;
    /// Word 0 height (0..=7), word 1 flags ([`SPACE_FLAG_KEEPER`]): a space capability.
    pub const MAKE_SPACE: u64 = 5;
    /// Word 0 badge: an indirector forwarding to the capability in slot 0.
    pub const MAKE_INDIRECTOR: u64 = 6;
    /// A meter: slot 0 holds a number (microseconds left), slot 1 its keeper.
    pub const MAKE_METER: u64 = 7;
    /// A process whose root node this is (stopped until started).
    pub const MAKE_PROCESS: u64 = 8;
    /// The node is a keeper node: slot 0 the inner space, slot 1 the keeper.
    pub const SPACE_FLAG_KEEPER: u64 = 1;
}

pub mod space {
    /// Word 0 height, word 1 flags.
    pub const INFO: u64 = 5;
}

pub mod process {
    /// The register file as the reply's string: 18 little-endian words, rax, rbx, rcx,
    /// rdx, rsi, rdi, rbp, r8..r15, rip, rsp, rflags.
    pub const READ_REGISTERS: u64 = 1;
    /// The string as [`READ_REGISTERS`] gives it; rip and rsp must be user addresses.
    pub const WRITE_REGISTERS: u64 = 2;
    /// Word 0 capability register: the capability there.
    pub const FETCH_REGISTER: u64 = 3;
    /// Word 0 capability register, capability 0: puts it there, returns the old one.
    pub const SWAP_REGISTER: u64 = 4;
    /// Capability 0 (a space, or void).
    pub const SET_SPACE: u64 = 5;
    /// Capability 0 (a start capability, or void): where its exceptions go.
    pub const SET_KEEPER: u64 = 6;
    /// Capability 0 (a meter, or void).
    pub const SET_METER: u64 = 7;
    /// Word 0 badge: a start capability to the process.
    pub const MAKE_START: u64 = 8;
    /// Runs a stopped or faulted process from its registers.
    pub const START: u64 = 9;
    /// Word 0 exit code.
    pub const STOP: u64 = 10;
    /// The process's space capability.
    pub const FETCH_SPACE: u64 = 11;
}

pub mod meter {
    /// Word 0: microseconds left.
    pub const REMAINING: u64 = 1;
    /// Word 0: microseconds to set.
    pub const REFILL: u64 = 2;
    /// Capability 0 (a start capability, or void): where exhaustion goes.
    pub const SET_KEEPER: u64 = 3;
}

pub mod console {
    /// Writes the string; word 0 its length.
    pub const WRITE: u64 = 1;
}

pub mod clock {
    /// Word 0: nanoseconds since boot.
    pub const NOW: u64 = 1;
}
