//! Holdfast's benchmarks. They are not tests: each prints a table of figures and ratios
//! against a peer measured in the same run on the same machine, and asserts no goal; it
//! fails only when something does not run at all (a guest that does not boot).
//!
//! `holdfast bench boot` ([`boot`]): time to "ready" of Holdfast booted by PVH, Holdfast
//! booted by GRUB (multiboot2 from a BIOS disk), and Debian's cloud kernel with a busybox
//! initramfs, all in the same QEMU with the same accelerator, interleaved, several times
//! each. Each guest signals ready with a serial line that the host timestamps (as
//! Firecracker's boot timer does with its I/O port) and that carries the guest's own
//! figure, the time since its kernel's first instruction.
//!
//! `holdfast bench micro` ([`micro::micro`]): the trivial invocation (and, once the kernel
//! has them, IPC and faults resolved from the node tree or by a keeper) against getppid, a
//! pipe round trip, a first-touch fault and a SIGSEGV-handler fault in a Linux guest.
//!
//! `holdfast bench services` ([`services::services`]): issue 17's services: a process made
//! by a constructor against fork and exec, a bank's page against mmap and first touch, a
//! call through a forwarder against a direct call.
//!
//! `holdfast bench tp1` ([`tp1::tp1`]): TP1 (TPC-B) transactions against the Holdfast
//! appliance, PostgreSQL 15 in a Debian guest under the same QEMU, and PostgreSQL 15 on the
//! host, with the same load generator.
//!
//! `holdfast bench pair` ([`pair::pair`]): TP1 on the single appliance and on a hot-standby
//! pair in each replication mode, the replication lag under that load, and a failover
//! drill's client-visible outage and acknowledged transactions lost.

pub mod boot_table;
pub mod figure_lines;
pub mod guests;
pub mod initramfs;
pub mod linux_peer;
pub mod micro;
pub mod pair;
pub mod program_bench;
pub mod store;
pub mod runner;
pub mod services;
pub mod setup;
pub mod table;
pub mod tp1;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use holdfast_image_builder::image_dir::ImageDir;

pub use boot_table::GuestRow;
pub use guests::Guest;
pub use holdfast_qemu::Accelerator;
pub use runner::BootSample;
pub use setup::{BOOT_TIMEOUT_DEFAULT, RunOptions, default_cache_dir};

use setup::{GuestVm, RunSetup};
use table::Caption;

/// Boots per guest by default, and with the `quick` preset.
pub const RUNS_PER_GUEST_DEFAULT: usize = 5;
pub const RUNS_PER_GUEST_QUICK: usize = 3;

/// The goals the table reports on (never asserted).
pub const GOAL_PVH_RATIO_TO_LINUX_MAX: f64 = 0.2;
pub const GOAL_PVH_FROM_FIRST_INSTRUCTION_MAX: Duration = Duration::from_millis(50);

/// What `holdfast bench boot` runs.
#[derive(Clone, Debug)]
pub struct BootBenchOptions {
    /// The output folder of `holdfast image build --out DIR`.
    pub image_dir: PathBuf,
    /// How the guests run; its cache folder keeps the peer's initramfs.
    pub run: RunOptions,
}

impl BootBenchOptions {
    /// The full benchmark: [`RUNS_PER_GUEST_DEFAULT`] boots per guest under TCG.
    pub fn new(image_dir: impl Into<PathBuf>) -> Self {
        Self {
            image_dir: image_dir.into(),
            run: RunOptions::new(RUNS_PER_GUEST_DEFAULT),
        }
    }

    /// The `quick` preset: [`RUNS_PER_GUEST_QUICK`] boots per guest.
    pub fn quick(image_dir: impl Into<PathBuf>) -> Self {
        Self {
            image_dir: image_dir.into(),
            run: RunOptions::new(RUNS_PER_GUEST_QUICK),
        }
    }
}

/// What the benchmark measured: every boot's sample and the table's rows.
#[derive(Clone, Debug)]
pub struct BootReport {
    pub samples: Vec<(Guest, Vec<BootSample>)>,
    pub rows: Vec<GuestRow>,
    pub table: String,
}

/// `holdfast bench boot`: boots every guest `runs_per_guest` times, printing one progress
/// line per boot, then the table. Fails, with the guest's console output, if any boot does
/// not reach ready or QEMU does not exit as expected.
pub fn boot(options: &BootBenchOptions) -> anyhow::Result<()> {
    let mut stdout = io::stdout();
    let report = measure_boot(options, &mut stdout)?;
    write!(stdout, "\n{}", report.table)?;
    stdout.flush()?;
    Ok(())
}

/// [`boot`] without printing the table: progress lines go to `progress`.
pub fn measure_boot(
    options: &BootBenchOptions,
    progress: &mut dyn Write,
) -> anyhow::Result<BootReport> {
    let image_dir = ImageDir::new(&options.image_dir);
    let build_hint = || {
        format!(
            "the Holdfast images in {0} cannot be booted: build them with `holdfast image build --out {0}`",
            options.image_dir.display()
        )
    };
    image_dir.check_for_pvh_boot().with_context(build_hint)?;
    image_dir.check_for_disk_boot().with_context(build_hint)?;
    let setup = RunSetup::prepare(&options.run)?;
    let files = guests::GuestFiles {
        holdfast_kernel: image_dir.kernel(),
        initial_image: image_dir.initial_image(),
        boot_disk: image_dir.boot_disk(),
        linux_initramfs: linux_peer::prepare_initramfs(&setup.busybox, &setup.cache_dir)?,
        linux_kernel: setup.linux_kernel.clone(),
    };
    writeln!(
        progress,
        "boot bench: {} boots per guest, {}, {} MiB, QEMU {}; Linux peer {} with {}",
        options.run.runs_per_guest,
        options.run.accelerator,
        options.run.memory_mib,
        setup.qemu.path().display(),
        files.linux_kernel.display(),
        files.linux_initramfs.display()
    )?;

    let guest_vms: Vec<GuestVm> = Guest::ALL
        .iter()
        .map(|&guest| GuestVm {
            guest,
            label: guest.name(),
            spec: setup.vm_spec(guests::boot(guest, &files)),
            keep_lines_with: Vec::new(),
            // Ready as Linux is: when the first program has run and printed.
            first_program_line: (guest != Guest::Linux)
                .then_some(guests::HOLDFAST_FIRST_PROGRAM_LINE),
            failure_message: format!("{} did not boot", guest.name()),
        })
        .collect();
    let mut samples: Vec<(Guest, Vec<BootSample>)> = Guest::ALL
        .iter()
        .map(|guest| (*guest, Vec::new()))
        .collect();
    setup.run_interleaved(&guest_vms, progress, |index, _, run| {
        let sample = run.sample;
        samples[index].1.push(sample);
        Ok(format!(
            "ready {:>8.1} ms from QEMU start, {:>8.1} ms from first instruction",
            sample.ready_from_qemu_start.as_secs_f64() * 1000.0,
            sample.ready_from_first_instruction.as_secs_f64() * 1000.0,
        ))
    })?;

    let rows = summarize(&samples);
    let spec = boot_table::TableSpec {
        caption: Caption {
            title: format!("boot to ready: {}", setup.conditions()),
            notes: vec![
                format!(
                    "ready: a ring-3 program has run and printed. Linux: /init's LINUX-READY line. \
                     Holdfast: the line hello prints first thing ({:?}; hello is started second, \
                     and other processes may run before it prints, which counts against Holdfast), \
                     after the kernel's HOLDFAST-READY (kernel up, ring 3 not started).",
                    guests::HOLDFAST_FIRST_PROGRAM_LINE
                ),
                "from QEMU start: host clock from spawning QEMU to the ready line arriving on its serial \
                 output (firmware, boot loader and kernel included)."
                    .to_owned(),
                "from first instruction: the guest's own clock. Holdfast counts TSC ticks from its first \
                 instruction to HOLDFAST-READY, then the host clock to the first program's line; Linux \
                 reports /proc/uptime (10 ms steps), which starts at timekeeping setup, after the \
                 bzImage decompressor and early boot, so it undercounts Linux."
                    .to_owned(),
                "max: the slowest boot. Goals are judged on medians.".to_owned(),
            ],
        },
        peer_row: Guest::ALL.iter().position(|guest| *guest == Guest::Linux).expect("a guest"),
        goal_row: Guest::ALL.iter().position(|guest| *guest == Guest::HoldfastPvh).expect("a guest"),
        ratio_to_peer_goal_max: GOAL_PVH_RATIO_TO_LINUX_MAX,
        from_first_instruction_goal_max: GOAL_PVH_FROM_FIRST_INSTRUCTION_MAX,
    };
    let table = boot_table::render(&rows, &spec);
    Ok(BootReport {
        samples,
        rows,
        table,
    })
}

/// Each guest's medians.
fn summarize(samples: &[(Guest, Vec<BootSample>)]) -> Vec<GuestRow> {
    samples
        .iter()
        .map(|(guest, samples)| {
            let from_start: Vec<Duration> = samples
                .iter()
                .map(|sample| sample.ready_from_qemu_start)
                .collect();
            let from_first: Vec<Duration> = samples
                .iter()
                .map(|sample| sample.ready_from_first_instruction)
                .collect();
            GuestRow {
                name: guest.name().to_owned(),
                runs: samples.len(),
                ready_from_qemu_start_median: table::median(&from_start).unwrap_or_default(),
                ready_from_qemu_start_max: from_start.iter().copied().max().unwrap_or_default(),
                ready_from_first_instruction_median: table::median(&from_first).unwrap_or_default(),
                ready_from_first_instruction_max: from_first.iter().copied().max().unwrap_or_default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets() {
        assert_eq!(BootBenchOptions::new("d").run.runs_per_guest, 5);
        let quick = BootBenchOptions::quick("d").run;
        assert_eq!(
            (quick.runs_per_guest, quick.accelerator, quick.memory_mib),
            (3, Accelerator::Tcg, 256)
        );
    }

    #[test]
    fn rows_are_medians_and_maxima_in_guest_order() {
        let sample = |start_ms, first_ms| BootSample {
            ready_from_qemu_start: Duration::from_millis(start_ms),
            ready_from_first_instruction: Duration::from_millis(first_ms),
        };
        let samples = vec![
            (
                Guest::HoldfastPvh,
                vec![sample(300, 15), sample(250, 14), sample(900, 40)],
            ),
            (Guest::HoldfastGrub, vec![sample(800, 15)]),
            (Guest::Linux, vec![sample(3000, 1200), sample(3200, 1300)]),
        ];
        let rows = summarize(&samples);
        assert_eq!(
            rows[0].ready_from_qemu_start_median,
            Duration::from_millis(300)
        );
        assert_eq!(
            rows[0].ready_from_first_instruction_median,
            Duration::from_millis(15)
        );
        assert_eq!(rows[0].ready_from_qemu_start_max, Duration::from_millis(900));
        assert_eq!(
            rows[0].ready_from_first_instruction_max,
            Duration::from_millis(40)
        );
        assert_eq!(
            rows[2].ready_from_qemu_start_median,
            Duration::from_millis(3100)
        );
        assert_eq!(
            rows.iter().map(|row| row.name.as_str()).collect::<Vec<_>>(),
            Guest::ALL.map(Guest::name)
        );
    }

    #[test]
    fn missing_images_name_the_build_command() {
        let error = measure_boot(
            &BootBenchOptions::new("/nonexistent-holdfast-images"),
            &mut io::sink(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("holdfast image build --out /nonexistent-holdfast-images"),
            "{error}"
        );
    }
}
