//! The paging test's workload (hypervisor-glue/holdfast/tests/paging.rs): a space of many
//! more pages than the guest has memory, every page written and read back, round after
//! round, so that most of them are evicted and loaded again from the store in between.
//!
//! Capability registers: 0 console, 1 own process, 2 a space of height 6 whose first
//! `count` pages are the test's (zero on the store at the start), 5 the number
//! `[count, rounds]`; 3 and 4 are scratch. The space goes into slot 1 of the program's
//! own space (height 7), at `1 << 42`.
//!
//! Round `r` checks that each page holds round `r - 1`'s word (zero before round 1), writes
//! round `r`'s, then reads all of them back; it prints `page-toucher: round <r>: <count>
//! pages written and read back` and, after the last round, stops with exit code 0. Any
//! difference is printed and stops it with exit code 1.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::interface::{number, process, space};
use user::syscall::CapReg;

const OWN_PROCESS: CapReg = CapReg::new(1);
const BIG_SPACE: CapReg = CapReg::new(2);
const ROOT_SPACE: CapReg = CapReg::new(3);
const SCRATCH: CapReg = CapReg::new(4);
const SHAPE: CapReg = CapReg::new(5);
const BASE: u64 = 1 << 42;
const PAGE_BYTES: u64 = 4096;

fn word_address(index: u64) -> *mut u64 {
    // Each page's word sits at a different offset, so that pages are not alike.
    (BASE + index * PAGE_BYTES + (index % 512) * 8) as *mut u64
}

fn expected(round: u64, index: u64) -> u64 {
    if round == 0 { 0 } else { (round << 40) ^ index.wrapping_mul(0x9e37_79b9) ^ 0x5a5a }
}

fn print_with_number(prefix: &str, value: u64, suffix: &str) {
    let mut digits = [0u8; 20];
    user::print_parts(&[prefix.as_bytes(), user::decimal(value, &mut digits), suffix.as_bytes()]);
}

/// Whether every page of `0..count` holds `round`'s word; prints the first that does not.
fn all_hold(round: u64, count: u64) -> bool {
    for index in 0..count {
        // SAFETY: the page is mapped (the kernel resolves the fault from the space tree);
        // nothing else in the program refers to this memory.
        let found = unsafe { word_address(index).read_volatile() };
        if found != expected(round, index) {
            print_with_number("page-toucher: MISMATCH at page ", index, "\n");
            return false;
        }
    }
    true
}

fn main() -> u64 {
    let Ok(shape) = number::value(SHAPE) else {
        user::print("page-toucher: no shape in register 5\n");
        return 1;
    };
    let (count, rounds) = (shape.word0, shape.word1);
    let attached = process::fetch_space(OWN_PROCESS, ROOT_SPACE)
        .and_then(|()| space::swap(ROOT_SPACE, 1, BIG_SPACE, SCRATCH));
    if attached.is_err() {
        user::print("page-toucher: cannot attach the big space\n");
        return 1;
    }
    for round in 1..=rounds {
        for index in 0..count {
            // SAFETY: as in `all_hold`.
            let word = unsafe { &mut *word_address(index) };
            if *word != expected(round - 1, index) {
                print_with_number("page-toucher: MISMATCH before writing page ", index, "\n");
                return 1;
            }
            *word = expected(round, index);
        }
        if !all_hold(round, count) {
            return 1;
        }
        print_with_number("page-toucher: round ", round, "");
        print_with_number(": ", count, " pages written and read back\n");
    }
    0
}

user::entry!(main);
