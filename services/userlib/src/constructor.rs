//! Asking a constructor (`services/constructor`; KeyKOS's factory, EROS's constructor) for a
//! new process of its program, and whether that process is confined.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// The orders of a constructor's start capability.
pub mod order {
    /// Capabilities sent: a bank and a meter, which the new process's storage and CPU time
    /// come from. Capability back: a start capability of the new process, already running.
    pub const YIELD: u64 = 1;
    /// Words back: 1 if every capability a yielded process holds is safe (conveys no
    /// authority to write or to communicate) or one of the constructor's listed holes, else
    /// 0; then a bitmask of the capability registers that are neither.
    pub const IS_CONFINED: u64 = 2;
}

/// What a constructor answers instead of 0 when it refuses (server reply codes).
pub mod refusal {
    /// The bank refused (its limit, the store) or is not a bank; nothing was made.
    pub const BANK_REFUSED: u64 = 400;
    /// Copying the program's space failed; what was bought is sold back.
    pub const COPY_FAILED: u64 = 401;
    /// An order the constructor does not have.
    pub const BAD_REQUEST: u64 = 402;
    /// The bank sent is no live bank (asked of the space bank before it is called): a
    /// capability that is not one might never answer, and the constructor serves others.
    pub const NOT_A_BANK: u64 = 403;
}

/// Yields a new process, paid for by `bank` and run on `meter`; its start capability goes
/// into `into`.
pub fn yield_process(constructor: CapReg, bank: CapReg, meter: CapReg, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { send: &[bank, meter], receive: &[into], ..Invocation::call(constructor, order::YIELD) })
        .check()
        .map(|_| ())
}

/// Whether the processes `constructor` yields are confined; the registers that leak.
pub fn is_confined(constructor: CapReg) -> Result<(bool, u64), Error> {
    let [confined, leaks, ..] = invoke(Invocation::call(constructor, order::IS_CONFINED)).check()?.words;
    Ok((confined == 1, leaks))
}
