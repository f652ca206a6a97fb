//! The lines the benchmarks' guest programs print, and how the host reads them.
//!
//! Each program prints `<marker> <name> <number>` lines, two per figure: the median over
//! its rounds (`LINUX-MICRO getppid_ns 1523.4`, `HOLDFAST-MICRO round_trip_ipc_tsc_cycles
//! 9120`) and the slowest round (`LINUX-MICRO getppid_max_ns 1800.2`, `HOLDFAST-MICRO
//! round_trip_ipc_max_tsc_cycles 9900`), or `<marker>-FAILED <why>` when it could not
//! measure. Holdfast's programs count TSC cycles; the kernel's calibration line converts
//! them.

/// The kernel's boot line with its TSC calibration (`guest-kernel/kernel/src/selftest.rs`):
/// `selftest: timer: TSC <MHz> MHz, ...`. The Holdfast program counts TSC cycles and has no
/// clock to convert them; this line gives the host the frequency.
pub const KERNEL_TSC_LINE_PREFIX: &str = "selftest: timer: TSC ";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_lines_give_name_and_value() {
        assert_eq!(
            parse_figure_line("LINUX-MICRO getppid_ns 1523.4", "LINUX-MICRO"),
            Some(Ok(("getppid_ns".to_owned(), 1523.4)))
        );
        assert_eq!(
            parse_figure_line(
                "HOLDFAST-MICRO trivial_invocation_tsc_cycles 2710\r",
                "HOLDFAST-MICRO"
            ),
            Some(Ok(("trivial_invocation_tsc_cycles".to_owned(), 2710.0)))
        );
        assert_eq!(parse_figure_line("LINUX-READY 1.2", "LINUX-MICRO"), None);
        assert_eq!(parse_figure_line("LINUX-MICROS x 1", "LINUX-MICRO"), None);
        assert_eq!(parse_figure_line("HOLDFAST-MICRO x 1", "LINUX-MICRO"), None);
    }

    #[test]
    fn bad_figures_are_errors_not_skips() {
        for line in [
            "LINUX-MICRO-FAILED mmap: Cannot allocate memory",
            "LINUX-MICRO getppid_ns",
            "LINUX-MICRO getppid_ns 12 extra",
            "LINUX-MICRO getppid_ns fast",
            "LINUX-MICRO getppid_ns -3",
            "LINUX-MICRO getppid_ns inf",
        ] {
            assert!(
                matches!(parse_figure_line(line, "LINUX-MICRO"), Some(Err(_))),
                "{line}"
            );
        }
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
