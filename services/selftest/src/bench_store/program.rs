//! `holdfast bench store`, Holdfast side (bench/src/store): the program behind the
//! `bench-store` bin, which gives it the pages it keeps resident (a `.bss` array the loader
//! puts in its space tree, every page of it resident in the kernel's object cache) and how
//! many rounds it runs.
//!
//! It lines the store up for the kernel's own figures (the `holdfast: checkpoint <g>
//! committed: ..., snapshot pause <us> us, stabilized in <ms> ms` line) and times the
//! journal itself:
//!
//! 1. waits until the first checkpoint (the whole system: every page is new) is committed
//!    and migrated home, so that the store is quiet;
//! 2. times journal commits of one page, each alone with `rdtsc`, and prints
//!    `HOLDFAST-STORE journal_commit_tsc_cycles <median over rounds of the mean>`;
//! 3. `rounds` times: writes a word into every page of the array (each write faults: the
//!    snapshot dropped every translation, so the kernel marks the page dirty and maps it),
//!    then the same writes again (now mapped), each pass timed (`HOLDFAST-STORE
//!    touch_after_checkpoint_tsc_cycles` and `touch_before_checkpoint_tsc_cycles`, per
//!    round: the refault cost of the dropped translations is their difference), asks for a
//!    checkpoint and waits until it is committed and migrated — every resident page is in
//!    every one of these checkpoints — and prints what the round wrote to the disk
//!    (`dirtied_bytes`, `written_bytes`, `migrated_bytes`, from the store's counters);
//! 4. prints `HOLDFAST-STORE-QUIESCENT` (the store holds its newest checkpoint, migrated)
//!    and waits for the host, which kills the VM and boots the store again: the restarted
//!    program, woken by the host with `r`, prints `HOLDFAST-STORE-SERVING`.
//!
//! It has no way to sleep of its own, and must not spin while the kernel stabilizes (the
//! kernel writes a checkpoint step at each timer tick while a process runs, and without
//! pause when none can): to wait it prints `HOLDFAST-STORE-SLEEP` and reads its control
//! channel, where the host answers with `w` about 10 ms later.
//!
//! Any unexpected answer prints `HOLDFAST-STORE-FAILED <what>` and ends with exit code 1.
//!
//! Capability registers (`bench/store-manifest.toml`): 0 console, 1 checkpoint, 2 journal,
//! 3 the page it commits, 4 the control channel; 15 stays empty.

use holdfast_userlib as user;
use user::interface::{checkpoint, control, journal, page};
use user::syscall::CapReg;

const CHECKPOINT: CapReg = CapReg::new(1);
const JOURNAL: CapReg = CapReg::new(2);
const JOURNAL_PAGE: CapReg = CapReg::new(3);
const CONTROL: CapReg = CapReg::new(4);
const EMPTY: CapReg = CapReg::new(15);

/// What the host sends at a restart (it answers a sleep with `w`).
const HOST_RESTARTED: u8 = b'r';

/// Journal commits: odd, so that the median is one round's figure.
const JOURNAL_ROUNDS: usize = 11;
const COMMITS_PER_ROUND: u64 = 16;

/// The counter the store reports its migration backlog in (0 when not migrating).
const BACKLOG_COUNTER: &[u8] = b"holdfast_migration_backlog_objects ";
/// Bytes written to the disk (every write: log, home blocks, tables, superblocks).
const WRITTEN_BYTES_COUNTER: &[u8] = b"holdfast_store_written_bytes_total ";
/// Blocks migration copied from the log to their home.
const MIGRATED_BLOCKS_COUNTER: &[u8] = b"holdfast_migrated_blocks_total ";
/// The store's block (`guest-kernel/store`'s `BLOCK_SIZE`).
const BLOCK_BYTES: u64 = 4096;

pub const PAGE_BYTES: usize = 4096;

fn read_tsc() -> u64 {
    // SAFETY: rdtsc only reads the time-stamp counter; ring 3 may (CR4.TSD is clear).
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn report(name: &str, value: u64) {
    let mut digits = [0u8; 20];
    user::print_parts(&[
        b"HOLDFAST-STORE ",
        name.as_bytes(),
        b" ",
        user::decimal(value, &mut digits),
        b"\n",
    ]);
}

fn fail(what: &str) -> u64 {
    user::print_parts(&[b"HOLDFAST-STORE-FAILED ", what.as_bytes(), b"\n"]);
    1
}

/// Blocks until the host sends something; after a sleep request (`sleep`) the host answers
/// with `w`. A restart (the host's [`HOST_RESTARTED`], whatever the program was
/// waiting for) ends the benchmark: it says it serves again and waits for ever.
fn wait_for_host(sleep: bool) -> Result<(), &'static str> {
    if sleep {
        user::print("HOLDFAST-STORE-SLEEP\n");
    }
    let mut bytes = [0u8; 64];
    let count = control::read(CONTROL, bytes.len() as u64, &mut bytes)
        .map_err(|_| "reading the control channel")?;
    if bytes[..count].contains(&HOST_RESTARTED) {
        user::print("HOLDFAST-STORE-SERVING\n");
        loop {
            let _ = control::read(CONTROL, bytes.len() as u64, &mut bytes);
        }
    }
    Ok(())
}

/// The number after `name` in the counters' text.
fn counter(text: &[u8], name: &[u8]) -> Option<u64> {
    let at = text.windows(name.len()).position(|window| window == name)? + name.len();
    let digits = text[at..].iter().take_while(|byte| byte.is_ascii_digit());
    let mut value = 0u64;
    let mut any = false;
    for digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

/// What the store says of itself.
struct StoreState {
    /// The newest committed generation.
    generation: u64,
    migration_backlog_objects: u64,
    written_bytes: u64,
    migrated_blocks: u64,
}

fn store_state() -> Result<StoreState, &'static str> {
    let status = checkpoint::status(CHECKPOINT).map_err(|_| "checkpoint status refused")?;
    // Each of the three is a family of its own, so in one page.
    let (mut backlog, mut written, mut migrated) = (None, None, None);
    user::counters::read_pages(CHECKPOINT, |text| {
        backlog = backlog.or_else(|| counter(text, BACKLOG_COUNTER));
        written = written.or_else(|| counter(text, WRITTEN_BYTES_COUNTER));
        migrated = migrated.or_else(|| counter(text, MIGRATED_BLOCKS_COUNTER));
    })
    .map_err(|_| "checkpoint counters refused")?;
    Ok(StoreState {
        generation: status.generation,
        migration_backlog_objects: backlog
            .ok_or("no migration backlog among the checkpoint counters")?,
        written_bytes: written.ok_or("no written bytes among the checkpoint counters")?,
        migrated_blocks: migrated.ok_or("no migrated blocks among the checkpoint counters")?,
    })
}

/// Sleeps until checkpoint `generation` is committed and migrated home; returns the state
/// then.
fn wait_until_quiet(generation: u64) -> Result<StoreState, &'static str> {
    loop {
        let state = store_state()?;
        if state.generation >= generation && state.migration_backlog_objects == 0 {
            return Ok(state);
        }
        wait_for_host(true)?;
    }
}

/// The median and the maximum.
fn median_and_max(values: &mut [u64]) -> (u64, u64) {
    values.sort_unstable();
    (values[values.len() / 2], values[values.len() - 1])
}

/// Each commit of the page timed alone; the median over rounds of each round's mean, and
/// the slowest round's.
fn journal_commit_cycles() -> Result<(u64, u64), &'static str> {
    let mut rounds = [0u64; JOURNAL_ROUNDS];
    let mut sequence = 0u64;
    for round in rounds.iter_mut() {
        let mut total = 0;
        for _ in 0..COMMITS_PER_ROUND {
            sequence += 1;
            page::write(JOURNAL_PAGE, 0, &sequence.to_le_bytes())
                .map_err(|_| "writing the journal page")?;
            let start = read_tsc();
            journal::commit(JOURNAL, JOURNAL_PAGE, EMPTY, EMPTY, EMPTY)
                .map_err(|_| "journal commit refused")?;
            total += read_tsc() - start;
        }
        *round = total / COMMITS_PER_ROUND;
    }
    Ok(median_and_max(&mut rounds))
}

/// Writes `value` into the first word of each of the `count` pages at `pages`.
fn dirty(pages: *mut [u8; PAGE_BYTES], count: usize, value: u64) {
    for index in 0..count {
        // SAFETY: `index` is within the caller's array, which only this program touches;
        // the volatile write makes every page's write happen.
        unsafe { core::ptr::write_volatile(pages.add(index).cast::<u64>(), value) };
    }
}

fn run(pages: *mut [u8; PAGE_BYTES], count: usize, rounds: u64) -> Result<(), &'static str> {
    report("resident_array_pages", count as u64);
    report("dirty_rounds", rounds);
    // The first checkpoint holds the whole system.
    wait_until_quiet(1)?;
    let (journal_median, journal_max) = journal_commit_cycles()?;
    report("journal_commit_tsc_cycles", journal_median);
    report("journal_commit_max_tsc_cycles", journal_max);
    for round in 1..=rounds {
        // Right after a checkpoint (or, in round 1, the first one and the journal's
        // commits, which leave the array alone): every write faults.
        let start = read_tsc();
        dirty(pages, count, round);
        report("touch_after_checkpoint_tsc_cycles", read_tsc() - start);
        // The same writes, the translations now in place.
        let start = read_tsc();
        dirty(pages, count, round);
        report("touch_before_checkpoint_tsc_cycles", read_tsc() - start);
        let before = store_state()?;
        checkpoint::take(CHECKPOINT).map_err(|_| "checkpoint take refused")?;
        let after = wait_until_quiet(before.generation + 1)?;
        report("dirtied_bytes", (count * PAGE_BYTES) as u64);
        report("written_bytes", after.written_bytes - before.written_bytes);
        report(
            "migrated_bytes",
            (after.migrated_blocks - before.migrated_blocks) * BLOCK_BYTES,
        );
    }
    user::print("HOLDFAST-STORE-QUIESCENT\n");
    loop {
        wait_for_host(false)?;
    }
}

/// Runs the benchmark on the `count` pages at `pages`; returns only on a failure.
pub fn main(pages: *mut [u8; PAGE_BYTES], count: usize, rounds: u64) -> u64 {
    match run(pages, count, rounds) {
        Ok(()) => 0,
        Err(what) => fail(what),
    }
}
