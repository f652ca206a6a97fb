//! The ABI version 2 system call, `invoke`, which the stubs in [`crate::interface`] are
//! built on. The running kernel still speaks version 1 ([`crate::invoke`]) until the kernel
//! core implementing version 2 lands.

use crate::abi::interface::{InvocationError, ObjectError};
use crate::abi::{CAPABILITY_REGISTER_COUNT, INVOCATION_STRING_BYTES_MAX};

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

/// What an invocation does after sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wait for the reply (through a fresh resume capability).
    Call = 0,
    /// Reply to a caller, then wait for the next invocation.
    Return = 1,
    /// Do not wait.
    Send = 2,
}

/// One invocation: what is sent and where what comes back goes.
#[derive(Debug)]
pub struct Invocation<'a> {
    pub target: CapReg,
    pub kind: Kind,
    /// The order code (call, send) or the reply code (return).
    pub code: u64,
    pub words: [u64; 4],
    /// At most [`INVOCATION_STRING_BYTES_MAX`] bytes; empty: no string.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// 0 for success; a server's reply code; or an error code (see [`Error`]).
    pub code: u64,
    pub words: [u64; 4],
    /// The badge of the capability invoked, for a server receiving a call.
    pub badge: u64,
    /// Bytes of the buffer the string that came back fills.
    pub string_length: usize,
}

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

/// Builds `rdi`: target, kind, the capability registers sent and received, and where a
/// resume capability goes.
fn encode_selector(invocation: &Invocation<'_>) -> u64 {
    assert!(invocation.send.len() <= 4 && invocation.receive.len() <= 4);
    let registers = |list: &[CapReg]| {
        list.iter()
            .enumerate()
            .fold(0, |bits, (position, register)| {
                bits | u64::from(register.0) << (4 * position)
            })
    };
    u64::from(invocation.target.0)
        | (invocation.kind as u64) << 4
        | registers(invocation.send) << 8
        | (invocation.send.len() as u64) << 24
        | registers(invocation.receive) << 32
        | (invocation.receive.len() as u64) << 48
        | u64::from(invocation.resume_into.0) << 52
}

/// The one system call: performs `invocation` and returns what came back.
pub fn invoke(invocation: Invocation<'_>) -> Received {
    assert!(invocation.string.len() <= INVOCATION_STRING_BYTES_MAX);
    let selector = encode_selector(&invocation);
    let code: u64;
    let mut words = invocation.words;
    let badge: u64;
    let string_length: u64;
    let buffer_capacity = invocation.buffer.len();
    // SAFETY: the kernel reads at most `string.len()` bytes at `string` and writes at most
    // `buffer.len()` bytes at `buffer` (r13 out says how many), and both borrows outlive
    // the instruction, `buffer`'s exclusively; it writes only the registers declared as
    // outputs here and clobbers rcx and r11 (where `syscall` saves rip and rflags); it never
    // touches our stack. Memory is not declared `nomem` so the compiler assumes the buffer
    // changed.
    unsafe {
        core::arch::asm!(
            "syscall",
            in("rdi") selector,
            in("rsi") invocation.code,
            inout("rdx") words[0],
            inout("r10") words[1],
            inout("r8") words[2],
            inout("r9") words[3],
            inout("r12") invocation.string.as_ptr() as u64 => badge,
            inout("r13") invocation.string.len() as u64 => string_length,
            in("r14") invocation.buffer.as_mut_ptr() as u64,
            in("r15") buffer_capacity as u64,
            lateout("rax") code,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    // The kernel promises never to report more than fits; a larger length would have
    // callers read past what it wrote.
    let string_length = string_length as usize;
    assert!(string_length <= buffer_capacity);
    Received {
        code,
        words,
        badge,
        string_length,
    }
}
