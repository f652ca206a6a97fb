//! The journal's workload in the restart test (hypervisor-glue/holdfast/tests/restart.rs):
//! writes the next number into its page, commits the page through the journal, and prints
//! `journal-writer <k>: acknowledged <n>` for every 16th acknowledged commit (`k` tells the
//! writers apart). Every
//! acknowledged commit must survive a crash even when no checkpoint follows it: after a
//! restart the page may be newer than the program's registers (it goes on from the page)
//! but never older than the last commit acknowledged.
//!
//! It notices a restart by the clock's boot count changing and then prints
//! `journal-writer <k>: restarted in boot <b>, page holds <n>`: what survived, for the test
//! to check. Lines printed between the checkpoint and the crash are printed again after the
//! restart, and that may be one of these from the boot before (the checkpoint caught the
//! writer between reading its page and printing): the boot count tells them apart.
//!
//! Capability registers: 0 console, 1 its page, 2 the journal, 3 the clock, 4 the number
//! `[k, 0]`; 15 stays empty.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::interface::{clock, journal, number, page};
use user::syscall::CapReg;

const PAGE: CapReg = CapReg::new(1);
const JOURNAL: CapReg = CapReg::new(2);
const CLOCK: CapReg = CapReg::new(3);
const IDENTITY: CapReg = CapReg::new(4);
const EMPTY: CapReg = CapReg::new(15);
const PRINT_EVERY: u64 = 16;

/// Prints `journal-writer <k>: restarted in boot <b>, page holds <n>`.
fn report_restart(identity: u64, boot: u64, in_page: u64) {
    let (mut identity_digits, mut boot_digits, mut page_digits) = ([0u8; 20], [0u8; 20], [0u8; 20]);
    user::print_parts(&[
        b"journal-writer ",
        user::decimal(identity, &mut identity_digits),
        b": restarted in boot ",
        user::decimal(boot, &mut boot_digits),
        b", page holds ",
        user::decimal(in_page, &mut page_digits),
        b"\n",
    ]);
}

/// Prints `journal-writer <k>: <what><value>`.
fn report(identity: u64, what: &str, value: u64) {
    let (mut identity_digits, mut value_digits) = ([0u8; 20], [0u8; 20]);
    user::print_parts(&[
        b"journal-writer ",
        user::decimal(identity, &mut identity_digits),
        b": ",
        what.as_bytes(),
        user::decimal(value, &mut value_digits),
        b"\n",
    ]);
}

fn stored() -> Option<u64> {
    let mut bytes = [0u8; 8];
    page::read(PAGE, 0, 8, &mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

fn main() -> u64 {
    let identity = number::value(IDENTITY).map_or(0, |number| number.word0);
    let mut next = 1u64;
    let mut boot = None;
    let boot_now = || clock::now(CLOCK).map_or(u64::MAX, |now| now.boot);
    loop {
        let now_boot = boot_now();
        let Some(in_page) = stored() else {
            report(identity, "MISMATCH: cannot read its page ", 1);
            return 1;
        };
        if boot.is_some_and(|boot| boot != now_boot) {
            report_restart(identity, now_boot, in_page);
        }
        boot = Some(now_boot);
        // The page holds the number last written: `next - 1`, or `next` if a snapshot came
        // between the write and the commit, or more after a restart from the journal.
        if in_page + 1 < next {
            report(identity, "MISMATCH: the page went back to ", in_page);
            return 1;
        }
        if in_page >= next {
            next = in_page + 1;
        }
        // A checkpoint taken since the read carries this `next`: restarted from it, the
        // program would write it over what the journal kept after that checkpoint. So the
        // write goes ahead only in the boot that read the page (a timer tick between this
        // check and the write still leaves a window of a few instructions).
        if boot_now() != now_boot {
            continue;
        }
        let committed = page::write(PAGE, 0, &next.to_le_bytes())
            .and_then(|()| journal::commit(JOURNAL, PAGE, EMPTY, EMPTY, EMPTY));
        if committed.is_err() {
            report(identity, "MISMATCH: the commit failed at ", next);
            return 1;
        }
        if next.is_multiple_of(PRINT_EVERY) {
            report(identity, "acknowledged ", next);
        }
        next += 1;
    }
}

user::entry!(main);
