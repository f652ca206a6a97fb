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
pub mod table;

use std::io::{self, Write};

use holdfast_abi as abi;

use crate::figure_lines::Figures;
use crate::linux_peer;
use crate::program_bench::{self, PeerProgram, ProgramLines, listed_ns};
use crate::table::Caption;
use figures::{
    HOLDFAST_MARKER, HoldfastFigure, HoldfastFiguresNs, LINUX_MARKER, LinuxFigure, LinuxFiguresNs,
};
pub use program_bench::{RUNS_PER_GUEST_DEFAULT, RUNS_PER_GUEST_QUICK};
use table::Medians;

/// What `holdfast bench services` runs: the micro-benchmark's options, as both boot the
/// same two guests with their own programs.
pub type ServicesBenchOptions = program_bench::ProgramBenchOptions;

/// The Linux peer's program. It also is the static binary its fork and exec figure execs,
/// by its path in the initramfs (its argv[0]).
pub const LINUX_PROGRAM: PeerProgram = PeerProgram {
    name: "linux-services",
    source: include_str!("../../peers/linux-services.c"),
};

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
    let holdfast = ProgramLines {
        marker: HOLDFAST_MARKER,
        read: figures::holdfast_figures,
        progress: |ns: &HoldfastFiguresNs| {
            listed_ns(HoldfastFigure::ALL.map(HoldfastFigure::stem), ns.median)
        },
    };
    let linux = ProgramLines {
        marker: LINUX_MARKER,
        read: figures::linux_figures,
        progress: |ns: &LinuxFiguresNs| {
            listed_ns(LinuxFigure::ALL.map(LinuxFigure::stem), ns.median)
        },
    };
    let boots = program_bench::run(
        "services",
        options,
        LINUX_PROGRAM,
        holdfast,
        linux,
        progress,
    )?;

    let medians = Medians {
        holdfast_ns: Figures::over_boots(&boots.holdfast),
        linux_ns: Figures::over_boots(&boots.linux),
    };
    let caption = Caption {
        title: boots.title,
        notes: notes(),
    };
    let table = table::render(&medians, &caption);
    Ok(ServicesReport {
        holdfast_ns: boots.holdfast,
        linux_ns: boots.linux,
        medians,
        table,
    })
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
         process creation = a bank below the program's bank, a constructor's yield of a \
         copy-on-write copy of echo-server paid for by it (a bank, a root node, its space a \
         virtual copy: two nodes, then the nodes and page its first write needs, as Linux's \
         exec maps a program), a call the new process answers, and the bank destroyed with all it \
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

    #[test]
    fn the_peer_program_prints_every_figure_the_host_reads() {
        for figure in LinuxFigure::ALL {
            assert!(
                LINUX_PROGRAM
                    .source
                    .contains(&format!("report(\"{}\"", figure.stem())),
                "{}",
                figure.stem()
            );
        }
        assert!(
            LINUX_PROGRAM
                .source
                .contains("LINUX-SERVICES-FAILED %s: %s\\n")
        );
    }

    /// Builds the real program with the real compiler and runs it on the host: its exec of
    /// itself with `--exit` must work, and it prints each figure.
    #[test]
    fn the_peer_program_builds_static_and_runs() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-services-{}", std::process::id()));
        let executable = LINUX_PROGRAM.build(&directory).unwrap();
        assert_eq!(
            linux_peer::is_static_elf(&std::fs::read(&executable).unwrap()),
            Ok(true)
        );
        let output = std::process::Command::new(&executable).output().unwrap();
        std::fs::remove_dir_all(&directory).unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}");
        let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
        figures::linux_figures(&lines).unwrap();
    }
}
