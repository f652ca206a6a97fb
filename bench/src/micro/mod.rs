//! `holdfast bench micro`: Holdfast's kernel paths against their nearest Linux system
//! calls, both guests booted in the same QEMU with the same accelerator in the same run,
//! interleaved. Each guest runs one program that times its operations over several rounds
//! and prints the median per operation; the table gives, per Holdfast measure, the median
//! over boots beside its Linux peer's, the ratio and the goal.
//!
//! Holdfast's guest boots the system of `bench/micro-manifest.toml`: `bench-micro`, which
//! times, and the servers it calls (`echo-server`, `zero-keeper`).

pub mod figures;
pub mod holdfast;
pub mod linux;
pub mod table;

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use holdfast_abi as abi;
use holdfast_qemu::{Accelerator, Boot, QemuBinary, QemuNotFound, VmSpec};

use crate::guests::Guest;
use crate::linux_peer;
use crate::runner;
use figures::{
    HOLDFAST_MARKER, HoldfastFiguresNs, KERNEL_TSC_LINE_PREFIX, LINUX_MARKER, LinuxFiguresNs,
};
pub use holdfast::HoldfastFiles;
use table::{Measure, Medians};

/// Boots per guest by default, and with the `quick` preset. Each boot already takes a
/// median over its program's rounds; more boots guard against one slow boot.
pub const RUNS_PER_GUEST_DEFAULT: usize = 3;
pub const RUNS_PER_GUEST_QUICK: usize = 1;

/// What `holdfast bench micro` runs.
#[derive(Clone, Debug)]
pub struct MicroBenchOptions {
    /// The Holdfast guest, from [`holdfast::prepare`].
    pub holdfast: HoldfastFiles,
    /// The accelerator both guests run under; the caller chooses it.
    pub accelerator: Accelerator,
    pub runs_per_guest: usize,
    pub memory_mib: u32,
    /// QEMU's binary; `None`: `$HOLDFAST_QEMU`, else `qemu-system-x86_64` on `PATH`.
    pub qemu_binary: Option<PathBuf>,
    /// Longest one boot may take, measuring and exit included.
    pub boot_timeout: Duration,
    /// The Linux peer's kernel; `None`: the newest `/boot/vmlinuz-*-cloud-amd64`.
    pub linux_kernel: Option<PathBuf>,
    /// A static busybox for the peer's initramfs; `None`: `/bin/busybox` (busybox-static).
    pub busybox: Option<PathBuf>,
    /// Where the peer's program and initramfs are kept; `None`: [`crate::default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
}

impl MicroBenchOptions {
    /// The full benchmark: [`RUNS_PER_GUEST_DEFAULT`] boots per guest under TCG.
    pub fn new(holdfast: HoldfastFiles) -> Self {
        Self {
            holdfast,
            accelerator: Accelerator::Tcg,
            runs_per_guest: RUNS_PER_GUEST_DEFAULT,
            memory_mib: holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
            qemu_binary: None,
            boot_timeout: crate::BOOT_TIMEOUT_DEFAULT,
            linux_kernel: None,
            busybox: None,
            cache_dir: None,
        }
    }

    /// The `quick` preset: [`RUNS_PER_GUEST_QUICK`] boot per guest.
    pub fn quick(holdfast: HoldfastFiles) -> Self {
        Self {
            runs_per_guest: RUNS_PER_GUEST_QUICK,
            ..Self::new(holdfast)
        }
    }
}

/// What the benchmark measured: every boot's figures, their medians and the table.
#[derive(Clone, Debug)]
pub struct MicroReport {
    /// Holdfast's figures per boot.
    pub holdfast_ns: Vec<HoldfastFiguresNs>,
    /// The Linux peer's figures per boot.
    pub linux_ns: Vec<LinuxFiguresNs>,
    pub medians: Medians,
    pub table: String,
}

/// `holdfast bench micro`: boots each guest `runs_per_guest` times, printing one progress
/// line per boot, then the table. Fails, with the guest's console output, if a boot does
/// not finish as expected or a figure is missing.
pub fn micro(options: &MicroBenchOptions) -> anyhow::Result<()> {
    let mut stdout = io::stdout();
    let report = measure_micro(options, &mut stdout)?;
    write!(stdout, "\n{}", report.table)?;
    stdout.flush()?;
    Ok(())
}

/// The VM of each guest: the launcher's defaults, as in the boot benchmark, so that the
/// two differ only in the kernel and what it runs.
fn vm_spec(boot: Boot, options: &MicroBenchOptions) -> VmSpec {
    let mut spec = VmSpec::new(boot, options.accelerator);
    spec.memory_mib = options.memory_mib;
    spec
}

/// [`micro`] without printing the table: progress lines go to `progress`.
pub fn measure_micro(
    options: &MicroBenchOptions,
    progress: &mut dyn Write,
) -> anyhow::Result<MicroReport> {
    if options.runs_per_guest == 0 {
        anyhow::bail!("runs per guest must be at least 1");
    }
    let qemu = match &options.qemu_binary {
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
    let cache_dir = options
        .cache_dir
        .clone()
        .unwrap_or_else(crate::default_cache_dir);
    let linux_initramfs = linux::prepare_initramfs(&busybox, &cache_dir)?;
    writeln!(
        progress,
        "micro bench: {} boots per guest, {}, {} MiB, QEMU {}; Holdfast {} with {}; Linux peer {} with {}",
        options.runs_per_guest,
        options.accelerator,
        options.memory_mib,
        qemu.path().display(),
        options.holdfast.kernel.display(),
        options.holdfast.initial_image.display(),
        linux_kernel.display(),
        linux_initramfs.display()
    )?;

    let holdfast_spec = vm_spec(
        Boot::Pvh {
            kernel: options.holdfast.kernel.clone(),
            initial_image: Some(options.holdfast.initial_image.clone()),
            command_line: String::new(),
        },
        options,
    );
    let linux_spec = vm_spec(
        Boot::Pvh {
            kernel: linux_kernel.clone(),
            initial_image: Some(linux_initramfs),
            // `mitigations=off` is on it: Holdfast applies no speculation mitigations
            // today, so Linux should not pay for them either.
            command_line: linux_peer::KERNEL_COMMAND_LINE.to_owned(),
        },
        options,
    );
    let run = |spec: &VmSpec, guest: Guest, keep: &[&str], what: &str, run: usize| {
        let mut command = qemu.command();
        command.args(spec.qemu_arguments());
        runner::run_guest(command, &guest.expectation(options.boot_timeout), keep).with_context(
            || {
                format!(
                    "{what} did not finish (run {run} of {})",
                    options.runs_per_guest
                )
            },
        )
    };

    let mut holdfast_ns = Vec::new();
    let mut linux_ns = Vec::new();
    let boots_total = options.runs_per_guest * 2;
    let width = boots_total.to_string().len();
    // Rounds interleave the guests, so that a slow spell of this shared machine falls on
    // both alike.
    for run_number in 1..=options.runs_per_guest {
        let holdfast_run = run(
            &holdfast_spec,
            Guest::HoldfastPvh,
            &[HOLDFAST_MARKER, KERNEL_TSC_LINE_PREFIX],
            "the Holdfast guest",
            run_number,
        )?;
        let figures = figures::holdfast_figures(&holdfast_run.kept_lines)
            .map_err(|why| anyhow!("the Holdfast guest, run {run_number}: {why}"))?;
        let listed: Vec<String> = Measure::ALL
            .iter()
            .zip(figures)
            .map(|(measure, ns)| format!("{} {ns:.1} ns", measure.name()))
            .collect();
        writeln!(
            progress,
            "[{:>width$}/{boots_total}] Holdfast    run {run_number}/{}: {}",
            2 * run_number - 1,
            options.runs_per_guest,
            listed.join(", ")
        )?;
        progress.flush()?;
        holdfast_ns.push(figures);

        let linux_run = run(
            &linux_spec,
            Guest::Linux,
            &[LINUX_MARKER],
            "the Linux peer",
            run_number,
        )?;
        let figures = figures::linux_figures(&linux_run.kept_lines)
            .map_err(|why| anyhow!("the Linux peer, run {run_number}: {why}"))?;
        let listed: Vec<String> = figures::LinuxFigure::ALL
            .iter()
            .zip(figures)
            .map(|(figure, ns)| format!("{} {ns:.1} ns", figure.name()))
            .collect();
        writeln!(
            progress,
            "[{:>width$}/{boots_total}] Linux peer  run {run_number}/{}: {}",
            2 * run_number,
            options.runs_per_guest,
            listed.join(", ")
        )?;
        progress.flush()?;
        linux_ns.push(figures);
    }

    let medians = summarize(&holdfast_ns, &linux_ns);
    let linux_name = linux_kernel
        .file_name()
        .unwrap_or(OsStr::new("?"))
        .to_string_lossy();
    let spec = table::TableSpec {
        title: format!(
            "micro: QEMU q35, {}, {} MiB, median of {} boots per guest (interleaved); Linux peer {linux_name} ({})",
            options.accelerator,
            options.memory_mib,
            options.runs_per_guest,
            linux_peer::KERNEL_COMMAND_LINE
        ),
        notes: notes(),
    };
    let table = table::render(&medians, &spec);
    Ok(MicroReport {
        holdfast_ns,
        linux_ns,
        medians,
        table,
    })
}

/// The medians over boots, figure by figure.
fn summarize(holdfast_ns: &[HoldfastFiguresNs], linux_ns: &[LinuxFiguresNs]) -> Medians {
    Medians {
        holdfast_ns: medians_over_boots(holdfast_ns),
        linux_ns: medians_over_boots(linux_ns),
    }
}

fn medians_over_boots<const N: usize>(runs: &[[f64; N]]) -> [f64; N] {
    std::array::from_fn(|index| {
        let values: Vec<f64> = runs.iter().map(|run| run[index]).collect();
        table::median(&values).unwrap_or(f64::NAN)
    })
}

fn notes() -> Vec<String> {
    vec![
        "each guest figure is the median over its program's rounds of the mean time per \
         operation in a round; the table gives the median of those over boots."
            .to_owned(),
        format!(
            "Holdfast (services/selftest/src/bench_micro.rs, with echo-server and zero-keeper, \
             bench/micro-manifest.toml): timed in ring 3 with rdtsc and converted with the TSC \
             frequency the kernel calibrates against the PIT and prints at boot \
             (`{KERNEL_TSC_LINE_PREFIX}<MHz> MHz`). trivial invocation = `invoke` of its own \
             process capability with an order none understands (answered InvalidOrder, no \
             side effect); round trip = call to echo-server (words only) and its reply; \
             one-way = from the client's TSC before the call to the server's TSC on receipt; \
             node-tree fault = first write to a .bss page the loader put in the space tree \
             (the page exists; Linux's first touch also allocates and zeroes one); keeper \
             fault = read of an unmapped page under a keeper node, resolved by zero-keeper \
             with a zeroed page from its pool, median of 15 faults timed one by one."
        ),
        "Linux (bench/peers/linux-micro.c, gcc -static -O2): getppid; pipe round trip = 8 bytes \
         to a child process and back over two pipes; first-touch fault = first write to an \
         anonymous 4 KiB page (huge pages off); SIGSEGV handler fault = write to a populated \
         PROT_NONE page whose SIGSEGV handler mprotects it writable, the nearest Linux has to \
         a keeper."
            .to_owned(),
        format!(
            "Holdfast's exit status must be {} (its self-test passes: bench-micro stopped with 0); \
             Linux's {} (powered off).",
            abi::exit::QEMU_STATUS_SUCCESS,
            linux_peer::EXIT_CODE_POWEROFF
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> HoldfastFiles {
        HoldfastFiles {
            kernel: "k.elf".into(),
            initial_image: "bench-micro.hfi".into(),
        }
    }

    #[test]
    fn presets() {
        assert_eq!(MicroBenchOptions::new(files()).runs_per_guest, 3);
        let quick = MicroBenchOptions::quick(files());
        assert_eq!(
            (quick.runs_per_guest, quick.accelerator),
            (1, Accelerator::Tcg)
        );
    }

    #[test]
    fn the_linux_peer_boots_with_mitigations_off() {
        assert!(
            linux_peer::KERNEL_COMMAND_LINE
                .split_whitespace()
                .any(|word| word == "mitigations=off")
        );
    }

    #[test]
    fn medians_are_over_boots_figure_by_figure() {
        let medians = summarize(
            &[
                [1000.0, 5.0, 50.0, 500.0, 7.0],
                [3000.0, 4.0, 60.0, 400.0, 9.0],
                [2000.0, 6.0, 40.0, 600.0, 8.0],
            ],
            &[
                [1.0, 10.0, 100.0, 1000.0],
                [3.0, 30.0, 300.0, 3000.0],
                [2.0, 20.0, 200.0, 2000.0],
            ],
        );
        assert_eq!(medians.holdfast_ns, [2000.0, 5.0, 50.0, 500.0, 8.0]);
        assert_eq!(medians.linux_ns, [2.0, 20.0, 200.0, 2000.0]);
    }
}
