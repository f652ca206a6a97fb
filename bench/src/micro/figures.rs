//! The figures the guests print, and how the host reads them.
//!
//! Each benchmark program prints `<marker> <name> <number>` lines (`LINUX-MICRO getppid_ns
//! 1523.4`, `HOLDFAST-MICRO round_trip_ipc_tsc_cycles 9120`), or `<marker>-FAILED
//! <why>` when it could not measure.

use super::table::Measure;

/// What the Linux peer's program (`bench/peers/linux-micro.c`) starts its lines with.
pub const LINUX_MARKER: &str = "LINUX-MICRO";
/// What the Holdfast program (`services/selftest/src/bench_micro.rs`) starts its lines with.
pub const HOLDFAST_MARKER: &str = "HOLDFAST-MICRO";
/// The kernel's boot line with its TSC calibration (`guest-kernel/kernel/src/selftest.rs`):
/// `selftest: timer: TSC <MHz> MHz, ...`. The Holdfast program counts TSC cycles and has no
/// clock to convert them; this line gives the host the frequency.
pub const KERNEL_TSC_LINE_PREFIX: &str = "selftest: timer: TSC ";

/// The Holdfast program's figures, in TSC cycles, in [`Measure`] order.
pub const HOLDFAST_KEYS: [&str; Measure::ALL.len()] = [
    "trivial_invocation_tsc_cycles",
    "one_way_ipc_tsc_cycles",
    "round_trip_ipc_tsc_cycles",
    "node_tree_fault_tsc_cycles",
    "keeper_fault_tsc_cycles",
];

/// One Holdfast run's figures, nanoseconds per operation, indexed by [`Measure`].
pub type HoldfastFiguresNs = [f64; Measure::ALL.len()];
/// The same in TSC cycles per operation, as the program printed them.
pub type HoldfastFiguresCycles = [f64; Measure::ALL.len()];

/// The Linux peer's figures, in the order its program prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxFigure {
    Getppid,
    PipeRoundTrip,
    FirstTouchFault,
    SignalHandlerFault,
}

impl LinuxFigure {
    pub const ALL: [LinuxFigure; 4] = [
        LinuxFigure::Getppid,
        LinuxFigure::PipeRoundTrip,
        LinuxFigure::FirstTouchFault,
        LinuxFigure::SignalHandlerFault,
    ];

    /// The name on the program's line.
    pub fn key(self) -> &'static str {
        match self {
            LinuxFigure::Getppid => "getppid_ns",
            LinuxFigure::PipeRoundTrip => "pipe_round_trip_ns",
            LinuxFigure::FirstTouchFault => "first_touch_fault_ns",
            LinuxFigure::SignalHandlerFault => "signal_handler_fault_ns",
        }
    }

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            LinuxFigure::Getppid => "getppid",
            LinuxFigure::PipeRoundTrip => "pipe round trip",
            LinuxFigure::FirstTouchFault => "first-touch fault",
            LinuxFigure::SignalHandlerFault => "SIGSEGV handler fault",
        }
    }
}

/// One Linux peer run's figures, nanoseconds per operation, indexed by [`LinuxFigure`].
pub type LinuxFiguresNs = [f64; LinuxFigure::ALL.len()];

/// Reads `<marker> <name> <number>` from a serial line. `None` when the line is not one of
/// `marker`'s; `Some(Err)` when it is a failure line or its number cannot be read, which
/// must fail the run rather than be skipped.
pub fn parse_figure_line(line: &str, marker: &str) -> Option<Result<(String, f64), String>> {
    let at = line.find(marker)?;
    let rest = &line[at + marker.len()..];
    if let Some(why) = rest.strip_prefix("-FAILED") {
        return Some(Err(format!("the guest could not measure:{why}")));
    }
    if !rest.starts_with(' ') {
        return None;
    }
    let mut words = rest.split_whitespace();
    let (Some(name), Some(number), None) = (words.next(), words.next(), words.next()) else {
        return Some(Err(format!(
            "figure line {line:?} is not '{marker} <name> <number>'"
        )));
    };
    match number.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Some(Ok((name.to_owned(), value))),
        _ => Some(Err(format!(
            "figure line {line:?}: {number:?} is not a number"
        ))),
    }
}

/// Every figure of `marker` in `lines`, in order; the first failure or bad line is the error.
fn figures_in(lines: &[String], marker: &str) -> Result<Vec<(String, f64)>, String> {
    lines
        .iter()
        .filter_map(|line| parse_figure_line(line, marker))
        .collect()
}

fn find(figures: &[(String, f64)], key: &str, lines: &[String]) -> Result<f64, String> {
    figures
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            format!(
                "no figure {key} among the guest's lines: {}",
                if lines.is_empty() {
                    "(none)".to_owned()
                } else {
                    lines.join(" | ")
                }
            )
        })
}

/// The Linux peer's figures from its run's lines.
pub fn linux_figures(lines: &[String]) -> Result<LinuxFiguresNs, String> {
    let figures = figures_in(lines, LINUX_MARKER)?;
    let mut values = [0.0; LinuxFigure::ALL.len()];
    for (index, figure) in LinuxFigure::ALL.iter().enumerate() {
        values[index] = find(&figures, figure.key(), lines)?;
    }
    Ok(values)
}

/// The TSC frequency from the kernel's calibration line, in MHz.
pub fn kernel_tsc_mhz(lines: &[String]) -> Result<u64, String> {
    let after_prefix = lines
        .iter()
        .find_map(|line| {
            let at = line.find(KERNEL_TSC_LINE_PREFIX)?;
            Some(&line[at + KERNEL_TSC_LINE_PREFIX.len()..])
        })
        .ok_or_else(|| format!("the kernel printed no '{KERNEL_TSC_LINE_PREFIX}<MHz> MHz' line"))?;
    // "2893 MHz, local APIC timer ..." → 2893.
    let mhz = after_prefix
        .split_once(' ')
        .filter(|(_, rest)| rest.starts_with("MHz"))
        .and_then(|(number, _)| number.parse::<u64>().ok())
        .ok_or_else(|| {
            format!("cannot read the TSC frequency from '{KERNEL_TSC_LINE_PREFIX}{after_prefix}'")
        })?;
    if mhz == 0 {
        return Err("the kernel calibrated its TSC at 0 MHz".to_owned());
    }
    Ok(mhz)
}

/// The Holdfast program's figures in TSC cycles. All are required.
pub fn holdfast_cycles(lines: &[String]) -> Result<HoldfastFiguresCycles, String> {
    let figures = figures_in(lines, HOLDFAST_MARKER)?;
    let mut values = [0.0; Measure::ALL.len()];
    for (value, key) in values.iter_mut().zip(HOLDFAST_KEYS) {
        *value = find(&figures, key, lines)?;
    }
    Ok(values)
}

/// The Holdfast program's figures in nanoseconds (its TSC cycles converted with the
/// kernel's calibration), and in cycles.
pub fn holdfast_figures(lines: &[String]) -> Result<(HoldfastFiguresNs, HoldfastFiguresCycles), String> {
    let cycles = holdfast_cycles(lines)?;
    let tsc_mhz = kernel_tsc_mhz(lines)? as f64;
    Ok((cycles.map(|cycles| cycles * 1000.0 / tsc_mhz), cycles))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| (*line).to_owned()).collect()
    }

    #[test]
    fn figure_lines_give_name_and_value() {
        assert_eq!(
            parse_figure_line("LINUX-MICRO getppid_ns 1523.4", LINUX_MARKER),
            Some(Ok(("getppid_ns".to_owned(), 1523.4)))
        );
        assert_eq!(
            parse_figure_line(
                "HOLDFAST-MICRO trivial_invocation_tsc_cycles 2710\r",
                HOLDFAST_MARKER
            ),
            Some(Ok(("trivial_invocation_tsc_cycles".to_owned(), 2710.0)))
        );
        assert_eq!(parse_figure_line("LINUX-READY 1.2", LINUX_MARKER), None);
        assert_eq!(parse_figure_line("LINUX-MICROS x 1", LINUX_MARKER), None);
        assert_eq!(parse_figure_line("HOLDFAST-MICRO x 1", LINUX_MARKER), None);
    }

    #[test]
    fn failures_and_bad_figures_are_errors_not_skips() {
        for line in [
            "LINUX-MICRO-FAILED mmap: Cannot allocate memory",
            "LINUX-MICRO getppid_ns",
            "LINUX-MICRO getppid_ns 12 extra",
            "LINUX-MICRO getppid_ns fast",
            "LINUX-MICRO getppid_ns -3",
            "LINUX-MICRO getppid_ns inf",
        ] {
            assert!(
                matches!(parse_figure_line(line, LINUX_MARKER), Some(Err(_))),
                "{line}"
            );
        }
        let error = linux_figures(&lines(&["LINUX-MICRO-FAILED fork: No memory"])).unwrap_err();
        assert!(error.contains("fork: No memory"), "{error}");
    }

    #[test]
    fn linux_figures_come_in_table_order_and_all_are_required() {
        let all = lines(&[
            "LINUX-MICRO getppid_ns 1500.0",
            "LINUX-MICRO pipe_round_trip_ns 300000.5",
            "LINUX-MICRO first_touch_fault_ns 30000",
            "LINUX-MICRO signal_handler_fault_ns 15000",
        ]);
        assert_eq!(
            linux_figures(&all),
            Ok([1500.0, 300000.5, 30000.0, 15000.0])
        );
        let error = linux_figures(&all[..3]).unwrap_err();
        assert!(
            error.contains("no figure signal_handler_fault_ns"),
            "{error}"
        );
        assert!(error.contains("getppid_ns 1500.0"), "{error}");
    }

    fn holdfast_run() -> Vec<String> {
        lines(&[
            "selftest: timer: TSC 2000 MHz, local APIC timer 1000 MHz, periodic interrupt 100 Hz requested, 100.000 Hz measured [ok]",
            "HOLDFAST-MICRO trivial_invocation_tsc_cycles 3000",
            "HOLDFAST-MICRO round_trip_ipc_tsc_cycles 9000",
            "HOLDFAST-MICRO one_way_ipc_tsc_cycles 4000",
            "HOLDFAST-MICRO node_tree_fault_tsc_cycles 6000",
            "HOLDFAST-MICRO keeper_fault_tsc_cycles 50000",
        ])
    }

    #[test]
    fn holdfast_cycles_are_converted_with_the_kernel_calibration_in_measure_order() {
        let run = holdfast_run();
        assert_eq!(
            holdfast_figures(&run),
            Ok((
                [1500.0, 2000.0, 4500.0, 3000.0, 25000.0],
                [3000.0, 4000.0, 9000.0, 6000.0, 50000.0]
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
        for missing in 1..=5 {
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
