//! The invocation as the generated stubs in [`crate::interface`] describe it, with
//! capability registers named and results checked; [`invoke`] hands it to
//! [`crate::Invocation`], the one system call.

use crate::abi::CAPABILITY_REGISTER_COUNT;
use crate::abi::descriptor::{Descriptor, Registers};
use crate::abi::interface::{InvocationError, ObjectError};

/// A capability register index, 0..=15.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapReg(u8);

impl CapReg {
    /// Panics if `index` is not a capability register: that is a bug in the program.
    pub const fn new(index: u8) -> Self {
        assert!((index as usize) < CAPABILITY_REGISTER_COUNT);
        Self(index)
    }

    pub const fn index(self) -> u8 {
        self.0
    }
}

pub use crate::abi::descriptor::Kind;

/// One invocation: what is sent and where what comes back goes.
#[derive(Debug)]
pub struct Invocation<'a> {
    pub target: CapReg,
    pub kind: Kind,
    /// The order code (call, send) or the reply code (return).
    pub code: u64,
    pub words: [u64; 4],
    /// At most [`crate::abi::INVOCATION_STRING_BYTES_MAX`] bytes; empty: no string.
    pub string: &'a [u8],
    /// Capabilities sent, at most 4.
    pub send: &'a [CapReg],
    /// Registers that receive the capabilities that come back, at most 4.
    pub receive: &'a [CapReg],
    /// The register that receives the resume capability when a return receives a call.
    pub resume_into: CapReg,
    /// Receives the string that comes back; what does not fit is dropped.
    pub buffer: &'a mut [u8],
}

impl Invocation<'_> {
    /// A call of `target` with `order` that sends and receives nothing else; fill in the
    /// rest with struct update syntax.
    pub fn call(target: CapReg, order: u64) -> Self {
        Self {
            target,
            kind: Kind::Call,
            code: order,
            words: [0; 4],
            string: &[],
            send: &[],
            receive: &[],
            // A call receives a reply, never a call, so no resume capability comes back.
            resume_into: CapReg(0),
            buffer: &mut [],
        }
    }
}

/// What comes back from an invocation.
pub use crate::Reply as Received;

impl Received {
    /// `Ok(self)` if the code is 0, else the error it names.
    pub fn check(self) -> Result<Self, Error> {
        match Error::from_code(self.code) {
            None => Ok(self),
            Some(error) => Err(error),
        }
    }
}

/// A non-zero result code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The kernel refused the invocation itself.
    Invocation(InvocationError),
    /// A kernel object refused the method.
    Object(ObjectError),
    /// A code neither kind of error uses: a server's reply, when the target was a start
    /// capability rather than a kernel object.
    Reply(u64),
}

impl Error {
    /// The error a result code names; `None` for 0, success.
    pub fn from_code(code: u64) -> Option<Self> {
        if code == 0 {
            None
        } else if let Some(error) = InvocationError::from_code(code) {
            Some(Self::Invocation(error))
        } else if let Some(error) = ObjectError::from_code(code) {
            Some(Self::Object(error))
        } else {
            Some(Self::Reply(code))
        }
    }
}

/// The one system call: performs `invocation` and returns what came back.
pub fn invoke(invocation: Invocation<'_>) -> Received {
    let registers = |list: &[CapReg]| {
        let indices: [u8; 4] = core::array::from_fn(|at| list.get(at).map_or(0, |r| r.0));
        Registers::new(&indices[..list.len()]).expect("at most four capability registers")
    };
    let descriptor = Descriptor {
        target: invocation.target.0,
        kind: invocation.kind,
        send: registers(invocation.send),
        receive: registers(invocation.receive),
        // Only a return can receive a call, and so a resume capability.
        resume: (invocation.kind == Kind::Return).then_some(invocation.resume_into.0),
    };
    let raw = crate::Invocation {
        descriptor,
        order: invocation.code,
        words: invocation.words,
        string: invocation.string,
    };
    raw.invoke(invocation.buffer)
}
