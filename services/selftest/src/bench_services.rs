//! `holdfast bench services`, Holdfast side: times the services of issue 17 in TSC cycles
//! and prints two lines each, `HOLDFAST-SERVICES <name>_tsc_cycles <cycles>`, the median
//! over rounds of the mean per operation in a round, and `<name>_max_tsc_cycles`, the
//! slowest round's:
//!
//! - `process_cycle`: a process made by a constructor and gone again, as Linux's fork,
//!   exec, exit and waitpid: a bank below this program's bank (`create_child`), a yield of
//!   `echo-server`'s template paid for by it, a call the new process answers (it has
//!   started and waits for messages), and the bank destroyed with all it sold;
//! - `page_allocation`: a page bought from the bank, put into this program's space
//!   (`space.swap` into a leaf node of its own tree) and written once, as Linux's mmap of
//!   4 KiB and first touch; the page is checked through its capability to hold the write;
//! - `direct_call`: a call to `echo-server` through its start capability and the reply;
//! - `forwarded_call`: the same call through an indirector (a forwarder, as the reference
//!   monitor will put between compartments) made of a node bought from the bank, whose
//!   slot 0 holds that start capability.
//!
//! Any unexpected answer prints `HOLDFAST-SERVICES-FAILED <what>` and ends with exit code 1.
//! The host converts cycles with the frequency the kernel calibrated and printed at boot.
//!
//! Capability registers (`bench/services-manifest.toml`): 0 console, 1 own process, 2 a
//! bank (a start capability of the space bank), 3 a constructor of `echo-server`, 4 the
//! meter its processes run on, 5 a start capability to `echo-server`; 6 to 11 working, 12
//! void.
#![no_std]
#![no_main]

#[path = "bench_timing.rs"]
mod timing;

use holdfast_userlib::bank;
use holdfast_userlib::constructor::yield_process;
use holdfast_userlib::interface::{node, page, process, space};
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};
use timing::{FigureLines, Spread, read_tsc, spread};

const BANK: CapReg = CapReg::new(2);
const CONSTRUCTOR: CapReg = CapReg::new(3);
const METER: CapReg = CapReg::new(4);
const ECHO_SERVER: u8 = 5;
const CYCLE_BANK: CapReg = CapReg::new(6);
const YIELDED: CapReg = CapReg::new(7);
const PAGE: CapReg = CapReg::new(8);
const DISPLACED: CapReg = CapReg::new(9);
/// The own space, then the leaf node of the window; then the forwarder's node.
const WORK: CapReg = CapReg::new(10);
const FORWARDER: u8 = 11;
/// Never written: void.
const VOID: CapReg = CapReg::new(12);

/// echo-server's order (`services/selftest/src/echo_server.rs`).
const ECHO: u64 = 1;

/// Odd, so that the median is one round's figure.
const ROUNDS: usize = 11;
/// Per round, sized for tens of milliseconds under TCG a round.
const CYCLES_PER_ROUND: u64 = 8;
const CALLS_PER_ROUND: u64 = 2_000;
/// A leaf node's slots: the window's pages.
const PAGES_PER_ROUND: usize = 32;

/// Limits of the bank below this program's for each process made: far more than a copy
/// of `echo-server` needs; the program's own bank bounds it anyway.
const CYCLE_BANK_LIMIT: u64 = 1024;

/// The window pages are bought into: one leaf node of the space tree (32 pages of 4 KiB,
/// aligned to what a leaf covers), in .bss so that the loader made the node.
#[repr(C, align(131072))]
struct Window([[u8; 4096]; PAGES_PER_ROUND]);
static mut WINDOW: Window = Window([[0; 4096]; PAGES_PER_ROUND]);

/// What this program's lines start with (`bench/src/services/figures.rs`).
const LINES: FigureLines = FigureLines::new("HOLDFAST-SERVICES");

/// One process made, answering, and gone: see the crate's doc.
fn process_cycle(serial: u64) -> Result<(), &'static str> {
    bank::create_child(BANK, CYCLE_BANK_LIMIT, CYCLE_BANK_LIMIT, CYCLE_BANK)
        .map_err(|_| "process cycle: the bank refused a bank below it")?;
    yield_process(CONSTRUCTOR, CYCLE_BANK, METER, YIELDED)
        .map_err(|_| "process cycle: the constructor refused to yield")?;
    let reply = Invocation::call(YIELDED.index(), ECHO, [serial, 0, 0, 0]).invoke(&mut []);
    if reply.code != 0 || reply.words[0] != serial {
        return Err("process cycle: the yielded process did not answer its first call");
    }
    bank::destroy(CYCLE_BANK).map_err(|_| "process cycle: the bank below was not destroyed")?;
    Ok(())
}

fn process_cycles() -> Result<Spread, &'static str> {
    let mut rounds = [0u64; ROUNDS];
    let mut serial = 0;
    for round in rounds.iter_mut() {
        let start = read_tsc();
        for _ in 0..CYCLES_PER_ROUND {
            serial += 1;
            process_cycle(serial)?;
        }
        *round = (read_tsc() - start) / CYCLES_PER_ROUND;
    }
    // The destroyed process's start capability is void: nothing is left of it.
    let reply = Invocation::call(YIELDED.index(), ECHO, [0; 4]).invoke(&mut []);
    if reply.code == 0 {
        return Err("process cycle: a process answers after its bank was destroyed");
    }
    Ok(spread(&mut rounds))
}

/// Fetches the leaf node of the own space that holds the window into `WORK`.
fn fetch_window_leaf() -> Result<*mut [u8; 4096], &'static str> {
    let window = core::ptr::addr_of_mut!(WINDOW).cast::<[u8; 4096]>();
    process::fetch_space(CapReg::new(user::OWN_PROCESS), WORK)
        .map_err(|_| "page allocation: cannot fetch the own space")?;
    let address = window as u64;
    for height in (2..=user::space::SPACE_HEIGHT).rev() {
        space::fetch(WORK, user::space::slot(height, address), WORK)
            .map_err(|_| "page allocation: the window has no leaf node")?;
    }
    Ok(window)
}

fn page_allocations() -> Result<Spread, &'static str> {
    let window = fetch_window_leaf()?;
    let mut rounds = [0u64; ROUNDS];
    for (index, round) in rounds.iter_mut().enumerate() {
        let marker = index as u8 + 1;
        let start = read_tsc();
        for slot in 0..PAGES_PER_ROUND {
            bank::buy_page(BANK, PAGE).map_err(|_| "page allocation: the bank refused a page")?;
            // The slot is empty but in the first round, where the loader's page goes.
            space::swap(WORK, slot as u64, PAGE, DISPLACED)
                .map_err(|_| "page allocation: the space refused the page")?;
            // SAFETY: `slot` is within the window, which nothing else touches; the volatile
            // write makes the first touch happen.
            unsafe { core::ptr::write_volatile(window.add(slot).cast::<u8>(), marker) };
        }
        *round = (read_tsc() - start) / PAGES_PER_ROUND as u64;
        // The last page bought holds the write made through the space.
        let mut byte = [0u8; 1];
        page::read(PAGE, 0, 1, &mut byte)
            .map_err(|_| "page allocation: the page bought cannot be read")?;
        if byte[0] != marker {
            return Err("page allocation: the write through the space missed the page bought");
        }
        // Untimed, as the peer's munmap: the pages taken out and sold back, so that the
        // bank's limit never ends the rounds.
        for slot in 0..PAGES_PER_ROUND {
            space::swap(WORK, slot as u64, VOID, DISPLACED)
                .map_err(|_| "page allocation: the space refused to give the page back")?;
            bank::sell(BANK, DISPLACED)
                .map_err(|_| "page allocation: the bank refused its own page back")?;
        }
    }
    Ok(spread(&mut rounds))
}

/// Calls to `echo-server` directly and through the forwarder, round by round in turn, so
/// that a slow spell of the shared host weighs on both alike.
fn calls() -> Result<(Spread, Spread), &'static str> {
    let mut direct = [0u64; ROUNDS];
    let mut forwarded = [0u64; ROUNDS];
    for round in 0..ROUNDS {
        for (target, rounds) in [(ECHO_SERVER, &mut direct), (FORWARDER, &mut forwarded)] {
            let start = read_tsc();
            for call in 0..CALLS_PER_ROUND {
                let reply = Invocation::call(target, ECHO, [call, 0, 0, 0]).invoke(&mut []);
                if reply.code != 0 || reply.words[0] != call {
                    return Err("call: echo-server did not echo");
                }
            }
            rounds[round] = (read_tsc() - start) / CALLS_PER_ROUND;
        }
    }
    Ok((spread(&mut direct), spread(&mut forwarded)))
}

/// The forwarder in `FORWARDER`: an indirector of a node bought from the bank, slot 0 the
/// start capability to `echo-server`.
fn make_forwarder() -> Result<(), &'static str> {
    bank::buy_node(BANK, WORK).map_err(|_| "forwarder: the bank refused a node")?;
    node::swap(WORK, 0, CapReg::new(ECHO_SERVER), DISPLACED)
        .map_err(|_| "forwarder: the node refused the start capability")?;
    node::make_indirector(WORK, 0, CapReg::new(FORWARDER))
        .map_err(|_| "forwarder: make_indirector refused")
}

fn run() -> Result<(), &'static str> {
    LINES.report("process_cycle", process_cycles()?);
    LINES.report("page_allocation", page_allocations()?);
    make_forwarder()?;
    let (direct, forwarded) = calls()?;
    LINES.report("direct_call", direct);
    LINES.report("forwarded_call", forwarded);
    Ok(())
}

fn main() -> u64 {
    match run() {
        Ok(()) => 0,
        Err(what) => LINES.fail(what),
    }
}

user::entry!(main);
