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
pub mod table;

use std::io::{self, Write};

use holdfast_abi as abi;
use holdfast_qemu::Accelerator;

use crate::figure_lines::{Figures, KERNEL_TSC_LINE_PREFIX};
use crate::linux_peer;
use crate::program_bench::{self, PeerProgram, ProgramLines, listed_ns};
use crate::table::Caption;
use figures::{
    HOLDFAST_MARKER, HoldfastFiguresCycles, HoldfastFiguresNs, LINUX_MARKER, LinuxFigure,
    LinuxFiguresNs,
};
pub use program_bench::HoldfastFiles;
pub use program_bench::{RUNS_PER_GUEST_DEFAULT, RUNS_PER_GUEST_QUICK};
use table::{Measure, Medians, ONE_WAY_IPC_CYCLES_MAX_KVM};

/// What `holdfast bench micro` runs: the services benchmark's options, as both boot the
/// same two guests with their own programs.
pub type MicroBenchOptions = program_bench::ProgramBenchOptions;

/// The Linux peer's program.
pub const LINUX_PROGRAM: PeerProgram = PeerProgram {
    name: "linux-micro",
    source: include_str!("../../peers/linux-micro.c"),
};

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
    // Holdfast's boots keep their cycles too: under KVM the table shows them.
    let holdfast = ProgramLines::<(HoldfastFiguresNs, HoldfastFiguresCycles)> {
        marker: HOLDFAST_MARKER,
        read: figures::holdfast_figures,
        progress: |(ns, _)| listed_ns(Measure::ALL.map(Measure::name), ns.median),
    };
    let linux = ProgramLines {
        marker: LINUX_MARKER,
        read: figures::linux_figures,
        progress: |ns: &LinuxFiguresNs| {
            listed_ns(LinuxFigure::ALL.map(LinuxFigure::name), ns.median)
        },
    };
    let boots = program_bench::run("micro", options, LINUX_PROGRAM, holdfast, linux, progress)?;
    let (holdfast_ns, holdfast_cycles): (Vec<_>, Vec<_>) = boots.holdfast.into_iter().unzip();

    let mut medians = summarize(&holdfast_ns, &boots.linux);
    let kvm = options.run.accelerator == Accelerator::Kvm;
    medians.holdfast_cycles_kvm = kvm.then(|| Figures::over_boots(&holdfast_cycles));
    let caption = Caption {
        title: boots.title,
        notes: notes(kvm),
    };
    let table = table::render(&medians, &caption);
    Ok(MicroReport {
        holdfast_ns,
        linux_ns: boots.linux,
        medians,
        table,
    })
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
        assert_eq!(
            medians.linux_ns.median,
            [2.0, 20.0, 200.0, 2000.0, 5.0, 8.0]
        );
        assert_eq!(medians.linux_ns.max, [9.0, 90.0, 900.0, 9000.0, 18.0, 27.0]);
    }

    #[test]
    fn the_peer_program_prints_every_figure_the_host_reads() {
        let source = LINUX_PROGRAM.source;
        for figure in LinuxFigure::ALL {
            assert!(
                source.contains(&format!("report(\"{}\"", figure.stem())),
                "{}",
                figure.stem()
            );
        }
        assert!(source.contains("LINUX-MICRO %s_ns %.1f\\nLINUX-MICRO %s_max_ns %.1f\\n"));
        assert!(source.contains("LINUX-MICRO-FAILED %s: %s\\n"));
    }
}
