//! The figures the services benchmark's guests print, read as the micro-benchmark's are
//! ([`crate::figure_lines`]: `<marker> <name> <number>`, the median and the slowest round).

use crate::figure_lines::{Figures, cycles_to_ns, figure_set};

/// What the Linux peer's program (`bench/peers/linux-services.c`) starts its lines with.
pub const LINUX_MARKER: &str = "LINUX-SERVICES";
/// What the Holdfast program (`services/selftest/src/bench_services.rs`) starts its lines with.
pub const HOLDFAST_MARKER: &str = "HOLDFAST-SERVICES";

/// What the Holdfast program measures, in the order of its figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldfastFigure {
    ProcessCycle,
    PageAllocation,
    DirectCall,
    ForwardedCall,
}

impl HoldfastFigure {
    pub const ALL: [HoldfastFigure; 4] = [
        HoldfastFigure::ProcessCycle,
        HoldfastFigure::PageAllocation,
        HoldfastFigure::DirectCall,
        HoldfastFigure::ForwardedCall,
    ];

    /// The name on the program's lines, without the unit: `<stem>_tsc_cycles` is the
    /// median, `<stem>_max_tsc_cycles` the slowest round.
    pub fn stem(self) -> &'static str {
        match self {
            HoldfastFigure::ProcessCycle => "process_cycle",
            HoldfastFigure::PageAllocation => "page_allocation",
            HoldfastFigure::DirectCall => "direct_call",
            HoldfastFigure::ForwardedCall => "forwarded_call",
        }
    }

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            HoldfastFigure::ProcessCycle => "constructor yield, call, bank destroyed",
            HoldfastFigure::PageAllocation => "bank page bought, mapped, written",
            HoldfastFigure::DirectCall => "direct call (start capability)",
            HoldfastFigure::ForwardedCall => "call through a forwarder",
        }
    }
}

/// The Linux peer's figures, in the order its program prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxFigure {
    ForkExecWait,
    MmapFirstTouch,
}

impl LinuxFigure {
    pub const ALL: [LinuxFigure; 2] = [LinuxFigure::ForkExecWait, LinuxFigure::MmapFirstTouch];

    /// The name on the program's lines, without the unit (`_ns`, `_max_ns`).
    pub fn stem(self) -> &'static str {
        match self {
            LinuxFigure::ForkExecWait => "fork_exec_wait",
            LinuxFigure::MmapFirstTouch => "mmap_first_touch",
        }
    }

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            LinuxFigure::ForkExecWait => "fork, exec (static), exit, waitpid",
            LinuxFigure::MmapFirstTouch => "mmap 4 KiB + first touch",
        }
    }
}

/// One Holdfast run's figures, nanoseconds per operation, indexed by [`HoldfastFigure`].
pub type HoldfastFiguresNs = Figures<{ HoldfastFigure::ALL.len() }>;
/// One Linux run's figures, nanoseconds per operation, indexed by [`LinuxFigure`].
pub type LinuxFiguresNs = Figures<{ LinuxFigure::ALL.len() }>;

/// The Linux peer's figures from its run's lines; all are required.
pub fn linux_figures(lines: &[String]) -> Result<LinuxFiguresNs, String> {
    figure_set(
        lines,
        LINUX_MARKER,
        LinuxFigure::ALL.map(LinuxFigure::stem),
        "ns",
    )
}

/// The Holdfast program's figures in nanoseconds, its TSC cycles converted with the
/// kernel's calibration line; all are required.
pub fn holdfast_figures(lines: &[String]) -> Result<HoldfastFiguresNs, String> {
    let cycles = figure_set(
        lines,
        HOLDFAST_MARKER,
        HoldfastFigure::ALL.map(HoldfastFigure::stem),
        "tsc_cycles",
    )?;
    cycles_to_ns(cycles, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| (*line).to_owned()).collect()
    }

    fn holdfast_run() -> Vec<String> {
        lines(&[
            "selftest: timer: TSC 2000 MHz, local APIC timer 1000 MHz [ok]",
            "HOLDFAST-SERVICES process_cycle_tsc_cycles 2000000",
            "HOLDFAST-SERVICES process_cycle_max_tsc_cycles 3000000",
            "HOLDFAST-SERVICES page_allocation_tsc_cycles 40000",
            "HOLDFAST-SERVICES page_allocation_max_tsc_cycles 50000",
            "HOLDFAST-SERVICES direct_call_tsc_cycles 10000",
            "HOLDFAST-SERVICES direct_call_max_tsc_cycles 12000",
            "HOLDFAST-SERVICES forwarded_call_tsc_cycles 14000",
            "HOLDFAST-SERVICES forwarded_call_max_tsc_cycles 16000",
        ])
    }

    #[test]
    fn holdfast_cycles_are_converted_with_the_kernel_calibration_in_figure_order() {
        assert_eq!(
            holdfast_figures(&holdfast_run()),
            Ok(Figures {
                median: [1_000_000.0, 20_000.0, 5000.0, 7000.0],
                max: [1_500_000.0, 25_000.0, 6000.0, 8000.0],
            })
        );
    }

    #[test]
    fn every_figure_is_required_and_a_failure_is_an_error() {
        for missing in 0..=8 {
            let mut run = holdfast_run();
            let removed = run.remove(missing);
            assert!(holdfast_figures(&run).is_err(), "without {removed}");
        }
        let mut run = holdfast_run();
        run.push("HOLDFAST-SERVICES-FAILED process cycle: the constructor refused to yield".into());
        let error = holdfast_figures(&run).unwrap_err();
        assert!(
            error.contains("the constructor refused to yield"),
            "{error}"
        );

        let linux = lines(&[
            "LINUX-SERVICES fork_exec_wait_ns 3000000.5",
            "LINUX-SERVICES fork_exec_wait_max_ns 4000000",
            "LINUX-SERVICES mmap_first_touch_ns 30000",
            "LINUX-SERVICES mmap_first_touch_max_ns 31000",
        ]);
        assert_eq!(
            linux_figures(&linux),
            Ok(Figures {
                median: [3_000_000.5, 30_000.0],
                max: [4_000_000.0, 31_000.0],
            })
        );
        let error = linux_figures(&linux[..3]).unwrap_err();
        assert!(
            error.contains("no figure mmap_first_touch_max_ns"),
            "{error}"
        );
        let error = linux_figures(&lines(&["LINUX-SERVICES-FAILED fork: No memory"])).unwrap_err();
        assert!(error.contains("fork: No memory"), "{error}");
    }
}
