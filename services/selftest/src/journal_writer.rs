//! The journal's workload in the restart test (hypervisor-glue/holdfast/tests/restart.rs):
//! commits the numbers 1, 2, 3, ... through the journal, one commit each, and prints
//! `journal-writer <k>: acknowledged <n>` for every 16th acknowledged commit (`k` tells the
//! writers apart). Every acknowledged commit must survive a crash even when no checkpoint
//! follows it: after a restart the page may be newer than the program's registers (it goes
//! on from the page) but never older than the last commit acknowledged.
//!
//! A restart resumes the program where the checkpoint caught it, which may be anywhere: its
//! registers may hold what it read from the page before the checkpoint, and the page may
//! hold commits made after it. So nothing it writes may undo a later commit: number `n`
//! goes into slot `n % SLOTS` of the page (a `u64` each), the newest number is the largest
//! slot, and a write replayed after a restart puts into its slot the number that was already
//! there (a restart replays the commits made since the checkpoint, a few dozen at most,
//! fewer than `SLOTS`). Writing the number over one word instead lost acknowledged commits:
//! caught between reading the page and writing it, the program came back with the old
//! number in its registers and wrote the next one over every commit made after the
//! checkpoint.
//!
//! It notices a restart by the clock's boot count changing, then reads the page again and
//! prints `journal-writer <k>: restarted, page holds <n> at boot <b>`: what survived, for
//! the test to check. Lines printed between the checkpoint and the crash are printed again after the
//! restart, and so may that line be, with what the page held in the boot before (the
//! checkpoint caught the program printing it); the line printed in this boot comes last.
//!
//! Capability registers: 0 console, 1 its page, 2 the journal, 3 the clock, 4 the number
//! `[k, d]`, where a `d` other than 0 makes it dawdle for 20 ms between reading
//! its page and writing it, so that checkpoints often catch it there (the restart test's
//! third writer does); 15 stays empty.
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
const PAGE_BYTES: usize = 4096;
/// The page's `u64` slots: number `n` is written to slot `n % SLOTS`.
const SLOTS: u64 = (PAGE_BYTES / 8) as u64;
const DAWDLE_NANOSECONDS: u64 = 20_000_000;

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

/// Prints `journal-writer <k>: restarted, page holds <n> at boot <b>`: the boot tells this
/// boot's line from one printed again after a restart.
fn report_restart(identity: u64, in_page: u64, boot: u64) {
    let (mut identity_digits, mut value_digits, mut boot_digits) = ([0u8; 20], [0u8; 20], [0u8; 20]);
    user::print_parts(&[
        b"journal-writer ",
        user::decimal(identity, &mut identity_digits),
        b": restarted, page holds ",
        user::decimal(in_page, &mut value_digits),
        b" at boot ",
        user::decimal(boot, &mut boot_digits),
        b"\n",
    ]);
}

/// The newest number in the page: its largest slot.
fn newest() -> Option<u64> {
    let mut bytes = [0u8; PAGE_BYTES];
    page::read(PAGE, 0, PAGE_BYTES as u64, &mut bytes).ok()?;
    bytes.chunks_exact(8).map(|slot| u64::from_le_bytes(slot.try_into().unwrap())).max()
}

/// What number `n`'s slot holds.
fn slot_of(n: u64) -> Option<u64> {
    let mut bytes = [0u8; 8];
    page::read(PAGE, n % SLOTS * 8, 8, &mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

fn main() -> u64 {
    let (identity, dawdle) = number::value(IDENTITY).map_or((0, 0), |number| (number.word0, number.word1));
    let mut next = 1u64;
    let mut boot = None;
    loop {
        // The clock first: a page read after it is at least as new as the boot it names.
        let now_boot = clock::now(CLOCK).map_or(u64::MAX, |now| now.boot);
        if boot != Some(now_boot) {
            // The first round, or the first after a restart: the page may hold numbers
            // newer than `next` (committed after the checkpoint this run resumed from).
            let Some(in_page) = newest() else {
                report(identity, "MISMATCH: cannot read its page ", 1);
                return 1;
            };
            if boot.is_some() {
                report_restart(identity, in_page, now_boot);
            }
            // The page holds `next - 1` at least: it was written before the checkpoint
            // that holds these registers, which holds the page too.
            if in_page + 1 < next {
                report(identity, "MISMATCH: the page went back to ", in_page);
                return 1;
            }
            next = next.max(in_page + 1);
            boot = Some(now_boot);
        } else {
            // No restart seen: the last number written is in its slot.
            let Some(held) = slot_of(next - 1) else {
                report(identity, "MISMATCH: cannot read its page ", 1);
                return 1;
            };
            if held + 1 < next {
                report(identity, "MISMATCH: the page went back to ", held);
                return 1;
            }
        }
        if dawdle != 0 {
            // Until the time is up, or a restart came in the middle (the clock counts from
            // each boot: the time left would be meaningless).
            let start = clock::now(CLOCK).ok();
            while let (Some(start), Ok(now)) = (start, clock::now(CLOCK))
                && now.boot == start.boot
                && now.nanoseconds < start.nanoseconds.saturating_add(DAWDLE_NANOSECONDS)
            {}
        }
        let committed = page::write(PAGE, next % SLOTS * 8, &next.to_le_bytes())
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
