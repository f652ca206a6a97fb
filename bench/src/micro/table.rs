//! The micro-benchmark's one table: a row per comparison of a Holdfast measure with the
//! Linux figure that does the same work (one-way with one-way, a fault that finds its page
//! with one that finds its page), each side's median and worst case, the ratio of the
//! medians, the goal and whether it is met.

use super::figures::{HoldfastFiguresCycles, HoldfastFiguresNs, LinuxFigure, LinuxFiguresNs};
use crate::table::{self, Caption, Column};

/// What Holdfast is measured on, in the program's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    TrivialInvocation,
    OneWayIpc,
    RoundTripIpc,
    NodeTreeFault,
    KeeperFault,
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
}

/// A goal: the Holdfast median at most `ratio_max` times a Linux figure's median.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Goal {
    pub ratio_max: f64,
    pub linux: LinuxFigure,
}

/// One row: a Holdfast measure beside the Linux figure that does the same work (the ratio
/// column's), and the goals the project set for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub measure: Measure,
    pub peer: LinuxFigure,
    pub goals: &'static [Goal],
}

/// The table's rows. The node-tree fault has two: against a first touch (which also
/// allocates and zeroes a page, and carries the goal set against it) and against a fault
/// that, like it, finds its page already there.
pub const ROWS: [Row; 6] = [
    Row {
        measure: Measure::TrivialInvocation,
        peer: LinuxFigure::Getppid,
        goals: &[Goal {
            ratio_max: 1.0,
            linux: LinuxFigure::Getppid,
        }],
    },
    Row {
        measure: Measure::OneWayIpc,
        peer: LinuxFigure::PipeOneWay,
        goals: &[Goal {
            ratio_max: 2.0,
            linux: LinuxFigure::Getppid,
        }],
    },
    Row {
        measure: Measure::RoundTripIpc,
        peer: LinuxFigure::PipeRoundTrip,
        goals: &[
            Goal {
                ratio_max: 4.0,
                linux: LinuxFigure::Getppid,
            },
            Goal {
                ratio_max: 0.05,
                linux: LinuxFigure::PipeRoundTrip,
            },
        ],
    },
    Row {
        measure: Measure::NodeTreeFault,
        peer: LinuxFigure::FirstTouchFault,
        goals: &[Goal {
            ratio_max: 0.5,
            linux: LinuxFigure::FirstTouchFault,
        }],
    },
    Row {
        measure: Measure::NodeTreeFault,
        peer: LinuxFigure::PageCacheFault,
        goals: &[],
    },
    Row {
        measure: Measure::KeeperFault,
        peer: LinuxFigure::SignalHandlerFault,
        goals: &[],
    },
];

/// The goal in cycles, under KVM only: one-way IPC in at most this many (seL4's is about
/// 600 on x86-64). Under TCG the guest's TSC runs at the host's rate while the guest runs
/// far slower, so its cycles say nothing about the kernel.
pub const ONE_WAY_IPC_CYCLES_MAX_KVM: f64 = 300.0;

/// Over boots: the median of the medians and the maximum of the maxima, Holdfast's indexed
/// by [`Measure`], the Linux peer's by [`LinuxFigure`].
#[derive(Clone, Debug, PartialEq)]
pub struct Medians {
    pub holdfast_ns: HoldfastFiguresNs,
    pub linux_ns: LinuxFiguresNs,
    /// Holdfast's in TSC cycles, under KVM only (see [`ONE_WAY_IPC_CYCLES_MAX_KVM`]): the
    /// table then has a cycles column and the one-way goal in cycles.
    pub holdfast_cycles_kvm: Option<HoldfastFiguresCycles>,
}

/// `1.0` as "1.0", `0.05` as "0.05": as few digits as the goal was set with.
fn ratio_max_text(ratio_max: f64) -> String {
    if ratio_max.fract() == 0.0 {
        format!("{ratio_max:.1}")
    } else {
        format!("{ratio_max}")
    }
}

fn goal_text(row: &Row, kvm: bool) -> String {
    if row.goals.is_empty() {
        return "none yet".to_owned();
    }
    let mut texts: Vec<String> = row
        .goals
        .iter()
        .map(|goal| {
            format!(
                "≤ {}× {}",
                ratio_max_text(goal.ratio_max),
                goal.linux.name()
            )
        })
        .collect();
    if kvm && row.measure == Measure::OneWayIpc {
        texts.push(format!("≤ {ONE_WAY_IPC_CYCLES_MAX_KVM} cycles"));
    }
    texts.join(", ")
}

/// "met" or "NOT met", with the ratios to goal figures other than the row's peer (whose
/// ratio has its own column). Goals are judged on medians.
/// `cycles_kvm`: the measure's cycles under KVM, judged for one-way IPC.
fn verdict_text(
    row: &Row,
    holdfast_ns: f64,
    linux_ns: &[f64; LinuxFigure::ALL.len()],
    cycles_kvm: Option<f64>,
) -> String {
    if row.goals.is_empty() {
        return "no goal".to_owned();
    }
    let ratio_to = |goal: &Goal| holdfast_ns / linux_ns[goal.linux as usize];
    let cycles_kvm = cycles_kvm.filter(|_| row.measure == Measure::OneWayIpc);
    let cycles_met = cycles_kvm.is_none_or(|cycles| cycles <= ONE_WAY_IPC_CYCLES_MAX_KVM);
    let all_met = cycles_met && row.goals.iter().all(|goal| ratio_to(goal) <= goal.ratio_max);
    let mut other_ratios: Vec<String> = row
        .goals
        .iter()
        .filter(|goal| goal.linux != row.peer)
        .map(|goal| format!("{:.3}× {}", ratio_to(goal), goal.linux.name()))
        .collect();
    if let Some(cycles) = cycles_kvm {
        other_ratios.push(format!("{cycles:.0} cycles"));
    }
    let verdict = if all_met { "met" } else { "NOT met" };
    if other_ratios.is_empty() {
        verdict.to_owned()
    } else {
        format!("{verdict} ({})", other_ratios.join(", "))
    }
}

const COLUMNS: [Column; 9] = [
    Column::left("measure"),
    Column::right("Holdfast median ns"),
    Column::right("Holdfast max ns"),
    Column::left("Linux peer"),
    Column::right("Linux median ns"),
    Column::right("Linux max ns"),
    Column::right("ratio of medians"),
    Column::left("goal"),
    Column::left("verdict"),
];

/// Beside the Holdfast figures in nanoseconds, under KVM.
const CYCLES_COLUMN: Column = Column::right("Holdfast median cycles");

/// The table as text, notes included, ending with a newline.
pub fn render(medians: &Medians, caption: &Caption) -> String {
    let cells: Vec<Vec<String>> = ROWS
        .iter()
        .map(|row| {
            let measure = row.measure as usize;
            let peer = row.peer as usize;
            let ns = medians.holdfast_ns.median[measure];
            let peer_ns = medians.linux_ns.median[peer];
            let cycles = medians
                .holdfast_cycles_kvm
                .map(|cycles| cycles.median[measure]);
            let mut cells = vec![
                row.measure.name().to_owned(),
                format!("{ns:.1}"),
                format!("{:.1}", medians.holdfast_ns.max[measure]),
                row.peer.name().to_owned(),
                format!("{peer_ns:.1}"),
                format!("{:.1}", medians.linux_ns.max[peer]),
                format!("{:.3}×", ns / peer_ns),
                goal_text(row, cycles.is_some()),
                verdict_text(row, ns, &medians.linux_ns.median, cycles),
            ];
            if let Some(cycles) = cycles {
                cells.insert(3, format!("{cycles:.0}"));
            }
            cells
        })
        .collect();
    let mut columns = COLUMNS.to_vec();
    if medians.holdfast_cycles_kvm.is_some() {
        columns.insert(3, CYCLES_COLUMN);
    }
    table::render(caption, &columns, &cells, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figure_lines::Figures;

    fn medians(trivial_invocation_ns: f64) -> Medians {
        Medians {
            holdfast_ns: Figures {
                median: [trivial_invocation_ns, 2500.0, 7000.0, 9000.0, 40_000.0],
                max: [2000.0, 3000.0, 8000.0, 12_000.0, 50_000.0],
            },
            linux_ns: Figures {
                median: [1500.0, 100_000.0, 300_000.0, 30_000.0, 20_000.0, 15_000.0],
                max: [1600.0, 110_000.0, 310_000.0, 40_000.0, 25_000.0, 16_000.0],
            },
            holdfast_cycles_kvm: None,
        }
    }

    fn caption() -> Caption {
        Caption {
            title: "micro, accelerator tcg".into(),
            notes: vec!["a caveat".into()],
        }
    }

    fn row_of(measure: Measure, peer: LinuxFigure) -> &'static Row {
        ROWS.iter()
            .find(|row| row.measure == measure && row.peer == peer)
            .unwrap()
    }

    #[test]
    fn table_shows_every_row_with_its_peer_worst_cases_goal_and_verdict() {
        let expected = "\
micro, accelerator tcg
measure             Holdfast median ns  Holdfast max ns  Linux peer             Linux median ns  Linux max ns  ratio of medians  goal                                     verdict
------------------  ------------------  ---------------  ---------------------  ---------------  ------------  ----------------  ---------------------------------------  ------------------------
trivial invocation              1234.5           2000.0  getppid                         1500.0        1600.0            0.823×  ≤ 1.0× getppid                           met
one-way IPC                     2500.0           3000.0  pipe one way                  100000.0      110000.0            0.025×  ≤ 2.0× getppid                           met (1.667× getppid)
round-trip IPC                  7000.0           8000.0  pipe round trip               300000.0      310000.0            0.023×  ≤ 4.0× getppid, ≤ 0.05× pipe round trip  NOT met (4.667× getppid)
node-tree fault                 9000.0          12000.0  first-touch fault              30000.0       40000.0            0.300×  ≤ 0.5× first-touch fault                 met
node-tree fault                 9000.0          12000.0  page-cache fault               20000.0       25000.0            0.450×  none yet                                 no goal
keeper fault                   40000.0          50000.0  SIGSEGV handler fault          15000.0       16000.0            2.667×  none yet                                 no goal
note: a caveat
";
        assert_eq!(render(&medians(1234.5), &caption()), expected);
    }

    #[test]
    fn each_row_compares_like_with_like() {
        assert_eq!(
            row_of(Measure::OneWayIpc, LinuxFigure::PipeOneWay).peer,
            LinuxFigure::PipeOneWay
        );
        // No one-way figure is held against a round trip, nor a round trip against a one-way.
        for row in ROWS {
            let one_way = |figure: LinuxFigure| figure == LinuxFigure::PipeOneWay;
            let round_trip = |figure: LinuxFigure| figure == LinuxFigure::PipeRoundTrip;
            let linux = || std::iter::once(row.peer).chain(row.goals.iter().map(|goal| goal.linux));
            if row.measure == Measure::OneWayIpc {
                assert!(!linux().any(round_trip), "{row:?}");
            } else {
                assert!(!linux().any(one_way), "{row:?}");
            }
        }
        let node_tree_peers: Vec<LinuxFigure> = ROWS
            .iter()
            .filter(|row| row.measure == Measure::NodeTreeFault)
            .map(|row| row.peer)
            .collect();
        assert_eq!(
            node_tree_peers,
            [LinuxFigure::FirstTouchFault, LinuxFigure::PageCacheFault]
        );
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
    fn goals_are_judged_on_medians_not_worst_cases() {
        let mut slow_worst_case = medians(1000.0);
        slow_worst_case.holdfast_ns.max[Measure::TrivialInvocation as usize] = 1_000_000.0;
        let text = render(&slow_worst_case, &caption());
        let row = text
            .lines()
            .find(|line| line.starts_with("trivial invocation"))
            .unwrap();
        assert!(row.contains("1000000.0"), "{row}");
        assert!(row.ends_with(" met"), "{row}");
    }

    #[test]
    fn a_goal_against_another_figure_than_the_peer_shows_its_ratio() {
        let linux_ns = medians(0.0).linux_ns.median;
        let round_trip = row_of(Measure::RoundTripIpc, LinuxFigure::PipeRoundTrip);
        // 6000 ns: 4.0× getppid (met), 0.02× pipe round trip (met).
        assert_eq!(
            verdict_text(round_trip, 6000.0, &linux_ns, None),
            "met (4.000× getppid)"
        );
        assert_eq!(
            verdict_text(round_trip, 6100.0, &linux_ns, None),
            "NOT met (4.067× getppid)"
        );
        // 0.05× a 100 µs pipe round trip is 5 µs: 5.5 µs misses it though 4× getppid is met.
        let mut fast_pipe = linux_ns;
        fast_pipe[LinuxFigure::PipeRoundTrip as usize] = 100_000.0;
        assert_eq!(
            verdict_text(round_trip, 5500.0, &fast_pipe, None),
            "NOT met (3.667× getppid)"
        );
        let keeper = row_of(Measure::KeeperFault, LinuxFigure::SignalHandlerFault);
        assert_eq!(verdict_text(keeper, 1.0, &linux_ns, None), "no goal");
    }

    #[test]
    fn under_kvm_the_table_gives_cycles_and_judges_one_way_ipc_in_cycles() {
        let mut kvm = medians(1000.0);
        let cycles = |one_way: f64| Figures {
            median: [400.0, one_way, 600.0, 5000.0, 30_000.0],
            max: [500.0, 2.0 * one_way, 700.0, 6000.0, 40_000.0],
        };
        kvm.holdfast_cycles_kvm = Some(cycles(290.0));
        let text = render(&kvm, &caption());
        let header = text.lines().nth(1).unwrap();
        assert!(
            header.contains("Holdfast max ns  Holdfast median cycles"),
            "{header}"
        );
        let row = |name: &str| text.lines().find(|line| line.starts_with(name)).unwrap().to_owned();
        let one_way = row("one-way IPC");
        assert!(one_way.contains(" 290 "), "{one_way}");
        assert!(one_way.contains("≤ 2.0× getppid, ≤ 300 cycles"), "{one_way}");
        assert!(one_way.contains(" met (1.667× getppid, 290 cycles)"), "{one_way}");
        assert!(!row("round-trip IPC").contains("cycles"), "only one-way has a cycles goal");

        kvm.holdfast_cycles_kvm = Some(cycles(310.0));
        let one_way = render(&kvm, &caption())
            .lines()
            .find(|line| line.starts_with("one-way IPC"))
            .unwrap()
            .to_owned();
        assert!(one_way.contains("NOT met (1.667× getppid, 310 cycles)"), "{one_way}");
    }

    #[test]
    fn no_row_says_not_measured() {
        let text = render(&medians(1000.0), &caption());
        assert!(!text.contains("not measured"), "{text}");
        assert!(!text.contains('—'), "{text}");
    }
}
