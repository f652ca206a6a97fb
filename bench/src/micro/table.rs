//! The micro-benchmark's one table: a row per Holdfast measure, beside its Linux peer's
//! figure, the ratio, the goal and whether it is met.

use std::fmt::Write as _;

use super::figures::{HoldfastFiguresNs, LinuxFigure, LinuxFiguresNs};

/// What Holdfast is measured on, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    TrivialInvocation,
    OneWayIpc,
    RoundTripIpc,
    NodeTreeFault,
    KeeperFault,
}

/// A goal: the Holdfast median at most `ratio_max` times a Linux figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Goal {
    pub ratio_max: f64,
    pub linux: LinuxFigure,
}

impl Measure {
    pub const ALL: [Measure; 5] = [
        Measure::TrivialInvocation,
        Measure::OneWayIpc,
        Measure::RoundTripIpc,
        Measure::NodeTreeFault,
        Measure::KeeperFault,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Measure::TrivialInvocation => "trivial invocation",
            Measure::OneWayIpc => "one-way IPC",
            Measure::RoundTripIpc => "round-trip IPC",
            Measure::NodeTreeFault => "node-tree fault",
            Measure::KeeperFault => "keeper fault",
        }
    }

    /// The Linux figure the ratio column is taken against.
    pub fn peer(self) -> LinuxFigure {
        match self {
            Measure::TrivialInvocation => LinuxFigure::Getppid,
            Measure::OneWayIpc | Measure::RoundTripIpc => LinuxFigure::PipeRoundTrip,
            Measure::NodeTreeFault => LinuxFigure::FirstTouchFault,
            Measure::KeeperFault => LinuxFigure::SignalHandlerFault,
        }
    }

    /// The goals the project set for this measure (none yet for the keeper fault).
    pub fn goals(self) -> &'static [Goal] {
        match self {
            Measure::TrivialInvocation => &[Goal {
                ratio_max: 1.0,
                linux: LinuxFigure::Getppid,
            }],
            Measure::OneWayIpc => &[Goal {
                ratio_max: 2.0,
                linux: LinuxFigure::Getppid,
            }],
            Measure::RoundTripIpc => &[
                Goal {
                    ratio_max: 4.0,
                    linux: LinuxFigure::Getppid,
                },
                Goal {
                    ratio_max: 0.05,
                    linux: LinuxFigure::PipeRoundTrip,
                },
            ],
            Measure::NodeTreeFault => &[Goal {
                ratio_max: 0.5,
                linux: LinuxFigure::FirstTouchFault,
            }],
            Measure::KeeperFault => &[],
        }
    }
}

/// The medians over boots: Holdfast's, indexed by [`Measure`], and the Linux peer's,
/// indexed by [`LinuxFigure`].
#[derive(Clone, Debug, PartialEq)]
pub struct Medians {
    pub holdfast_ns: HoldfastFiguresNs,
    pub linux_ns: LinuxFiguresNs,
}

/// What the table says above and below its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub title: String,
    pub notes: Vec<String>,
}

/// The middle value, or the mean of the two middle values; `None` for none. The median
/// because this machine is shared: one boot slowed by a neighbour must not move the figure.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

/// `1.0` as "1.0", `0.05` as "0.05": as few digits as the goal was set with.
fn ratio_max_text(ratio_max: f64) -> String {
    if ratio_max.fract() == 0.0 {
        format!("{ratio_max:.1}")
    } else {
        format!("{ratio_max}")
    }
}

fn goal_text(goals: &[Goal]) -> String {
    if goals.is_empty() {
        return "none yet".to_owned();
    }
    goals
        .iter()
        .map(|goal| {
            format!(
                "≤ {}× {}",
                ratio_max_text(goal.ratio_max),
                goal.linux.name()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// "met" or "NOT met", with the ratios to goal figures other than the row's peer (whose
/// ratio has its own column).
fn verdict_text(measure: Measure, holdfast_ns: f64, linux_ns: &LinuxFiguresNs) -> String {
    let goals = measure.goals();
    if goals.is_empty() {
        return "no goal".to_owned();
    }
    let ratio_to = |goal: &Goal| holdfast_ns / linux_ns[goal.linux as usize];
    let all_met = goals.iter().all(|goal| ratio_to(goal) <= goal.ratio_max);
    let other_ratios: Vec<String> = goals
        .iter()
        .filter(|goal| goal.linux != measure.peer())
        .map(|goal| format!("{:.3}× {}", ratio_to(goal), goal.linux.name()))
        .collect();
    let verdict = if all_met { "met" } else { "NOT met" };
    if other_ratios.is_empty() {
        verdict.to_owned()
    } else {
        format!("{verdict} ({})", other_ratios.join(", "))
    }
}

/// The table as text, notes included, ending with a newline.
pub fn render(medians: &Medians, spec: &TableSpec) -> String {
    const HEADERS: [&str; 7] = [
        "measure",
        "Holdfast median ns",
        "Linux peer",
        "Linux median ns",
        "ratio to peer",
        "goal",
        "verdict",
    ];
    // Columns 1, 3 and 4 are numbers, right-aligned so that their points line up.
    const NUMERIC: [bool; 7] = [false, true, false, true, true, false, false];
    let cells: Vec<[String; 7]> = Measure::ALL
        .iter()
        .map(|&measure| {
            let peer = measure.peer();
            let peer_ns = medians.linux_ns[peer as usize];
            let ns = medians.holdfast_ns[measure as usize];
            [
                measure.name().to_owned(),
                format!("{ns:.1}"),
                peer.name().to_owned(),
                format!("{peer_ns:.1}"),
                format!("{:.3}×", ns / peer_ns),
                goal_text(measure.goals()),
                verdict_text(measure, ns, &medians.linux_ns),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|column| {
            cells
                .iter()
                .map(|row| row[column].chars().count())
                .chain([HEADERS[column].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |out: &mut String, row: &[String]| {
        let mut text = String::new();
        for (column, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[column] - cell.chars().count());
            if column > 0 {
                text.push_str("  ");
            }
            if NUMERIC[column] {
                text.push_str(&pad);
                text.push_str(cell);
            } else {
                text.push_str(cell);
                text.push_str(&pad);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };

    let mut out = String::new();
    let _ = writeln!(out, "{}", spec.title);
    line(&mut out, &HEADERS.map(str::to_owned));
    let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
    line(&mut out, &rule);
    for row in &cells {
        line(&mut out, row);
    }
    for note in &spec.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians(trivial_invocation_ns: f64) -> Medians {
        Medians {
            holdfast_ns: [trivial_invocation_ns, 2500.0, 7000.0, 9000.0, 40_000.0],
            linux_ns: [1500.0, 300_000.0, 30_000.0, 15_000.0],
        }
    }

    fn spec() -> TableSpec {
        TableSpec {
            title: "micro, accelerator tcg".into(),
            notes: vec!["a caveat".into()],
        }
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn table_shows_every_row_with_its_peer_goal_and_verdict() {
        let expected = "\
micro, accelerator tcg
measure             Holdfast median ns  Linux peer             Linux median ns  ratio to peer  goal                                     verdict
------------------  ------------------  ---------------------  ---------------  -------------  ---------------------------------------  ------------------------
trivial invocation              1234.5  getppid                         1500.0         0.823×  ≤ 1.0× getppid                           met
one-way IPC                     2500.0  pipe round trip               300000.0         0.008×  ≤ 2.0× getppid                           met (1.667× getppid)
round-trip IPC                  7000.0  pipe round trip               300000.0         0.023×  ≤ 4.0× getppid, ≤ 0.05× pipe round trip  NOT met (4.667× getppid)
node-tree fault                 9000.0  first-touch fault              30000.0         0.300×  ≤ 0.5× first-touch fault                 met
keeper fault                   40000.0  SIGSEGV handler fault          15000.0         2.667×  none yet                                 no goal
note: a caveat
";
        assert_eq!(render(&medians(1234.5), &spec()), expected);
    }

    #[test]
    fn a_goal_missed_says_so() {
        let text = render(&medians(1600.0), &spec());
        let row = text
            .lines()
            .find(|line| line.starts_with("trivial invocation"))
            .unwrap();
        assert!(row.contains("1.067×"), "{row}");
        assert!(row.ends_with("NOT met"), "{row}");
    }

    #[test]
    fn a_goal_against_another_figure_than_the_peer_shows_its_ratio() {
        let linux_ns = medians(0.0).linux_ns;
        // 6000 ns: 4.0× getppid (met), 0.02× pipe round trip (met).
        assert_eq!(
            verdict_text(Measure::RoundTripIpc, 6000.0, &linux_ns),
            "met (4.000× getppid)"
        );
        assert_eq!(
            verdict_text(Measure::RoundTripIpc, 6100.0, &linux_ns),
            "NOT met (4.067× getppid)"
        );
        // 0.05× a 100 µs pipe round trip is 5 µs: 5.5 µs misses it though 4× getppid is met.
        let mut fast_pipe = linux_ns;
        fast_pipe[LinuxFigure::PipeRoundTrip as usize] = 100_000.0;
        assert_eq!(
            verdict_text(Measure::RoundTripIpc, 5500.0, &fast_pipe),
            "NOT met (3.667× getppid)"
        );
        assert_eq!(
            verdict_text(Measure::KeeperFault, 1.0, &linux_ns),
            "no goal"
        );
    }

    #[test]
    fn no_row_says_not_measured() {
        let text = render(&medians(1000.0), &spec());
        assert!(!text.contains("not measured"), "{text}");
        assert!(!text.contains('—'), "{text}");
    }
}
