//! The micro-benchmark's figures, read from its guests' lines as
//! [`crate::figure_lines`] says.

use super::table::Measure;
use crate::figure_lines::{Figures, cycles_to_ns, figure_set};

/// What the Linux peer's program (`bench/peers/linux-micro.c`) starts its lines with.
pub const LINUX_MARKER: &str = "LINUX-MICRO";
/// What the Holdfast program (`services/selftest/src/bench_micro.rs`) starts its lines with.
pub const HOLDFAST_MARKER: &str = "HOLDFAST-MICRO";
/// The Holdfast program's figures in [`Measure`] order, named without their unit: each
/// comes as `<name>_tsc_cycles` (the median) and `<name>_max_tsc_cycles`.
pub const HOLDFAST_NAMES: [&str; Measure::ALL.len()] = [
    "trivial_invocation",
    "one_way_ipc",
    "round_trip_ipc",
    "node_tree_fault",
    "keeper_fault",
];

/// One Holdfast run's figures, nanoseconds per operation, indexed by [`Measure`].
pub type HoldfastFiguresNs = Figures<{ Measure::ALL.len() }>;
/// The same in TSC cycles per operation, as the program printed them.
pub type HoldfastFiguresCycles = Figures<{ Measure::ALL.len() }>;

/// The Linux peer's figures, in the order its program prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxFigure {
    Getppid,
    PipeOneWay,
    PipeRoundTrip,
    FirstTouchFault,
    PageCacheFault,
    SignalHandlerFault,
}

impl LinuxFigure {
    pub const ALL: [LinuxFigure; 6] = [
        LinuxFigure::Getppid,
        LinuxFigure::PipeOneWay,
        LinuxFigure::PipeRoundTrip,
        LinuxFigure::FirstTouchFault,
        LinuxFigure::PageCacheFault,
        LinuxFigure::SignalHandlerFault,
    ];

    /// The name on the program's lines, without the unit: `<stem>_ns` is the median,
    /// `<stem>_max_ns` the slowest round.
    pub fn stem(self) -> &'static str {
        match self {
            LinuxFigure::Getppid => "getppid",
            LinuxFigure::PipeOneWay => "pipe_one_way",
            LinuxFigure::PipeRoundTrip => "pipe_round_trip",
            LinuxFigure::FirstTouchFault => "first_touch_fault",
            LinuxFigure::PageCacheFault => "page_cache_fault",
            LinuxFigure::SignalHandlerFault => "signal_handler_fault",
        }
    }

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            LinuxFigure::Getppid => "getppid",
            LinuxFigure::PipeOneWay => "pipe one way",
            LinuxFigure::PipeRoundTrip => "pipe round trip",
            LinuxFigure::FirstTouchFault => "first-touch fault",
            LinuxFigure::PageCacheFault => "page-cache fault",
            LinuxFigure::SignalHandlerFault => "SIGSEGV handler fault",
        }
    }
}

/// One Linux peer run's figures, nanoseconds per operation, indexed by [`LinuxFigure`].
pub type LinuxFiguresNs = Figures<{ LinuxFigure::ALL.len() }>;

/// The Linux peer's figures from its run's lines.
pub fn linux_figures(lines: &[String]) -> Result<LinuxFiguresNs, String> {
    figure_set(
        lines,
        LINUX_MARKER,
        LinuxFigure::ALL.map(LinuxFigure::stem),
        "ns",
    )
}

/// The Holdfast program's figures in TSC cycles. All are required.
pub fn holdfast_cycles(lines: &[String]) -> Result<HoldfastFiguresCycles, String> {
    figure_set(lines, HOLDFAST_MARKER, HOLDFAST_NAMES, "tsc_cycles")
}

/// The Holdfast program's figures in nanoseconds (its TSC cycles converted with the
/// kernel's calibration), and in cycles.
pub fn holdfast_figures(
    lines: &[String],
) -> Result<(HoldfastFiguresNs, HoldfastFiguresCycles), String> {
    let cycles = holdfast_cycles(lines)?;
    Ok((cycles_to_ns(cycles, lines)?, cycles))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| (*line).to_owned()).collect()
    }

    #[test]
    fn a_failure_line_is_an_error() {
        let error = linux_figures(&lines(&["LINUX-MICRO-FAILED fork: No memory"])).unwrap_err();
        assert!(error.contains("fork: No memory"), "{error}");
    }

    #[test]
    fn linux_figures_come_in_table_order_and_all_are_required() {
        let all = lines(&[
            "LINUX-MICRO getppid_ns 1500.0",
            "LINUX-MICRO getppid_max_ns 1600.0",
            "LINUX-MICRO pipe_one_way_ns 100000",
            "LINUX-MICRO pipe_one_way_max_ns 120000",
            "LINUX-MICRO pipe_round_trip_ns 300000.5",
            "LINUX-MICRO pipe_round_trip_max_ns 400000",
            "LINUX-MICRO first_touch_fault_ns 30000",
            "LINUX-MICRO first_touch_fault_max_ns 31000",
            "LINUX-MICRO page_cache_fault_ns 20000",
            "LINUX-MICRO page_cache_fault_max_ns 22000",
            "LINUX-MICRO signal_handler_fault_ns 15000",
            "LINUX-MICRO signal_handler_fault_max_ns 16000",
        ]);
        assert_eq!(
            linux_figures(&all),
            Ok(Figures {
                median: [1500.0, 100_000.0, 300000.5, 30000.0, 20000.0, 15000.0],
                max: [1600.0, 120_000.0, 400_000.0, 31000.0, 22000.0, 16000.0],
            })
        );
        let error = linux_figures(&all[..11]).unwrap_err();
        assert!(
            error.contains("no figure signal_handler_fault_max_ns"),
            "{error}"
        );
        assert!(error.contains("getppid_ns 1500.0"), "{error}");
    }

    fn holdfast_run() -> Vec<String> {
        lines(&[
            "selftest: timer: TSC 2000 MHz, local APIC timer 1000 MHz, periodic interrupt 100 Hz requested, 100.000 Hz measured [ok]",
            "HOLDFAST-MICRO trivial_invocation_tsc_cycles 3000",
            "HOLDFAST-MICRO trivial_invocation_max_tsc_cycles 3400",
            "HOLDFAST-MICRO round_trip_ipc_tsc_cycles 9000",
            "HOLDFAST-MICRO round_trip_ipc_max_tsc_cycles 9800",
            "HOLDFAST-MICRO one_way_ipc_tsc_cycles 4000",
            "HOLDFAST-MICRO one_way_ipc_max_tsc_cycles 4200",
            "HOLDFAST-MICRO node_tree_fault_tsc_cycles 6000",
            "HOLDFAST-MICRO node_tree_fault_max_tsc_cycles 8000",
            "HOLDFAST-MICRO keeper_fault_tsc_cycles 50000",
            "HOLDFAST-MICRO keeper_fault_max_tsc_cycles 60000",
        ])
    }

    #[test]
    fn holdfast_cycles_are_converted_with_the_kernel_calibration_in_measure_order() {
        let run = holdfast_run();
        assert_eq!(
            holdfast_figures(&run),
            Ok((
                Figures {
                    median: [1500.0, 2000.0, 4500.0, 3000.0, 25000.0],
                    max: [1700.0, 2100.0, 4900.0, 4000.0, 30000.0],
                },
                Figures {
                    median: [3000.0, 4000.0, 9000.0, 6000.0, 50000.0],
                    max: [3400.0, 4200.0, 9800.0, 8000.0, 60000.0],
                }
            ))
        );
        let error = holdfast_figures(&run[1..]).unwrap_err();
        assert!(
            error.contains("no 'selftest: timer: TSC <MHz> MHz' line"),
            "{error}"
        );
        let zero = lines(&["selftest: timer: TSC 0 MHz, x", &run[1]]);
        assert!(holdfast_figures(&zero).is_err());
        let garbled = lines(&["selftest: timer: TSC fast", &run[1]]);
        assert!(holdfast_figures(&garbled).is_err());
        assert!(holdfast_figures(&run[..1]).is_err());
    }

    #[test]
    fn every_holdfast_figure_is_required_and_a_failure_is_an_error() {
        for missing in 1..=10 {
            let mut run = holdfast_run();
            let key = run.remove(missing);
            let name = key.split_whitespace().nth(1).unwrap().to_owned();
            let error = holdfast_figures(&run).unwrap_err();
            assert!(error.contains(&format!("no figure {name}")), "{error}");
        }
        let mut run = holdfast_run();
        run.push("HOLDFAST-MICRO-FAILED keeper fault: the keeper's page was not zeroed".into());
        let error = holdfast_figures(&run).unwrap_err();
        assert!(
            error.contains("the keeper's page was not zeroed"),
            "{error}"
        );
    }
}
