//! The boot benchmark's one table: a row per guest with its medians and worst cases (the
//! slowest boot) and its ratio to the Linux peer, and a line on the goals (judged on
//! medians).

use std::time::Duration;

use crate::table::{self, Caption, Column};

/// One row of the table: a guest's medians and maxima over its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct GuestRow {
    pub name: String,
    pub runs: usize,
    pub ready_from_qemu_start_median: Duration,
    pub ready_from_qemu_start_max: Duration,
    pub ready_from_first_instruction_median: Duration,
    pub ready_from_first_instruction_max: Duration,
}

/// What the rows are measured against and the goals checked on them.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub caption: Caption,
    /// Index in the rows of the peer the ratios are taken against (Linux).
    pub peer_row: usize,
    /// Index of the row the goals apply to (Holdfast PVH).
    pub goal_row: usize,
    /// Goal: the goal row's QEMU-start median at most this fraction of the peer's.
    pub ratio_to_peer_goal_max: f64,
    /// Goal: the goal row's first-instruction median at most this long.
    pub from_first_instruction_goal_max: Duration,
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn ratio(value: Duration, peer: Duration) -> f64 {
    if peer.is_zero() {
        f64::INFINITY
    } else {
        value.as_secs_f64() / peer.as_secs_f64()
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

const COLUMNS: [Column; 7] = [
    Column::left("guest"),
    Column::right("runs"),
    Column::right("median ms from QEMU start"),
    Column::right("max"),
    Column::right("median ms from first instruction"),
    Column::right("max"),
    Column::right("ratio to Linux (QEMU start)"),
];

/// The table as text, goals line and notes included, ending with a newline.
pub fn render(rows: &[GuestRow], spec: &TableSpec) -> String {
    let peer = &rows[spec.peer_row];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.name.clone(),
                row.runs.to_string(),
                format!("{:.1}", milliseconds(row.ready_from_qemu_start_median)),
                format!("{:.1}", milliseconds(row.ready_from_qemu_start_max)),
                format!(
                    "{:.1}",
                    milliseconds(row.ready_from_first_instruction_median)
                ),
                format!(
                    "{:.1}",
                    milliseconds(row.ready_from_first_instruction_max)
                ),
                format!(
                    "{:.3}×",
                    ratio(
                        row.ready_from_qemu_start_median,
                        peer.ready_from_qemu_start_median
                    )
                ),
            ]
        })
        .collect();

    let goal = &rows[spec.goal_row];
    let goal_ratio = ratio(
        goal.ready_from_qemu_start_median,
        peer.ready_from_qemu_start_median,
    );
    let ratio_met = goal_ratio <= spec.ratio_to_peer_goal_max;
    let first_instruction_met =
        goal.ready_from_first_instruction_median <= spec.from_first_instruction_goal_max;
    let goals = format!(
        "goals: {} ≤ {}× {} from QEMU start: {:.3}×, {}; {} ≤ {} ms from first instruction: {:.1} ms, {}",
        goal.name,
        spec.ratio_to_peer_goal_max,
        peer.name,
        goal_ratio,
        verdict(ratio_met),
        goal.name,
        milliseconds(spec.from_first_instruction_goal_max),
        milliseconds(goal.ready_from_first_instruction_median),
        verdict(first_instruction_met),
    );
    table::render(&spec.caption, &COLUMNS, &cells, &[goals])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    fn rows() -> Vec<GuestRow> {
        vec![
            GuestRow {
                name: "Holdfast PVH".into(),
                runs: 5,
                ready_from_qemu_start_median: Duration::from_micros(245_300),
                ready_from_qemu_start_max: ms(301),
                ready_from_first_instruction_median: Duration::from_micros(14_400),
                ready_from_first_instruction_max: ms(20),
            },
            GuestRow {
                name: "Holdfast GRUB".into(),
                runs: 5,
                ready_from_qemu_start_median: ms(812),
                ready_from_qemu_start_max: ms(900),
                ready_from_first_instruction_median: Duration::from_micros(15_060),
                ready_from_first_instruction_max: ms(16),
            },
            GuestRow {
                name: "Linux (Debian cloud kernel)".into(),
                runs: 5,
                ready_from_qemu_start_median: ms(3000),
                ready_from_qemu_start_max: ms(3500),
                ready_from_first_instruction_median: ms(1270),
                ready_from_first_instruction_max: ms(1280),
            },
        ]
    }

    fn spec() -> TableSpec {
        TableSpec {
            caption: Caption {
                title: "boot to ready, accelerator tcg".into(),
                notes: vec!["a caveat".into()],
            },
            peer_row: 2,
            goal_row: 0,
            ratio_to_peer_goal_max: 0.2,
            from_first_instruction_goal_max: ms(50),
        }
    }

    #[test]
    fn table_has_aligned_columns_ratios_and_goals() {
        let expected = "\
boot to ready, accelerator tcg
guest                        runs  median ms from QEMU start     max  median ms from first instruction     max  ratio to Linux (QEMU start)
---------------------------  ----  -------------------------  ------  --------------------------------  ------  ---------------------------
Holdfast PVH                    5                      245.3   301.0                              14.4    20.0                       0.082×
Holdfast GRUB                   5                      812.0   900.0                              15.1    16.0                       0.271×
Linux (Debian cloud kernel)     5                     3000.0  3500.0                            1270.0  1280.0                       1.000×
goals: Holdfast PVH ≤ 0.2× Linux (Debian cloud kernel) from QEMU start: 0.082×, met; Holdfast PVH ≤ 50 ms from first instruction: 14.4 ms, met
note: a caveat
";
        assert_eq!(render(&rows(), &spec()), expected);
    }

    #[test]
    fn goals_not_met_say_so() {
        let mut rows = rows();
        rows[0].ready_from_qemu_start_median = ms(900);
        rows[0].ready_from_first_instruction_median = ms(51);
        let text = render(&rows, &spec());
        let goals = text
            .lines()
            .find(|line| line.starts_with("goals:"))
            .unwrap();
        assert!(goals.contains("0.300×, NOT met"), "{goals}");
        assert!(goals.contains("51.0 ms, NOT met"), "{goals}");
    }
}
