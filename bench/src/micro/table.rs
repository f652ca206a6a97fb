//! The micro-benchmark's one table: a row per Holdfast measure, beside its Linux peer's
//! figure, the ratio, the goal and whether it is met.

use super::figures::{HoldfastFiguresNs, LinuxFigure, LinuxFiguresNs};
use crate::table::{self, Caption, Column};

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

const COLUMNS: [Column; 7] = [
    Column::left("measure"),
    Column::right("Holdfast median ns"),
    Column::left("Linux peer"),
    Column::right("Linux median ns"),
    Column::right("ratio to peer"),
    Column::left("goal"),
    Column::left("verdict"),
];

/// The table as text, notes included, ending with a newline.
pub fn render(medians: &Medians, caption: &Caption) -> String {
    let cells: Vec<Vec<String>> = Measure::ALL
        .iter()
        .map(|&measure| {
            let peer = measure.peer();
            let peer_ns = medians.linux_ns[peer as usize];
            let ns = medians.holdfast_ns[measure as usize];
            vec![
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
    table::render(caption, &COLUMNS, &cells, &[])
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

    fn caption() -> Caption {
        Caption {
            title: "micro, accelerator tcg".into(),
            notes: vec!["a caveat".into()],
        }
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
        assert_eq!(render(&medians(1234.5), &caption()), expected);
    }

    #[test]
    fn a_goal_missed_says_so() {
        let text = render(&medians(1600.0), &caption());
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
        let text = render(&medians(1000.0), &caption());
        assert!(!text.contains("not measured"), "{text}");
        assert!(!text.contains('—'), "{text}");
    }
}
