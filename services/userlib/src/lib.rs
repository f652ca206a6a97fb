//! The ring-3 side of the Holdfast ABI. A program links this crate, defines
//! `fn main() -> u64` through [`entry!`], and talks to the kernel only by invoking the
//! capabilities in its capability registers.
//!
//! [`Invocation`] is the one system call; the stubs in [`interface`] (generated from the
//! interface description) are built on it through [`syscall`]. The self-test's programs
//! hold the console in capability register 0 and their own process in 1 ([`CONSOLE`],
//! [`OWN_PROCESS`]).
#![no_std]

use abi::InvocationError;
use abi::descriptor::{Descriptor, Kind, Registers};

pub mod interface;
pub mod syscall;
pub use holdfast_abi as abi;

pub mod check;
pub mod net;
pub mod random;
pub mod spin;
pub mod space;
pub mod bank;
pub mod constructor;
pub mod virtual_copy;
pub mod keysafe;
pub mod counters;
pub mod checkpointed;

pub const CONSOLE: u8 = 0;
pub const OWN_PROCESS: u8 = 1;

/// What an `invoke` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// 0, an object error code, a server's reply code, or an [`InvocationError`] code.
    pub code: u64,
    pub words: [u64; 4],
    /// The badge of the capability this process was invoked through (when receiving).
    pub badge: u64,
    /// How many bytes of the receive buffer the message filled.
    pub string_length: usize,
}

impl Reply {
    /// The kernel's own refusal, if this is one.
    pub fn invocation_error(&self) -> Option<InvocationError> {
        InvocationError::from_code(self.code)
    }
}

/// One invocation, as the kernel sees it: `docs/interface.md` names its registers.
#[derive(Clone, Copy)]
pub struct Invocation<'a> {
    pub descriptor: Descriptor,
    pub order: u64,
    pub words: [u64; 4],
    pub string: &'a [u8],
}

impl<'a> Invocation<'a> {
    /// A call of `order` on capability register `target`, sending and receiving nothing but
    /// words.
    pub fn call(target: u8, order: u64, words: [u64; 4]) -> Self {
        let descriptor = Descriptor {
            target,
            kind: Kind::Call,
            send: Registers::NONE,
            receive: Registers::NONE,
            resume: None,
        };
        Self {
            descriptor,
            order,
            words,
            string: &[],
        }
    }

    /// A send: the invoker goes on without waiting.
    pub fn send(target: u8, order: u64, words: [u64; 4]) -> Self {
        let call = Self::call(target, order, words);
        Self {
            descriptor: Descriptor {
                kind: Kind::Send,
                ..call.descriptor
            },
            ..call
        }
    }

    /// A return: replies through `target` (usually a resume capability; a void register
    /// just waits), then waits for the next message.
    pub fn return_to(target: u8, code: u64, words: [u64; 4]) -> Self {
        let call = Self::call(target, code, words);
        Self {
            descriptor: Descriptor {
                kind: Kind::Return,
                ..call.descriptor
            },
            ..call
        }
    }

    #[must_use]
    pub fn with_string(self, string: &'a [u8]) -> Self {
        Self { string, ..self }
    }

    /// Sends the capabilities in these registers (at most four). Inlined, as the builders
    /// below: with the registers written out at the call site the descriptor is folded
    /// into a constant, instead of loops over a slice in .rodata on every invocation (an
    /// IPC path touches one page fewer, and each page a process touches costs a TLB
    /// flush and refill when it is switched out and in).
    #[inline]
    #[must_use]
    pub fn sending(mut self, registers: &[u8]) -> Self {
        self.descriptor.send = Registers::new(registers).expect("at most four registers 0..=15");
        self
    }

    /// Capabilities received land in these registers (at most four).
    #[inline]
    #[must_use]
    pub fn receiving(mut self, registers: &[u8]) -> Self {
        self.descriptor.receive = Registers::new(registers).expect("at most four registers 0..=15");
        self
    }

    /// The resume capability of a call received lands in `register`.
    #[must_use]
    #[inline]
    pub fn resume_into(mut self, register: u8) -> Self {
        self.descriptor.resume = Some(register);
        self
    }

    /// Performs the invocation; a string received lands in `buffer`. Inlined: a call
    /// out of line puts the program's loop and its `syscall` on two code pages, and each
    /// page a process touches costs a TLB flush when it is switched out and a refill when
    /// it is switched back in.
    #[inline]
    pub fn invoke(&self, buffer: &mut [u8]) -> Reply {
        self.invoke_raw(self.descriptor.encode(), buffer)
    }

    /// As [`Self::invoke`] with `rdi` given as is (tests of malformed descriptors). The
    /// registers are those of the generated [`interface::system_call`].
    #[inline]
    pub fn invoke_raw(&self, descriptor: u64, buffer: &mut [u8]) -> Reply {
        interface::system_call(descriptor, self.order, self.words, self.string, buffer)
    }
}

/// Calls `order` on capability register `target` with `words`; the result words, or the
/// reply code if it is not 0. Inlined, as [`Invocation::invoke`]: a call out of line is
/// a call and a return more per invocation, each a translation block under TCG.
#[inline]
pub fn call(target: u8, order: u64, words: [u64; 4]) -> Result<[u64; 4], u64> {
    let reply = Invocation::call(target, order, words).invoke(&mut []);
    if reply.code == 0 {
        Ok(reply.words)
    } else {
        Err(reply.code)
    }
}

/// Writes `text` to the console capability in register `capability`.
pub fn write_to(capability: u8, text: &[u8]) -> Result<(), u64> {
    let reply = Invocation::call(capability, abi::methods::console::WRITE, [0; 4])
        .with_string(text)
        .invoke(&mut []);
    if reply.code == 0 {
        Ok(())
    } else {
        Err(reply.code)
    }
}

pub fn print(text: &str) {
    let _ = write_to(CONSOLE, text.as_bytes());
}

/// Writes `parts` to the console in one write (up to 256 bytes), so that another process's
/// output cannot land inside the line.
pub fn print_parts(parts: &[&[u8]]) {
    let mut line = [0u8; 256];
    let mut length = 0;
    for part in parts {
        let taken = part.len().min(line.len() - length);
        line[length..length + taken].copy_from_slice(&part[..taken]);
        length += taken;
    }
    let _ = write_to(CONSOLE, &line[..length]);
}

/// Prints one line of texts each followed by its number in decimal (up to eight), then
/// `end`, in one write ([`print_parts`]).
pub fn print_numbers(parts: &[(&[u8], u64)], end: &[u8]) {
    let mut digits = [[0u8; 20]; 8];
    let mut line: [&[u8]; 17] = [b""; 17];
    let mut used = 0;
    for ((text, value), digits) in parts.iter().zip(digits.iter_mut()) {
        line[used] = text;
        line[used + 1] = decimal(*value, digits);
        used += 2;
    }
    line[used] = end;
    print_parts(&line[..=used]);
}

/// `value` in decimal, written into the end of `digits`; returns the digits.
pub fn decimal(value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            return &digits[start..];
        }
    }
}

/// Stops this process with `exit_code`.
pub fn stop(exit_code: u64) -> ! {
    let _ = call(
        OWN_PROCESS,
        abi::methods::process::STOP,
        [exit_code, 0, 0, 0],
    );
    // The kernel never resumes a stopped process; if it did, fault rather than run on.
    // SAFETY: ud2 only raises #UD.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}

/// Defines the program's entry point: runs `$main` and stops with the code it returns.
/// Also stamps the program with the ABI version note the kernel's loader checks.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        core::arch::global_asm!(
            ".pushsection .note.holdfast, \"a\", @note",
            ".balign 4",
            ".long {name_size}", // "Holdfast\0"
            ".long 4",  // descriptor size
            ".long {note_type}",
            ".asciz \"Holdfast\"",
            ".balign 4",
            ".long {abi_version}",
            ".popsection",
            name_size = const $crate::abi::note::NAME.len(),
            note_type = const $crate::abi::note::TYPE_ABI_VERSION,
            abi_version = const $crate::abi::ABI_VERSION,
        );

        #[unsafe(no_mangle)]
        pub extern "C" fn _start() -> ! {
            $crate::stop($main())
        }

        #[panic_handler]
        fn panic(_info: &core::panic::PanicInfo) -> ! {
            $crate::print("panic in ring 3\n");
            $crate::stop(101)
        }
    };
}
