//! Asking the virtual copy keeper (`services/virtual-copy`; KeyKOS's VCSK) for a
//! copy-on-write copy of a space.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// The orders of the keeper's start capability (badge 0).
pub mod order {
    /// Capabilities sent: the original space (no keeper of its own) and a bank. Capability
    /// back: a space of the same height that reads as the original until written; each page
    /// written becomes a private copy bought from the bank (a page the original lacks, a
    /// zeroed one). Install it in a space to use it.
    pub const MAKE_COPY: u64 = 1;
}

/// What the keeper answers instead of 0 when it refuses (server reply codes).
pub mod refusal {
    /// It keeps as many copies as it can (32).
    pub const TOO_MANY_COPIES: u64 = 500;
    /// The original is not a space, has a keeper, or the bank refused a node.
    pub const BAD_ORIGINAL: u64 = 501;
}

/// A copy of `original`, paid for by `bank`, into `into`.
pub fn make_copy(keeper: CapReg, original: CapReg, bank: CapReg, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { send: &[original, bank], receive: &[into], ..Invocation::call(keeper, order::MAKE_COPY) })
        .check()
        .map(|_| ())
}
