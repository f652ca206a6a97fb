//! `holdfast bench micro`: Holdfast's kernel paths against their nearest Linux system
//! calls, both guests booted in the same QEMU with the same accelerator in the same run,
//! interleaved. Each guest runs one program that times its operations over several rounds
//! and prints the median and the slowest round per operation; the table gives, per Holdfast
//! measure and the Linux figure that does the same work, the median over boots and the
//! worst case of each, the ratio of the medians and the goal.
//!
//! Holdfast's guest boots the system of `bench/micro-manifest.toml`: `bench-micro`, which
//! times, and the servers it calls (`echo-server`, `zero-keeper`).

pub mod figures;
pub mod holdfast;
pub mod linux;
pub mod table;

use std::io::{self, Write};

use anyhow::anyhow;
use holdfast_abi as abi;
use holdfast_qemu::Accelerator;

use crate::guests::{self, Guest};
use crate::linux_peer;
use crate::setup::{GuestVm, RunOptions, RunSetup};
use crate::table::Caption;
use figures::{
    Figures, HOLDFAST_MARKER, HoldfastFiguresNs, KERNEL_TSC_LINE_PREFIX, LINUX_MARKER,
    LinuxFiguresNs,
};
pub use holdfast::HoldfastFiles;
use table::{Measure, Medians, ONE_WAY_IPC_CYCLES_MAX_KVM};

/// Boots per guest by default, and with the `quick` preset. Each boot already takes a
/// median over its program's rounds; more boots guard against one slow boot.
pub const RUNS_PER_GUEST_DEFAULT: usize = 3;
pub const RUNS_PER_GUEST_QUICK: usize = 1;

/// What `holdfast bench micro` runs.
#[derive(Clone, Debug)]
pub struct MicroBenchOptions {
    /// The Holdfast guest, from [`holdfast::prepare`].
    pub holdfast: HoldfastFiles,
    /// How both guests run; its cache folder keeps the peer's program and initramfs.
    pub run: RunOptions,
}

impl MicroBenchOptions {
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

/// [`micro`] without printing the table: progress lines go to `progress`.
pub fn measure_micro(
    options: &MicroBenchOptions,
    progress: &mut dyn Write,
) -> anyhow::Result<MicroReport> {
    let setup = RunSetup::prepare(&options.run)?;
    let linux_initramfs = linux::prepare_initramfs(&setup.busybox, &setup.cache_dir)?;
    writeln!(
        progress,
        "micro bench: {} boots per guest, {}, {} MiB, QEMU {}; Holdfast {} with {}; Linux peer {} with {}",
        options.run.runs_per_guest,
        options.run.accelerator,
        options.run.memory_mib,
        setup.qemu.path().display(),
        options.holdfast.kernel.display(),
        options.holdfast.initial_image.display(),
        setup.linux_kernel.display(),
        linux_initramfs.display()
    )?;

    // The VMs are the boot benchmark's, so that the two differ only in what the guests run.
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
    let mut holdfast_cycles = Vec::new();
    let mut linux_ns = Vec::new();
    setup.run_interleaved(&guest_vms, progress, |index, run_number, run| {
        if guest_vms[index].guest == Guest::Linux {
            let figures = figures::linux_figures(&run.kept_lines)
                .map_err(|why| anyhow!("the Linux peer, run {run_number}: {why}"))?;
            linux_ns.push(figures);
            Ok(listed_ns(
                figures::LinuxFigure::ALL.map(|figure| figure.name()),
                figures.median,
            ))
        } else {
            let (figures, cycles) = figures::holdfast_figures(&run.kept_lines)
                .map_err(|why| anyhow!("the Holdfast guest, run {run_number}: {why}"))?;
            holdfast_ns.push(figures);
            holdfast_cycles.push(cycles);
            Ok(listed_ns(Measure::ALL.map(Measure::name), figures.median))
        }
    })?;

    let mut medians = summarize(&holdfast_ns, &linux_ns);
    let kvm = options.run.accelerator == Accelerator::Kvm;
    medians.holdfast_cycles_kvm = kvm.then(|| Figures::over_boots(&holdfast_cycles));
    let caption = Caption {
        title: format!(
            "micro: {} ({})",
            setup.conditions(),
            linux_peer::KERNEL_COMMAND_LINE
        ),
        notes: notes(kvm),
    };
    let table = table::render(&medians, &caption);
    Ok(MicroReport {
        holdfast_ns,
        linux_ns,
        medians,
        table,
    })
}

/// One run's figures for its progress line: "getppid 1351.4 ns, pipe round trip …".
fn listed_ns<const N: usize>(names: [&str; N], figures_ns: [f64; N]) -> String {
    names
        .iter()
        .zip(figures_ns)
        .map(|(name, ns)| format!("{name} {ns:.1} ns"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The medians and worst cases over boots, figure by figure.
fn summarize(holdfast_ns: &[HoldfastFiguresNs], linux_ns: &[LinuxFiguresNs]) -> Medians {
    Medians {
        holdfast_ns: Figures::over_boots(holdfast_ns),
        linux_ns: Figures::over_boots(linux_ns),
        holdfast_cycles_kvm: None,
    }
}

fn notes(kvm: bool) -> Vec<String> {
    let cycles = if kvm {
        format!(
            "cycles: Holdfast's TSC cycles at native speed under KVM; one-way IPC has a goal of \
             ≤ {ONE_WAY_IPC_CYCLES_MAX_KVM} cycles there (seL4's is about 600 on x86-64)."
        )
    } else {
        format!(
            "one-way IPC's goal of ≤ {ONE_WAY_IPC_CYCLES_MAX_KVM} cycles holds under KVM only, \
             where the table also gives cycles: under TCG the guest's TSC counts the host's time \
             for far slower guest code."
        )
    };
    vec![
        cycles,
        "each guest figure is the median over its program's rounds of the mean time per \
         operation in a round, the table's median that over boots; max is the slowest round \
         of any boot (for the keeper fault, timed one by one, the slowest fault). Goals are \
         judged on medians; the ratio is of the medians."
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
             (the page exists: its like on Linux is the page-cache fault; the first touch \
             also allocates and zeroes one, and carries the goal set against it); keeper \
             fault = read of an unmapped page under a keeper node, resolved by zero-keeper \
             with a zeroed page from its pool, median of 15 faults timed one by one."
        ),
        "Linux (bench/peers/linux-micro.c, gcc -static -O2): getppid; pipe one way = from the \
         writer's clock before an 8-byte write to the clock of the reader, blocked in read(), \
         on waking with it (the message carries the writer's reading; one CPU, one clock); \
         pipe round trip = 8 bytes to a child process and back over two pipes; first-touch \
         fault = first write to an anonymous 4 KiB page (huge pages off); page-cache fault = \
         first write to a page of a file in the initramfs's root, already in the page cache, \
         in a new shared mapping (a minor fault); SIGSEGV handler fault = write to a populated \
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
    use holdfast_qemu::Accelerator;

    fn files() -> HoldfastFiles {
        HoldfastFiles {
            kernel: "k.elf".into(),
            initial_image: "bench-micro.hfi".into(),
        }
    }

    #[test]
    fn presets() {
        assert_eq!(MicroBenchOptions::new(files()).run.runs_per_guest, 3);
        let quick = MicroBenchOptions::quick(files()).run;
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
    fn medians_are_over_boots_figure_by_figure_and_maxima_the_worst_boot() {
        let holdfast = |median: [f64; 5]| Figures {
            median,
            max: median.map(|ns| 2.0 * ns),
        };
        let linux = |median: [f64; 6]| Figures {
            median,
            max: median.map(|ns| 3.0 * ns),
        };
        let medians = summarize(
            &[
                holdfast([1000.0, 5.0, 50.0, 500.0, 7.0]),
                holdfast([3000.0, 4.0, 60.0, 400.0, 9.0]),
                holdfast([2000.0, 6.0, 40.0, 600.0, 8.0]),
            ],
            &[
                linux([1.0, 10.0, 100.0, 1000.0, 5.0, 7.0]),
                linux([3.0, 30.0, 300.0, 3000.0, 6.0, 8.0]),
                linux([2.0, 20.0, 200.0, 2000.0, 4.0, 9.0]),
            ],
        );
        assert_eq!(medians.holdfast_ns.median, [2000.0, 5.0, 50.0, 500.0, 8.0]);
        assert_eq!(medians.holdfast_ns.max, [6000.0, 12.0, 120.0, 1200.0, 18.0]);
        assert_eq!(medians.linux_ns.median, [2.0, 20.0, 200.0, 2000.0, 5.0, 8.0]);
        assert_eq!(medians.linux_ns.max, [9.0, 90.0, 900.0, 9000.0, 18.0, 27.0]);
    }
}
