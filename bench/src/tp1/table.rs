//! The TP1 benchmark's table: a row per measure, a column per system, Holdfast's ratios to
//! each peer, the goal and whether it is met. A system that did not run shows why in the
//! notes and its cells say "not run" or "failed"; a goal that needs it says "not judged".

use crate::table::{Caption, Column, render as render_table};

use super::{
    COMMITS_PER_FLUSH_CLIENTS, GOAL_COMMITS_PER_FLUSH_MIN, GOAL_OPEN_LOOP_P99_MAX,
    GOAL_RATIO_TO_GUEST_POSTGRES_MIN, GOAL_RATIO_TO_HOST_POSTGRES_MIN, Measured,
    OPEN_LOOP_LOAD_FRACTION, Outcome, SystemFigures, Tp1BenchOptions, Tp1Report,
};

const COLUMNS: [Column; 8] = [
    Column::left("measure"),
    Column::right("Holdfast (guest)"),
    Column::right("PostgreSQL (guest)"),
    Column::right("PostgreSQL (host)"),
    Column::right("HF/guest"),
    Column::right("HF/host"),
    Column::left("goal"),
    Column::left("verdict"),
];

fn plural_clients(clients: u32) -> String {
    if clients == 1 {
        "1 client".to_owned()
    } else {
        format!("{clients} clients")
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// A figure of a system, or why there is none.
enum Cell {
    Value(f64),
    /// No figure, and the text that stands for it ("n/a (...)", "not run", "failed").
    Missing(String),
}

impl Cell {
    fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(value) => Some(*value),
            Cell::Missing(_) => None,
        }
    }

    fn text(&self, decimals: usize) -> String {
        match self {
            Cell::Value(value) => format!("{value:.decimals$}"),
            Cell::Missing(text) => text.clone(),
        }
    }
}

/// `figure` of a measured system, "not run" or "failed" otherwise.
fn cell(outcome: &Outcome, figure: impl Fn(&SystemFigures) -> Cell) -> Cell {
    match outcome {
        Outcome::Measured(figures) => figure(figures),
        Outcome::NotRun(_) => Cell::Missing("not run".into()),
        Outcome::Failed(_) => Cell::Missing("failed".into()),
    }
}

fn ratio(holdfast: &Cell, peer: &Cell) -> Option<f64> {
    let (holdfast, peer) = (holdfast.value()?, peer.value()?);
    (peer > 0.0).then(|| holdfast / peer)
}

fn ratio_text(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}×"))
}

fn milliseconds(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The closed-loop run at `clients`, if the system ran it.
fn closed_at(figures: &SystemFigures, clients: u32) -> Option<&Measured> {
    figures
        .closed
        .iter()
        .find(|run| run.report.clients == clients)
}

/// Commits per flush over `run`, or why there is no figure. With one transaction in flight
/// per connection a flush can make at most as many commits durable as there are clients,
/// so a count below that bound was not a count of every flush: PostgreSQL 15's
/// `pg_stat_wal` was seen to lose most WAL syncs of backends that wait idle between
/// transactions (open loop: 7 syncs for 2,722 commits), while closed-loop counts matched
/// one sync per commit at one client.
fn commits_per_flush(run: &Measured, none: &str) -> Cell {
    let commits = run.report.acknowledged as f64;
    match run.flushes {
        Some(0) => Cell::Missing("n/a (no flush counted)".into()),
        Some(flushes) if commits / flushes as f64 > f64::from(run.report.clients * run.report.pipeline) => {
            Cell::Missing(format!("n/a (only {flushes} flushes counted)"))
        }
        Some(flushes) => Cell::Value(commits / flushes as f64),
        None => Cell::Missing(none.into()),
    }
}

/// The table as text.
pub fn render(options: &Tp1BenchOptions, report: &Tp1Report) -> String {
    let systems = [
        &report.holdfast,
        &report.guest_postgres,
        &report.host_postgres,
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    let mut push = |measure: String,
                    cells: [Cell; 3],
                    decimals: usize,
                    ratios: bool,
                    goal: &str,
                    judged: String| {
        let (guest_ratio, host_ratio) = if ratios {
            (ratio(&cells[0], &cells[1]), ratio(&cells[0], &cells[2]))
        } else {
            (None, None)
        };
        let mut row = vec![measure];
        row.extend(cells.iter().map(|cell| cell.text(decimals)));
        row.push(if ratios {
            ratio_text(guest_ratio)
        } else {
            String::new()
        });
        row.push(if ratios {
            ratio_text(host_ratio)
        } else {
            String::new()
        });
        row.push(goal.to_owned());
        row.push(judged);
        rows.push(row);
    };

    let holdfast_missing = match &report.holdfast {
        Outcome::Measured(_) => None,
        Outcome::NotRun(_) => Some("not judged: Holdfast not run"),
        Outcome::Failed(_) => Some("not judged: Holdfast failed"),
    };

    push(
        format!("load scale {} (s)", options.scale),
        systems.map(|outcome| {
            cell(outcome, |figures| {
                Cell::Value(figures.load_time.as_secs_f64())
            })
        }),
        1,
        false,
        "",
        String::new(),
    );

    // Closed loop: throughput, judged against both peers.
    let goal_throughput = format!(
        "≥ {GOAL_RATIO_TO_GUEST_POSTGRES_MIN}× guest, ≥ {GOAL_RATIO_TO_HOST_POSTGRES_MIN}× host"
    );
    for &clients in &options.closed_clients {
        let cells = systems.map(|outcome| {
            cell(outcome, |figures| match closed_at(figures, clients) {
                Some(run) => Cell::Value(run.report.accepted_per_second),
                None => Cell::Missing("-".into()),
            })
        });
        let judged = match holdfast_missing {
            Some(why) => why.to_owned(),
            None => {
                let mut parts = Vec::new();
                for (peer, minimum, name) in [
                    (&cells[1], GOAL_RATIO_TO_GUEST_POSTGRES_MIN, "guest"),
                    (&cells[2], GOAL_RATIO_TO_HOST_POSTGRES_MIN, "host"),
                ] {
                    match ratio(&cells[0], peer) {
                        Some(ratio) => parts.push(format!("{name} {}", verdict(ratio >= minimum))),
                        None => parts.push(format!("{name} not judged")),
                    }
                }
                parts.join(", ")
            }
        };
        summary.push(format!(
            "goal: closed loop at {}, {goal_throughput}: {judged}",
            plural_clients(clients)
        ));
        push(
            format!("closed loop, {} (tps)", plural_clients(clients)),
            cells,
            1,
            true,
            &goal_throughput,
            judged,
        );
        // Its worst case beside it: the slowest transaction of the run.
        push(
            "  slowest transaction (ms)".into(),
            systems.map(|outcome| {
                cell(outcome, |figures| match closed_at(figures, clients) {
                    Some(run) => Cell::Value(milliseconds(run.report.latency.max_us)),
                    None => Cell::Missing("-".into()),
                })
            }),
            1,
            false,
            "",
            String::new(),
        );
    }

    // Open loop at 80 % of each system's own best closed-loop rate.
    let open = |figure: fn(&Measured) -> f64| {
        systems.map(|outcome| cell(outcome, |figures| Cell::Value(figure(&figures.open))))
    };
    push(
        format!(
            "open loop at {:.0} % of best (tps offered)",
            OPEN_LOOP_LOAD_FRACTION * 100.0
        ),
        open(|run| run.report.offered_per_second),
        1,
        false,
        "",
        String::new(),
    );
    push(
        "  clients (those of the best closed loop)".into(),
        open(|run| f64::from(run.report.clients)),
        0,
        false,
        "",
        String::new(),
    );
    push(
        "  acknowledged (tps)".into(),
        open(|run| run.report.accepted_per_second),
        1,
        false,
        "",
        String::new(),
    );
    push(
        "  p50 latency (ms)".into(),
        open(|run| milliseconds(run.report.latency.p50_us)),
        2,
        false,
        "",
        String::new(),
    );
    let p99 = open(|run| milliseconds(run.report.latency.p99_us));
    let p99_goal = format!("Holdfast ≤ {} ms", GOAL_OPEN_LOOP_P99_MAX.as_millis());
    let p99_judged = match (holdfast_missing, p99[0].value()) {
        (Some(why), _) => why.to_owned(),
        (None, None) => "not judged".to_owned(),
        (None, Some(ms)) => verdict(ms <= GOAL_OPEN_LOOP_P99_MAX.as_secs_f64() * 1000.0).to_owned(),
    };
    summary.push(format!(
        "goal: open-loop p99 at 80 % load, {p99_goal}: {p99_judged}"
    ));
    push(
        "  p99 latency (ms)".into(),
        p99,
        2,
        false,
        &p99_goal,
        p99_judged,
    );
    push(
        "  max latency (ms)".into(),
        open(|run| milliseconds(run.report.latency.max_us)),
        2,
        false,
        "",
        String::new(),
    );

    // Commits per flush at the goal's client count (else the largest that ran).
    let flush_clients = options
        .closed_clients
        .iter()
        .copied()
        .find(|&clients| clients == COMMITS_PER_FLUSH_CLIENTS)
        .or_else(|| options.closed_clients.iter().copied().max())
        .unwrap_or(COMMITS_PER_FLUSH_CLIENTS);
    let flush_cells = [
        cell(&report.holdfast, |figures| {
            match closed_at(figures, flush_clients) {
                Some(run) => commits_per_flush(run, "n/a (the appliance counts no flushes yet)"),
                None => Cell::Missing("-".into()),
            }
        }),
        cell(&report.guest_postgres, |figures| {
            match closed_at(figures, flush_clients) {
                Some(run) => commits_per_flush(run, "n/a (no pg_stat_wal)"),
                None => Cell::Missing("-".into()),
            }
        }),
        cell(&report.host_postgres, |figures| {
            match closed_at(figures, flush_clients) {
                Some(run) => commits_per_flush(run, "n/a (no pg_stat_wal)"),
                None => Cell::Missing("-".into()),
            }
        }),
    ];
    let flush_goal =
        format!("Holdfast ≥ {GOAL_COMMITS_PER_FLUSH_MIN} at {COMMITS_PER_FLUSH_CLIENTS} clients");
    let flush_judged = match (holdfast_missing, flush_cells[0].value()) {
        (Some(why), _) => why.to_owned(),
        (None, None) => "not judged: no flush count".to_owned(),
        (None, Some(_)) if flush_clients != COMMITS_PER_FLUSH_CLIENTS => {
            format!("not judged: no run at {COMMITS_PER_FLUSH_CLIENTS} clients")
        }
        (None, Some(commits)) => verdict(commits >= GOAL_COMMITS_PER_FLUSH_MIN).to_owned(),
    };
    summary.push(format!(
        "goal: commits per flush, {flush_goal}: {flush_judged}"
    ));
    push(
        format!("commits per flush, {flush_clients} clients"),
        flush_cells,
        1,
        false,
        &flush_goal,
        flush_judged,
    );

    // Kernel invocations per transaction: Holdfast only; over its closed-loop runs.
    let invocations = cell(&report.holdfast, |figures| {
        let (invocations, transactions) =
            figures
                .closed
                .iter()
                .fold((Some(0u64), 0u64), |(sum, transactions), run| {
                    (
                        sum.and_then(|sum| Some(sum + run.invocations?)),
                        transactions + run.report.acknowledged,
                    )
                });
        match invocations {
            Some(invocations) if transactions > 0 => {
                Cell::Value(invocations as f64 / transactions as f64)
            }
            _ => Cell::Missing("n/a (the appliance counts no invocations yet)".into()),
        }
    });
    push(
        "kernel invocations per transaction".into(),
        [
            invocations,
            Cell::Missing("n/a".into()),
            Cell::Missing("n/a".into()),
        ],
        1,
        false,
        "",
        String::new(),
    );

    let clients: Vec<String> = options.closed_clients.iter().map(u32::to_string).collect();
    let title = format!(
        "holdfast bench tp1{}: TP1 (TPC-B) at scale {}, closed loop at {} clients, then open loop at {:.0} % of each system's best closed-loop rate with that run's clients; {:.0} s a run, seed {} (the Nth run of a system: seed + N - 1); guests: QEMU q35, {}, {} MiB, 1 CPU, raw virtio-blk (QEMU's default cache=writeback)",
        if options.quick { " --quick" } else { "" },
        options.scale,
        clients.join(", "),
        OPEN_LOOP_LOAD_FRACTION * 100.0,
        options.duration.as_secs_f64(),
        options.seed,
        options.accelerator,
        options.memory_mib,
    );
    let mut notes = Vec::new();
    for (name, outcome) in [
        ("Holdfast", &report.holdfast),
        ("PostgreSQL (guest)", &report.guest_postgres),
        ("PostgreSQL (host)", &report.host_postgres),
    ] {
        match outcome {
            Outcome::Measured(figures) => notes.push(format!("{name}: {}", figures.about)),
            Outcome::NotRun(why) => notes.push(format!("{name} not run: {why}")),
            Outcome::Failed(error) => notes.push(format!(
                "{name} failed: {}",
                error.lines().next().unwrap_or_default()
            )),
        }
    }
    notes.push(
        "every system gets the same generator (holdfast tp1, pipeline 1: one transaction in flight per connection), one after another, each alone on the machine; PostgreSQL with fsync=on, synchronous_commit=on, full_page_writes=on, wal_sync_method=fdatasync; the host's PostgreSQL has the host's cores, a guest one vCPU".into(),
    );
    notes.push("open-loop latency runs from each transaction's intended send time (no coordinated omission); a closed-loop figure's worst case is its slowest transaction".into());
    notes.push("PostgreSQL's flushes: pg_stat_wal.wal_sync over the run (WAL syncs by backends and the WAL writer); commits: transactions acknowledged in that run; a count that would put more commits in a flush than there are clients is shown as n/a (pg_stat_wal loses idle backends' syncs)".into());
    render_table(&Caption { title, notes }, &COLUMNS, &rows, &summary)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use holdfast_tp1_load::run::{Latency, RunReport};

    use super::*;
    use crate::tp1::{GuestPeer, HoldfastSide};

    fn report(clients: u32, rate: f64, p99_ms: u64, acknowledged: u64) -> RunReport {
        RunReport {
            target: "t".into(),
            scale: 1,
            mode: "closed",
            clients,
            pipeline: 1,
            seed: 7,
            duration_seconds: 5.0,
            offered_per_second: rate,
            accepted_per_second: rate,
            sent: acknowledged,
            acknowledged,
            refused: BTreeMap::new(),
            failed: 0,
            unfinished: 0,
            not_sent: 0,
            retries: 0,
            reconnects: 0,
            latency: Latency {
                count: acknowledged,
                p50_us: 1000,
                p90_us: 2000,
                p99_us: p99_ms * 1000,
                p99_9_us: p99_ms * 1000,
                max_us: p99_ms * 2000,
                mean_us: 1000.0,
            },
            silence_us_max: p99_ms * 2000,
            silence_from_seconds: 1.0,
            started_at: std::time::Instant::now(),
        }
    }

    fn figures(rates: [f64; 2], p99_ms: u64, flushes_at_64: Option<u64>) -> SystemFigures {
        let run = |clients, rate: f64, flushes| Measured {
            report: report(clients, rate, p99_ms, (rate * 5.0) as u64),
            flushes,
            invocations: None,
            steps_at_ticks_seconds: None,
            disk_wait_seconds: None,
        };
        SystemFigures {
            load_time: Duration::from_secs(2),
            closed: vec![run(1, rates[0], Some(1)), run(64, rates[1], flushes_at_64)],
            open: run(64, rates[1] * 0.8, None),
            about: "about".into(),
        }
    }

    fn options() -> Tp1BenchOptions {
        let mut options =
            Tp1BenchOptions::quick(HoldfastSide::Unavailable("why".into()), "/c".into());
        options.guest = GuestPeer::Run;
        options
    }

    fn row<'a>(table: &'a str, start: &str) -> &'a str {
        table
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no row {start:?} in\n{table}"))
    }

    #[test]
    fn goals_are_judged_on_ratios_latency_and_commits_per_flush() {
        // Holdfast: 12× the guest and 0.5× the host at 64 clients; 1000 commits in 100
        // flushes; p99 60 ms.
        let report = Tp1Report {
            holdfast: Outcome::Measured(Box::new(figures([100.0, 200.0], 60, Some(100)))),
            guest_postgres: Outcome::Measured(Box::new(figures([10.0, 16.0], 900, Some(80)))),
            host_postgres: Outcome::Measured(Box::new(figures([300.0, 400.0], 5, None))),
        };
        let table = render(&options(), &report);
        let closed_64 = row(&table, "closed loop, 64 clients");
        assert!(closed_64.contains("12.50×"), "{closed_64}");
        assert!(closed_64.contains("0.50×"), "{closed_64}");
        assert!(
            closed_64.ends_with("guest met, host NOT met"),
            "{closed_64}"
        );
        let closed_1 = row(&table, "closed loop, 1 client ");
        assert!(closed_1.ends_with("guest met, host NOT met"), "{closed_1}");
        assert!(row(&table, "  p99 latency").ends_with("NOT met"));
        let flush = row(&table, "commits per flush, 64 clients");
        // 1000 / 100 for Holdfast, 80 / 80 in the guest, none counted on the host.
        assert!(flush.contains("10.0"), "{flush}");
        assert!(flush.contains("1.0"), "{flush}");
        assert!(flush.contains("n/a (no pg_stat_wal)"), "{flush}");
        assert!(flush.ends_with(" met"), "{flush}");
        assert!(
            row(&table, "kernel invocations")
                .contains("n/a (the appliance counts no invocations yet)")
        );
    }

    #[test]
    fn a_flush_count_below_what_the_clients_allow_is_not_a_figure() {
        // 64 clients, 5 s at 16 tps: 80 commits; 1 flush would be 80 commits per flush.
        let report = Tp1Report {
            holdfast: Outcome::NotRun("why".into()),
            guest_postgres: Outcome::Measured(Box::new(figures([10.0, 16.0], 900, Some(1)))),
            host_postgres: Outcome::Measured(Box::new(figures([300.0, 400.0], 5, Some(2000)))),
        };
        let table = render(&options(), &report);
        let flush = row(&table, "commits per flush, 64 clients");
        assert!(flush.contains("n/a (only 1 flushes counted)"), "{flush}");
        assert!(flush.contains("1.0"), "{flush}");
    }

    #[test]
    fn a_system_that_did_not_run_is_never_given_a_figure() {
        let report = Tp1Report {
            holdfast: Outcome::NotRun("the TP1 service is not in this source tree".into()),
            guest_postgres: Outcome::Failed("QEMU ended\nconsole".into()),
            host_postgres: Outcome::Measured(Box::new(figures([300.0, 400.0], 5, Some(400)))),
        };
        let table = render(&options(), &report);
        let closed = row(&table, "closed loop, 64 clients");
        assert!(closed.contains("not run"), "{closed}");
        assert!(closed.contains("failed"), "{closed}");
        assert!(closed.contains("400.0"), "{closed}");
        assert!(closed.ends_with("not judged: Holdfast not run"), "{closed}");
        assert!(!table.contains(" met\n"), "{table}");
        assert!(
            table.contains("note: Holdfast not run: the TP1 service is not in this source tree")
        );
        assert!(table.contains("note: PostgreSQL (guest) failed: QEMU ended\n"));
    }
}
