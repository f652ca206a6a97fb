//! `holdfast bench pair`: what replication costs and what a failover shows the clients
//! (issue 18, point 7), in one run with one load generator (`holdfast-tp1-load`): TP1
//! throughput and latency of the unreplicated appliance, then of one pair in each mode
//! (sync-durable, sync-received, async, switched at run time with `holdfast pair mode`),
//! the primary's view of its standby's lag sampled through each of those runs, and a drill:
//! under load, SIGKILL of the primary's QEMU, the generator's longest silence (the outage
//! the clients saw) and `check` on the new primary (acknowledged transactions lost).
//!
//! The CLI owns `holdfast run` and `holdfast pair`: it gives the launchers. A side that
//! cannot run says why; nothing is made up. Goals are reported, never asserted: the
//! benchmark fails only when something breaks (a pair that does not come up, a failed run,
//! an acknowledged transaction lost).

pub mod table;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_qemu::Accelerator;
use holdfast_tp1_load::check::{CheckReport, check};
use holdfast_tp1_load::holdfast::HoldfastTarget;
use holdfast_tp1_load::ledger::{Ledger, LedgerContents};
use holdfast_tp1_load::run::{RunOptions as LoadRunOptions, RunReport, run as run_load};
use holdfast_tp1_load::target::Target;
use holdfast_tp1_protocol::Token;

use crate::tp1::{ApplianceRequest, HoldfastSide};

/// The goals (judged, never asserted).
pub const GOAL_SYNC_RATIO_MIN: f64 = 0.8;
pub const GOAL_OUTAGE_MAX: Duration = Duration::from_millis(500);
/// How often the primary's view of the lag is read during a run.
pub const LAG_SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
/// `check`'s name for what a failover must never do.
pub const LOST_KIND: &str = "acknowledged transactions missing from history";

/// The pair's replication modes, as `holdfast pair mode` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    SyncDurable,
    SyncReceived,
    Async,
}

impl ReplicationMode {
    pub const ALL: [ReplicationMode; 3] = [Self::SyncDurable, Self::SyncReceived, Self::Async];

    pub fn name(self) -> &'static str {
        match self {
            Self::SyncDurable => "sync-durable",
            Self::SyncReceived => "sync-received",
            Self::Async => "async",
        }
    }

    pub fn synchronous(self) -> bool {
        self != Self::Async
    }
}

/// One reading of the primary's view of its standby: stream bytes not yet durable there,
/// and how old the oldest of them is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LagSample {
    pub bytes: u64,
    pub ms: u64,
}

/// The lag over a run: medians and worst cases of the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LagSummary {
    pub samples: usize,
    pub bytes_median: u64,
    pub bytes_max: u64,
    pub ms_median: u64,
    pub ms_max: u64,
}

/// The median (the lower middle value for an even count: a lag that was there, not an
/// average of two) and the maximum of each figure; `None` without samples.
pub fn summarize_lag(samples: &[LagSample]) -> Option<LagSummary> {
    if samples.is_empty() {
        return None;
    }
    let median_and_max = |figure: fn(&LagSample) -> u64| {
        let mut values: Vec<u64> = samples.iter().map(figure).collect();
        values.sort_unstable();
        (values[(values.len() - 1) / 2], values[values.len() - 1])
    };
    let (bytes_median, bytes_max) = median_and_max(|sample| sample.bytes);
    let (ms_median, ms_max) = median_and_max(|sample| sample.ms);
    Some(LagSummary {
        samples: samples.len(),
        bytes_median,
        bytes_max,
        ms_median,
        ms_max,
    })
}

/// A running pair, driven by the CLI (`holdfast pair up` and the verbs that talk to its
/// supervisor). Dropping it ends the pair.
pub trait RunningPair {
    /// The client endpoint on 127.0.0.1 that follows the primary.
    fn endpoint(&self) -> SocketAddr;
    fn client_token(&self) -> Token;
    /// For `load`.
    fn admin_token(&self) -> Token;
    /// Switches the primary's mode at run time and waits until the primary says it runs in
    /// it, with its standby whole, not degraded and caught up.
    fn set_mode(&mut self, mode: ReplicationMode) -> anyhow::Result<()>;
    /// The primary's view of its standby's lag now; `None` while it gives none.
    fn lag(&mut self) -> anyhow::Result<Option<LagSample>>;
    /// Takes a checkpoint on the primary that starts after every write so far, waits until
    /// it is committed and the standby has caught up with it.
    fn checkpoint(&mut self) -> anyhow::Result<()>;
    /// Client connections the endpoint holds open.
    fn endpoint_connections(&mut self) -> anyhow::Result<u64>;
    /// SIGKILLs the primary's QEMU, as an operator's `holdfast vm kill` does.
    fn kill_primary(&mut self) -> anyhow::Result<()>;
    /// Waits for the supervisor to say it promoted the standby, then (a while) for it to
    /// say the new primary serves.
    fn wait_promotion(&mut self, within: Duration) -> anyhow::Result<PromotionSeen>;
    /// Ends the pair in order (`pair down`).
    fn down(self: Box<Self>) -> anyhow::Result<()>;
    /// A line on what runs (the VMs, the heartbeat timeout, the async lag bound).
    fn about(&self) -> String;
}

/// What the supervisor said of a failover, and when the benchmark read it.
#[derive(Clone, Debug)]
pub struct PromotionSeen {
    /// Its FAILOVER line.
    pub line: String,
    pub promoted_at: Instant,
    /// When it said the new primary serves (`None`: not within the wait).
    pub serving_at: Option<Instant>,
}

/// Starts a pair in sync-durable mode and waits until its standby holds a whole copy.
pub type PairLauncher = Box<dyn Fn(&ApplianceRequest) -> anyhow::Result<Box<dyn RunningPair>>>;

/// How the pair is started, given by the CLI.
pub enum PairSide {
    Unavailable(String),
    Launcher(PairLauncher),
}

/// What `holdfast bench pair` runs.
pub struct PairBenchOptions {
    pub quick: bool,
    pub accelerator: Accelerator,
    pub memory_mib: u32,
    pub scale: u32,
    /// Every throughput run's clients (closed loop), the drill's too.
    pub clients: u32,
    pub duration: Duration,
    pub drain: Duration,
    /// Rounds: each a run on the single appliance and one on the pair in each mode.
    pub rounds: u32,
    /// The drill's run, and when the primary is killed: this long after every client is
    /// connected through the endpoint.
    pub drill_duration: Duration,
    pub drill_kill_after: Duration,
    /// How long transactions cut off by the failover may take to be retried on the new
    /// primary after the run.
    pub drill_drain: Duration,
    pub seed: u64,
    /// The ledgers.
    pub run_dir: PathBuf,
    /// The unreplicated appliance: the pair's image on two store mirrors, as each node of
    /// the pair has, so that the ratio prices the standby and nothing else.
    pub single: HoldfastSide,
    pub pair: PairSide,
}

impl PairBenchOptions {
    /// The full run: scale 10, 16 clients, three rounds of 30 s runs; the drill 20 s, the
    /// kill 5 s in.
    pub fn new(single: HoldfastSide, pair: PairSide) -> Self {
        Self {
            quick: false,
            accelerator: Accelerator::Tcg,
            memory_mib: 512,
            scale: 10,
            clients: 16,
            duration: Duration::from_secs(30),
            drain: Duration::from_secs(30),
            rounds: 3,
            drill_duration: Duration::from_secs(20),
            drill_kill_after: Duration::from_secs(5),
            drill_drain: Duration::from_secs(120),
            seed: holdfast_tp1_load::random_seed(),
            run_dir: crate::default_cache_dir().join("pair"),
            single,
            pair,
        }
    }

    /// For CI: scale 1, 5 s a run; the drill 8 s, the kill 2 s in.
    pub fn quick(single: HoldfastSide, pair: PairSide) -> Self {
        Self {
            quick: true,
            scale: 1,
            duration: Duration::from_secs(5),
            drain: Duration::from_secs(20),
            drill_duration: Duration::from_secs(8),
            drill_kill_after: Duration::from_secs(2),
            ..Self::new(single, pair)
        }
    }
}

/// A side's figures, or why there are none.
#[derive(Clone, Debug)]
pub enum Measurement<T> {
    Measured(T),
    NotRun(String),
    Failed(String),
}

impl<T> Measurement<T> {
    pub fn measured(&self) -> Option<&T> {
        match self {
            Self::Measured(figures) => Some(figures),
            _ => None,
        }
    }

    fn of(result: anyhow::Result<T>, what: &str) -> Self {
        match result {
            Ok(figures) => Self::Measured(figures),
            Err(error) => {
                eprintln!("holdfast bench pair: {what} failed: {error:#}");
                Self::Failed(format!("{error:#}"))
            }
        }
    }
}

/// A side's throughput runs, one a round, and the lag sampled through them (`None` for the
/// single appliance). Medians over rounds, and the worst round beside them.
#[derive(Clone, Debug)]
pub struct ModeRun {
    pub rounds: Vec<RunReport>,
    pub lag: Option<LagSummary>,
}

impl ModeRun {
    fn median_of(&self, figure: impl Fn(&RunReport) -> f64) -> f64 {
        let values: Vec<f64> = self.rounds.iter().map(figure).collect();
        crate::table::median(&values).unwrap_or(0.0)
    }

    fn worst_of(&self, figure: impl Fn(&RunReport) -> u64) -> u64 {
        self.rounds.iter().map(figure).max().unwrap_or(0)
    }

    /// Transactions acknowledged per second: the median round, and the slowest.
    pub fn tps_median(&self) -> f64 {
        self.median_of(|report| report.accepted_per_second)
    }

    pub fn tps_min(&self) -> f64 {
        self.rounds.iter().map(|report| report.accepted_per_second).fold(f64::INFINITY, f64::min).min(self.tps_median())
    }

    /// Each round's p50 and p99; the medians of those.
    pub fn p50_us(&self) -> f64 {
        self.median_of(|report| report.latency.p50_us as f64)
    }

    pub fn p99_us(&self) -> f64 {
        self.median_of(|report| report.latency.p99_us as f64)
    }

    /// The slowest transaction and the longest silence of any round.
    pub fn max_us(&self) -> u64 {
        self.worst_of(|report| report.latency.max_us)
    }

    pub fn silence_us_max(&self) -> u64 {
        self.worst_of(|report| report.silence_us_max)
    }
}

/// What `check` on the new primary found.
#[derive(Clone, Debug)]
pub struct CheckFigures {
    pub passed: bool,
    pub acknowledged: usize,
    /// Acknowledged transactions missing from the new primary's history.
    pub lost: usize,
    /// Every other kind of difference `check` found, with its count.
    pub other_differences: Vec<String>,
}

impl CheckFigures {
    pub fn of(report: &CheckReport) -> Self {
        Self {
            passed: report.passed(),
            acknowledged: report.acknowledged,
            lost: report
                .differences
                .iter()
                .filter(|difference| difference.kind == LOST_KIND)
                .map(|difference| difference.count)
                .sum(),
            other_differences: report
                .differences
                .iter()
                .filter(|difference| difference.kind != LOST_KIND)
                .map(|difference| format!("{} ({})", difference.kind, difference.count))
                .collect(),
        }
    }
}

/// The failover drill.
#[derive(Clone, Debug)]
pub struct Drill {
    pub mode: ReplicationMode,
    pub report: RunReport,
    /// When the kill came, in seconds from the load's start (its clients' connections
    /// included, so a little later in the run's own clock).
    pub killed_at_seconds: f64,
    /// When the longest silence began, in milliseconds from the kill (negative: before it).
    pub silence_from_kill_ms: i64,
    /// From the kill to the supervisor's FAILOVER line, and to its word that the new
    /// primary serves.
    pub promotion_after: Duration,
    pub serving_after: Option<Duration>,
    pub promotion_line: String,
    /// `check` over every run on the pair, through the endpoint on the new primary.
    pub check: CheckFigures,
}

#[derive(Clone, Debug)]
pub struct PairFigures {
    pub load_time: Duration,
    pub runs: Vec<(ReplicationMode, Measurement<ModeRun>)>,
    pub drill: Measurement<Drill>,
    pub about: String,
}

#[derive(Clone, Debug)]
pub struct PairReport {
    /// The host's load average over a minute when the benchmark started (`/proc/loadavg`):
    /// other work on a shared host slows two VMs more than one.
    pub host_load_average: Option<f64>,
    pub single: Measurement<ModeRun>,
    pub single_about: String,
    pub pair: Measurement<PairFigures>,
}

impl PairReport {
    /// What broke, one line each: a side that failed, a run or the drill that failed, an
    /// acknowledged transaction lost or a `check` that did not pass.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if let Measurement::Failed(error) = &self.single {
            failures.push(format!("the single appliance: {error}"));
        }
        match &self.pair {
            Measurement::Failed(error) => failures.push(format!("the pair: {error}")),
            Measurement::NotRun(_) => {}
            Measurement::Measured(figures) => {
                for (mode, run) in &figures.runs {
                    if let Measurement::Failed(error) = run {
                        failures.push(format!("the pair in {}: {error}", mode.name()));
                    }
                }
                match &figures.drill {
                    Measurement::Failed(error) => failures.push(format!("the drill: {error}")),
                    Measurement::NotRun(_) => {}
                    Measurement::Measured(drill) => {
                        if drill.check.lost > 0 {
                            failures.push(format!(
                                "the drill: {} acknowledged transactions lost",
                                drill.check.lost
                            ));
                        }
                        if !drill.check.passed {
                            failures.push(format!(
                                "the drill: check did not pass ({})",
                                drill.check.other_differences.join(", ")
                            ));
                        }
                    }
                }
            }
        }
        failures
    }
}

/// Runs the benchmark and prints its table on stdout (progress on stderr). Fails, after
/// the table, if something broke.
pub fn pair(options: PairBenchOptions) -> anyhow::Result<PairReport> {
    let started = Instant::now();
    let report = measure(&options)?;
    print!("{}", table::render(&options, &report));
    eprintln!(
        "holdfast bench pair: took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let failures = report.failures();
    if !failures.is_empty() {
        anyhow::bail!("holdfast bench pair: {}", failures.join("\n"));
    }
    Ok(report)
}

/// Boots the single appliance and the pair (both loaded and checkpointed), then runs
/// `rounds` rounds, each a run on the single appliance and one on the pair in each mode, so
/// that a host whose other work comes and goes weighs on every column alike; then the
/// drill. Prints only progress.
pub fn measure(options: &PairBenchOptions) -> anyhow::Result<PairReport> {
    anyhow::ensure!(options.clients >= 1, "a run needs a client");
    anyhow::ensure!(options.rounds >= 1, "at least one round");
    std::fs::create_dir_all(&options.run_dir)
        .with_context(|| format!("creating {}", options.run_dir.display()))?;
    let request = ApplianceRequest {
        accelerator: options.accelerator,
        memory_mib: options.memory_mib,
    };
    let host_load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok());

    let mut single_about = String::new();
    let mut single = match &options.single {
        HoldfastSide::Unavailable(why) => Err(Measurement::NotRun(why.clone())),
        HoldfastSide::Launcher(launch) => {
            eprintln!("holdfast bench pair: the single appliance");
            start_single(options, launch.as_ref(), &request)
                .map(|(appliance, target, ledger)| {
                    single_about = format!("appliance at {}", appliance.address);
                    (appliance, target, ledger, Vec::new())
                })
                .map_err(|error| failed(error, "the single appliance"))
        }
    };
    let mut pair = match &options.pair {
        PairSide::Unavailable(why) => Err(Measurement::NotRun(why.clone())),
        PairSide::Launcher(launch) => {
            eprintln!("holdfast bench pair: the pair");
            start_pair(options, launch.as_ref(), &request).map_err(|error| failed(error, "the pair"))
        }
    };

    let mut runs: Vec<(ReplicationMode, Result<ModeRun, Measurement<ModeRun>>)> = ReplicationMode::ALL
        .into_iter()
        .map(|mode| (mode, Ok(ModeRun { rounds: Vec::new(), lag: None })))
        .collect();
    let mut lag_samples: Vec<Vec<LagSample>> = vec![Vec::new(); ReplicationMode::ALL.len()];
    let mut broken: Option<String> = None;
    for round in 1..=options.rounds {
        if let Ok((_, target, ledger, reports)) = &mut single {
            let seed = run_seed(options.seed, round, 0);
            let run = spawn_load(options, Arc::clone(target), Arc::clone(ledger), options.duration, options.drain, seed);
            match join_load(run) {
                Ok(report) => {
                    say_run(&format!("round {round}: single appliance"), &report, None);
                    reports.push(report);
                }
                Err(error) => single = Err(failed(error, "the single appliance")),
            }
        }
        let Ok(started) = &mut pair else { continue };
        for (index, (mode, run)) in runs.iter_mut().enumerate() {
            if let Some(why) = &broken {
                if run.is_ok() {
                    *run = Err(Measurement::NotRun(format!("an earlier run failed: {why}")));
                }
                continue;
            }
            let measured = (|| -> anyhow::Result<RunReport> {
                started.pair.set_mode(*mode)?;
                let seed = run_seed(options.seed, round, 1 + index as u64);
                let load = spawn_load(options, Arc::clone(&started.target), Arc::clone(&started.ledger), options.duration, options.drain, seed);
                let samples = sample_lag(&mut *started.pair, &load, options.duration)?;
                let report = join_load(load)?;
                say_run(&format!("round {round}: pair, {}", mode.name()), &report, summarize_lag(&samples).as_ref());
                lag_samples[index].extend(samples);
                Ok(report)
            })();
            match (measured, run) {
                (Ok(report), Ok(run)) => run.rounds.push(report),
                (Ok(_), Err(_)) => {}
                (Err(error), run) => {
                    broken = Some(format!("{error:#}").lines().next().unwrap_or_default().to_owned());
                    *run = Err(failed(error, &format!("the pair in {}", mode.name())));
                }
            }
        }
    }
    let single = match single {
        Ok((appliance, _, _, rounds)) => {
            drop(appliance);
            Measurement::Measured(ModeRun { rounds, lag: None })
        }
        Err(measurement) => measurement,
    };
    let pair = match pair {
        Err(measurement) => measurement,
        Ok(mut started) => {
            let drill = match &broken {
                Some(why) => Measurement::NotRun(format!("an earlier run failed: {why}")),
                None => Measurement::of(
                    drill(options, &mut *started.pair, Arc::clone(&started.target), Arc::clone(&started.ledger)),
                    "the drill",
                ),
            };
            let about = started.pair.about();
            // The figures stand whether or not the pair ends in order (dropping it ends it
            // anyway).
            if let Err(error) = started.pair.down() {
                eprintln!("holdfast bench pair: pair down: {error:#}");
            }
            let runs = runs
                .into_iter()
                .zip(lag_samples)
                .map(|((mode, run), samples)| {
                    let run = match run {
                        Ok(mut run) => {
                            run.lag = summarize_lag(&samples);
                            Measurement::Measured(run)
                        }
                        Err(measurement) => measurement,
                    };
                    (mode, run)
                })
                .collect();
            Measurement::Measured(PairFigures {
                load_time: started.load_time,
                runs,
                drill,
                about,
            })
        }
    };
    Ok(PairReport {
        host_load_average,
        single,
        single_about,
        pair,
    })
}

fn failed<T>(error: anyhow::Error, what: &str) -> Measurement<T> {
    eprintln!("holdfast bench pair: {what} failed: {error:#}");
    Measurement::Failed(format!("{error:#}"))
}

type SingleStarted = (crate::tp1::Appliance, Arc<HoldfastTarget>, Arc<Ledger>);

/// The single appliance booted, loaded and checkpointed.
fn start_single(
    options: &PairBenchOptions,
    launch: &dyn Fn(&ApplianceRequest) -> anyhow::Result<crate::tp1::Appliance>,
    request: &ApplianceRequest,
) -> anyhow::Result<SingleStarted> {
    let mut appliance = launch(request)?;
    load(options, appliance.address, appliance.admin_token, "single")?;
    // The loaded data written out before the first run, as on the pair.
    (appliance.checkpoint)()?;
    let ledger = fresh_ledger(options, "single")?;
    let target = Arc::new(HoldfastTarget::new(appliance.address, appliance.client_token)?);
    Ok((appliance, target, ledger))
}

struct PairStarted {
    pair: Box<dyn RunningPair>,
    target: Arc<HoldfastTarget>,
    /// One ledger for every run on the pair: the drill's check covers them all.
    ledger: Arc<Ledger>,
    load_time: Duration,
}

/// The pair up, loaded, checkpointed and its standby caught up.
fn start_pair(
    options: &PairBenchOptions,
    launch: &dyn Fn(&ApplianceRequest) -> anyhow::Result<Box<dyn RunningPair>>,
    request: &ApplianceRequest,
) -> anyhow::Result<PairStarted> {
    let mut pair = launch(request)?;
    let endpoint = pair.endpoint();
    let load_time = load(options, endpoint, pair.admin_token(), "pair")?;
    // The loaded data written out and streamed to the standby before the first run, so
    // that it does not fall on the first mode.
    pair.checkpoint()?;
    let ledger = fresh_ledger(options, "pair")?;
    let target = Arc::new(HoldfastTarget::new(endpoint, pair.client_token())?);
    Ok(PairStarted {
        pair,
        target,
        ledger,
        load_time,
    })
}

/// The drill: sync-durable (the mode that promises no acknowledged commit is lost), load
/// through the endpoint, the primary SIGKILLed `drill_kill_after` into it, the run goes on
/// against the promoted standby, then `check` through the endpoint.
fn drill(
    options: &PairBenchOptions,
    pair: &mut dyn RunningPair,
    target: Arc<HoldfastTarget>,
    ledger: Arc<Ledger>,
) -> anyhow::Result<Drill> {
    let mode = ReplicationMode::SyncDurable;
    pair.set_mode(mode)?;
    let started = Instant::now();
    // Round 0 is no throughput run's.
    let seed = run_seed(options.seed, 0, 0);
    let load = spawn_load(options, Arc::clone(&target), ledger, options.drill_duration, options.drill_drain, seed);
    // Every client connected, so that the kill comes under the whole load.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pair.endpoint_connections()? < u64::from(options.clients) {
        anyhow::ensure!(!load.is_finished(), "the drill's load ended before its clients connected");
        anyhow::ensure!(Instant::now() < deadline, "the drill's clients did not connect within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(options.drill_kill_after);
    let killed_at = Instant::now();
    pair.kill_primary()?;
    let promotion = pair.wait_promotion(Duration::from_secs(60));
    let report = join_load(load)?;
    let promotion = promotion?;
    let promotion_after = promotion.promoted_at.saturating_duration_since(killed_at);
    let serving_after = promotion.serving_at.map(|at| at.saturating_duration_since(killed_at));
    say_run("drill", &report, None);
    let silence_from_kill_ms = report.silence_from_ms(killed_at);
    eprintln!(
        "holdfast bench pair: drill: promotion announced {:.0} ms after the SIGKILL, the new primary serving {}; longest client silence {:.1} ms from {} the SIGKILL",
        promotion_after.as_secs_f64() * 1000.0,
        serving_after.map_or_else(|| "(not said)".to_owned(), |after| format!("{:.0} ms after", after.as_secs_f64() * 1000.0)),
        report.silence_us_max as f64 / 1000.0,
        RunReport::silence_from_words(silence_from_kill_ms)
    );
    let ledger = LedgerContents::read(&ledger_dir(options, "pair"))?;
    let snapshot = holdfast_tp1_load::block_on(target.snapshot())?
        .context("reading the new primary's data for check")?;
    let checked = check(target.describe(), &snapshot, &ledger);
    eprint!("{}", checked.render());
    Ok(Drill {
        mode,
        report,
        killed_at_seconds: killed_at.duration_since(started).as_secs_f64(),
        silence_from_kill_ms,
        promotion_after,
        serving_after,
        promotion_line: promotion.line,
        check: CheckFigures::of(&checked),
    })
}

/// Reads the lag every [`LAG_SAMPLE_INTERVAL`] while `load` runs new transactions.
fn sample_lag(
    pair: &mut dyn RunningPair,
    load: &JoinHandle<anyhow::Result<RunReport>>,
    duration: Duration,
) -> anyhow::Result<Vec<LagSample>> {
    let end = Instant::now() + duration;
    let mut samples = Vec::new();
    while Instant::now() < end && !load.is_finished() {
        let next = Instant::now() + LAG_SAMPLE_INTERVAL;
        if let Some(sample) = pair.lag()? {
            samples.push(sample);
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(samples)
}

/// Loads `scale` through `address`; how long it took.
fn load(options: &PairBenchOptions, address: SocketAddr, admin: Token, name: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let loader = HoldfastTarget::new(address, admin)?;
    holdfast_tp1_load::block_on(loader.load(options.scale, true))?
        .with_context(|| format!("loading scale {}", options.scale))?;
    let took = started.elapsed();
    eprintln!(
        "holdfast bench pair: {name}: loaded scale {} in {:.1} s",
        options.scale,
        took.as_secs_f64()
    );
    Ok(took)
}

fn ledger_dir(options: &PairBenchOptions, name: &str) -> PathBuf {
    options.run_dir.join(format!("ledger-{name}"))
}

fn fresh_ledger(options: &PairBenchOptions, name: &str) -> anyhow::Result<Arc<Ledger>> {
    let dir = ledger_dir(options, name);
    Ledger::reset(&dir)?;
    Ok(Arc::new(Ledger::open(&dir)?))
}

/// The seed of run `side` (0 the single appliance, 1 + the mode's index the pair) of
/// `round`: each run's own, because a seed repeats its transaction ids, and a repeated id
/// is a retry that the appliance answers from its record without applying it again (a run
/// that repeated the last one's seed measured replies, not transactions).
fn run_seed(seed: u64, round: u32, side: u64) -> u64 {
    seed.wrapping_add(u64::from(round) * 4 + side)
}

/// Closed-loop load at the options' clients on a thread of its own, so that the caller
/// can sample the pair or kill its primary meanwhile.
fn spawn_load(
    options: &PairBenchOptions,
    target: Arc<HoldfastTarget>,
    ledger: Arc<Ledger>,
    duration: Duration,
    drain: Duration,
    seed: u64,
) -> JoinHandle<anyhow::Result<RunReport>> {
    let load_options = LoadRunOptions {
        clients: options.clients,
        rate_per_second: None,
        pipeline: 1,
        duration,
        drain,
        seed,
        progress: false,
    };
    std::thread::spawn(move || holdfast_tp1_load::block_on(run_load(target, ledger, load_options))?)
}

fn join_load(load: JoinHandle<anyhow::Result<RunReport>>) -> anyhow::Result<RunReport> {
    load.join()
        .map_err(|_| anyhow::anyhow!("the load generator's thread panicked"))?
}

fn say_run(name: &str, report: &RunReport, lag: Option<&LagSummary>) {
    eprintln!(
        "holdfast bench pair: {name}: {} clients: {:.1} tps ({} acknowledged, {} refused, {} failed, {} unfinished, {} reconnects), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, longest silence {:.1} ms{}",
        report.clients,
        report.accepted_per_second,
        report.acknowledged,
        report.refused.values().sum::<u64>(),
        report.failed,
        report.unfinished,
        report.reconnects,
        report.latency.p50_us as f64 / 1000.0,
        report.latency.p99_us as f64 / 1000.0,
        report.latency.max_us as f64 / 1000.0,
        report.silence_us_max as f64 / 1000.0,
        lag.map(|lag| format!(
            ", lag median {} B / {} ms, max {} B / {} ms over {} samples",
            lag.bytes_median, lag.ms_median, lag.bytes_max, lag.ms_max, lag.samples
        ))
        .unwrap_or_default(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(bytes: u64, ms: u64) -> LagSample {
        LagSample { bytes, ms }
    }

    #[test]
    fn the_lag_summary_gives_a_median_that_was_seen_and_the_worst_case() {
        assert_eq!(summarize_lag(&[]), None);
        let one = summarize_lag(&[sample(10, 2)]).unwrap();
        assert_eq!((one.bytes_median, one.bytes_max, one.ms_median, one.ms_max), (10, 10, 2, 2));
        // Each figure is ordered on its own: the largest byte count and the oldest lag
        // need not be the same sample's.
        let summary =
            summarize_lag(&[sample(4096, 1), sample(0, 9), sample(1 << 20, 3), sample(512, 0)])
                .unwrap();
        assert_eq!(summary.samples, 4);
        // Even count: the lower middle value, one that was read, not a mean of two.
        assert_eq!(summary.bytes_median, 512);
        assert_eq!(summary.bytes_max, 1 << 20);
        assert_eq!(summary.ms_median, 1);
        assert_eq!(summary.ms_max, 9);
    }

    #[test]
    fn every_run_has_a_seed_of_its_own() {
        let mut seeds = vec![run_seed(u64::MAX, 0, 0)];
        for round in 1..=3 {
            for side in 0..4 {
                seeds.push(run_seed(u64::MAX, round, side));
            }
        }
        let count = seeds.len();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), count);
    }

    #[test]
    fn only_the_async_mode_is_asynchronous() {
        let names: Vec<&str> = ReplicationMode::ALL.iter().map(|mode| mode.name()).collect();
        assert_eq!(names, ["sync-durable", "sync-received", "async"]);
        assert!(ReplicationMode::SyncDurable.synchronous());
        assert!(ReplicationMode::SyncReceived.synchronous());
        assert!(!ReplicationMode::Async.synchronous());
    }
}
