//! `holdfast bench store`: the single-level store's figures against the raw disk they sit
//! on, in the same run.
//!
//! Holdfast boots `bench/store-manifest.toml`'s system (`bench-store`, a program keeping a
//! large array resident) on a freshly formatted store, takes checkpoints of every page,
//! times journal commits, and is booted again on the store it left (the restart). The
//! Linux peer, the boot benchmark's Debian cloud kernel in the same QEMU configuration with
//! a store-sized disk image attached the same way, writes the raw disk
//! (`bench/peers/linux-store.c`). The table gives the snapshot pause per GiB resident, the
//! stabilization throughput against the raw write throughput, the journal commit against a
//! 4 KiB write + flush, and the restart to serving, each against its goal.

pub mod figures;
pub mod holdfast;
pub mod linux;
pub mod table;

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, anyhow};
use holdfast_qemu::{Boot, VmSpec};

use crate::guests::Guest;
use crate::linux_peer;
use crate::runner::{self, GuestRun};
use crate::setup::{RunOptions, RunSetup};
use crate::table::{Caption, median};
use figures::{HoldfastRun, LinuxRun, RestartRun, RoundBytes};
pub use holdfast::HoldfastFiles;
use table::{Medians, Spread};

/// First boots (each followed by [`RESTARTS_PER_RUN`] restarts, then a Linux peer boot)
/// by default, and with the `quick` preset.
pub const RUNS_DEFAULT: usize = 3;
pub const RUNS_QUICK: usize = 1;
/// Restart boots of each store: the store does not change between them.
pub const RESTARTS_PER_RUN: usize = 2;
/// Longest one boot may take.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(1800);

/// How much `bench-store` keeps resident and how many checkpoints of it it takes: what its
/// bin (`services/selftest/src/bench_store.rs`) is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSize {
    pub resident_array_mib: u64,
    pub rounds: usize,
}

/// `bench-store`'s size, the same for the quick preset, which has fewer runs: three
/// checkpoints, so that one slow snapshot is not half the median.
pub const SIZE: StoreSize = StoreSize {
    resident_array_mib: 1024,
    rounds: 3,
};

impl StoreSize {
    /// The kernel heap the array needs: object pages come from it, with room for the store's
    /// directory and the stabilization's copies. The heap takes the guest's largest free RAM
    /// range, so the guest's memory is sized from it.
    pub fn heap_mib(self) -> u64 {
        self.resident_array_mib * 5 / 4 + 64
    }

    /// Guest memory, the same for both guests: the heap, the kernel and the initial image.
    pub fn memory_mib(self) -> u32 {
        (self.heap_mib() + 128) as u32
    }

    /// The store (and the peer's disk): the log is an eighth, twice the array, so that the
    /// kernel takes every page of the array in one checkpoint (it checkpoints early when the
    /// dirty pages near three quarters of the free log).
    pub fn store_mib(self) -> u64 {
        self.resident_array_mib * 16 + 64
    }
}

/// Formats a store on a disk image of the given size in MiB (`holdfast store format`).
pub type FormatStore = fn(&Path, u64) -> anyhow::Result<()>;

/// What `holdfast bench store` runs.
#[derive(Clone, Debug)]
pub struct StoreBenchOptions {
    pub holdfast: HoldfastFiles,
    pub run: RunOptions,
    pub size: StoreSize,
    pub format_store: FormatStore,
}

impl StoreBenchOptions {
    /// The full benchmark ([`RUNS_DEFAULT`] runs) under TCG.
    pub fn new(holdfast: HoldfastFiles, format_store: FormatStore) -> Self {
        Self::with(holdfast, format_store, RUNS_DEFAULT)
    }

    /// The `quick` preset: [`RUNS_QUICK`] run.
    pub fn quick(holdfast: HoldfastFiles, format_store: FormatStore) -> Self {
        Self::with(holdfast, format_store, RUNS_QUICK)
    }

    fn with(holdfast: HoldfastFiles, format_store: FormatStore, runs: usize) -> Self {
        let size = SIZE;
        let mut run = RunOptions::new(runs);
        run.memory_mib = size.memory_mib();
        run.boot_timeout = BOOT_TIMEOUT;
        Self {
            holdfast,
            run,
            size,
            format_store,
        }
    }
}

/// What the benchmark measured.
#[derive(Clone, Debug)]
pub struct StoreReport {
    pub holdfast_runs: Vec<HoldfastRun>,
    pub restarts: Vec<RestartRun>,
    /// The peer's raw write throughput (B/s) and write + flush (ns), per boot.
    pub linux_runs: Vec<LinuxRun>,
    pub medians: Medians,
    pub table: String,
}

/// `holdfast bench store`: the runs with a progress line per boot, then the table.
pub fn store(options: &StoreBenchOptions) -> anyhow::Result<()> {
    let mut stdout = io::stdout();
    let report = measure_store(options, &mut stdout)?;
    write!(stdout, "\n{}", report.table)?;
    stdout.flush()?;
    Ok(())
}

/// The serial lines kept from a Holdfast boot (not the program's sleep requests).
const HOLDFAST_KEPT: [&str; 6] = [
    "HOLDFAST-STORE ",
    figures::SERVING_LINE,
    "HOLDFAST-STORE-FAILED",
    figures::COMMIT_LINE_PREFIX,
    figures::RESTART_LINE_PREFIX,
    crate::figure_lines::KERNEL_TSC_LINE_PREFIX,
];

struct Session<'a> {
    setup: &'a RunSetup,
    progress: &'a mut dyn Write,
    boots_done: usize,
    boots_total: usize,
}

impl Session<'_> {
    fn line(&mut self, label: &str, run: usize, figures: &str) -> anyhow::Result<()> {
        self.boots_done += 1;
        writeln!(
            self.progress,
            "[{:>2}/{}] {label:<18} run {run}/{}: {figures}",
            self.boots_done, self.boots_total, self.setup.options.runs_per_guest
        )?;
        self.progress.flush()?;
        Ok(())
    }
}

/// One Holdfast boot on `spec`'s store, the host answering the program on its control
/// channel.
fn run_holdfast(setup: &RunSetup, spec: &VmSpec, boot: holdfast::Boot) -> anyhow::Result<GuestRun> {
    let socket = spec
        .control_socket
        .clone()
        .expect("the Holdfast VM has a control channel");
    let _ = std::fs::remove_file(&socket);
    let channel = holdfast::ControlChannel::new(socket.clone());
    let mut command = setup.qemu.command();
    command.args(spec.qemu_arguments());
    let expectation = Guest::HoldfastPvh.expectation(setup.options.boot_timeout);
    let result = runner::run_guest_with(command, &expectation, &HOLDFAST_KEPT, &mut |line| {
        let (action, send) = holdfast::react(boot, line);
        if let Some((delay, byte)) = send {
            channel.send_after(delay, byte);
        }
        action
    });
    let closed = channel.close();
    let _ = std::fs::remove_file(&socket);
    let run = result?;
    closed?;
    Ok(run)
}

/// When the first kept line starting with `prefix` arrived.
fn arrival(run: &GuestRun, prefix: &str) -> Result<Duration, String> {
    run.kept_lines
        .iter()
        .zip(&run.kept_lines_at)
        .find(|(line, _)| line.starts_with(prefix))
        .map(|(_, at)| *at)
        .ok_or_else(|| format!("no '{prefix}' line"))
}

fn restart_run(run: &GuestRun) -> Result<RestartRun, String> {
    Ok(RestartRun {
        ready_from_qemu_start: run.sample.ready_from_qemu_start,
        ready_from_first_instruction: run.sample.ready_from_first_instruction,
        restarted_from_qemu_start: arrival(run, figures::RESTART_LINE_PREFIX)?,
        serving_from_qemu_start: arrival(run, figures::SERVING_LINE)?,
    })
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// [`store`] without printing the table: progress lines go to `progress`.
pub fn measure_store(
    options: &StoreBenchOptions,
    progress: &mut dyn Write,
) -> anyhow::Result<StoreReport> {
    let setup = RunSetup::prepare(&options.run)?;
    let size = options.size;
    let linux_initramfs = linux::prepare_initramfs(
        &setup.busybox,
        &setup.linux_kernel,
        &setup.cache_dir,
        size.resident_array_mib,
        size.rounds,
    )?;
    let store_image = setup
        .cache_dir
        .join(format!("bench-store-{}.img", std::process::id()));
    let peer_image = setup
        .cache_dir
        .join(format!("bench-store-peer-{}.img", std::process::id()));
    let socket = setup
        .cache_dir
        .join(format!("bench-store-{}.control", std::process::id()));
    writeln!(
        progress,
        "store bench: {} runs ({} MiB resident array, {} checkpoints of it, {} restarts; Linux peer), {}, {} MiB, \
         {} MiB disk images; QEMU {}; Holdfast {} with {}; Linux peer {} with {}",
        options.run.runs_per_guest,
        size.resident_array_mib,
        size.rounds,
        RESTARTS_PER_RUN,
        options.run.accelerator,
        options.run.memory_mib,
        size.store_mib(),
        setup.qemu.path().display(),
        options.holdfast.kernel.display(),
        options.holdfast.initial_image.display(),
        setup.linux_kernel.display(),
        linux_initramfs.display()
    )?;

    let mut holdfast_spec = setup.vm_spec(Boot::Pvh {
        kernel: options.holdfast.kernel.clone(),
        initial_image: Some(options.holdfast.initial_image.clone()),
        // No checkpoint but those the program asks for, after the first (every object).
        command_line: "holdfast.checkpoint-interval-ms=86400000".to_owned(),
    });
    holdfast_spec.disks = vec![store_image.clone()];
    holdfast_spec.control_socket = Some(socket);
    let mut linux_spec = setup.vm_spec(linux_peer::boot(&setup.linux_kernel, &linux_initramfs));
    linux_spec.disks = vec![peer_image.clone()];

    let runs = options.run.runs_per_guest;
    let mut session = Session {
        setup: &setup,
        progress,
        boots_done: 0,
        boots_total: runs * (2 + RESTARTS_PER_RUN),
    };
    let mut holdfast_runs = Vec::new();
    let mut restarts = Vec::new();
    let mut linux_runs = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for run_number in 1..=runs {
            let context = |what: &str| format!("{what} (run {run_number} of {runs})");
            (options.format_store)(&store_image, size.store_mib())
                .with_context(|| format!("formatting {}", store_image.display()))?;
            let first = run_holdfast(&setup, &holdfast_spec, holdfast::Boot::First)
                .with_context(|| context("the Holdfast guest did not finish its rounds"))?;
            let figures = figures::holdfast_run(&first.kept_lines)
                .map_err(|why| anyhow!("the Holdfast guest, run {run_number}: {why}"))?;
            session.line(
                "Holdfast",
                run_number,
                &format!(
                    "{} MiB resident; snapshot pause {:?} us; stabilized {:?} ms; bytes written per byte dirtied {:?}; \
                     touch after / before checkpoint {:?} / {:?} ns a page; journal commit {:.1} us",
                    figures.resident_bytes() >> 20,
                    figures.dirty_rounds.iter().map(|c| c.snapshot_pause_us).collect::<Vec<_>>(),
                    figures.dirty_rounds.iter().map(|c| c.stabilized_ms).collect::<Vec<_>>(),
                    figures
                        .round_bytes
                        .iter()
                        .map(|bytes| bytes.written as f64 / bytes.dirtied as f64)
                        .map(|ratio| (ratio * 1000.0).round() / 1000.0)
                        .collect::<Vec<_>>(),
                    figures.touch_after_checkpoint_ns.iter().map(|ns| ns.round()).collect::<Vec<_>>(),
                    figures.touch_before_checkpoint_ns.iter().map(|ns| ns.round()).collect::<Vec<_>>(),
                    figures.journal_commit_ns / 1000.0
                ),
            )?;
            holdfast_runs.push(figures);
            for _ in 0..RESTARTS_PER_RUN {
                let boot = run_holdfast(&setup, &holdfast_spec, holdfast::Boot::Restart)
                    .with_context(|| context("the Holdfast restart did not serve"))?;
                let restart = restart_run(&boot)
                    .map_err(|why| anyhow!("the Holdfast restart, run {run_number}: {why}"))?;
                session.line(
                    "Holdfast restart",
                    run_number,
                    &format!(
                        "ready {:.1} ms, restarted {:.1} ms, serving {:.1} ms from QEMU start; serving {:.1} ms from first instruction",
                        ms(restart.ready_from_qemu_start),
                        ms(restart.restarted_from_qemu_start),
                        ms(restart.serving_from_qemu_start),
                        ms(restart.serving_from_first_instruction())
                    ),
                )?;
                restarts.push(restart);
            }
            (options.format_store)(&peer_image, size.store_mib())
                .with_context(|| format!("formatting {}", peer_image.display()))?;
            let mut command = setup.qemu.command();
            command.args(linux_spec.qemu_arguments());
            let expectation = Guest::Linux.expectation(setup.options.boot_timeout);
            let linux = runner::run_guest(command, &expectation, &[figures::LINUX_MARKER])
                .with_context(|| context("the Linux peer did not finish"))?;
            let peer = figures::linux_figures(&linux.kept_lines)
                .map_err(|why| anyhow!("the Linux peer, run {run_number}: {why}"))?;
            session.line(
                "Linux peer",
                run_number,
                &format!(
                    "raw write {:.1} MB/s, 4 KiB write + flush {:.1} us",
                    peer.raw_write_bytes_per_second / 1e6,
                    peer.write_flush_ns / 1000.0
                ),
            )?;
            linux_runs.push(peer);
        }
        Ok(())
    })();
    for image in [&store_image, &peer_image] {
        let _ = std::fs::remove_file(image);
    }
    result?;

    let medians = summarize(&holdfast_runs, &restarts, &linux_runs);
    let caption = Caption {
        title: format!(
            "store: QEMU q35, {}, {} MiB, virtio-blk on a {} MiB raw image (host page cache, QEMU's default \
             cache=writeback: a flush is the host's fdatasync); {} run(s): {} checkpoints of a {} MiB array, \
             {} restarts; Linux peer {} ({})",
            options.run.accelerator,
            options.run.memory_mib,
            size.store_mib(),
            runs,
            size.rounds,
            size.resident_array_mib,
            RESTARTS_PER_RUN,
            setup
                .linux_kernel
                .file_name()
                .unwrap_or_default()
                .to_string_lossy(),
            linux_peer::KERNEL_COMMAND_LINE
        ),
        notes: notes(size),
    };
    let table = table::render(&medians, &caption);
    Ok(StoreReport {
        holdfast_runs,
        restarts,
        linux_runs,
        medians,
        table,
    })
}

/// The medians over every round of every run (the per-round figures), and over boots; the
/// worst case beside each (the largest time or byte count, the smallest throughput).
fn summarize(
    holdfast_runs: &[HoldfastRun],
    restarts: &[RestartRun],
    linux_runs: &[LinuxRun],
) -> Medians {
    let spread = |values: Vec<f64>, worst: fn(f64, f64) -> f64| Spread {
        median: median(&values).unwrap_or(f64::NAN),
        worst: values.iter().copied().reduce(worst).unwrap_or(f64::NAN),
    };
    let rounds = |figure: fn(&HoldfastRun) -> Vec<f64>| -> Vec<f64> {
        holdfast_runs.iter().flat_map(figure).collect()
    };
    let bytes = |ratio: fn(&RoundBytes) -> f64| {
        spread(
            holdfast_runs
                .iter()
                .flat_map(|run| run.round_bytes.iter().map(ratio))
                .collect(),
            f64::max,
        )
    };
    let linux = |figure: fn(&LinuxRun) -> f64| linux_runs.iter().map(figure).collect::<Vec<_>>();
    let restart_ms = |figure: fn(&RestartRun) -> Duration| {
        restarts.iter().map(|run| ms(figure(run))).collect::<Vec<_>>()
    };
    Medians {
        resident_bytes: median(
            &holdfast_runs
                .iter()
                .map(|run| run.resident_bytes() as f64)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(0.0) as u64,
        pause_ms_per_gib: spread(rounds(HoldfastRun::pause_ms_per_gib), f64::max),
        pause_us: spread(
            rounds(|run| {
                run.dirty_rounds
                    .iter()
                    .map(|c| c.snapshot_pause_us as f64)
                    .collect()
            }),
            f64::max,
        ),
        touch_after_checkpoint_ns: spread(
            rounds(|run| run.touch_after_checkpoint_ns.clone()),
            f64::max,
        ),
        touch_before_checkpoint_ns: spread(
            rounds(|run| run.touch_before_checkpoint_ns.clone()),
            f64::max,
        ),
        stabilization_bytes_per_second: spread(
            rounds(HoldfastRun::stabilization_bytes_per_second),
            f64::min,
        ),
        raw_write_bytes_per_second: Spread {
            median: spread(linux(|run| run.raw_write_bytes_per_second), f64::min).median,
            worst: spread(linux(|run| run.raw_write_min_bytes_per_second), f64::min).worst,
        },
        stabilization_written_per_dirtied: bytes(RoundBytes::stabilization_written_per_dirtied),
        migration_written_per_dirtied: bytes(RoundBytes::migration_written_per_dirtied),
        journal_commit_ns: Spread {
            median: spread(rounds(|run| vec![run.journal_commit_ns]), f64::max).median,
            worst: spread(rounds(|run| vec![run.journal_commit_max_ns]), f64::max).worst,
        },
        write_flush_ns: Spread {
            median: spread(linux(|run| run.write_flush_ns), f64::max).median,
            worst: spread(linux(|run| run.write_flush_max_ns), f64::max).worst,
        },
        restart_serving: spread(
            restart_ms(RestartRun::serving_from_first_instruction),
            f64::max,
        ),
        restart_serving_from_qemu_start_ms: spread(
            restart_ms(|run| run.serving_from_qemu_start),
            f64::max,
        )
        .median,
    }
}

fn notes(size: StoreSize) -> Vec<String> {
    vec![
        format!(
            "snapshot pause: the kernel's own figure (its commit line: TSC from stopping the world to resuming it: \
             registers into root nodes, every translation dropped, dirty nodes encoded, dirty pages listed) for \
             checkpoints in which every page of bench-store's {} MiB array was dirty; per GiB of every page \
             resident (the pages of the first checkpoint, which holds the whole system). There is no Linux peer: \
             the figure is held against the goal.",
            size.resident_array_mib
        ),
        "refault after a checkpoint: the snapshot drops every translation, so bench-store's first write to each \
         page of its array after a checkpoint faults (the kernel marks the page dirty and maps it again); \
         bench-store times that pass over the whole array with rdtsc, then the same writes again, translations \
         in place, and gives both per page: their difference is what the dropped translations cost afterwards."
            .to_owned(),
        "bytes written per byte dirtied: from the store's counters (holdfast_store_written_bytes_total, \
         holdfast_migrated_blocks_total) read before each checkpoint and after its migration: migration = the home \
         blocks it copied from the log; stabilization = every other byte written (log records, the commit, and \
         migration's table blocks and superblocks, which the counters do not tell apart). Dirtied = the array."
            .to_owned(),
        "worst: the largest time or byte count, the smallest throughput, over every round of every run (the \
         journal and the Linux peer: the slowest round's mean). Goals are judged on medians."
            .to_owned(),
        "stabilization throughput: page bytes of those checkpoints over the kernel's stabilization time (snapshot \
         to commit, flushes included, millisecond resolution), with bench-store asleep (blocked on its control \
         channel: the kernel stabilizes from its idle loop without pause). Linux: the same number of MiB written \
         to /dev/vda from offset 0 in 1 MiB O_DIRECT pwrites, then fdatasync (dd bs=1M oflag=direct), per round."
            .to_owned(),
        "journal commit: bench-store's rdtsc around journal.commit of one page, converted with the kernel's TSC \
         calibration (the store otherwise quiet: first checkpoint migrated); Linux: pwrite of 4 KiB (O_DIRECT) \
         + fdatasync on /dev/vda. Both: the median over 11 rounds of the mean of 16 commits."
            .to_owned(),
        format!(
            "restart to serving: the store the first boot left (killed once its last checkpoint was migrated \
             home; it holds the whole system, {} MiB of it the array) booted again, from the kernel's first \
             instruction (its own figure on HOLDFAST-READY, then the host clock) to the restarted bench-store's \
             first line; the host sends it a byte on its control channel as soon as the kernel prints `{}` (its \
             process table rebuilt). A restart reads the checkpoint directory and the processes' root nodes; \
             other nodes, pages and page versions load when used. Judged only for a store of 1 GiB or more \
             (the full run): nothing is extrapolated.",
            size.resident_array_mib,
            figures::RESTART_LINE_PREFIX.trim_end()
        ),
        format!(
            "both guests have {} MiB so that the array fits in the kernel's heap (the largest free RAM range): object pages come from it.",
            size.memory_mib()
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> HoldfastFiles {
        HoldfastFiles {
            kernel: "k.elf".into(),
            initial_image: "bench-store.hfi".into(),
        }
    }

    fn no_format(_: &Path, _: u64) -> anyhow::Result<()> {
        Ok(())
    }

    #[test]
    fn presets_size_memory_and_store_for_the_array() {
        let quick = StoreBenchOptions::quick(files(), no_format);
        assert_eq!((quick.run.runs_per_guest, quick.size), (1, SIZE));
        assert!(u64::from(quick.run.memory_mib) > quick.size.heap_mib() + 64);
        assert!(quick.size.heap_mib() > quick.size.resident_array_mib);
        // The log (an eighth of the store) holds a checkpoint of every page with room.
        assert!(quick.size.store_mib() / 8 > quick.size.resident_array_mib * 3 / 2 - 1);
        let full = StoreBenchOptions::new(files(), no_format);
        assert_eq!((full.run.runs_per_guest, full.size), (3, SIZE));
    }

    #[test]
    fn the_bin_is_built_with_the_size_the_host_expects() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../services/selftest/src/bench_store.rs"),
        )
        .unwrap();
        let resident = format!(
            "const RESIDENT_PAGES: usize = {} * 256;",
            SIZE.resident_array_mib
        );
        assert!(text.contains(&resident), "{resident}");
        let rounds = format!("const ROUNDS: u64 = {};", SIZE.rounds);
        assert!(text.contains(&rounds), "{rounds}");
    }

    #[test]
    fn medians_are_over_every_round_and_boot_and_worst_cases_beside_them() {
        let commit = |pause, stabilized| figures::Commit {
            generation: 2,
            nodes: 1,
            pages: 262_144,
            snapshot_pause_us: pause,
            stabilized_ms: stabilized,
        };
        let run = |pauses: [u64; 3], journal: f64| HoldfastRun {
            resident_pages: 262_144,
            dirty_rounds: pauses.iter().map(|&pause| commit(pause, 1000)).collect(),
            journal_commit_ns: journal,
            journal_commit_max_ns: 2.0 * journal,
            touch_after_checkpoint_ns: pauses.iter().map(|&pause| pause as f64 * 10.0).collect(),
            touch_before_checkpoint_ns: vec![100.0, 200.0, 300.0],
            round_bytes: pauses
                .iter()
                .map(|&pause| RoundBytes {
                    dirtied: 1000,
                    written: 2000 + pause,
                    migrated: 1000,
                })
                .collect(),
        };
        let restart = |serving| RestartRun {
            ready_from_qemu_start: Duration::from_millis(100),
            ready_from_first_instruction: Duration::from_millis(10),
            restarted_from_qemu_start: Duration::from_millis(serving - 1),
            serving_from_qemu_start: Duration::from_millis(serving),
        };
        let peer = |median: f64| LinuxRun {
            raw_write_bytes_per_second: median,
            raw_write_min_bytes_per_second: median / 2.0,
            write_flush_ns: median / 10.0,
            write_flush_max_ns: median,
        };
        let medians = summarize(
            &[run([1000, 2000, 9000], 5.0), run([3000, 4000, 5000], 7.0)],
            &[restart(300), restart(500), restart(400)],
            &[peer(100.0), peer(300.0)],
        );
        assert_eq!(medians.resident_bytes, 1 << 30);
        assert_eq!(medians.pause_us, Spread { median: 3500.0, worst: 9000.0 });
        assert_eq!(medians.pause_ms_per_gib, Spread { median: 3.5, worst: 9.0 });
        assert_eq!(
            medians.touch_after_checkpoint_ns,
            Spread { median: 35_000.0, worst: 90_000.0 }
        );
        assert_eq!(
            medians.touch_before_checkpoint_ns,
            Spread { median: 200.0, worst: 300.0 }
        );
        let gib_per_second = (1u64 << 30) as f64;
        assert_eq!(
            medians.stabilization_bytes_per_second,
            Spread { median: gib_per_second, worst: gib_per_second }
        );
        // Throughput's worst is the slowest: the smallest.
        assert_eq!(
            medians.raw_write_bytes_per_second,
            Spread { median: 200.0, worst: 50.0 }
        );
        assert_eq!(medians.write_flush_ns, Spread { median: 20.0, worst: 300.0 });
        assert_eq!(
            medians.stabilization_written_per_dirtied,
            Spread { median: 4.5, worst: 10.0 }
        );
        assert_eq!(
            medians.migration_written_per_dirtied,
            Spread { median: 1.0, worst: 1.0 }
        );
        assert_eq!(medians.journal_commit_ns, Spread { median: 6.0, worst: 14.0 });
        assert_eq!(medians.restart_serving_from_qemu_start_ms, 400.0);
        // 10 ms to ready, then serving 300 ms after the 100 ms QEMU took to ready.
        assert_eq!(medians.restart_serving, Spread { median: 310.0, worst: 410.0 });
    }
}
