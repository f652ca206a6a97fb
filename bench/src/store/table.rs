//! The store benchmark's one table: a row per measure, with its peer's figure where it has
//! one, the ratio, the goal and whether it is met.

use std::time::Duration;

use crate::table::{self, Caption, Column};

/// The goals (never asserted).
pub const GOAL_PAUSE_MS_PER_GIB_MAX: f64 = 1.0;
pub const GOAL_STABILIZATION_RATIO_MIN: f64 = 0.9;
pub const GOAL_JOURNAL_RATIO_MAX: f64 = 1.2;
pub const GOAL_RESTART_MAX: Duration = Duration::from_millis(200);
pub const GOAL_RESTART_STORE_BYTES: u64 = 1 << 30;

/// The medians over rounds and boots.
#[derive(Clone, Debug, PartialEq)]
pub struct Medians {
    /// Bytes resident (pages of the whole system) during the rounds.
    pub resident_bytes: u64,
    pub pause_ms_per_gib: f64,
    pub pause_us: f64,
    pub stabilization_bytes_per_second: f64,
    pub raw_write_bytes_per_second: f64,
    pub journal_commit_ns: f64,
    pub write_flush_ns: f64,
    /// The kernel's first instruction to the restarted program's first line: the goal's
    /// figure.
    pub restart_serving: Duration,
    /// Spawning QEMU to the same line (QEMU's own start and the firmware included).
    pub restart_serving_from_qemu_start: Duration,
}

const COLUMNS: [Column; 7] = [
    Column::left("measure"),
    Column::right("Holdfast median"),
    Column::left("peer"),
    Column::right("peer median"),
    Column::right("ratio"),
    Column::left("goal"),
    Column::left("verdict"),
];

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn verdict(met: bool) -> String {
    if met { "met" } else { "NOT met" }.to_owned()
}

fn milliseconds(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// The table as text, notes included, ending with a newline.
pub fn render(medians: &Medians, caption: &Caption) -> String {
    let stabilization_ratio =
        medians.stabilization_bytes_per_second / medians.raw_write_bytes_per_second;
    let journal_ratio = medians.journal_commit_ns / medians.write_flush_ns;
    // A smaller store says nothing of the goal's: nothing is extrapolated.
    let restart_at_goal_size = medians.resident_bytes >= GOAL_RESTART_STORE_BYTES;
    let rows = vec![
        vec![
            "snapshot pause per GiB resident".to_owned(),
            format!("{:.2} ms/GiB", medians.pause_ms_per_gib),
            format!(
                "none: {:.1} ms pause, {} resident",
                medians.pause_us / 1000.0,
                mib(medians.resident_bytes)
            ),
            "-".to_owned(),
            "-".to_owned(),
            format!("≤ {GOAL_PAUSE_MS_PER_GIB_MAX:.1} ms/GiB"),
            verdict(medians.pause_ms_per_gib <= GOAL_PAUSE_MS_PER_GIB_MAX),
        ],
        vec![
            "stabilization throughput".to_owned(),
            format!("{:.1} MB/s", medians.stabilization_bytes_per_second / 1e6),
            "Linux raw O_DIRECT write".to_owned(),
            format!("{:.1} MB/s", medians.raw_write_bytes_per_second / 1e6),
            format!("{stabilization_ratio:.3}×"),
            format!("≥ {GOAL_STABILIZATION_RATIO_MIN}× raw write"),
            verdict(stabilization_ratio >= GOAL_STABILIZATION_RATIO_MIN),
        ],
        vec![
            "journal commit (1 page)".to_owned(),
            format!("{:.1} µs", medians.journal_commit_ns / 1000.0),
            "Linux pwrite 4 KiB + fdatasync".to_owned(),
            format!("{:.1} µs", medians.write_flush_ns / 1000.0),
            format!("{journal_ratio:.3}×"),
            format!("≤ {GOAL_JOURNAL_RATIO_MAX}× write + flush"),
            verdict(journal_ratio <= GOAL_JOURNAL_RATIO_MAX),
        ],
        vec![
            format!("restart to serving ({} store)", mib(medians.resident_bytes)),
            milliseconds(medians.restart_serving),
            format!(
                "none: {} from spawning QEMU",
                milliseconds(medians.restart_serving_from_qemu_start)
            ),
            "-".to_owned(),
            "-".to_owned(),
            format!("≤ {} ms for 1 GiB", GOAL_RESTART_MAX.as_millis()),
            if restart_at_goal_size {
                verdict(medians.restart_serving <= GOAL_RESTART_MAX)
            } else {
                "not measured: store under 1 GiB".to_owned()
            },
        ],
    ];
    table::render(caption, &COLUMNS, &rows, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians() -> Medians {
        Medians {
            resident_bytes: 256 << 20,
            pause_ms_per_gib: 0.5,
            pause_us: 125.0,
            stabilization_bytes_per_second: 90e6,
            raw_write_bytes_per_second: 100e6,
            journal_commit_ns: 1_300_000.0,
            write_flush_ns: 1_000_000.0,
            restart_serving: Duration::from_millis(150),
            restart_serving_from_qemu_start: Duration::from_millis(400),
        }
    }

    #[test]
    fn the_restart_is_judged_only_for_a_store_of_the_goals_size() {
        let caption = Caption {
            title: "store".into(),
            notes: Vec::new(),
        };
        let restart_row = |medians: &Medians| {
            render(medians, &caption)
                .lines()
                .find(|line| line.starts_with("restart"))
                .unwrap()
                .to_owned()
        };
        let mut gib = medians();
        gib.resident_bytes = 1 << 30;
        assert!(restart_row(&gib).ends_with(" met"));
        gib.restart_serving = Duration::from_millis(201);
        assert!(restart_row(&gib).ends_with("NOT met"));
        assert!(restart_row(&medians()).ends_with("not measured: store under 1 GiB"));
    }

    #[test]
    fn every_row_has_its_goal_and_verdict() {
        let caption = Caption {
            title: "store".into(),
            notes: vec!["a caveat".into()],
        };
        let text = render(&medians(), &caption);
        let row = |start: &str| {
            text.lines()
                .find(|line| line.starts_with(start))
                .unwrap()
                .to_owned()
        };
        assert!(row("snapshot pause").contains("0.50 ms/GiB"));
        assert!(row("snapshot pause").ends_with(" met"));
        assert!(row("stabilization").contains("0.900×"));
        assert!(row("stabilization").ends_with(" met"));
        assert!(row("journal").contains("1.300×"));
        assert!(row("journal").ends_with("NOT met"));
        assert!(row("restart").contains("256 MiB store"));
        assert!(row("restart").contains("150.0 ms"));
        assert!(row("restart").contains("400.0 ms from spawning QEMU"));
        assert!(text.ends_with("note: a caveat\n"));
    }
}
