//! What the guests print in the store benchmark, and how the host reads it.
//!
//! - The kernel, per checkpoint (`guest-kernel/kernel/src/persistence/checkpoint.rs`): `holdfast:
//!   checkpoint <g> committed: <n> nodes, <m> pages, snapshot pause <us> us, stabilized in
//!   <ms> ms`; at a restart: `holdfast: restarted from checkpoint <g>: <k> processes`.
//! - `bench-store` (`services/selftest/src/bench_store/program.rs`): `HOLDFAST-STORE <name>
//!   <number>` figures, the words `HOLDFAST-STORE-SLEEP`, `-QUIESCENT`, `-SERVING`, or
//!   `HOLDFAST-STORE-FAILED <why>`.
//! - The Linux peer (`bench/peers/linux-store.c`): `LINUX-STORE <name> <number>` or
//!   `LINUX-STORE-FAILED <why>`.

use crate::figure_lines::{kernel_tsc_mhz, parse_figure_line};

pub const HOLDFAST_MARKER: &str = "HOLDFAST-STORE";
pub const LINUX_MARKER: &str = "LINUX-STORE";
/// `bench-store` asks to be woken in a while (it has no sleep of its own).
pub const SLEEP_LINE: &str = "HOLDFAST-STORE-SLEEP";
/// The store holds its newest checkpoint, migrated: the first boot is done.
pub const QUIESCENT_LINE: &str = "HOLDFAST-STORE-QUIESCENT";
/// The restarted program ran and printed: the restart boot is done.
pub const SERVING_LINE: &str = "HOLDFAST-STORE-SERVING";
pub const COMMIT_LINE_PREFIX: &str = "holdfast: checkpoint ";
pub const RESTART_LINE_PREFIX: &str = "holdfast: restarted from checkpoint ";
/// Kernel lines that end a run as failed.
pub const KERNEL_FAILURES: [&str; 3] = ["checkpoint failed", "kernel panic", "[FAILED]"];

pub const PAGE_BYTES: u64 = 4096;

/// One committed checkpoint as the kernel reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    pub generation: u64,
    pub nodes: u64,
    pub pages: u64,
    pub snapshot_pause_us: u64,
    pub stabilized_ms: u64,
}

/// Reads a kernel commit line. `None` when the line is not one; `Some(Err)` when it is but
/// does not read as expected (the kernel changed its wording: the run must fail, not skip).
pub fn parse_commit_line(line: &str) -> Option<Result<Commit, String>> {
    let rest = &line[line.find(COMMIT_LINE_PREFIX)? + COMMIT_LINE_PREFIX.len()..];
    let (generation, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix("committed: ")?;
    let bad = || {
        format!(
            "checkpoint line {line:?} does not read as '<g> committed: <n> nodes, <m> pages, snapshot pause <us> us, stabilized in <ms> ms'"
        )
    };
    let number = |text: &str| text.parse::<u64>().map_err(|_| bad());
    let words: Vec<&str> = rest
        .split([' ', ','])
        .filter(|word| !word.is_empty())
        .collect();
    let [
        nodes,
        "nodes",
        pages,
        "pages",
        "snapshot",
        "pause",
        pause,
        "us",
        "stabilized",
        "in",
        stabilized,
        "ms",
    ] = words.as_slice()
    else {
        return Some(Err(bad()));
    };
    Some((|| {
        Ok(Commit {
            generation: number(generation)?,
            nodes: number(nodes)?,
            pages: number(pages)?,
            snapshot_pause_us: number(pause)?,
            stabilized_ms: number(stabilized)?,
        })
    })())
}

/// What one dirty round wrote to the disk, from the store's counters (`bench-store`'s
/// `dirtied_bytes`, `written_bytes`, `migrated_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundBytes {
    /// The array's pages the program wrote, in bytes.
    pub dirtied: u64,
    /// Every byte written to the disk from before the checkpoint to its migration's end.
    pub written: u64,
    /// Of those, the home blocks migration copied from the log.
    pub migrated: u64,
}

impl RoundBytes {
    /// Bytes the stabilization wrote (log records, the commit; and migration's few table
    /// blocks and superblocks, which the counters do not tell apart) per byte dirtied.
    pub fn stabilization_written_per_dirtied(&self) -> f64 {
        self.written.saturating_sub(self.migrated) as f64 / self.dirtied as f64
    }

    /// Home bytes migration wrote per byte dirtied.
    pub fn migration_written_per_dirtied(&self) -> f64 {
        self.migrated as f64 / self.dirtied as f64
    }
}

/// What one boot of `bench-store` on a fresh store measured.
#[derive(Clone, Debug, PartialEq)]
pub struct HoldfastRun {
    /// Pages in the first checkpoint, which holds the whole system: every resident page.
    pub resident_pages: u64,
    /// The checkpoints of the rounds that dirtied every page of the program's array.
    pub dirty_rounds: Vec<Commit>,
    /// One journal commit of a page, as the program timed it: the median round's mean and
    /// the slowest round's.
    pub journal_commit_ns: f64,
    pub journal_commit_max_ns: f64,
    /// Per round, per page of the array: its first write after a checkpoint (which dropped
    /// every translation, so each faults) and the same write again, mapped.
    pub touch_after_checkpoint_ns: Vec<f64>,
    pub touch_before_checkpoint_ns: Vec<f64>,
    /// Per round, what it wrote.
    pub round_bytes: Vec<RoundBytes>,
}

impl HoldfastRun {
    pub fn resident_bytes(&self) -> u64 {
        self.resident_pages * PAGE_BYTES
    }

    /// Per round: the snapshot pause in milliseconds per GiB resident.
    pub fn pause_ms_per_gib(&self) -> Vec<f64> {
        let gib = self.resident_bytes() as f64 / (1u64 << 30) as f64;
        self.dirty_rounds
            .iter()
            .map(|commit| commit.snapshot_pause_us as f64 / 1000.0 / gib)
            .collect()
    }

    /// Per round: page bytes written per second of stabilization.
    pub fn stabilization_bytes_per_second(&self) -> Vec<f64> {
        self.dirty_rounds
            .iter()
            .map(|commit| {
                // A stabilization shorter than the kernel's millisecond resolution counts as half of one.
                let seconds = (commit.stabilized_ms as f64).max(0.5) / 1000.0;
                (commit.pages * PAGE_BYTES) as f64 / seconds
            })
            .collect()
    }
}

/// The figures `bench-store` printed, by name, in order; the first failure is the error.
fn figures(lines: &[String], marker: &str) -> Result<Vec<(String, f64)>, String> {
    lines
        .iter()
        .filter_map(|line| parse_figure_line(line, marker))
        .collect()
}

/// Every value of `key`, in order; exactly `count` are required (one per round).
fn find_each(figures: &[(String, f64)], key: &str, count: u64) -> Result<Vec<f64>, String> {
    let values: Vec<f64> = figures
        .iter()
        .filter(|(name, _)| name == key)
        .map(|(_, value)| *value)
        .collect();
    if values.len() as u64 != count {
        return Err(format!(
            "{} figures {key} among the guest's lines where the program has {count} rounds",
            values.len()
        ));
    }
    Ok(values)
}

fn find(figures: &[(String, f64)], key: &str) -> Result<f64, String> {
    figures
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| *value)
        .ok_or_else(|| format!("no figure {key} among the guest's lines"))
}

/// A first boot's figures from its kept lines (kernel lines and the program's).
pub fn holdfast_run(lines: &[String]) -> Result<HoldfastRun, String> {
    let figures = figures(lines, HOLDFAST_MARKER)?;
    let array_pages = find(&figures, "resident_array_pages")? as u64;
    let rounds = find(&figures, "dirty_rounds")? as u64;
    let journal_cycles = find(&figures, "journal_commit_tsc_cycles")?;
    let journal_max_cycles = find(&figures, "journal_commit_max_tsc_cycles")?;
    let tsc_mhz = kernel_tsc_mhz(lines)? as f64;
    let ns_per_page = |key: &str| -> Result<Vec<f64>, String> {
        Ok(find_each(&figures, key, rounds)?
            .into_iter()
            .map(|cycles| cycles * 1000.0 / tsc_mhz / array_pages.max(1) as f64)
            .collect())
    };
    let touch_after_checkpoint_ns = ns_per_page("touch_after_checkpoint_tsc_cycles")?;
    let touch_before_checkpoint_ns = ns_per_page("touch_before_checkpoint_tsc_cycles")?;
    let dirtied = find_each(&figures, "dirtied_bytes", rounds)?;
    let written = find_each(&figures, "written_bytes", rounds)?;
    let migrated = find_each(&figures, "migrated_bytes", rounds)?;
    let round_bytes: Vec<RoundBytes> = (0..rounds as usize)
        .map(|round| RoundBytes {
            dirtied: dirtied[round] as u64,
            written: written[round] as u64,
            migrated: migrated[round] as u64,
        })
        .collect();
    if let Some(bytes) = round_bytes
        .iter()
        .find(|bytes| bytes.dirtied == 0 || bytes.migrated > bytes.written)
    {
        return Err(format!(
            "a round's bytes do not add up: {bytes:?} (none dirtied, or more migrated than written)"
        ));
    }
    let commits: Vec<Commit> = lines
        .iter()
        .filter_map(|line| parse_commit_line(line))
        .collect::<Result<_, _>>()?;
    let first = commits
        .iter()
        .find(|commit| commit.generation == 1)
        .ok_or("no commit line for the first checkpoint")?;
    if first.pages < array_pages {
        return Err(format!(
            "the first checkpoint holds {} pages, fewer than the program's {array_pages}",
            first.pages
        ));
    }
    let dirty_rounds: Vec<Commit> = (2..2 + rounds)
        .map(|generation| {
            let commit = commits
                .iter()
                .find(|commit| commit.generation == generation)
                .ok_or_else(|| format!("no commit line for checkpoint {generation}"))?;
            if commit.pages < array_pages {
                return Err(format!(
                    "checkpoint {generation} holds {} pages; the program dirtied {array_pages}",
                    commit.pages
                ));
            }
            Ok(*commit)
        })
        .collect::<Result<_, String>>()?;
    Ok(HoldfastRun {
        resident_pages: first.pages,
        dirty_rounds,
        journal_commit_ns: journal_cycles * 1000.0 / tsc_mhz,
        journal_commit_max_ns: journal_max_cycles * 1000.0 / tsc_mhz,
        touch_after_checkpoint_ns,
        touch_before_checkpoint_ns,
        round_bytes,
    })
}

/// What a restart boot measured, from the host's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartRun {
    /// QEMU start → `HOLDFAST-READY` (the kernel is up; the store not yet read).
    pub ready_from_qemu_start: std::time::Duration,
    /// The guest's own figure on its ready line.
    pub ready_from_first_instruction: std::time::Duration,
    /// QEMU start → the kernel's restart line (the process table rebuilt).
    pub restarted_from_qemu_start: std::time::Duration,
    /// QEMU start → the restarted program's first line.
    pub serving_from_qemu_start: std::time::Duration,
}

impl RestartRun {
    /// The serving time from the kernel's first instruction: the guest's ready figure plus
    /// what the host saw between the ready and serving lines.
    pub fn serving_from_first_instruction(&self) -> std::time::Duration {
        self.ready_from_first_instruction
            + self
                .serving_from_qemu_start
                .saturating_sub(self.ready_from_qemu_start)
    }

    /// What the restart spent after ready: reading the store back and starting to serve.
    pub fn after_ready(&self) -> std::time::Duration {
        self.serving_from_qemu_start
            .saturating_sub(self.ready_from_qemu_start)
    }
}

/// The Linux peer's figures: the median round and the slowest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinuxRun {
    pub raw_write_bytes_per_second: f64,
    pub raw_write_min_bytes_per_second: f64,
    /// One 4 KiB write + flush.
    pub write_flush_ns: f64,
    pub write_flush_max_ns: f64,
}

pub fn linux_figures(lines: &[String]) -> Result<LinuxRun, String> {
    let figures = figures(lines, LINUX_MARKER)?;
    Ok(LinuxRun {
        raw_write_bytes_per_second: find(&figures, "raw_write_bytes_per_second")?,
        raw_write_min_bytes_per_second: find(&figures, "raw_write_min_bytes_per_second")?,
        write_flush_ns: find(&figures, "write_flush_ns")?,
        write_flush_max_ns: find(&figures, "write_flush_max_ns")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| (*line).to_owned()).collect()
    }

    #[test]
    fn commit_lines_are_read() {
        assert_eq!(
            parse_commit_line(
                "holdfast: checkpoint 3 committed: 12 nodes, 16390 pages, snapshot pause 8123 us, stabilized in 912 ms"
            ),
            Some(Ok(Commit {
                generation: 3,
                nodes: 12,
                pages: 16390,
                snapshot_pause_us: 8123,
                stabilized_ms: 912
            }))
        );
        assert_eq!(
            parse_commit_line("holdfast: restarted from checkpoint 3: 1 processes"),
            None
        );
        assert_eq!(parse_commit_line("holdfast: checkpoint failed: disk"), None);
        assert_eq!(parse_commit_line("HOLDFAST-STORE-SLEEP"), None);
        for bad in [
            "holdfast: checkpoint x committed: 1 nodes, 2 pages, snapshot pause 3 us, stabilized in 4 ms",
            "holdfast: checkpoint 1 committed: 1 nodes, 2 pages, stabilized in 4 ms",
            "holdfast: checkpoint 1 committed: 1 nodes, 2 pages, snapshot pause 3.5 us, stabilized in 4 ms",
        ] {
            assert!(matches!(parse_commit_line(bad), Some(Err(_))), "{bad}");
        }
    }

    fn first_boot() -> Vec<String> {
        lines(&[
            "selftest: timer: TSC 2000 MHz, local APIC timer 1000 MHz, periodic interrupt 100 Hz requested, 100.000 Hz measured [ok]",
            "HOLDFAST-STORE resident_array_pages 16384",
            "HOLDFAST-STORE dirty_rounds 2",
            "holdfast: checkpoint 1 committed: 20 nodes, 16400 pages, snapshot pause 3000 us, stabilized in 800 ms",
            "HOLDFAST-STORE journal_commit_tsc_cycles 2000000",
            "HOLDFAST-STORE journal_commit_max_tsc_cycles 3000000",
            "HOLDFAST-STORE touch_after_checkpoint_tsc_cycles 327680000",
            "HOLDFAST-STORE touch_before_checkpoint_tsc_cycles 32768000",
            "holdfast: checkpoint 2 committed: 9 nodes, 16390 pages, snapshot pause 4000 us, stabilized in 500 ms",
            "HOLDFAST-STORE dirtied_bytes 67108864",
            "HOLDFAST-STORE written_bytes 140000000",
            "HOLDFAST-STORE migrated_bytes 68000000",
            "HOLDFAST-STORE touch_after_checkpoint_tsc_cycles 655360000",
            "HOLDFAST-STORE touch_before_checkpoint_tsc_cycles 65536000",
            "holdfast: checkpoint 3 committed: 9 nodes, 16390 pages, snapshot pause 5000 us, stabilized in 0 ms",
            "HOLDFAST-STORE dirtied_bytes 67108864",
            "HOLDFAST-STORE written_bytes 134217728",
            "HOLDFAST-STORE migrated_bytes 67108864",
        ])
    }

    #[test]
    fn a_first_boot_gives_resident_pages_rounds_and_the_journal() {
        let run = holdfast_run(&first_boot()).unwrap();
        assert_eq!(run.resident_pages, 16400);
        assert_eq!(
            run.dirty_rounds
                .iter()
                .map(|c| c.generation)
                .collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(run.journal_commit_ns, 1_000_000.0);
        assert_eq!(run.journal_commit_max_ns, 1_500_000.0);
        // 327,680,000 cycles at 2000 MHz over 16,384 pages: 10 µs a page.
        assert_eq!(run.touch_after_checkpoint_ns, [10_000.0, 20_000.0]);
        assert_eq!(run.touch_before_checkpoint_ns, [1_000.0, 2_000.0]);
        assert_eq!(
            run.round_bytes
                .iter()
                .map(|bytes| (
                    bytes.stabilization_written_per_dirtied(),
                    bytes.migration_written_per_dirtied()
                ))
                .collect::<Vec<_>>(),
            [
                (72_000_000.0 / 67_108_864.0, 68_000_000.0 / 67_108_864.0),
                (1.0, 1.0)
            ]
        );
        let gib = 16400.0 * 4096.0 / (1u64 << 30) as f64;
        assert_eq!(run.pause_ms_per_gib(), [4.0 / gib, 5.0 / gib]);
        let bytes = 16390.0 * 4096.0;
        assert_eq!(
            run.stabilization_bytes_per_second(),
            [bytes / 0.5, bytes / 0.0005]
        );
    }

    #[test]
    fn missing_or_short_checkpoints_and_failures_are_errors() {
        let run = first_boot();
        let mut no_commit = run.clone();
        no_commit.remove(14);
        let error = holdfast_run(&no_commit).unwrap_err();
        assert!(error.contains("no commit line for checkpoint 3"), "{error}");
        let error = holdfast_run(&run[..17]).unwrap_err();
        assert!(
            error.contains("1 figures migrated_bytes among the guest's lines where the program has 2 rounds"),
            "{error}"
        );
        let mut more_migrated = run.clone();
        more_migrated[17] = "HOLDFAST-STORE migrated_bytes 200000000".into();
        let error = holdfast_run(&more_migrated).unwrap_err();
        assert!(error.contains("do not add up"), "{error}");
        let mut short = run.clone();
        short[14] = "holdfast: checkpoint 3 committed: 9 nodes, 100 pages, snapshot pause 5000 us, stabilized in 9 ms".into();
        assert!(
            holdfast_run(&short)
                .unwrap_err()
                .contains("the program dirtied 16384")
        );
        let mut failed = run.clone();
        failed.push("HOLDFAST-STORE-FAILED journal commit refused".into());
        assert!(
            holdfast_run(&failed)
                .unwrap_err()
                .contains("journal commit refused")
        );
        let error = holdfast_run(&run[1..]).unwrap_err();
        assert!(error.contains("TSC"), "{error}");
    }

    #[test]
    fn the_peer_gives_throughput_and_latency() {
        let run = lines(&[
            "LINUX-STORE write_flush_ns 812345.5",
            "LINUX-STORE write_flush_max_ns 900000",
            "LINUX-STORE raw_write_bytes_per_second 150000000",
            "LINUX-STORE raw_write_min_bytes_per_second 120000000",
        ]);
        assert_eq!(
            linux_figures(&run),
            Ok(LinuxRun {
                raw_write_bytes_per_second: 150_000_000.0,
                raw_write_min_bytes_per_second: 120_000_000.0,
                write_flush_ns: 812_345.5,
                write_flush_max_ns: 900_000.0,
            })
        );
        assert!(linux_figures(&run[..3]).is_err());
        assert!(
            linux_figures(&lines(&["LINUX-STORE-FAILED open /dev/vda: No such file"]))
                .unwrap_err()
                .contains("/dev/vda")
        );
    }

    #[test]
    fn restart_times_are_taken_from_ready() {
        use std::time::Duration;
        let run = RestartRun {
            ready_from_qemu_start: Duration::from_millis(300),
            ready_from_first_instruction: Duration::from_millis(20),
            restarted_from_qemu_start: Duration::from_millis(900),
            serving_from_qemu_start: Duration::from_millis(1000),
        };
        assert_eq!(run.after_ready(), Duration::from_millis(700));
        assert_eq!(
            run.serving_from_first_instruction(),
            Duration::from_millis(720)
        );
    }
}
