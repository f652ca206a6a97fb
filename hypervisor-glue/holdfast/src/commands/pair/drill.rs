//! `holdfast pair drill`: failover drills under TP1 load, against a running pair and
//! through the same verbs an operator has (status, link, rejoin), so that a drill tests
//! the pair as it is run.
//!
//! Each drill: wait until the primary serves and the standby holds a whole copy; run TP1
//! load through the endpoint; fail the primary at a random moment; wait for the new primary
//! to serve; let the load finish (the generator retries by id through the endpoint); check
//! the new primary against the ledger of every drill so far; rejoin the old primary.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_bench::table::{Caption, Column, median, render};
use holdfast_qemu::QmpClient;
use holdfast_tp1_load::check::{CheckReport, check};
use holdfast_tp1_load::holdfast::HoldfastTarget;
use holdfast_tp1_load::ledger::{Ledger, LedgerContents};
use holdfast_tp1_load::run::{RunOptions, RunReport, run as run_load};
use holdfast_tp1_load::target::Target;
use holdfast_tp1_protocol::Token;
use serde::Serialize;
use serde_json::Value;

use super::state::{PairState, unix_ms_now};
use super::{PairPaths, ask};
use crate::cli::{DrillKind, PairDrillArguments};
use crate::failure::{Failure, exit_status};
use crate::paths;

/// How long a drill waits for the pair to be ready (a rejoin's full copy included).
const READY_TIME_LIMIT: Duration = Duration::from_secs(300);
/// How long a drill waits from the fault to a new primary that serves.
const TAKEOVER_TIME_LIMIT: Duration = Duration::from_secs(120);
/// How long load goes on after the fault, beyond the supervisor's detection time: long
/// enough for the new primary to serve and the clients to be back.
const LOAD_AFTER_FAULT: Duration = Duration::from_secs(3);
/// How long the generator may take to finish what was in flight after the run.
const DRAIN: Duration = Duration::from_secs(60);
/// The difference `tp1 check` reports for acknowledged transactions that are gone.
const LOST_KIND: &str = "acknowledged transactions missing from history";

/// One drill's figures.
#[derive(Debug, Serialize)]
pub struct DrillReport {
    pub drill: u32,
    pub kind: &'static str,
    pub old_primary: u64,
    pub new_primary: u64,
    /// When the fault came, in milliseconds from the load's start.
    pub fault_at_ms: u64,
    /// From the fault to the supervisor's decision to fail over.
    pub detection_ms: u64,
    /// From that decision to the Promote sent (the old primary fenced in between).
    pub promotion_ms: u64,
    /// From the fault to the new primary serving (as its console said).
    pub ready_ms: u64,
    /// The longest time the clients went without an acknowledgement.
    pub outage_ms: f64,
    /// When that outage began, from the fault (negative: the last acknowledgement before it
    /// came that long before the fault; past `ready_ms`: the new primary's clients stalled
    /// after it served). The load's clock starts a few ms after the drill's.
    pub outage_began_from_fault_ms: i64,
    /// The slowest transaction, from its first send to its acknowledgement (retries and
    /// reconnections included): what one client waited at worst.
    pub slowest_ms: f64,
    /// Connections made again after one was lost (a client may lose its own more than once).
    pub reconnects: u64,
    pub acknowledged: u64,
    /// Acknowledged transactions (of every drill so far) not on the new primary.
    pub lost: usize,
    /// Whether `tp1 check` found nothing wrong at all (the TP1 invariant holds).
    pub check_passed: bool,
}

pub fn run(arguments: &PairDrillArguments) -> Result<ExitCode, Failure> {
    let paths = PairPaths::of(&arguments.name)?;
    let seed = arguments.seed.unwrap_or_else(holdfast_tp1_load::random_seed);
    let mut random = SplitMix(seed);
    eprintln!("pair drill {}: {} drill(s), seed {seed} (--seed {seed} repeats the moments and the load)", arguments.name, arguments.count);
    let ledger_dir = paths.dir.join("drill-ledger");
    let status = wait_until_ready(&arguments.name)?;
    let endpoint = endpoint_of(&status)?;
    let primary_vm = primary_row(&status)?["vm"].as_str().unwrap_or_default().to_owned();
    let admin = token(&primary_vm, "drill-admin", true)?;
    let client = token(&primary_vm, "drill", false)?;
    let loader = HoldfastTarget::new(endpoint, admin).map_err(|error| Failure::input(format!("{error:#}")))?;
    let loaded = holdfast_tp1_load::block_on(loader.loaded_scale())?.map_err(|error| Failure::other(format!("TP1 summary: {error:#}")))?;
    if let Some(scale) = loaded
        && !ledger_dir.exists()
    {
        // The check needs every transaction ever sent to tell lost from invented.
        return Err(Failure::input(format!(
            "pair '{}' holds TP1 data (scale {scale}) loaded without the drill's ledger {}: load and run TP1 with --state-dir {} \
             (as the main job does), or drill a fresh pair",
            arguments.name,
            ledger_dir.display(),
            ledger_dir.display()
        )));
    }
    if loaded.is_none() {
        eprintln!("pair drill {}: loading TP1 at scale {}", arguments.name, arguments.scale);
        holdfast_tp1_load::block_on(loader.load(arguments.scale, false))?.map_err(|error| Failure::other(format!("TP1 load: {error:#}")))?;
        Ledger::reset(&ledger_dir)?;
    }
    let target = Arc::new(HoldfastTarget::new(endpoint, client).map_err(|error| Failure::input(format!("{error:#}")))?);

    let mut reports = Vec::new();
    for drill in 1..=arguments.count {
        let kind = arguments.kinds[(drill as usize - 1) % arguments.kinds.len()];
        let report = one_drill(arguments, drill, kind, &mut random, seed, &target, &ledger_dir)?;
        eprintln!(
            "pair drill {}: #{drill} {}: node {} -> {}, detection {} ms, promotion {} ms, ready {} ms, outage {:.0} ms (from {} ms), slowest {:.0} ms, {} reconnects, {} acknowledged, {} lost{}",
            arguments.name,
            report.kind,
            report.old_primary,
            report.new_primary,
            report.detection_ms,
            report.promotion_ms,
            report.ready_ms,
            report.outage_ms,
            report.outage_began_from_fault_ms,
            report.slowest_ms,
            report.reconnects,
            report.acknowledged,
            report.lost,
            if report.check_passed { "" } else { ", CHECK FAILED" }
        );
        let failed = !report.check_passed;
        reports.push(report);
        if failed {
            // The pair lost or damaged data: the next drill would only add to it.
            break;
        }
    }
    let all_passed = reports.len() == arguments.count as usize && reports.iter().all(|report| report.check_passed);
    if all_passed {
        // The pair is left as it was found: the last drill's old primary a consistent
        // standby again.
        wait_until_ready(&arguments.name)?;
    }
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&reports).expect("reports serialize"));
    } else {
        print!("{}", table(&arguments.name, seed, &reports));
    }
    Ok(if all_passed { ExitCode::SUCCESS } else { ExitCode::from(exit_status::GUEST_FAILED) })
}

fn one_drill(
    arguments: &PairDrillArguments,
    drill: u32,
    kind: DrillKind,
    random: &mut SplitMix,
    seed: u64,
    target: &Arc<HoldfastTarget>,
    ledger_dir: &std::path::Path,
) -> Result<DrillReport, Failure> {
    let name = &arguments.name;
    let status = wait_until_ready(name)?;
    let old = primary_row(&status)?.clone();
    let old_number = old["node"].as_u64().unwrap_or_default();
    let detection_allowance = match kind {
        DrillKind::Kill => Duration::ZERO,
        DrillKind::Freeze | DrillKind::Cut => Duration::from_millis(status["heartbeat_timeout_ms"].as_u64().unwrap_or(2000)),
    };
    let fault_after = Duration::from_millis(1000 + random.next() % 2000);
    let options = RunOptions {
        clients: arguments.clients,
        rate_per_second: None,
        pipeline: 1,
        duration: fault_after + detection_allowance + LOAD_AFTER_FAULT,
        drain: DRAIN,
        seed: seed.wrapping_add(u64::from(drill)),
        progress: false,
    };
    let ledger = Arc::new(Ledger::open(ledger_dir)?);
    let load = {
        let target = Arc::clone(target);
        std::thread::spawn(move || -> Result<RunReport, Failure> {
            holdfast_tp1_load::block_on(run_load(target, ledger, options))?.map_err(|error| Failure::other(format!("TP1 run: {error:#}")))
        })
    };
    let load_started = Instant::now();
    std::thread::sleep(fault_after);
    let fault_unix_ms = unix_ms_now();
    let fault_at = Instant::now();
    inject(name, kind, &old)?;

    // The new primary serves: the supervisor promoted and the endpoint moved.
    let ready_ms = loop {
        if fault_at.elapsed() > TAKEOVER_TIME_LIMIT {
            return Err(Failure::other(format!(
                "pair '{name}': drill {drill}: no new primary serving {} s after the fault (see the supervisor's output)",
                TAKEOVER_TIME_LIMIT.as_secs()
            )));
        }
        let status = ask(name, "status")?;
        if status["primary"].as_u64() != Some(old_number) && primary_row(&status)?["state"] == "serving" {
            break fault_at.elapsed().as_millis() as u64;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if kind == DrillKind::Cut {
        ask(name, "link restore")?;
    }
    let run = load.join().map_err(|_| Failure::other("the load thread panicked"))??;
    let contents = LedgerContents::read(ledger_dir)?;
    let snapshot = holdfast_tp1_load::block_on(target.snapshot())?.map_err(|error| Failure::other(format!("TP1 snapshot: {error:#}")))?;
    let checked = check(target.describe(), &snapshot, &contents);
    if !checked.passed() {
        eprint!("{}", checked.render());
    }
    let promotion = PairState::read(&PairPaths::of(name)?.dir)
        .map_err(Failure::other)?
        .and_then(|state| state.promotions.last().cloned())
        .ok_or_else(|| Failure::other(format!("pair '{name}': a new primary serves but pair.json records no promotion")))?;
    let detected_unix_ms = promotion.time_unix_ms.saturating_sub(promotion.takeover_ms);
    ask(name, "rejoin")?;
    Ok(DrillReport {
        drill,
        kind: kind_name(kind),
        old_primary: old_number,
        new_primary: u64::from(promotion.new_primary),
        fault_at_ms: fault_at.duration_since(load_started).as_millis() as u64,
        detection_ms: detected_unix_ms.saturating_sub(fault_unix_ms),
        promotion_ms: promotion.takeover_ms,
        ready_ms,
        outage_ms: run.silence_us_max as f64 / 1000.0,
        // From the run's own clock, which starts once its clients have connected: later
        // than `load_started`, by as long as that took (about 90 ms for 16 clients).
        outage_began_from_fault_ms: run.silence_from_ms(fault_at),
        slowest_ms: run.latency.max_us as f64 / 1000.0,
        reconnects: run.reconnects,
        acknowledged: run.acknowledged,
        lost: lost_of(&checked),
        check_passed: checked.passed(),
    })
}

/// Fails the primary (`old`, its row of `status`) as `kind` says.
fn inject(name: &str, kind: DrillKind, old: &Value) -> Result<(), Failure> {
    let vm = old["vm"].as_str().unwrap_or_default();
    match kind {
        DrillKind::Kill => {
            crate::commands::vm::kill_qemu(vm, &paths::qmp_socket_of(vm)?)?;
        }
        DrillKind::Freeze => {
            let socket = paths::qmp_socket_of(vm)?;
            let mut client = QmpClient::connect(&socket).map_err(|error| Failure::other(format!("VM '{vm}': {error}")))?;
            client.pause().map_err(|error| Failure::other(format!("VM '{vm}': QMP stop: {error}")))?;
        }
        DrillKind::Cut => {
            ask(name, &format!("link isolate {}", old["node"]))?;
        }
    }
    Ok(())
}

fn kind_name(kind: DrillKind) -> &'static str {
    match kind {
        DrillKind::Kill => "kill",
        DrillKind::Freeze => "freeze",
        DrillKind::Cut => "cut",
    }
}

fn lost_of(checked: &CheckReport) -> usize {
    checked.differences.iter().filter(|difference| difference.kind == LOST_KIND).map(|difference| difference.count).sum()
}

/// Waits until the primary serves, its standby holds a whole copy, and the primary last
/// said it was in step and not degraded (else a failure now could not be taken over);
/// returns the status then.
fn wait_until_ready(name: &str) -> Result<Value, Failure> {
    let started = Instant::now();
    loop {
        let status = ask(name, "status")?;
        let primary = primary_row(&status)?;
        let standby = status["nodes"].as_array().into_iter().flatten().find(|node| node["role"] == "standby");
        let primary_says = &primary["status"];
        let ready = primary["state"] == "serving"
            && standby.is_some_and(|node| node["state"] == "consistent")
            && primary_says["standby_state"] == "consistent"
            && primary_says["degraded"] == false;
        if ready {
            return Ok(status);
        }
        if started.elapsed() > READY_TIME_LIMIT {
            return Err(Failure::other(format!(
                "pair '{name}': not ready for a drill within {} s (a serving primary and a consistent standby); status: {status}",
                READY_TIME_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn primary_row(status: &Value) -> Result<&Value, Failure> {
    let primary = &status["primary"];
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|node| &node["node"] == primary)
        .ok_or_else(|| Failure::other(format!("the supervisor's status names no primary row: {status}")))
}

fn endpoint_of(status: &Value) -> Result<std::net::SocketAddr, Failure> {
    status["endpoint"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| Failure::other(format!("the supervisor's status has no endpoint: {status}")))
}

fn token(vm: &str, name: &str, admin: bool) -> Result<Token, Failure> {
    let hex = crate::commands::tp1::mint(vm, name, admin, None)?;
    Token::from_hex(&hex).ok_or_else(|| Failure::other(format!("{vm}: minted a token that is not one: {hex}")))
}

/// The drills as a table, with the medians and worst cases under it.
fn table(name: &str, seed: u64, reports: &[DrillReport]) -> String {
    let columns = [
        Column::right("#"),
        Column::left("fault"),
        Column::left("old->new"),
        Column::right("detection ms"),
        Column::right("promotion ms"),
        Column::right("ready ms"),
        Column::right("outage ms"),
        Column::right("outage from ms"),
        Column::right("slowest ms"),
        Column::right("reconnects"),
        Column::right("acknowledged"),
        Column::right("lost"),
        Column::left("check"),
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|report| {
            vec![
                report.drill.to_string(),
                report.kind.to_owned(),
                format!("{}->{}", report.old_primary, report.new_primary),
                report.detection_ms.to_string(),
                report.promotion_ms.to_string(),
                report.ready_ms.to_string(),
                format!("{:.0}", report.outage_ms),
                report.outage_began_from_fault_ms.to_string(),
                format!("{:.0}", report.slowest_ms),
                report.reconnects.to_string(),
                report.acknowledged.to_string(),
                report.lost.to_string(),
                if report.check_passed { "passed".into() } else { "FAILED".into() },
            ]
        })
        .collect();
    let mut summary = Vec::new();
    for kind in ["kill", "freeze", "cut"] {
        let of_kind: Vec<&DrillReport> = reports.iter().filter(|report| report.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let figure = |value: fn(&DrillReport) -> f64| {
            let values: Vec<f64> = of_kind.iter().map(|report| value(report)).collect();
            let worst = values.iter().copied().fold(0.0, f64::max);
            format!("{:.0} (worst {worst:.0})", median(&values).unwrap_or_default())
        };
        summary.push(format!(
            "{kind} ({} of them), median: detection {} ms, promotion {} ms, ready {} ms, outage {} ms",
            of_kind.len(),
            figure(|report| report.detection_ms as f64),
            figure(|report| report.promotion_ms as f64),
            figure(|report| report.ready_ms as f64),
            figure(|report| report.outage_ms),
        ));
    }
    let lost: usize = reports.iter().map(|report| report.lost).sum();
    let passed = reports.iter().filter(|report| report.check_passed).count();
    summary.push(format!("acknowledged transactions lost: {lost}; TP1 check passed after {passed} of {} drills", reports.len()));
    let caption = Caption {
        title: format!("pair {name}: {} failover drill(s) under TP1 load, seed {seed}", reports.len()),
        notes: vec![
            "outage: the longest time the load generator went without any acknowledgement (it reconnects to the same endpoint and retries by id); outage from: when it began, from the fault; slowest: one transaction's wait, retries included".into(),
            "a freeze or a cut is detected after the supervisor's heartbeat timeout; a kill when QEMU exits".into(),
            "peers, not measured here: CloudNativePG's failover tests allow 10 s, Patroni's defaults 30 s".into(),
        ],
    };
    render(&caption, &columns, &rows, &summary)
}

/// SplitMix64: the drills' moments, repeatable from the seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }
}
