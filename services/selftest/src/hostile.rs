//! Invokes random capabilities with random orders, words, strings and capability lists for
//! a while, to show that nothing a program can ask makes the kernel panic or disturbs
//! another process. Prints how many invocations it made.
//!
//! Capability registers: 0 console and 1 own process (neither invoked nor sent: the
//! report must stay readable and the program must live to make it), 2 clock, 3 a node, 4 a page, 5 a start capability to echo-server,
//! 6 a number whose first word is how many seconds to run. Capabilities it receives land
//! in 3..=15 but 5, never over the console, its process, the clock or the echo server.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::abi::methods::{self, clock, node};
use holdfast_userlib::{self as user, Invocation};

const CLOCK: u8 = 2;
const ECHO_SERVER: u8 = 5;
const DURATION: u8 = 6;

/// xorshift64*: reproducible from its seed, good enough to reach every path.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// A capability register to invoke or send: any but the own process's.
    fn register(&mut self) -> u8 {
        let register = self.below(15) as u8;
        if register >= 1 {
            register + 1
        } else {
            register
        }
    }

    /// A capability register to receive into: 3..=15 but the echo server's, which is
    /// invoked without asking what it holds (a console received there would be invoked
    /// with random bytes).
    fn receive_register(&mut self) -> u8 {
        let register = 3 + self.below(12) as u8;
        if register >= ECHO_SERVER {
            register + 1
        } else {
            register
        }
    }
}

/// Whether invoking `target` with `order` cannot leave this program waiting forever: a
/// start capability of a process that never becomes available (one this program made and
/// started, or an indirector to it) would stall it, as KeyKOS would. So it makes neither
/// processes nor indirectors, and calls no start capability but the echo server's (nor a
/// console).
fn safe_to_invoke(target: u8, order: u64) -> bool {
    if target == ECHO_SERVER {
        return true;
    }
    match user::call(target, methods::IDENTIFY, [0; 4]).map(|words| Type::from_code(words[0])) {
        Ok(Some(Type::Node)) => order != node::MAKE_PROCESS && order != node::MAKE_INDIRECTOR,
        Ok(Some(Type::Start | Type::Resume | Type::Indirector)) => false,
        // A console that came back from the echo server: random bytes would garble the report.
        Ok(Some(Type::Console)) => false,
        Ok(_) => true,
        // A void capability refuses everything at once: invoke it too.
        Err(code) => code == InvocationError::Void as u64,
    }
}

fn now_nanoseconds() -> u64 {
    user::call(CLOCK, clock::NOW, [0; 4]).map_or(0, |words| words[0])
}

fn main() -> u64 {
    let duration_seconds =
        user::call(DURATION, methods::number::VALUE, [0; 4]).map_or(10, |words| words[0]);
    let start = now_nanoseconds();
    let mut random = Random(start | 1);
    let mut string = [0u8; 4200];
    let mut buffer = [0u8; 4200];
    let mut invocations: u64 = 0;
    while now_nanoseconds().saturating_sub(start) < duration_seconds * 1_000_000_000 {
        for byte in string.iter_mut().take(64) {
            *byte = random.next() as u8;
        }
        let words = [
            random.next(),
            random.below(40),
            random.below(5000),
            random.next(),
        ];
        // Small orders reach real methods; now and then anything at all.
        let order = if random.below(8) == 0 {
            random.next()
        } else {
            random.below(13)
        };
        let target = random.register();
        if !safe_to_invoke(target, order) {
            continue;
        }
        // A return would wait for a message that never comes, so calls and sends only.
        let mut invocation = if random.below(4) == 0 {
            Invocation::send(target, order, words)
        } else {
            Invocation::call(target, order, words)
        };
        let send_count = random.below(5) as usize;
        let receive_count = random.below(5) as usize;
        let sent: [u8; 4] = core::array::from_fn(|_| random.register());
        let received: [u8; 4] = core::array::from_fn(|_| random.receive_register());
        invocation = invocation
            .sending(&sent[..send_count])
            .receiving(&received[..receive_count]);
        let length = match random.below(4) {
            0 => 0,
            1 => random.below(64) as usize,
            2 => random.below(4200) as usize,
            _ => 4096,
        };
        invocation = invocation.with_string(&string[..length]);
        let reply = match random.below(16) {
            // Undefined descriptor bits set at random: the kernel must refuse the
            // invocation, not misread it.
            0 => {
                const UNDEFINED_BITS: u64 = 0xfe00_0000_0000_0000 | 1 << 51 | 0xf800_0000 | 0xc0;
                let descriptor = invocation.descriptor.encode() | random.next() & UNDEFINED_BITS;
                invocation.invoke_raw(descriptor, &mut buffer)
            }
            _ => invocation.invoke(&mut buffer),
        };
        let _ = reply;
        invocations += 1;
    }
    let mut digits = [0u8; 20];
    user::print_parts(&[
        b"hostile: ",
        user::decimal(invocations, &mut digits),
        b" random invocations, kernel and other processes unharmed\n",
    ]);
    0
}

user::entry!(main);
