//! `holdfast bench services`: the services of issue 17 against what they stand for, both
//! guests booted in the same QEMU with the same accelerator in the same run, interleaved
//! (issue 17 point 8):
//!
//! - process creation by a constructor against Linux's fork and exec of a static binary;
//! - a page bought from a space bank against Linux's mmap and first touch;
//! - a call through a forwarder (an indirector, as the reference monitor puts between
//!   compartments) against the same call through the start capability itself.
//!
//! Holdfast's guest boots the system of `bench/services-manifest.toml`; the Linux peer runs
//! `bench/peers/linux-services.c`. Each program times its operations over rounds and prints
//! the median and the slowest round; the table gives the median over boots and the worst
//! case of each side, the ratio of the medians and the goal, never asserted.

pub mod figures;
pub mod holdfast;
pub mod linux;
pub mod table;

use std::io::{self, Write};

use anyhow::anyhow;
use holdfast_abi as abi;

use crate::guests::{self, Guest};
use crate::linux_peer;
use crate::micro::figures::{Figures, KERNEL_TSC_LINE_PREFIX};
use crate::micro::holdfast::HoldfastFiles;
use crate::setup::{GuestVm, RunOptions, RunSetup};
use crate::table::Caption;
use figures::{
    HOLDFAST_MARKER, HoldfastFigure, HoldfastFiguresNs, LINUX_MARKER, LinuxFigure, LinuxFiguresNs,
};
use table::Medians;

/// Boots per guest by default, and with the `quick` preset (for CI).
pub const RUNS_PER_GUEST_DEFAULT: usize = 3;
pub const RUNS_PER_GUEST_QUICK: usize = 1;

/// What `holdfast bench services` runs.
#[derive(Clone, Debug)]
pub struct ServicesBenchOptions {
    /// The Holdfast guest, from [`holdfast::prepare`].
    pub holdfast: HoldfastFiles,
    /// How both guests run; its cache folder keeps the peer's program and initramfs.
    pub run: RunOptions,
}

impl ServicesBenchOptions {
    /// The full benchmark: [`RUNS_PER_GUEST_DEFAULT`] boots per guest under TCG.
    pub fn new(holdfast: HoldfastFiles) -> Self {
        Self {
            holdfast,
            run: RunOptions::new(RUNS_PER_GUEST_DEFAULT),
        }
    }

    /// The `quick` preset: [`RUNS_PER_GUEST_QUICK`] boot per guest.
    pub fn quick(holdfast: HoldfastFiles) -> Self {
        Self {
            holdfast,
            run: RunOptions::new(RUNS_PER_GUEST_QUICK),
        }
    }
}

/// What the benchmark measured: every boot's figures, their medians and the table.
#[derive(Clone, Debug)]
pub struct ServicesReport {
    pub holdfast_ns: Vec<HoldfastFiguresNs>,
    pub linux_ns: Vec<LinuxFiguresNs>,
    pub medians: Medians,
    pub table: String,
}

/// `holdfast bench services`: boots each guest `runs_per_guest` times, printing one
/// progress line per boot, then the table. Fails, with the guest's console output, if a
/// boot does not finish as expected or a figure is missing.
pub fn services(options: &ServicesBenchOptions) -> anyhow::Result<()> {
    let mut stdout = io::stdout();
    let report = measure_services(options, &mut stdout)?;
    write!(stdout, "\n{}", report.table)?;
    stdout.flush()?;
    Ok(())
}

/// [`services`] without printing the table: progress lines go to `progress`.
pub fn measure_services(
    options: &ServicesBenchOptions,
    progress: &mut dyn Write,
) -> anyhow::Result<ServicesReport> {
    let setup = RunSetup::prepare(&options.run)?;
    let linux_initramfs = linux::prepare_initramfs(&setup.busybox, &setup.cache_dir)?;
    writeln!(
        progress,
        "services bench: {} boots per guest, {}, {} MiB, QEMU {}; Holdfast {} with {}; Linux peer {} with {}",
        options.run.runs_per_guest,
        options.run.accelerator,
        options.run.memory_mib,
        setup.qemu.path().display(),
        options.holdfast.kernel.display(),
        options.holdfast.initial_image.display(),
        setup.linux_kernel.display(),
        linux_initramfs.display()
    )?;
    let guest_vms = [
        GuestVm {
            guest: Guest::HoldfastPvh,
            label: "Holdfast",
            spec: setup.vm_spec(guests::holdfast_pvh_boot(
                &options.holdfast.kernel,
                &options.holdfast.initial_image,
            )),
            keep_lines_with: vec![HOLDFAST_MARKER, KERNEL_TSC_LINE_PREFIX],
            first_program_line: None,
            failure_message: "the Holdfast guest did not finish".to_owned(),
        },
        GuestVm {
            guest: Guest::Linux,
            label: "Linux peer",
            spec: setup.vm_spec(linux_peer::boot(&setup.linux_kernel, &linux_initramfs)),
            keep_lines_with: vec![LINUX_MARKER],
            first_program_line: None,
            failure_message: "the Linux peer did not finish".to_owned(),
        },
    ];
    let mut holdfast_ns = Vec::new();
    let mut linux_ns = Vec::new();
    setup.run_interleaved(&guest_vms, progress, |index, run_number, run| {
        if guest_vms[index].guest == Guest::Linux {
            let figures = figures::linux_figures(&run.kept_lines)
                .map_err(|why| anyhow!("the Linux peer, run {run_number}: {why}"))?;
            linux_ns.push(figures);
            Ok(listed_ns(
                LinuxFigure::ALL.map(LinuxFigure::stem),
                figures.median,
            ))
        } else {
            let figures = figures::holdfast_figures(&run.kept_lines)
                .map_err(|why| anyhow!("the Holdfast guest, run {run_number}: {why}"))?;
            holdfast_ns.push(figures);
            Ok(listed_ns(
                HoldfastFigure::ALL.map(HoldfastFigure::stem),
                figures.median,
            ))
        }
    })?;

    let medians = Medians {
        holdfast_ns: Figures::over_boots(&holdfast_ns),
        linux_ns: Figures::over_boots(&linux_ns),
    };
    let caption = Caption {
        title: format!(
            "services: {} ({})",
            setup.conditions(),
            linux_peer::KERNEL_COMMAND_LINE
        ),
        notes: notes(),
    };
    let table = table::render(&medians, &caption);
    Ok(ServicesReport {
        holdfast_ns,
        linux_ns,
        medians,
        table,
    })
}

/// One run's figures for its progress line.
fn listed_ns<const N: usize>(names: [&str; N], figures_ns: [f64; N]) -> String {
    names
        .iter()
        .zip(figures_ns)
        .map(|(name, ns)| format!("{name} {ns:.1} ns"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn notes() -> Vec<String> {
    vec![
        "each guest figure is the median over its program's 11 rounds of the mean time per \
         operation in a round, the table's median that over boots; max is the slowest round \
         of any boot. Goals are judged on medians; the ratio is of the medians. EROS's \
         constructor reached 0.35× Linux's fork and exec."
            .to_owned(),
        "Holdfast (services/selftest/src/bench_services.rs, bench/services-manifest.toml, timed \
         in ring 3 with rdtsc, converted with the TSC frequency the kernel prints at boot): \
         process creation = a bank below the program's bank, a constructor's yield of a copy \
         of echo-server paid for by it (a bank, a root node, its space's nodes and writable \
         pages copied), a call the new process answers, and the bank destroyed with all it \
         sold; page allocation = a page bought from the space bank, swapped into a leaf node \
         of the program's own space and written once (a node-tree fault maps it), the pages \
         sold back untimed after each round of 32; cross-compartment call = a call to \
         echo-server (words only) through an indirector of a node bought from the bank, \
         against the same call through the start capability in that node's slot 0, rounds \
         of 2,000 in turn."
            .to_owned(),
        "Linux (bench/peers/linux-services.c, gcc -static -O2): fork, execve of the same \
         static binary (it returns 0 from main at once), waitpid; mmap of 4 KiB anonymous \
         memory and its first write, munmap untimed after each round of 32."
            .to_owned(),
        format!(
            "Holdfast's exit status must be {} (its self-test passes: bench-services stopped \
             with 0); Linux's {} (powered off).",
            abi::exit::QEMU_STATUS_SUCCESS,
            linux_peer::EXIT_CODE_POWEROFF
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_qemu::Accelerator;

    #[test]
    fn presets() {
        let files = HoldfastFiles {
            kernel: "k.elf".into(),
            initial_image: "bench-services.hfi".into(),
        };
        assert_eq!(
            ServicesBenchOptions::new(files.clone()).run.runs_per_guest,
            3
        );
        let quick = ServicesBenchOptions::quick(files).run;
        assert_eq!(
            (quick.runs_per_guest, quick.accelerator),
            (1, Accelerator::Tcg)
        );
    }
}
