//! `holdfast bench pair`: the options, and how its two sides are started and driven with
//! this CLI's own verbs, as an operator would: the single appliance as `holdfast bench
//! tp1` starts it, the pair with `holdfast pair up`, `pair mode`, `pair status --json`,
//! `vm kill` and `pair down`.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use holdfast_bench::Accelerator;
use holdfast_bench::pair::{
    LagSample, Measurement, PairBenchOptions, PairReport, PairSide, PromotionSeen, ReplicationMode,
    RunningPair,
};
use holdfast_bench::tp1::{ApplianceRequest, HoldfastSide};
use holdfast_image_builder::ImageDir;
use holdfast_qemu::QemuBinary;
use holdfast_tp1_protocol::Token;
use serde_json::{Value, json};

use super::tp1::{self, Running};
use crate::cli::{AccelArgument, BenchPairArguments};
use crate::commands::accel;
use crate::failure::Failure;
use crate::paths;

/// Each node's store mirrors, as tests/pair.rs makes them (the appliance's first checkpoint
/// writes its whole database through the log).
const STORE_MIB: &str = "2048";
/// How long `pair up` may take to serve on its endpoint, then to have a whole standby.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a mode switch may take to be said by the primary, with its standby whole.
const MODE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the standby may take to catch up (lag 0) before a run starts anyway.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after the promotion the supervisor may take to say the new primary serves.
const SERVING_TIMEOUT: Duration = Duration::from_secs(20);
/// Supervisor lines that say the pair broke.
const BROKEN_LINES: [&str; 4] = ["kernel panic", "STORE LOST", "FAILOVER FAILED", "NOT PROMOTING"];

pub fn pair(arguments: BenchPairArguments) -> Result<ExitCode, Failure> {
    let manifest = paths::source_dir().join(tp1::TP1_MANIFEST);
    // One image for both sides, built before anything is timed; removed at the end.
    let image = if manifest.is_file() {
        eprintln!("holdfast bench pair: building the TP1 appliance's image");
        let folder = Folder(tp1::fresh_state_dir("pair-image")?);
        let image_dir = folder.0.join("image");
        tp1::build_image(&manifest, &image_dir, &folder.0)?;
        Some((folder, image_dir))
    } else {
        None
    };
    let accelerator = match (arguments.accel, &image) {
        (AccelArgument::Tcg, _) => Accelerator::Tcg,
        (AccelArgument::Kvm, _) => Accelerator::Kvm,
        (AccelArgument::Auto, Some((_, image_dir))) => {
            let qemu = QemuBinary::find().map_err(Failure::other)?;
            accel::resolve(AccelArgument::Auto, &qemu, &ImageDir::new(image_dir).kernel())?
        }
        (AccelArgument::Auto, None) => Accelerator::Tcg,
    };
    let (single, pair) = match &image {
        None => {
            let why = format!("the TP1 service is not in this source tree ({} missing)", tp1::TP1_MANIFEST);
            (HoldfastSide::Unavailable(why.clone()), PairSide::Unavailable(why))
        }
        Some((_, image_dir)) => {
            let single_image = image_dir.clone();
            let pair_image = image_dir.clone();
            (
                HoldfastSide::Launcher(Box::new(move |request| {
                    // Mirrored like each node of the pair: the table's ratio is what the
                    // standby costs, not what the second disk does.
                    tp1::boot(&single_image, tp1::fresh_state_dir("pair-single")?, request, tp1::Mirrors::Two)
                })),
                PairSide::Launcher(Box::new(move |request| {
                    Ok(Box::new(CliPair::up(&pair_image, request)?) as Box<dyn RunningPair>)
                })),
            )
        }
    };
    let mut options = if arguments.quick {
        PairBenchOptions::quick(single, pair)
    } else {
        PairBenchOptions::new(single, pair)
    };
    options.accelerator = accelerator;
    options.memory_mib = arguments.memory_mib;
    if let Some(clients) = arguments.clients {
        options.clients = clients;
    }
    if let Some(scale) = arguments.scale {
        options.scale = scale;
    }
    if let Some(seconds) = arguments.duration_s {
        options.duration = Duration::from_secs(u64::from(seconds));
    }
    if let Some(rounds) = arguments.rounds {
        options.rounds = rounds;
    }
    if let Some(seed) = arguments.seed {
        options.seed = seed;
    }
    if !arguments.json {
        holdfast_bench::pair::pair(options)?;
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let report = holdfast_bench::pair::measure(&options)?;
    println!("{:#}", report_json(&options, &report));
    eprintln!("holdfast bench pair: took {:.0} s", started.elapsed().as_secs_f64());
    let failures = report.failures();
    if !failures.is_empty() {
        return Err(Failure::other(format!("holdfast bench pair: {}", failures.join("\n"))));
    }
    Ok(ExitCode::SUCCESS)
}

/// A folder removed when dropped.
struct Folder(PathBuf);

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The report for programs: what the table shows, with each run's whole report.
fn report_json(options: &PairBenchOptions, report: &PairReport) -> Value {
    fn measurement<T>(measurement: &Measurement<T>, figures: impl Fn(&T) -> Value) -> Value {
        match measurement {
            Measurement::Measured(value) => figures(value),
            Measurement::NotRun(why) => json!({ "not_run": why }),
            Measurement::Failed(error) => json!({ "failed": error }),
        }
    }
    let single_tps = report.single.measured().map(holdfast_bench::pair::ModeRun::tps_median);
    let run = |run: &holdfast_bench::pair::ModeRun| {
        json!({
            "tps_median": run.tps_median(),
            "tps_min": run.tps_min(),
            "ratio_to_single": single_tps.filter(|tps| *tps > 0.0).map(|tps| run.tps_median() / tps),
            "p50_us_median": run.p50_us(),
            "p99_us_median": run.p99_us(),
            "max_us": run.max_us(),
            "silence_us_max": run.silence_us_max(),
            "lag": run.lag.map(|lag| json!({
                "samples": lag.samples,
                "bytes_median": lag.bytes_median,
                "bytes_max": lag.bytes_max,
                "ms_median": lag.ms_median,
                "ms_max": lag.ms_max,
            })),
            "rounds": serde_json::to_value(&run.rounds).unwrap_or(Value::Null),
        })
    };
    json!({
        "quick": options.quick,
        "accelerator": options.accelerator.to_string(),
        "memory_mib": options.memory_mib,
        "scale": options.scale,
        "clients": options.clients,
        "duration_seconds": options.duration.as_secs_f64(),
        "rounds": options.rounds,
        "seed": options.seed,
        "goals": {
            "sync_ratio_min": holdfast_bench::pair::GOAL_SYNC_RATIO_MIN,
            "outage_ms_max": holdfast_bench::pair::GOAL_OUTAGE_MAX.as_millis() as u64,
            "lost_max": 0,
        },
        "single": measurement(&report.single, run),
        "pair": measurement(&report.pair, |figures| {
            let modes: serde_json::Map<String, Value> = figures
                .runs
                .iter()
                .map(|(mode, measured)| (mode.name().to_owned(), measurement(measured, run)))
                .collect();
            json!({
                "about": figures.about,
                "load_seconds": figures.load_time.as_secs_f64(),
                "modes": modes,
                "drill": measurement(&figures.drill, |drill| json!({
                    "mode": drill.mode.name(),
                    "outage_ms": drill.report.silence_us_max as f64 / 1000.0,
                    "outage_from_seconds": drill.report.silence_from_seconds,
                    "killed_at_seconds": drill.killed_at_seconds,
                    "outage_from_kill_ms": drill.silence_from_kill_ms,
                    "promotion_after_ms": drill.promotion_after.as_secs_f64() * 1000.0,
                    "serving_after_ms": drill.serving_after.map(|after| after.as_secs_f64() * 1000.0),
                    "promotion_line": drill.promotion_line,
                    "lost": drill.check.lost,
                    "check_passed": drill.check.passed,
                    "check_acknowledged": drill.check.acknowledged,
                    "check_other_differences": drill.check.other_differences,
                    "run": serde_json::to_value(&drill.report).unwrap_or(Value::Null),
                })),
            })
        }),
        "failures": report.failures(),
    })
}

/// What the benchmark reads of `holdfast pair status --json`.
#[derive(Clone, Debug, PartialEq)]
struct PairView {
    /// The primary's node number.
    primary: u64,
    /// The primary's own word on its mode, its standby's store and whether it is degraded.
    mode: Option<String>,
    standby_whole: bool,
    degraded: bool,
    /// On the standby's row: the primary's view of its lag.
    lag: Option<LagSample>,
    endpoint_connections: u64,
    lag_bytes_max: Option<u64>,
}

impl PairView {
    fn of(status: &Value) -> anyhow::Result<Self> {
        let primary = status["primary"].as_u64().context("pair status: no primary")?;
        let nodes = status["nodes"].as_array().context("pair status: no nodes")?;
        let said = nodes
            .iter()
            .find(|node| node["node"].as_u64() == Some(primary))
            .map(|node| &node["status"])
            .filter(|said| !said.is_null());
        let lag = nodes.iter().find_map(|node| {
            Some(LagSample { bytes: node["lag_bytes"].as_u64()?, ms: node["lag_ms"].as_u64()? })
        });
        Ok(Self {
            primary,
            mode: said.and_then(|said| said["mode"].as_str()).map(str::to_owned),
            standby_whole: said.is_some_and(|said| said["standby_state"] == "consistent"),
            degraded: said.is_some_and(|said| said["degraded"] == true),
            lag,
            endpoint_connections: status["endpoint_connections"].as_u64().unwrap_or(0),
            lag_bytes_max: status["lag_bytes_max"].as_u64(),
        })
    }

    /// Runs in `mode`, with a standby that could be promoted (whole, not degraded).
    fn runs_in(&self, mode: ReplicationMode) -> bool {
        self.mode.as_deref() == Some(mode.name()) && self.standby_whole && !self.degraded
    }
}

/// A pair under `holdfast pair up`, in a state folder of its own.
struct CliPair {
    exe: PathBuf,
    name: String,
    /// `pair up`; killed, and the state folder removed, when dropped.
    running: Running,
    lines: Receiver<String>,
    transcript: Arc<Mutex<VecDeque<String>>>,
    endpoint: SocketAddr,
    client_token: Token,
    admin_token: Token,
    lag_bytes_max: Option<u64>,
}

impl CliPair {
    /// `holdfast pair up` in sync-durable mode; waits for the endpoint, the primary ready and
    /// the standby whole, then mints tokens on the primary.
    fn up(image_dir: &Path, request: &ApplianceRequest) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding this program")?;
        let state_dir = tp1::fresh_state_dir("pair")?;
        let name = format!("bench-pair-{}", std::process::id());
        let mut command = Command::new(&exe);
        command
            .args(["pair", "up", &name, "--mode", "sync-durable", "--store-mib", STORE_MIB])
            .args(["--accel", tp1::accel_name(request.accelerator)])
            .args(["--memory-mib", &request.memory_mib.to_string()])
            .arg("--image-dir")
            .arg(image_dir)
            .env("HOLDFAST_STATE_DIR", &state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().with_context(|| format!("starting {command:?}"))?;
        let transcript = Arc::new(Mutex::new(VecDeque::new()));
        let (sender, lines) = std::sync::mpsc::channel();
        for stream in [
            child.stdout.take().map(|out| Box::new(out) as Box<dyn Read + Send>),
            child.stderr.take().map(|err| Box::new(err) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let transcript = Arc::clone(&transcript);
            let sender = sender.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    {
                        let mut kept = transcript.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                        if kept.len() == tp1::TRANSCRIPT_LINES {
                            kept.pop_front();
                        }
                        kept.push_back(line.clone());
                    }
                    let _ = sender.send(line);
                }
            });
        }
        let mut pair = Self {
            exe,
            name,
            running: Running { child, state_dir },
            lines,
            transcript,
            endpoint: SocketAddr::from(([127, 0, 0, 1], 0)),
            client_token: Token([0; 16]),
            admin_token: Token([0; 16]),
            lag_bytes_max: None,
        };
        pair.start().map_err(|error| pair.with_transcript(error))?;
        Ok(pair)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let prefix = format!("pair {}: ", self.name);
        let endpoint = self.wait_line(ENDPOINT_TIMEOUT, "its endpoint", |line| {
            line.strip_prefix(&prefix)?.strip_prefix("endpoint ")?.parse::<SocketAddr>().ok()
        })?;
        self.endpoint = endpoint;
        let ready = format!("{prefix}node 1 ({}-1) ready, primary", self.name);
        self.wait_line(READY_TIMEOUT, "the primary is ready", |line| line.starts_with(&ready).then_some(()))?;
        let whole = format!("{prefix}node 2 ({}-2) standby: consistent", self.name);
        self.wait_line(READY_TIMEOUT, "the standby is whole", |line| line.starts_with(&whole).then_some(()))?;
        eprintln!("holdfast bench pair: the pair serves at {endpoint}, its standby whole");
        let deadline = Instant::now() + tp1::APPLIANCE_START_TIMEOUT;
        let primary = format!("{}-1", self.name);
        self.client_token = tp1::mint(&self.exe, &mut self.running, &primary, false, deadline)?;
        self.admin_token = tp1::mint(&self.exe, &mut self.running, &primary, true, deadline)?;
        self.lag_bytes_max = self.view()?.lag_bytes_max;
        Ok(())
    }

    /// Waits for a line of `pair up` that `wanted` accepts, failing on one that says the
    /// pair broke.
    fn wait_line<T>(&self, within: Duration, what: &str, wanted: impl Fn(&str) -> Option<T>) -> anyhow::Result<T> {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if let Some(bad) = BROKEN_LINES.iter().find(|bad| line.contains(*bad)) {
                        bail!("pair up said {bad} before it said {what}: {line}");
                    }
                    if let Some(found) = wanted(&line) {
                        return Ok(found);
                    }
                }
                Err(RecvTimeoutError::Timeout) => bail!("pair up did not say {what} within {} s", within.as_secs()),
                Err(RecvTimeoutError::Disconnected) => bail!("pair up ended before it said {what}"),
            }
        }
    }

    fn with_transcript(&self, error: anyhow::Error) -> anyhow::Error {
        let kept = self.transcript.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let console: String = kept.iter().map(|line| format!("  | {line}\n")).collect();
        anyhow::anyhow!("{error:#}\nholdfast pair up:\n{console}")
    }

    fn holdfast(&self, arguments: &[&str]) -> anyhow::Result<String> {
        let arguments: Vec<&OsStr> = arguments.iter().map(OsStr::new).collect();
        tp1::holdfast_step(&self.running.state_dir, &arguments)
    }

    fn view(&self) -> anyhow::Result<PairView> {
        let text = self.holdfast(&["pair", "status", &self.name, "--json"])?;
        let status: Value = serde_json::from_str(&text).context("pair status --json")?;
        PairView::of(&status)
    }
}

impl RunningPair for CliPair {
    fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    fn client_token(&self) -> Token {
        self.client_token
    }

    fn admin_token(&self) -> Token {
        self.admin_token
    }

    fn set_mode(&mut self, mode: ReplicationMode) -> anyhow::Result<()> {
        self.holdfast(&["pair", "mode", &self.name, mode.name()])?;
        let deadline = Instant::now() + MODE_TIMEOUT;
        let mut view = self.view()?;
        while !view.runs_in(mode) {
            if Instant::now() >= deadline {
                bail!("the primary did not say it runs in {} with a whole standby within {} s: {view:?}", mode.name(), MODE_TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(100));
            view = self.view()?;
        }
        // A standby still catching up from the last run would slow this one.
        let caught_up_by = Instant::now() + CATCH_UP_TIMEOUT;
        while view.lag.is_some_and(|lag| lag.bytes > 0) && Instant::now() < caught_up_by {
            std::thread::sleep(Duration::from_millis(100));
            view = self.view()?;
        }
        eprintln!("holdfast bench pair: the primary runs in {}; lag {:?}", mode.name(), view.lag);
        Ok(())
    }

    fn checkpoint(&mut self) -> anyhow::Result<()> {
        let primary = format!("{}-{}", self.name, self.view()?.primary);
        tp1::checkpoint_after_writes(&self.running.state_dir, &primary)?;
        let deadline = Instant::now() + CATCH_UP_TIMEOUT;
        while self.view()?.lag.is_some_and(|lag| lag.bytes > 0) {
            if Instant::now() >= deadline {
                bail!("the standby did not catch up with the checkpoint within {} s", CATCH_UP_TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn lag(&mut self) -> anyhow::Result<Option<LagSample>> {
        Ok(self.view()?.lag)
    }

    fn endpoint_connections(&mut self) -> anyhow::Result<u64> {
        Ok(self.view()?.endpoint_connections)
    }

    fn kill_primary(&mut self) -> anyhow::Result<()> {
        let primary = format!("{}-{}", self.name, self.view()?.primary);
        self.holdfast(&["vm", "kill", &primary]).map(drop)
    }

    fn wait_promotion(&mut self, within: Duration) -> anyhow::Result<PromotionSeen> {
        let prefix = format!("pair {}: ", self.name);
        let failover = format!("{prefix}FAILOVER: ");
        let line = self
            .wait_line(within, "it promoted the standby (FAILOVER)", |line| line.starts_with(&failover).then(|| line.to_owned()))
            .map_err(|error| self.with_transcript(error))?;
        let promoted_at = Instant::now();
        // `node N (NAME-N) ready, primary`, once the promoted VM says it serves; the
        // figure is left out rather than the drill failed if it does not come.
        let serving = self.wait_line(SERVING_TIMEOUT, "the new primary serves", |said| {
            let rest = said.strip_prefix(&prefix)?.strip_prefix("node ")?;
            rest.contains(") ready, primary").then_some(())
        });
        if let Err(error) = &serving {
            eprintln!("holdfast bench pair: {error:#}");
        }
        Ok(PromotionSeen { line, promoted_at, serving_at: serving.ok().map(|()| Instant::now()) })
    }

    fn down(mut self: Box<Self>) -> anyhow::Result<()> {
        self.holdfast(&["pair", "down", &self.name])?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.running.child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                bail!("pair up did not end within 60 s of pair down");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn about(&self) -> String {
        format!(
            "`holdfast pair up` ({name}-1 primary, {name}-2 standby), {STORE_MIB} MiB store mirrors, the heartbeat timeout and failure detection of pair up's defaults, async lag bound {}",
            self.lag_bytes_max.map_or_else(|| "unknown".to_owned(), |bytes| format!("{bytes} bytes")),
            name = self.name,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(primary_said: Value, lag_bytes: Value) -> Value {
        json!({
            "ok": true,
            "primary": 1,
            "endpoint_connections": 16,
            "lag_bytes_max": 16777216,
            "nodes": [
                { "node": 1, "role": "primary", "lag_bytes": null, "lag_ms": null, "status": primary_said },
                { "node": 2, "role": "standby", "lag_bytes": lag_bytes, "lag_ms": 3, "status": { "mode": "async", "standby_state": "consistent", "degraded": false } },
            ],
        })
    }

    #[test]
    fn the_view_takes_the_primarys_word_and_the_lag_from_the_standbys_row() {
        let said = json!({ "mode": "sync-received", "standby_state": "consistent", "degraded": false });
        let view = PairView::of(&status(said, json!(4096))).unwrap();
        assert_eq!(view.primary, 1);
        assert_eq!(view.lag, Some(LagSample { bytes: 4096, ms: 3 }));
        assert_eq!(view.endpoint_connections, 16);
        assert_eq!(view.lag_bytes_max, Some(16 << 20));
        // The standby's own word ("async") is not the primary's mode.
        assert!(view.runs_in(ReplicationMode::SyncReceived));
        assert!(!view.runs_in(ReplicationMode::Async));
    }

    #[test]
    fn a_primary_that_is_degraded_copying_or_silent_does_not_run_in_a_mode() {
        let degraded = json!({ "mode": "sync-durable", "standby_state": "consistent", "degraded": true });
        assert!(!PairView::of(&status(degraded, json!(0))).unwrap().runs_in(ReplicationMode::SyncDurable));
        let copying = json!({ "mode": "sync-durable", "standby_state": "copying", "degraded": false });
        assert!(!PairView::of(&status(copying, json!(0))).unwrap().runs_in(ReplicationMode::SyncDurable));
        let silent = PairView::of(&status(Value::Null, Value::Null)).unwrap();
        assert!(!silent.runs_in(ReplicationMode::SyncDurable));
        assert_eq!(silent.lag, None);
        assert!(PairView::of(&json!({ "nodes": [] })).is_err());
    }
}
