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

pub mod guests;
pub mod initramfs;
pub mod linux_peer;
pub mod micro;
pub mod runner;
pub mod table;

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use holdfast_image_builder::image_dir::ImageDir;
use holdfast_qemu::{QemuBinary, QemuNotFound};

pub use guests::Guest;
pub use holdfast_qemu::Accelerator;
pub use runner::BootSample;
pub use table::GuestRow;

/// Boots per guest by default, and with the `quick` preset.
pub const RUNS_PER_GUEST_DEFAULT: usize = 5;
pub const RUNS_PER_GUEST_QUICK: usize = 3;

/// Longest one boot may take, ready line and exit included. Generous because the peer
/// takes seconds under TCG on a shared two-core machine; a guest that needs longer is
/// treated as not booting.
pub const BOOT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

/// The goals the table reports on (never asserted).
pub const GOAL_PVH_RATIO_TO_LINUX_MAX: f64 = 0.2;
pub const GOAL_PVH_FROM_FIRST_INSTRUCTION_MAX: Duration = Duration::from_millis(50);

/// What `holdfast bench boot` runs.
#[derive(Clone, Debug)]
pub struct BootBenchOptions {
    /// The output folder of `holdfast image build --out DIR`.
    pub image_dir: PathBuf,
    /// The accelerator every guest runs under; the caller chooses it (`holdfast_qemu::accel`).
    pub accelerator: Accelerator,
    pub runs_per_guest: usize,
    pub memory_mib: u32,
    /// QEMU's binary; `None`: `$HOLDFAST_QEMU`, else `qemu-system-x86_64` on `PATH`.
    pub qemu_binary: Option<PathBuf>,
    pub boot_timeout: Duration,
    /// The Linux peer's kernel; `None`: the newest `/boot/vmlinuz-*-cloud-amd64`.
    pub linux_kernel: Option<PathBuf>,
    /// A static busybox for the peer's initramfs; `None`: `/bin/busybox` (busybox-static).
    pub busybox: Option<PathBuf>,
    /// Where the peer's initramfs is kept; `None`: `holdfast-bench/` in Cargo's target
    /// folder (found from `CARGO_TARGET_DIR` or the running program's location).
    pub cache_dir: Option<PathBuf>,
}

impl BootBenchOptions {
    /// The full benchmark: [`RUNS_PER_GUEST_DEFAULT`] boots per guest under TCG.
    pub fn new(image_dir: impl Into<PathBuf>) -> Self {
        Self {
            image_dir: image_dir.into(),
            accelerator: Accelerator::Tcg,
            runs_per_guest: RUNS_PER_GUEST_DEFAULT,
            memory_mib: holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
            qemu_binary: None,
            boot_timeout: BOOT_TIMEOUT_DEFAULT,
            linux_kernel: None,
            busybox: None,
            cache_dir: None,
        }
    }

    /// The `quick` preset: [`RUNS_PER_GUEST_QUICK`] boots per guest.
    pub fn quick(image_dir: impl Into<PathBuf>) -> Self {
        Self {
            runs_per_guest: RUNS_PER_GUEST_QUICK,
            ..Self::new(image_dir)
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
    if options.runs_per_guest == 0 {
        bail!("runs per guest must be at least 1");
    }
    let image_dir = ImageDir::new(&options.image_dir);
    let build_hint = || {
        format!(
            "the Holdfast images in {0} cannot be booted: build them with `holdfast image build --out {0}`",
            options.image_dir.display()
        )
    };
    image_dir.check_for_pvh_boot().with_context(build_hint)?;
    image_dir.check_for_disk_boot().with_context(build_hint)?;
    let qemu = match &options.qemu_binary {
        // The launcher's message for an unusable path names its environment variable; here
        // the path came from the options.
        Some(path) => {
            QemuBinary::find_with(Some(path.as_os_str()), None).map_err(|error| match error {
                QemuNotFound::OverrideUnusable { path, problem } => {
                    anyhow!("QEMU binary '{}' {problem}", path.display())
                }
                other => other.into(),
            })?
        }
        None => QemuBinary::find()?,
    };

    let linux_kernel = match &options.linux_kernel {
        Some(path) => path.clone(),
        None => linux_peer::find_kernel()?,
    };
    linux_peer::check_kernel_readable(&linux_kernel)?;
    let busybox = match &options.busybox {
        Some(path) => path.clone(),
        None => linux_peer::find_busybox()?,
    };
    let cache_dir = options.cache_dir.clone().unwrap_or_else(default_cache_dir);
    let files = guests::GuestFiles {
        holdfast_kernel: image_dir.kernel(),
        initial_image: image_dir.initial_image(),
        boot_disk: image_dir.boot_disk(),
        linux_initramfs: linux_peer::prepare_initramfs(&busybox, &cache_dir)?,
        linux_kernel,
    };
    writeln!(
        progress,
        "boot bench: {} boots per guest, {}, {} MiB, QEMU {}; Linux peer {} with {}",
        options.runs_per_guest,
        options.accelerator,
        options.memory_mib,
        qemu.path().display(),
        files.linux_kernel.display(),
        files.linux_initramfs.display()
    )?;

    let mut samples: Vec<(Guest, Vec<BootSample>)> = Guest::ALL
        .iter()
        .map(|guest| (*guest, Vec::new()))
        .collect();
    let boots_total = options.runs_per_guest * Guest::ALL.len();
    let mut boots_done = 0;
    // Rounds interleave the guests, so that a slow spell of this shared machine falls on
    // all of them alike rather than on whichever guest was being measured at the time.
    for run in 1..=options.runs_per_guest {
        for (guest, guest_samples) in &mut samples {
            let spec = guests::vm_spec(*guest, &files, options.accelerator, options.memory_mib);
            let mut command = qemu.command();
            command.args(spec.qemu_arguments());
            let sample = runner::run_boot(command, &guest.expectation(options.boot_timeout))
                .with_context(|| {
                    format!(
                        "{} did not boot (run {run} of {})",
                        guest.name(),
                        options.runs_per_guest
                    )
                })?;
            boots_done += 1;
            writeln!(
                progress,
                "[{boots_done:>width$}/{boots_total}] {:<27} run {run}/{}: ready {:>8.1} ms from QEMU start, {:>8.1} ms from first instruction",
                guest.name(),
                options.runs_per_guest,
                sample.ready_from_qemu_start.as_secs_f64() * 1000.0,
                sample.ready_from_first_instruction.as_secs_f64() * 1000.0,
                width = boots_total.to_string().len(),
            )?;
            progress.flush()?;
            guest_samples.push(sample);
        }
    }

    let rows = summarize(&samples);
    let linux_name = files
        .linux_kernel
        .file_name()
        .unwrap_or(OsStr::new("?"))
        .to_string_lossy();
    let spec = table::TableSpec {
        title: format!(
            "boot to ready: QEMU q35, {}, {} MiB, median of {} boots per guest (interleaved); Linux peer {linux_name}",
            options.accelerator, options.memory_mib, options.runs_per_guest
        ),
        peer_row: Guest::ALL.iter().position(|guest| *guest == Guest::Linux).expect("a guest"),
        goal_row: Guest::ALL.iter().position(|guest| *guest == Guest::HoldfastPvh).expect("a guest"),
        ratio_to_peer_goal_max: GOAL_PVH_RATIO_TO_LINUX_MAX,
        from_first_instruction_goal_max: GOAL_PVH_FROM_FIRST_INSTRUCTION_MAX,
        notes: vec![
            "from QEMU start: host clock from spawning QEMU to the ready line arriving on its serial \
             output (firmware, boot loader and kernel included)."
                .to_owned(),
            "from first instruction: the guest's own clock. Holdfast counts TSC ticks from its first \
             instruction; Linux reports /proc/uptime (10 ms steps), which starts at timekeeping \
             setup, after the bzImage decompressor and early boot, so it undercounts Linux."
                .to_owned(),
        ],
    };
    let table = table::render(&rows, &spec);
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
                ready_from_first_instruction_median: table::median(&from_first).unwrap_or_default(),
            }
        })
        .collect()
}

/// `holdfast-bench/` in Cargo's target folder: `CARGO_TARGET_DIR`, else the nearest folder
/// above the running program that holds Cargo's `CACHEDIR.TAG` (the target folder), else
/// the system's temporary folder.
pub fn default_cache_dir() -> PathBuf {
    const SUBDIRECTORY: &str = "holdfast-bench";
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join(SUBDIRECTORY);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .find(|folder| folder.join("CACHEDIR.TAG").is_file())
                .map(Path::to_owned)
        })
        .unwrap_or_else(std::env::temp_dir)
        .join(SUBDIRECTORY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets() {
        assert_eq!(BootBenchOptions::new("d").runs_per_guest, 5);
        let quick = BootBenchOptions::quick("d");
        assert_eq!(
            (quick.runs_per_guest, quick.accelerator, quick.memory_mib),
            (3, Accelerator::Tcg, 256)
        );
    }

    #[test]
    fn rows_are_medians_in_guest_order() {
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

    #[test]
    fn the_cache_lands_in_the_target_folder_under_cargo() {
        let cache = default_cache_dir();
        assert!(cache.ends_with("holdfast-bench"));
        assert!(
            cache.parent().unwrap().join("CACHEDIR.TAG").is_file()
                || std::env::var_os("CARGO_TARGET_DIR").is_some()
        );
    }
}
