//! The pair benchmark's table: a row per measure, a column for the single appliance and one
//! per replication mode, the goal and whether it is met. A side or run that did not run
//! says "not run" or "failed" in its cells and why in the notes; a goal that needs it says
//! "not judged".

use holdfast_tp1_load::run::RunReport;

use crate::table::{Caption, Column, render as render_table};

use super::{
    Drill, GOAL_OUTAGE_MAX, GOAL_SYNC_RATIO_MIN, LAG_SAMPLE_INTERVAL, LagSummary, Measurement,
    ModeRun, PairBenchOptions, PairReport, ReplicationMode,
};

const COLUMNS: [Column; 7] = [
    Column::left("measure"),
    Column::right("single"),
    Column::right("sync-durable"),
    Column::right("sync-received"),
    Column::right("async"),
    Column::left("goal"),
    Column::left("verdict"),
];

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn milliseconds(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// A measured run, or the text that stands for its figures ("not run", "failed").
fn state<T>(measurement: &Measurement<T>) -> Result<&T, &'static str> {
    match measurement {
        Measurement::Measured(figures) => Ok(figures),
        Measurement::NotRun(_) => Err("not run"),
        Measurement::Failed(_) => Err("failed"),
    }
}

/// The table as text.
pub fn render(options: &PairBenchOptions, report: &PairReport) -> String {
    // A mode's run; the pair's own state stands for each of its runs when it has none.
    let run_of = |mode: ReplicationMode| -> Result<&ModeRun, &'static str> {
        state(&report.pair).and_then(|figures| {
            figures
                .runs
                .iter()
                .find(|(run_mode, _)| *run_mode == mode)
                .map_or(Err("not run"), |(_, run)| state(run))
        })
    };
    let single_tps = report
        .single
        .measured()
        .map(ModeRun::tps_median)
        .filter(|tps| *tps > 0.0);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut summary = Vec::new();
    let mut push = |measure: &str, figure: &dyn Fn(&ModeRun) -> String, goal: &str, judged: String| {
        let text = |run: Result<&ModeRun, &'static str>| run.map_or_else(str::to_owned, figure);
        let mut row = vec![measure.to_owned(), text(state(&report.single))];
        for mode in ReplicationMode::ALL {
            row.push(text(run_of(mode)));
        }
        row.push(goal.to_owned());
        row.push(judged);
        rows.push(row);
    };

    push(
        &format!("TP1 tps, {} clients, closed loop: median", options.clients),
        &|run| format!("{:.1}", run.tps_median()),
        "",
        String::new(),
    );
    push("  slowest round", &|run| format!("{:.1}", run.tps_min()), "", String::new());
    let ratio = |run: &ModeRun| single_tps.map(|single| run.tps_median() / single);
    let sync_goal = format!("sync ≥ {GOAL_SYNC_RATIO_MIN:.2}× single");
    let judged: Vec<String> = [ReplicationMode::SyncDurable, ReplicationMode::SyncReceived]
        .into_iter()
        .map(|mode| {
            let figure = run_of(mode).ok().and_then(ratio);
            match (figure, single_tps) {
                (Some(ratio), _) => format!("{} {}", mode.name(), verdict(ratio >= GOAL_SYNC_RATIO_MIN)),
                (None, None) => format!("{} not judged: no single figure", mode.name()),
                (None, Some(_)) => format!("{} not judged: not measured", mode.name()),
            }
        })
        .collect();
    let judged = judged.join(", ");
    summary.push(format!("goal: {sync_goal}: {judged}"));
    push(
        "  ratio to the single appliance",
        &|run| ratio(run).map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}×")),
        &sync_goal,
        judged,
    );
    let ms = |us: f64| format!("{:.1}", us / 1000.0);
    push("  p50 latency, ms (median round)", &|run| ms(run.p50_us()), "", String::new());
    push("  p99 latency, ms (median round)", &|run| ms(run.p99_us()), "", String::new());
    push("  max latency, ms (worst round)", &|run| milliseconds(run.max_us()), "", String::new());
    push(
        "  longest client silence, ms (worst round)",
        &|run| milliseconds(run.silence_us_max()),
        "",
        String::new(),
    );
    // The single appliance has no lag; a pair's run without a reading says so.
    let lag = |figure: fn(&LagSummary) -> u64| {
        move |run: &ModeRun| run.lag.as_ref().map_or_else(|| "-".to_owned(), |lag| figure(lag).to_string())
    };
    push("replication lag, bytes: median", &lag(|lag| lag.bytes_median), "", String::new());
    push("replication lag, bytes: max", &lag(|lag| lag.bytes_max), "", String::new());
    push("replication lag, ms: median", &lag(|lag| lag.ms_median), "", String::new());
    push("replication lag, ms: max", &lag(|lag| lag.ms_max), "", String::new());

    // The drill: its figures in the column of the mode it ran in.
    let drill = state(&report.pair).and_then(|figures| state(&figures.drill));
    let drill_mode = drill.map_or(ReplicationMode::SyncDurable, |drill| drill.mode);
    let mut drill_row = |measure: &str, figure: &dyn Fn(&Drill) -> String, goal: &str, judged: String| {
        let mut row = vec![measure.to_owned(), "-".to_owned()];
        for mode in ReplicationMode::ALL {
            row.push(if mode == drill_mode { drill.map_or_else(str::to_owned, figure) } else { "-".to_owned() });
        }
        row.push(goal.to_owned());
        row.push(judged);
        rows.push(row);
    };
    let measured_drill = drill.ok();
    let outage_goal = format!("≤ {} ms", GOAL_OUTAGE_MAX.as_millis());
    let outage_judged = match measured_drill {
        Some(drill) => verdict(u128::from(drill.report.silence_us_max) <= GOAL_OUTAGE_MAX.as_micros()).to_owned(),
        None => "not judged: no drill".to_owned(),
    };
    summary.push(format!("goal: failover outage {outage_goal}: {outage_judged}"));
    drill_row(
        "failover: client-visible outage, ms",
        &|drill| milliseconds(drill.report.silence_us_max),
        &outage_goal,
        outage_judged,
    );
    drill_row(
        "failover: promotion said, ms after SIGKILL",
        &|drill| format!("{:.0}", drill.promotion_after.as_secs_f64() * 1000.0),
        "",
        String::new(),
    );
    drill_row(
        "failover: new primary serving, ms after SIGKILL",
        &|drill| drill.serving_after.map_or_else(|| "not said".to_owned(), |after| format!("{:.0}", after.as_secs_f64() * 1000.0)),
        "",
        String::new(),
    );
    let lost_judged = match measured_drill {
        Some(drill) => verdict(drill.check.lost == 0 && drill.check.passed).to_owned(),
        None => "not judged: no drill".to_owned(),
    };
    summary.push(format!("goal: acknowledged transactions lost = 0, tp1 check passes: {lost_judged}"));
    drill_row(
        "failover: acknowledged transactions lost",
        &|drill| drill.check.lost.to_string(),
        "0, check passes",
        lost_judged,
    );
    drill_row(
        "failover: run's tps (reconnects)",
        &|drill| format!("{:.1} ({})", drill.report.accepted_per_second, drill.report.reconnects),
        "",
        String::new(),
    );

    let title = format!(
        "holdfast bench pair{}: TP1 (TPC-B) at scale {}, closed loop at {} clients, {} rounds of {:.0} s runs, each round a run on the single appliance and one on the pair in each mode (one pair, switched at run time with `holdfast pair mode`), seed {} (each run its own: + 4 × round + side); then a failover drill in {}; QEMU q35, {}, {} MiB and 1 vCPU a VM",
        if options.quick { " --quick" } else { "" },
        options.scale,
        options.clients,
        options.rounds,
        options.duration.as_secs_f64(),
        options.seed,
        drill_mode.name(),
        options.accelerator,
        options.memory_mib,
    );
    let mut notes = Vec::new();
    match &report.single {
        Measurement::Measured(_) => notes.push(format!(
            "single: {}, on two store mirrors as each node of the pair (so the ratio prices the standby, not the second disk)",
            report.single_about
        )),
        Measurement::NotRun(why) => notes.push(format!("single not run: {why}")),
        Measurement::Failed(error) => notes.push(format!("single failed: {}", first_line(error))),
    }
    match &report.pair {
        Measurement::Measured(figures) => {
            notes.push(format!(
                "pair: {}; loaded in {:.1} s; one pair for every mode, switched with `holdfast pair mode` and each run started once the primary said it ran in that mode with its standby whole and caught up (the same measure as a pair booted in that mode, without two more boots)",
                figures.about,
                figures.load_time.as_secs_f64()
            ));
            for (mode, run) in &figures.runs {
                match run {
                    Measurement::NotRun(why) => notes.push(format!("{} not run: {why}", mode.name())),
                    Measurement::Failed(error) => notes.push(format!("{} failed: {}", mode.name(), first_line(error))),
                    Measurement::Measured(_) => {}
                }
            }
            match &figures.drill {
                Measurement::Measured(drill) => {
                    notes.push(format!(
                        "drill: the primary's QEMU SIGKILLed (`holdfast vm kill`) {:.1} s after the load started, under {} clients; the longest silence began {} the SIGKILL; {}",
                        drill.killed_at_seconds,
                        drill.report.clients,
                        RunReport::silence_from_words(drill.silence_from_kill_ms),
                        drill.promotion_line
                    ));
                    notes.push(format!(
                        "check on the new primary, through the endpoint, over every run on the pair: {} acknowledged, {}",
                        drill.check.acknowledged,
                        if drill.check.passed {
                            "passed".to_owned()
                        } else {
                            format!("DID NOT PASS: {}", drill.check.other_differences.join(", "))
                        }
                    ));
                }
                Measurement::NotRun(why) => notes.push(format!("drill not run: {why}")),
                Measurement::Failed(error) => notes.push(format!("drill failed: {}", first_line(error))),
            }
        }
        Measurement::NotRun(why) => notes.push(format!("pair not run: {why}")),
        Measurement::Failed(error) => notes.push(format!("pair failed: {}", first_line(error))),
    }
    notes.push(format!(
        "lag: the primary's view of its standby (`holdfast pair status --json`: stream bytes not yet durable on the standby, and the oldest one's age), read every {} ms through each run; median and worst of the readings",
        LAG_SAMPLE_INTERVAL.as_millis()
    ));
    notes.push("outage: the generator's longest time between two acknowledgements over the drill's run (clients reconnect through the same endpoint and retry by id); one drill a run (a pair that has failed over has no standby until rejoined)".into());
    notes.push("peers, not measured here: CloudNativePG's failover tests allow 10 s; Patroni's defaults (ttl 30 s, loop_wait 10 s) take up to 30 s to fail over".into());
    notes.push(format!(
        "the single appliance and the pair are up together (three VMs), each idle while the other runs, so that other work on a shared host weighs on every column alike; the pair runs two busy VMs where the single appliance runs one: on a host with fewer free cores than that under TCG they share them, which counts against the pair (this host: {} cores, load average {} when the benchmark started)",
        std::thread::available_parallelism().map_or_else(|_| "?".to_owned(), |cores| cores.to_string()),
        report.host_load_average.map_or_else(|| "unknown".to_owned(), |load| format!("{load:.2}")),
    ));
    render_table(&Caption { title, notes }, &COLUMNS, &rows, &summary)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use holdfast_tp1_load::run::{Latency, RunReport};

    use super::*;
    use crate::pair::{CheckFigures, LagSummary, PairFigures, PairSide};
    use crate::tp1::HoldfastSide;

    fn report(tps: f64, silence_ms: u64) -> RunReport {
        RunReport {
            target: "t".into(),
            scale: 1,
            mode: "closed",
            clients: 16,
            pipeline: 1,
            seed: 7,
            duration_seconds: 8.0,
            offered_per_second: tps,
            accepted_per_second: tps,
            sent: (tps * 8.0) as u64,
            acknowledged: (tps * 8.0) as u64,
            refused: BTreeMap::new(),
            failed: 0,
            unfinished: 0,
            not_sent: 0,
            retries: 0,
            reconnects: 16,
            latency: Latency {
                count: 1,
                p50_us: 7_000,
                p90_us: 20_000,
                p99_us: 40_000,
                p99_9_us: 90_000,
                max_us: 250_000,
                mean_us: 9_000.0,
            },
            silence_us_max: silence_ms * 1000,
            silence_from_seconds: 3.0,
            started_at: std::time::Instant::now(),
        }
    }

    fn run(tps: f64, lag: Option<LagSummary>) -> Measurement<ModeRun> {
        Measurement::Measured(ModeRun { rounds: vec![report(tps * 0.9, 60), report(tps, 60), report(tps * 1.5, 70)], lag })
    }

    fn lag(bytes_median: u64, bytes_max: u64) -> Option<LagSummary> {
        Some(LagSummary { samples: 32, bytes_median, bytes_max, ms_median: 2, ms_max: 191 })
    }

    fn pair_report(sync_durable_tps: f64, outage_ms: u64, lost: usize) -> PairReport {
        PairReport {
            host_load_average: Some(0.5),
            single: run(1000.0, None),
            single_about: "appliance".into(),
            pair: Measurement::Measured(PairFigures {
                load_time: Duration::from_millis(40),
                runs: vec![
                    (ReplicationMode::SyncDurable, run(sync_durable_tps, lag(65536, 3 << 20))),
                    (ReplicationMode::SyncReceived, run(700.0, lag(36864, 1 << 20))),
                    (ReplicationMode::Async, run(950.0, lag(0, 770048))),
                ],
                drill: Measurement::Measured(Drill {
                    mode: ReplicationMode::SyncDurable,
                    report: report(700.0, outage_ms),
                    killed_at_seconds: 3.1,
                    silence_from_kill_ms: -2,
                    promotion_after: Duration::from_millis(84),
                    serving_after: Some(Duration::from_millis(300)),
                    promotion_line: "pair p: FAILOVER: ...".into(),
                    check: CheckFigures {
                        passed: lost == 0,
                        acknowledged: 13260,
                        lost,
                        other_differences: Vec::new(),
                    },
                }),
                about: "two VMs".into(),
            }),
        }
    }

    fn options() -> PairBenchOptions {
        PairBenchOptions::quick(
            HoldfastSide::Unavailable("why".into()),
            PairSide::Unavailable("why".into()),
        )
    }

    fn row<'a>(table: &'a str, start: &str) -> &'a str {
        table
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no row {start:?} in\n{table}"))
    }

    #[test]
    fn ratios_lag_and_the_drill_are_judged_against_their_goals() {
        let report = pair_report(850.0, 735, 0);
        let table = render(&options(), &report);
        let ratio = row(&table, "  ratio to the single appliance");
        assert!(ratio.contains("1.00×") && ratio.contains("0.85×") && ratio.contains("0.70×"), "{ratio}");
        assert!(ratio.ends_with("sync-durable met, sync-received NOT met"), "{ratio}");
        let lag_max = row(&table, "replication lag, bytes: max");
        assert!(lag_max.contains("3145728") && lag_max.contains("770048"), "{lag_max}");
        // The single appliance has no lag.
        assert!(row(&table, "replication lag, ms: median").contains(" - "));
        let outage = row(&table, "failover: client-visible outage, ms");
        assert!(outage.contains("735.0"), "{outage}");
        assert!(outage.ends_with("NOT met"), "{outage}");
        assert!(row(&table, "failover: acknowledged transactions lost").ends_with(" met"));
        assert!(report.failures().is_empty(), "{:?}", report.failures());
    }

    #[test]
    fn a_lost_transaction_is_a_failure_and_a_pair_that_did_not_come_up_has_no_figures() {
        let lost = pair_report(850.0, 300, 2);
        assert!(row(&render(&options(), &lost), "failover: acknowledged transactions lost").ends_with("NOT met"));
        assert!(lost.failures().iter().any(|failure| failure.contains("2 acknowledged transactions lost")));

        let broken = PairReport {
            host_load_average: None,
            single: run(1000.0, None),
            single_about: "appliance".into(),
            pair: Measurement::Failed("pair up did not say the standby is whole within 300 s\nconsole".into()),
        };
        let table = render(&options(), &broken);
        let tps = row(&table, "TP1 tps");
        assert!(row(&table, "  slowest round").contains("900.0"), "{table}");
        assert!(tps.contains("1000.0") && tps.matches("failed").count() == 3, "{tps}");
        assert!(row(&table, "  ratio to the single appliance").ends_with("sync-durable not judged: not measured, sync-received not judged: not measured"));
        assert!(row(&table, "failover: client-visible outage, ms").contains("failed"));
        assert!(table.contains("note: pair failed: pair up did not say the standby is whole within 300 s\n"), "{table}");
        assert_eq!(broken.failures().len(), 1);
    }
}
