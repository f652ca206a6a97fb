//! Restart after a crash: a system checkpointing to its store is killed with SIGKILL at a
//! random moment (`holdfast vm kill`), booted again on the same disk, and must come back
//! from its newest committed checkpoint with its process where the checkpoint caught it —
//! registers, pages and capabilities — many times over.
//!
//! The workload (manifest services/journal-manifest.toml) is `persist-counter`
//! (services/selftest/src/persist_counter.rs), which prints `persist-counter: <n>` every 2^22 steps, `n`
//! counted in a register and in memory alongside a trace of every step that it checks at
//! each print. The kernel prints `holdfast: checkpoint <g> committed: ...` after each commit
//! and `holdfast: restarted from checkpoint <g>: ...` at a restart. What must hold after each
//! kill, boot `k` restarting from checkpoint `g`:
//! - `g` is the newest checkpoint boot `k-1` committed: the last it printed, or one more if
//!   the kill fell between the commit and its line;
//! - the first count boot `k` prints is past every count boot `k-1` printed before
//!   committing checkpoint `g-1` (checkpoint `g` was taken after that), and at most one
//!   report beyond the last count it printed at all (nothing is invented);
//! - counts go up by one report at a time within a boot, and the program never finds its
//!   registers and pages disagreeing (`MISMATCH`) or restarted from its entry point;
//! - every journal commit each of three `journal-writer`s printed as acknowledged (every
//!   16th) survives, though no checkpoint followed it: the page it finds after the restart
//!   holds at least the last number it acknowledged before the kill. The third dawdles
//!   between reading its page and writing it, so that checkpoints often catch it there and
//!   the restart resumes it with what it read before the checkpoint (see
//!   services/selftest/src/journal_writer.rs).
//!
//! `HOLDFAST_RESTART_ROUNDS` sets the number of kills (default 8).

mod support;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{LineReader, build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

const REPORT_STEPS: u64 = 1 << 22;
/// Each `journal-writer` prints every 16th acknowledged commit.
const JOURNAL_PRINT_EVERY: u64 = 16;
const JOURNAL_WRITERS: [u64; 3] = [1, 2, 3];
const CHECKPOINT_INTERVAL_MS: u64 = 200;
/// Commits a boot must show before it is killed, so that the next boot has a checkpoint of
/// this boot to come back to and the one before it to bound it.
const COMMITS_BEFORE_KILL: usize = 2;
const KILL_DELAY_MS_MAX: u64 = 400;
const BOOT_TIME_LIMIT: Duration = Duration::from_secs(120);

fn random_u64() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// The numbers that follow `prefix` on the lines that start with it.
fn numbers_after(lines: &[String], prefix: &str) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| rest.parse().ok())
        .collect()
}

/// What one boot printed, in order.
struct Boot {
    lines: Vec<String>,
}

impl Boot {
    fn counts(&self) -> Vec<u64> {
        self.counts_in(&self.lines)
    }

    fn counts_in(&self, lines: &[String]) -> Vec<u64> {
        numbers_after(lines, "persist-counter: ")
    }

    fn acknowledged(&self, writer: u64) -> Vec<u64> {
        numbers_after(&self.lines, &format!("journal-writer {writer}: acknowledged "))
    }

    fn commits(&self) -> Vec<(usize, u64)> {
        self.lines
            .iter()
            .enumerate()
            .filter_map(|(index, line)| {
                let rest = line.strip_prefix("holdfast: checkpoint ")?;
                let (generation, rest) = rest.split_once(' ')?;
                rest.starts_with("committed")
                    .then_some(())
                    .and_then(|()| Some((index, generation.parse().ok()?)))
            })
            .collect()
    }

    fn restarted_from(&self) -> Option<u64> {
        self.lines.iter().find_map(|line| {
            let rest = line.strip_prefix("holdfast: restarted from checkpoint ")?;
            rest.split(':').next()?.parse().ok()
        })
    }

    /// The last count printed before the line announcing `generation`'s commit.
    fn last_count_before_commit(&self, generation: u64) -> Option<u64> {
        let (index, _) = self.commits().into_iter().find(|&(_, g)| g == generation)?;
        self.counts_in(&self.lines[..index]).last().copied()
    }

    fn transcript(&self) -> String {
        self.lines.join("\n")
    }
}

/// Boots the persist image on `store` as VM `name`, kills it `delay` after its
/// [`COMMITS_BEFORE_KILL`]th commit and first acknowledged journal commit and count, and returns
/// what it printed.
fn boot_and_kill(image_dir: &Path, store: &Path, name: &str, delay: Duration) -> Boot {
    let append = format!("holdfast.checkpoint-interval-ms={CHECKPOINT_INTERVAL_MS}");
    let mut command = holdfast();
    command
        .args(["run", "--name", name, "--accel", "tcg", "--timeout-seconds", "300"])
        .arg("--image-dir")
        .arg(image_dir)
        .arg("--disk")
        .arg(store)
        .args(["--append", &append]);
    let LineReader { mut child, lines: receiver, reader } = spawn_reading_lines(&mut command);
    let mut boot = Boot { lines: Vec::new() };
    let started = Instant::now();
    let mut kill_at = None;
    loop {
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            break;
        }
        let left = BOOT_TIME_LIMIT.saturating_sub(started.elapsed());
        assert!(!left.is_zero(), "no {COMMITS_BEFORE_KILL} commits within {BOOT_TIME_LIMIT:?}:\n{}", boot.transcript());
        let wait = kill_at.map_or(left, |at: Instant| at.saturating_duration_since(Instant::now()));
        match receiver.recv_timeout(wait) {
            Ok(line) => boot.lines.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the VM ended before it was killed:\n{}", boot.transcript())
            }
        }
        // Each boot must also show a journal commit acknowledged and a count, for the checks
        // (a slow host may take longer than two checkpoints to print either).
        let acknowledged = JOURNAL_WRITERS.iter().all(|&writer| !boot.acknowledged(writer).is_empty());
        let counted = !boot.counts().is_empty();
        if kill_at.is_none() && boot.commits().len() >= COMMITS_BEFORE_KILL && acknowledged && counted {
            kill_at = Some(Instant::now() + delay);
        }
    }
    let kill = run_holdfast(&["vm", "kill", name]);
    assert_eq!(kill.status, Some(0), "holdfast vm kill failed\n{}", kill.transcript());
    assert!(kill.stdout.starts_with(&format!("{name}: killed (SIGKILL to QEMU, pid ")), "{}", kill.transcript());
    // The rest of what the VM printed before it died.
    boot.lines.extend(receiver.iter());
    reader.join().expect("the reader thread ends");
    let status = child.0.wait().expect("holdfast run ends");
    assert!(!status.success(), "a killed VM is not a success: {status}");
    boot
}

/// Checks one boot on its own: no disagreement found, counts one report apart.
fn check_boot(boot: &Boot) {
    for bad in ["MISMATCH", "continuing at", "kernel panic", "checkpoint failed", "selftest: store:", "journal commit failed"] {
        assert!(!boot.lines.iter().any(|line| line.contains(bad)), "'{bad}' in:\n{}", boot.transcript());
    }
    let counts = boot.counts();
    assert!(!counts.is_empty(), "no counts:\n{}", boot.transcript());
    for pair in counts.windows(2) {
        assert_eq!(pair[1], pair[0] + REPORT_STEPS, "counts out of step:\n{}", boot.transcript());
    }
    for writer in JOURNAL_WRITERS {
        let acknowledged = boot.acknowledged(writer);
        assert!(!acknowledged.is_empty(), "writer {writer}: no journal commit acknowledged:\n{}", boot.transcript());
        for pair in acknowledged.windows(2) {
            // More than one apart after a restart that found the page newer than the registers.
            assert!(
                pair[1] > pair[0] && pair[1] % JOURNAL_PRINT_EVERY == 0,
                "writer {writer}: journal commits out of step:\n{}",
                boot.transcript()
            );
        }
    }
}

/// Checks that `boot` restarted where `before` (the boot it followed) left off.
fn check_restart(before: &Boot, boot: &Boot) {
    let context = || format!("--- the boot before\n{}\n--- the restart\n{}", before.transcript(), boot.transcript());
    let last_commit = before.commits().last().map(|&(_, generation)| generation).expect("commits were awaited");
    let generation = boot.restarted_from().unwrap_or_else(|| panic!("no restart line\n{}", context()));
    assert!(
        generation == last_commit || generation == last_commit + 1,
        "restarted from checkpoint {generation}, but the last commit before the kill was {last_commit}\n{}",
        context()
    );
    let first = boot.counts()[0];
    let floor = before.last_count_before_commit(generation - 1);
    assert!(
        floor.is_none_or(|floor| first > floor),
        "restarted at count {first}, behind {floor:?}, a count printed before checkpoint {} committed\n{}",
        generation - 1,
        context()
    );
    let ceiling = before.counts().last().copied().unwrap_or(0) + REPORT_STEPS;
    assert!(first <= ceiling, "restarted at count {first}, beyond anything reached ({ceiling})\n{}", context());
    for writer in JOURNAL_WRITERS {
        let Some(&last_before) = before.acknowledged(writer).last() else {
            continue;
        };
        // The last: a checkpoint that caught the writer printing the line in the boot before
        // makes it print that boot's line again first.
        let survived = numbers_after(&boot.lines, &format!("journal-writer {writer}: restarted, page holds ")).last().copied();
        assert!(
            survived.is_some_and(|survived| survived >= last_before),
            "writer {writer}: journal commit {last_before} was acknowledged before the kill, but the page holds {survived:?} after the restart\n{}",
            context()
        );
    }
}

/// `holdfast store check` after a kill: clean, except that a superblock write the kill cut
/// off may be reported (the next open rewrites it); nothing else may be wrong.
fn check_store_after_kill(store: &str, round: usize) {
    let check = run_holdfast(&["store", "check", store]);
    let findings: Vec<&str> = check.stdout.lines().skip(1).collect();
    let cut_off_superblock_write =
        |line: &&str| line.contains(": superblock slot ") && line.ends_with("will be rewritten at the next read-write open");
    let clean = check.status == Some(0) || (check.status == Some(1) && findings.iter().all(cut_off_superblock_write));
    assert!(clean, "the store is damaged after kill {round}\n{}", check.transcript());
}

#[test]
fn a_killed_system_restarts_from_its_newest_checkpoint() {
    let manifest = source_dir().join("services/journal-manifest.toml");
    let image_dir = build_image("journal-image", Some(&manifest));
    let directory = scratch_dir("restart");
    let store = directory.join("store.img");
    let store_path = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "16", store_path]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());

    let rounds: usize = std::env::var("HOLDFAST_RESTART_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(8);
    let name = format!("restart-test-{}", std::process::id());
    let mut previous: Option<Boot> = None;
    for round in 0..rounds {
        let delay = Duration::from_millis(random_u64() % (KILL_DELAY_MS_MAX + 1));
        let boot = boot_and_kill(&image_dir, &store, &name, delay);
        check_boot(&boot);
        match &previous {
            None => assert_eq!(boot.restarted_from(), None, "a fresh store restarted:\n{}", boot.transcript()),
            Some(before) => check_restart(before, &boot),
        }
        eprintln!(
            "round {round}: killed {delay:?} after commit {}, counts {:?}..{:?}",
            boot.commits().get(COMMITS_BEFORE_KILL - 1).map_or(0, |&(_, generation)| generation),
            boot.counts().first(),
            boot.counts().last()
        );
        check_store_after_kill(store_path, round);
        previous = Some(boot);
    }
}
