//! The figures the guests print, and how the host reads them.
//!
//! Each benchmark program prints `<marker> <name> <number>` lines, two per figure: the
//! median over its rounds (`LINUX-MICRO getppid_ns 1523.4`, `HOLDFAST-MICRO
//! round_trip_ipc_tsc_cycles 9120`) and the slowest round (`LINUX-MICRO getppid_max_ns
//! 1800.2`, `HOLDFAST-MICRO round_trip_ipc_max_tsc_cycles 9900`), or `<marker>-FAILED
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

/// The Holdfast program's figures in [`Measure`] order, named without their unit: each
/// comes as `<name>_tsc_cycles` (the median) and `<name>_max_tsc_cycles`.
pub const HOLDFAST_NAMES: [&str; Measure::ALL.len()] = [
    "trivial_invocation",
    "one_way_ipc",
    "round_trip_ipc",
    "node_tree_fault",
    "keeper_fault",
];

/// A program's figures: per figure the median over its rounds, and the slowest round
/// (the worst case); over boots, the median of the medians and the maximum of the maxima.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures<const N: usize> {
    pub median: [f64; N],
    pub max: [f64; N],
}

impl<const N: usize> Figures<N> {
    pub fn map(self, convert: impl Fn(f64) -> f64) -> Self {
        Self {
            median: self.median.map(&convert),
            max: self.max.map(&convert),
        }
    }

    /// Over boots: the median of each figure's medians and the maximum of its maxima.
    pub fn over_boots(runs: &[Self]) -> Self {
        Self {
            median: std::array::from_fn(|index| {
                let values: Vec<f64> = runs.iter().map(|run| run.median[index]).collect();
                crate::table::median(&values).unwrap_or(f64::NAN)
            }),
            max: std::array::from_fn(|index| {
                runs.iter()
                    .map(|run| run.max[index])
                    .reduce(f64::max)
                    .unwrap_or(f64::NAN)
            }),
        }
    }
}

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

/// The figure set of `marker`'s lines: per stem, `<stem>_<unit>` (the median over the
/// program's rounds) and `<stem>_max_<unit>` (its slowest round), in `stems` order. All are
/// required: a missing one would leave a row of the table empty without saying why.
pub fn figure_set<const N: usize>(
    lines: &[String],
    marker: &str,
    stems: [&str; N],
    unit: &str,
) -> Result<Figures<N>, String> {
    let figures = figures_in(lines, marker)?;
    let mut values = Figures {
        median: [0.0; N],
        max: [0.0; N],
    };
    for (index, stem) in stems.iter().enumerate() {
        values.median[index] = find(&figures, &format!("{stem}_{unit}"), lines)?;
        values.max[index] = find(&figures, &format!("{stem}_max_{unit}"), lines)?;
    }
    Ok(values)
}

/// `cycles` in nanoseconds, converted with the kernel's calibration line among `lines`.
pub fn cycles_to_ns<const N: usize>(
    cycles: Figures<N>,
    lines: &[String],
) -> Result<Figures<N>, String> {
    let tsc_mhz = kernel_tsc_mhz(lines)? as f64;
    Ok(cycles.map(|cycles| cycles * 1000.0 / tsc_mhz))
}

/// The Linux peer's figures from its run's lines.
pub fn linux_figures(lines: &[String]) -> Result<LinuxFiguresNs, String> {
    figure_set(
        lines,
        LINUX_MARKER,
        LinuxFigure::ALL.map(LinuxFigure::stem),
        "ns",
    )
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

    #[test]
    fn over_boots_the_medians_are_medians_and_the_maxima_maxima() {
        let boot = |median: f64, max: f64| Figures {
            median: [median, 10.0 * median],
            max: [max, 10.0 * max],
        };
        assert_eq!(
            Figures::over_boots(&[boot(3.0, 4.0), boot(1.0, 9.0), boot(2.0, 2.5)]),
            Figures {
                median: [2.0, 20.0],
                max: [9.0, 90.0],
            }
        );
    }
}
