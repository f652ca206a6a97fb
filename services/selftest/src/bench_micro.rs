//! `holdfast bench micro`, Holdfast side: times the kernel's paths in TSC cycles and prints
//! two lines each, `HOLDFAST-MICRO <name>_tsc_cycles <cycles>`, the median over rounds of
//! the mean per operation in a round, and `<name>_max_tsc_cycles`, the slowest round's:
//!
//! - `trivial_invocation`: an invocation the kernel refuses with `InvalidOrder`
//!   (capability lookup and dispatch, no work);
//! - `round_trip_ipc`: a call to `echo-server` (`ECHO`, words only) and its reply;
//! - `one_way_ipc`: from just before a call to `echo-server` (`TIMESTAMP`) to the
//!   server's TSC read right after it received the message (one CPU, one TSC);
//! - `node_tree_fault`: the first touch of a page the loader put in the
//!   program's space tree (.bss) but no page table holds yet, per page;
//! - `keeper_fault`: a fault on an empty slot under a keeper node, resolved by
//!   `zero-keeper` with a zeroed page, per fault.
//!
//! Any unexpected answer prints `HOLDFAST-MICRO-FAILED <what>` and ends with exit code 1.
//! The program has no use for its clock capability's frequency: the host converts cycles
//! with the frequency the kernel calibrated and printed at boot (`selftest: timer: TSC <MHz>
//! MHz`).
//!
//! Capability registers (`bench/micro-manifest.toml`): 0 console, 1 own process, 2 start
//! capability to `echo-server`, 3 a spare node (becomes the keeper node), 4 start
//! capability to `zero-keeper`, 5 clock. It fetches its own space into 6 and the wrapped
//! space into 7.
#![no_std]
#![no_main]

#[path = "bench_timing.rs"]
mod timing;

use holdfast_userlib::abi::methods::ObjectError;
use holdfast_userlib::abi::{USER_STACK_BYTES, USER_STACK_TOP};
use holdfast_userlib::{self as user, Invocation};
use timing::{FigureLines, Spread, read_tsc, spread};

const ECHO_SERVER: u8 = 2;
const KEEPER_NODE: u8 = 3;
const ZERO_KEEPER: u8 = 4;
const SPACE: u8 = 6;
const WRAPPED: u8 = 7;

/// echo-server's orders (`services/selftest/src/echo_server.rs`).
const ECHO: u64 = 1;
const TIMESTAMP: u64 = 5;
/// zero-keeper's order (`services/selftest/src/zero_keeper.rs`).
const REGISTER: u64 = 1;

/// Odd, so that the median is one round's figure.
const ROUNDS: usize = 11;
/// Per round: a few tens of milliseconds under TCG, so that a timer tick (100 Hz) costs a
/// round little and a slow spell of the shared host spoils few rounds.
const INVOCATIONS_PER_ROUND: u64 = 10_000;
/// IPC costs a few times an invocation: fewer per round.
const CALLS_PER_ROUND: u64 = 2_000;
/// An order no capability understands. The kernel answers it from its invocation path
/// with `InvalidOrder` and changes nothing (it only counts the invocation), which makes it
/// the trivial invocation: capability lookup and dispatch, no work.
const ORDER_UNDERSTOOD_BY_NONE: u64 = 0xFFFF;

/// Node-tree faults: each page is touched once, so the rounds share one array.
const FAULT_ROUNDS: usize = 15;
const PAGES_PER_FAULT_ROUND: usize = 16;
const FAULT_PAGES: usize = FAULT_ROUNDS * PAGES_PER_FAULT_ROUND;
/// In .bss: the loader puts its pages in the space tree; no page table holds them until
/// the first touch.
static mut UNTOUCHED: [[u8; 4096]; FAULT_PAGES] = [[0; 4096]; FAULT_PAGES];

/// Keeper faults: the pages below the stack in its height-1 node (the stack is its upper
/// 16 of 32 pages), each faulted once and timed alone. The keeper's pool holds more.
const KEEPER_FAULTS: usize = 15;

/// What this program's lines start with (`bench/src/micro/figures.rs`).
const LINES: FigureLines = FigureLines::new("HOLDFAST-MICRO");

fn trivial_invocation() -> Option<Spread> {
    let mut rounds = [0u64; ROUNDS];
    for round in rounds.iter_mut() {
        let start = read_tsc();
        for _ in 0..INVOCATIONS_PER_ROUND {
            let result = user::call(user::OWN_PROCESS, ORDER_UNDERSTOOD_BY_NONE, [0; 4]);
            if result != Err(ObjectError::InvalidOrder as u64) {
                return None;
            }
        }
        *round = (read_tsc() - start) / INVOCATIONS_PER_ROUND;
    }
    Some(spread(&mut rounds))
}

fn round_trip_ipc() -> Option<Spread> {
    let mut rounds = [0u64; ROUNDS];
    for round in rounds.iter_mut() {
        let start = read_tsc();
        for call in 0..CALLS_PER_ROUND {
            let reply = Invocation::call(ECHO_SERVER, ECHO, [call, 0, 0, 0]).invoke(&mut []);
            if reply.code != 0 || reply.words[0] != call {
                return None;
            }
        }
        *round = (read_tsc() - start) / CALLS_PER_ROUND;
    }
    Some(spread(&mut rounds))
}

fn one_way_ipc() -> Option<Spread> {
    let mut rounds = [0u64; ROUNDS];
    for round in rounds.iter_mut() {
        let mut total = 0u64;
        for _ in 0..CALLS_PER_ROUND {
            let before = read_tsc();
            let reply = Invocation::call(ECHO_SERVER, TIMESTAMP, [0; 4]).invoke(&mut []);
            let received = reply.words[0];
            if reply.code != 0 || received < before {
                return None;
            }
            total += received - before;
        }
        *round = total / CALLS_PER_ROUND;
    }
    Some(spread(&mut rounds))
}

fn node_tree_fault() -> Spread {
    let pages = core::ptr::addr_of_mut!(UNTOUCHED).cast::<[u8; 4096]>();
    let mut rounds = [0u64; FAULT_ROUNDS];
    for (index, round) in rounds.iter_mut().enumerate() {
        let first = index * PAGES_PER_FAULT_ROUND;
        let start = read_tsc();
        for page in first..first + PAGES_PER_FAULT_ROUND {
            // SAFETY: `page` is within the array, which nothing else touches; the volatile
            // write makes each first touch happen, once.
            unsafe { core::ptr::write_volatile(pages.add(page).cast::<u8>(), 1) };
        }
        *round = (read_tsc() - start) / PAGES_PER_FAULT_ROUND as u64;
    }
    spread(&mut rounds)
}

/// Wraps the own space in the spare node as a keeper node whose keeper is zero-keeper,
/// and tells zero-keeper which space to fill.
fn wrap_space_in_keeper_node() -> bool {
    let wrapped = user::space::wrap_own_space(SPACE, KEEPER_NODE, ZERO_KEEPER, WRAPPED);
    let registered = Invocation::call(ZERO_KEEPER, REGISTER, [0; 4])
        .sending(&[SPACE])
        .invoke(&mut []);
    wrapped && registered.code == 0
}

/// Each fault timed alone (the pages run out before rounds could); `None` if a page the
/// keeper mapped is not zeroed.
fn keeper_fault() -> Option<Spread> {
    let mut faults = [0u64; KEEPER_FAULTS];
    for (index, fault) in faults.iter_mut().enumerate() {
        let page = index as u64 + 1;
        let address = (USER_STACK_TOP - USER_STACK_BYTES - page * 4096) as *mut u64;
        let start = read_tsc();
        // SAFETY: the read faults and the keeper maps a zeroed page there; the volatile
        // accesses make every access reach memory.
        let value = unsafe { core::ptr::read_volatile(address) };
        *fault = read_tsc() - start;
        if value != 0 {
            return None;
        }
    }
    Some(spread(&mut faults))
}

fn main() -> u64 {
    let Some(trivial) = trivial_invocation() else {
        return LINES.fail("trivial invocation: not answered InvalidOrder");
    };
    LINES.report("trivial_invocation", trivial);
    let Some(round_trip) = round_trip_ipc() else {
        return LINES.fail("round-trip IPC: echo-server did not echo");
    };
    LINES.report("round_trip_ipc", round_trip);
    let Some(one_way) = one_way_ipc() else {
        return LINES.fail("one-way IPC: echo-server did not answer TIMESTAMP with a later TSC");
    };
    LINES.report("one_way_ipc", one_way);
    LINES.report("node_tree_fault", node_tree_fault());
    if !wrap_space_in_keeper_node() {
        return LINES.fail("keeper fault: cannot wrap the own space in a keeper node");
    }
    let Some(keeper) = keeper_fault() else {
        return LINES.fail("keeper fault: the keeper's page was not zeroed");
    };
    LINES.report("keeper_fault", keeper);
    0
}

user::entry!(main);
