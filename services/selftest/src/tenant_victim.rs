//! The victim tenant of the hostile-tenant test (services/tenant-manifest.toml,
//! hypervisor-glue/holdfast/tests/tenants.rs). It holds its own bank, two data pages from
//! the manifest and two it buys, and its server (`tenant-server`); it runs on its own meter.
//! It writes its bought pages, takes a checksum of all four and its bank's counts, then
//! times calls to its server before the attack (until it has `BEFORE_CALLS_MIN` calls and
//! `BEFORE_NS`), says so in its ready page, times them during the attack (until the
//! hostile tenant's page says it is done) and for `AFTER_NS` after. Then it checks that
//! its pages' checksum and its bank's counts are what they were, and that its bank still
//! sells and buys back. Prints
//! `tenant-victim: latency before N calls the slowest M us then K us, during ..., after ...`
//! (K: the slowest but one), then
//! `tenant-victim: checksum C, bank P/L pages N/L nodes: passed` or
//! `tenant-victim: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 the clock, 3 its bank, 4 and 5 its
//! data pages, 6 its server, 7 its ready page (written here), 8 the hostile tenant's page
//! (read-only: word 0 is its phase, 3 once it is done); 9 and 10 the pages it buys, 11
//! scratch.
#![no_std]
#![no_main]

use holdfast_userlib::bank;
use holdfast_userlib::interface::{clock, page};
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const CLOCK: CapReg = CapReg::new(2);
const BANK: CapReg = CapReg::new(3);
const DATA: [CapReg; 4] = [CapReg::new(4), CapReg::new(5), CapReg::new(9), CapReg::new(10)];
const SERVER: u8 = 6;
const READY_PAGE: CapReg = CapReg::new(7);
const ATTACK_PAGE: CapReg = CapReg::new(8);
const SCRATCH: CapReg = CapReg::new(11);
const ECHO: u64 = 1;
const BEFORE_NS: u64 = 1_000_000_000;
const BEFORE_CALLS_MIN: u64 = 200;
const AFTER_NS: u64 = 1_000_000_000;
/// The hostile tenant's phase once it is done.
const ATTACK_DONE: u64 = 3;
/// How long the attack may take before the victim gives up on it: its 10 s of fuzzing and
/// its other attacks, stretched by a loaded host.
const ATTACK_NS_MAX: u64 = 240_000_000_000;

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

/// FNV-1a over the four data pages.
fn checksum() -> Result<u64, &'static str> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut bytes = [0u8; 4096];
    for register in DATA {
        page::read(register, 0, 4096, &mut bytes).map_err(|_| "a data page does not read")?;
        for byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(hash)
}

fn word0(register: CapReg) -> u64 {
    let mut bytes = [0u8; 8];
    page::read(register, 0, 8, &mut bytes).map_or(0, |_| u64::from_le_bytes(bytes))
}

/// Calls and their slowest, in a window.
#[derive(Default)]
struct Window {
    calls: u64,
    slowest_ns: u64,
    /// The slowest but one: the test bounds this one, since a host that deschedules QEMU
    /// stalls a call whatever the guest does, while an attack that beat the meter would
    /// slow one call in every period.
    next_slowest_ns: u64,
    /// Calls longer than `LONG_NS`.
    long: u64,
    started: u64,
    /// When the slowest call began, from the window's first.
    slowest_at_ns: u64,
}

/// Two scheduling quanta.
const LONG_NS: u64 = 20_000_000;

impl Window {
    /// Times one call; false if the server refused it.
    fn call(&mut self) -> bool {
        let before = now();
        if self.calls == 0 {
            self.started = before;
        }
        let words = [self.calls, 7, 11, 13];
        let reply = Invocation::call(SERVER, ECHO, words).invoke(&mut []);
        let took = now() - before;
        if took > self.slowest_ns {
            self.next_slowest_ns = self.slowest_ns;
            self.slowest_ns = took;
            self.slowest_at_ns = before - self.started;
        } else if took > self.next_slowest_ns {
            self.next_slowest_ns = took;
        }
        self.long += u64::from(took > LONG_NS);
        self.calls += 1;
        reply.code == 0 && reply.words[..3] == words[..3]
    }
}

fn run() -> Result<(), &'static str> {
    for (index, register) in DATA[2..].iter().enumerate() {
        bank::buy_page(BANK, *register).map_err(|_| "the victim's bank sold it no page")?;
        let mut bytes = [0u8; 4096];
        for (at, byte) in bytes.iter_mut().enumerate() {
            *byte = (at * 7 + index * 13) as u8;
        }
        page::write(*register, 0, &bytes).map_err(|_| "a bought page does not write")?;
    }
    let sum = checksum()?;
    let counts = bank::info(BANK).map_err(|_| "the bank's counts do not read")?;

    let mut windows: [Window; 3] = Default::default();
    let [before, during, after] = &mut windows;
    let start = now();
    while before.calls < BEFORE_CALLS_MIN || now() - start < BEFORE_NS {
        if !before.call() {
            return Err("the server refused a call before the attack");
        }
    }
    page::write(READY_PAGE, 0, &1u64.to_le_bytes()).map_err(|_| "the ready page does not write")?;
    let attack = now();
    while word0(ATTACK_PAGE) < ATTACK_DONE {
        if now() - attack > ATTACK_NS_MAX {
            return Err("the hostile tenant never finished");
        }
        for _ in 0..16 {
            if !during.call() {
                return Err("the server refused a call during the attack");
            }
        }
    }
    let end = now();
    while now() - end < AFTER_NS {
        if !after.call() {
            return Err("the server refused a call after the attack");
        }
    }
    let mut digits = [[0u8; 20]; 9];
    let [d0, d1, d2, d3, d4, d5, d6, d7, d8] = &mut digits;
    user::print_parts(&[
        b"tenant-victim: latency before ",
        user::decimal(before.calls, d0),
        b" calls the slowest ",
        user::decimal(before.slowest_ns / 1000, d1),
        b" us then ",
        user::decimal(before.next_slowest_ns / 1000, d2),
        b" us, during ",
        user::decimal(during.calls, d3),
        b" calls the slowest ",
        user::decimal(during.slowest_ns / 1000, d4),
        b" us then ",
        user::decimal(during.next_slowest_ns / 1000, d5),
        b" us, after ",
        user::decimal(after.calls, d6),
        b" calls the slowest ",
        user::decimal(after.slowest_ns / 1000, d7),
        b" us then ",
        user::decimal(after.next_slowest_ns / 1000, d8),
        b" us\n",
    ]);
    let mut digits = [[0u8; 20]; 4];
    let [d0, d1, d2, d3] = &mut digits;
    user::print_parts(&[
        b"tenant-victim: calls over 20 ms: before ",
        user::decimal(before.long, d0),
        b", during ",
        user::decimal(during.long, d1),
        b" (the slowest ",
        user::decimal(during.slowest_at_ns / 1_000_000, d2),
        b" ms into the attack), after ",
        user::decimal(after.long, d3),
        b"\n",
    ]);

    if checksum()? != sum {
        return Err("its pages changed");
    }
    if bank::info(BANK).map_err(|_| "the bank's counts do not read after the attack")? != counts {
        return Err("its bank's counts changed");
    }
    // The bank still sells: one more page, sold back.
    bank::buy_page(BANK, SCRATCH).map_err(|_| "its bank sells no more after the attack")?;
    bank::sell(BANK, SCRATCH).map_err(|_| "its bank took no page back after the attack")?;
    let mut digits = [[0u8; 20]; 5];
    let [d0, d1, d2, d3, d4] = &mut digits;
    user::print_parts(&[
        b"tenant-victim: checksum ",
        user::decimal(sum, d0),
        b", bank ",
        user::decimal(counts.pages, d1),
        b"/",
        user::decimal(counts.page_limit, d2),
        b" pages ",
        user::decimal(counts.nodes, d3),
        b"/",
        user::decimal(counts.node_limit, d4),
        b" nodes unchanged\n",
    ]);
    Ok(())
}

fn main() -> u64 {
    u64::from(!holdfast_userlib::check::verdict("tenant-victim", run()))
}

user::entry!(main);
