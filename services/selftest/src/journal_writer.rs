//! The journal's workload in the restart test (hypervisor-glue/holdfast/tests/restart.rs):
//! writes the next number into its page, commits the page through the journal, and prints
//! `journal-writer: acknowledged <n>` for every 16th acknowledged commit. Every
//! acknowledged commit must survive a crash even when no checkpoint follows it: after a
//! restart the page may be newer than the program's registers (it goes on from the page)
//! but never older than the last commit acknowledged.
//!
//! It notices a restart by the clock's boot count changing and then prints
//! `journal-writer: restarted, page holds <n>`: what survived, for the test to check.
//! Lines printed between the checkpoint and the crash are printed again after the restart;
//! that line is not.
//!
//! Capability registers: 0 console, 1 its page, 2 the journal, 3 the clock; 15 stays empty.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::interface::{clock, journal, page};
use user::syscall::CapReg;

const PAGE: CapReg = CapReg::new(1);
const JOURNAL: CapReg = CapReg::new(2);
const CLOCK: CapReg = CapReg::new(3);
const EMPTY: CapReg = CapReg::new(15);
const PRINT_EVERY: u64 = 16;

fn print_with_number(prefix: &str, value: u64) {
    let mut digits = [0u8; 20];
    user::print_parts(&[prefix.as_bytes(), user::decimal(value, &mut digits), b"\n"]);
}

fn stored() -> Option<u64> {
    let mut bytes = [0u8; 8];
    page::read(PAGE, 0, 8, &mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

fn main() -> u64 {
    let mut next = 1u64;
    let mut boot = None;
    loop {
        let Some(in_page) = stored() else {
            user::print("journal-writer: MISMATCH: cannot read its page\n");
            return 1;
        };
        let now_boot = clock::now(CLOCK).map_or(u64::MAX, |now| now.boot);
        if boot.is_some_and(|boot| boot != now_boot) {
            print_with_number("journal-writer: restarted, page holds ", in_page);
        }
        boot = Some(now_boot);
        // The page holds the number last written: `next - 1`, or `next` if a snapshot came
        // between the write and the commit, or more after a restart from the journal.
        if in_page + 1 < next {
            print_with_number("journal-writer: MISMATCH: the page went back to ", in_page);
            return 1;
        }
        if in_page >= next {
            next = in_page + 1;
        }
        let committed = page::write(PAGE, 0, &next.to_le_bytes())
            .and_then(|()| journal::commit(JOURNAL, PAGE, EMPTY, EMPTY, EMPTY));
        if committed.is_err() {
            user::print("journal-writer: MISMATCH: the commit failed\n");
            return 1;
        }
        if next.is_multiple_of(PRINT_EVERY) {
            print_with_number("journal-writer: acknowledged ", next);
        }
        next += 1;
    }
}

user::entry!(main);
