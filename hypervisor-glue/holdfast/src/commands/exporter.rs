//! `holdfast exporter`: serves every running VM's counters to Prometheus at
//! `http://127.0.0.1:PORT/metrics`, each series labelled with its `vm` and `role`, beside
//! the exporter's own health (`holdfast_exporter_*`).
//!
//! A scrape never waits for a guest: one poller thread per VM asks its admin service for
//! `counters` and `checkpoint status` every poll interval, with a short time limit, and keeps
//! the last answer; `/metrics` only encodes those answers. A slow or hung VM costs its own
//! poller, never the scrape or the other VMs, and a VM is asked once per interval however
//! often Prometheus scrapes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::cli::ExporterArguments;
use crate::failure::Failure;
use crate::paths;

/// Where the exporter listens unless told otherwise (not an IANA port; 9717 is free in
/// Prometheus's default port allocation list).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9717";

/// The role of a VM that is not half of a pair (issue 18's pair will say primary/standby).
const ROLE_STANDALONE: &str = "standalone";

/// The content type of the OpenMetrics text prometheus-client writes.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels as the exposition writes them, in order.
type Labels = Vec<(String, String)>;

/// One line of a guest's exposition: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// Reads the Prometheus text a guest's admin service sends (`counters`): sample lines,
/// `#` comments and the closing `ok` line. A line that is none of these is an error naming
/// it: the guest and the exporter disagree about the format.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line == "ok" || line.starts_with("ok ") {
            continue;
        }
        samples.push(parse_sample(line).ok_or_else(|| format!("not a sample line: {line:?}"))?);
    }
    Ok(samples)
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let valid_name = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !valid_name {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = after_brace;
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let equals = rest.find('=')?;
            let key = rest[..equals].trim().to_owned();
            let mut chars = rest[equals + 1..].strip_prefix('"')?.char_indices();
            let mut value = String::new();
            let close = loop {
                match chars.next()? {
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    (index, '"') => break index,
                    (_, other) => value.push(other),
                }
            };
            labels.push((key, value));
            rest = &rest[equals + 1 + 1 + close + 1..];
        }
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        number => number.parse().ok()?,
    };
    Some(Sample { name: name.to_owned(), labels, value })
}

/// `holdfast_checkpoint_interval_seconds` from a `checkpoint status` reply
/// (`ok generation <g> interval-ms <ms> ...`): the rules compare stabilization time with it.
pub fn interval_from_status(reply: &str) -> Option<Sample> {
    let mut words = reply.split_whitespace();
    while let Some(word) = words.next() {
        if word == "interval-ms" {
            let milliseconds: f64 = words.next()?.parse().ok()?;
            return Some(Sample {
                name: "holdfast_checkpoint_interval_seconds".to_owned(),
                labels: Vec::new(),
                value: milliseconds / 1000.0,
            });
        }
    }
    None
}

/// What the exporter last heard from one VM.
#[derive(Debug)]
struct VmState {
    role: &'static str,
    /// The last poll got an answer.
    up: bool,
    /// The last answer's samples (kept through failed polls, so a hiccup leaves no gap in
    /// counters; `holdfast_exporter_vm_up` says whether they are fresh).
    samples: Vec<Sample>,
    /// When the samples were read.
    read_at: Option<Instant>,
}

/// Every VM's last answer, by name; shared by the pollers and the scrapes.
#[derive(Debug, Default)]
pub struct VmTable {
    vms: Mutex<BTreeMap<String, VmState>>,
}

impl VmTable {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, VmState>> {
        // A poller that panicked mid-update leaves whole values behind: keep serving.
        self.vms.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a poll's answer (`Ok`) or failure (`Err`) for `vm`.
    pub fn record(&self, vm: &str, answer: Result<Vec<Sample>, ()>) {
        let mut vms = self.lock();
        let state = vms.entry(vm.to_owned()).or_insert_with(|| VmState {
            role: ROLE_STANDALONE,
            up: false,
            samples: Vec::new(),
            read_at: None,
        });
        match answer {
            Ok(samples) => {
                state.up = true;
                state.samples = samples;
                state.read_at = Some(Instant::now());
            }
            Err(()) => state.up = false,
        }
    }

    pub fn forget(&self, vm: &str) {
        self.lock().remove(vm);
    }
}

/// The kind of a metric family, from its samples' names (the guests send no `# TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// One histogram series being gathered from its `_bucket`, `_sum` and `_count` lines.
#[derive(Debug, Default)]
struct HistogramSeries {
    /// (upper bound, cumulative count), as the text gives them.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// One family's series, labels first.
#[derive(Debug, Default)]
struct FamilyData {
    values: BTreeMap<Vec<(String, String)>, f64>,
    histograms: BTreeMap<Vec<(String, String)>, HistogramSeries>,
}

impl Collector for VmTable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let vms = self.lock();
        let mut families: BTreeMap<(String, Kind), FamilyData> = BTreeMap::new();
        let mut up = FamilyData::default();
        let mut age = FamilyData::default();
        for (vm, state) in vms.iter() {
            let vm_labels = vec![("vm".to_owned(), vm.clone()), ("role".to_owned(), state.role.to_owned())];
            up.values.insert(vm_labels.clone(), if state.up { 1.0 } else { 0.0 });
            if let Some(read_at) = state.read_at {
                age.values.insert(vm_labels.clone(), read_at.elapsed().as_secs_f64());
            }
            let histogram_bases: BTreeSet<&str> = state
                .samples
                .iter()
                .filter_map(|sample| {
                    let base = sample.name.strip_suffix("_sum")?;
                    let has_count = state.samples.iter().any(|other| {
                        other.name.strip_suffix("_count") == Some(base) && other.labels == sample.labels
                    });
                    has_count.then_some(base)
                })
                .collect();
            for sample in &state.samples {
                let mut labels = vm_labels.clone();
                let mut le = None;
                for (key, value) in &sample.labels {
                    if key == "le" {
                        le = Some(value.as_str());
                    } else if key != "vm" && key != "role" {
                        labels.push((key.clone(), value.clone()));
                    }
                }
                let histogram_part = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                    let base = sample.name.strip_suffix(suffix)?;
                    histogram_bases.contains(base).then_some((base, *suffix))
                });
                if let Some((base, suffix)) = histogram_part {
                    let family = families.entry((base.to_owned(), Kind::Histogram)).or_default();
                    let series = family.histograms.entry(labels).or_default();
                    match suffix {
                        "_sum" => series.sum = sample.value,
                        "_count" => series.count = sample.value,
                        _ => {
                            let bound = match le {
                                Some("+Inf") => f64::INFINITY,
                                Some(text) => match text.parse() {
                                    Ok(bound) => bound,
                                    Err(_) => continue,
                                },
                                None => continue,
                            };
                            series.buckets.push((bound, sample.value));
                        }
                    }
                } else if let Some(base) = sample.name.strip_suffix("_total") {
                    families.entry((base.to_owned(), Kind::Counter)).or_default().values.insert(labels, sample.value);
                } else {
                    families.entry((sample.name.clone(), Kind::Gauge)).or_default().values.insert(labels, sample.value);
                }
            }
        }
        drop(vms);

        encode_values(&mut encoder, "holdfast_exporter_vm_up", "1 if the VM's admin service answered the last poll", MetricType::Gauge, &up)?;
        encode_values(
            &mut encoder,
            "holdfast_exporter_sample_age_seconds",
            "Seconds since the VM's counters were last read",
            MetricType::Gauge,
            &age,
        )?;
        for ((name, kind), family) in &families {
            let help = "Read from the VM's admin service (`holdfast vm counters`)";
            match kind {
                Kind::Gauge => encode_values(&mut encoder, name, help, MetricType::Gauge, family)?,
                Kind::Counter => encode_values(&mut encoder, name, help, MetricType::Counter, family)?,
                Kind::Histogram => {
                    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
                    for (labels, series) in &family.histograms {
                        let buckets = bucket_counts(series);
                        let mut one = metric.encode_family(labels)?;
                        one.encode_histogram::<NoLabelSet>(series.sum, series.count as u64, &buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The per-bucket counts prometheus-client wants from the text's cumulative ones, ending with
/// `+Inf` (a `_sum`/`_count` pair without buckets becomes a histogram of that one bucket).
fn bucket_counts(series: &HistogramSeries) -> Vec<(f64, u64)> {
    let mut cumulative: Vec<(f64, f64)> = series.buckets.clone();
    cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
    if cumulative.last().is_none_or(|&(bound, _)| bound != f64::INFINITY) {
        cumulative.push((f64::INFINITY, series.count));
    }
    let mut before = 0.0;
    cumulative
        .into_iter()
        .map(|(bound, total)| {
            // A guest's buckets are cumulative; one that is not gives 0, never a wrap.
            let count = (total - before).max(0.0) as u64;
            before = total.max(before);
            (bound, count)
        })
        .collect()
}

fn encode_values(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    family: &FamilyData,
) -> Result<(), std::fmt::Error> {
    if family.values.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in &family.values {
        let mut one = metric.encode_family(labels)?;
        match kind {
            MetricType::Counter => one.encode_counter::<NoLabelSet, f64, f64>(value, None)?,
            _ => one.encode_gauge(value)?,
        }
    }
    Ok(())
}

/// The exporter's own health, kept by prometheus-client's typed metrics.
#[derive(Debug)]
struct Health {
    scrapes: Counter,
    scrape_seconds: Gauge<f64, AtomicU64>,
    poll_errors: Family<Labels, Counter>,
    poll_seconds: Family<Labels, Histogram>,
}

/// The exporter: the VM table, its health and the registry that encodes both.
pub struct Exporter {
    pub table: Arc<VmTable>,
    health: Health,
    registry: Registry,
}

impl Exporter {
    pub fn new() -> Self {
        let table = Arc::new(VmTable::default());
        let health = Health {
            scrapes: Counter::default(),
            scrape_seconds: Gauge::default(),
            poll_errors: Family::default(),
            poll_seconds: Family::new_with_constructor(|| {
                // 1 ms to 10 s: a guest under TCG answers in tens of milliseconds.
                Histogram::new([0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0])
            }),
        };
        let mut registry = Registry::default();
        registry.register("holdfast_exporter_scrapes", "Scrapes of /metrics served", health.scrapes.clone());
        registry.register(
            "holdfast_exporter_scrape_seconds",
            "How long the previous scrape took to encode (it reads no VM)",
            health.scrape_seconds.clone(),
        );
        registry.register(
            "holdfast_exporter_poll_errors",
            "Polls of a VM that got no answer in time or an error",
            health.poll_errors.clone(),
        );
        registry.register(
            "holdfast_exporter_poll_seconds",
            "How long a poll of a VM's admin service took",
            health.poll_seconds.clone(),
        );
        registry.register_collector(Box::new(table.clone()));
        Self { table, health, registry }
    }

    /// `/metrics`: the OpenMetrics text of every VM's last answer and the exporter's health.
    pub fn scrape(&self) -> String {
        let started = Instant::now();
        self.health.scrapes.inc();
        let mut text = String::new();
        // Writing to a String fails only if an encoder does, which ours never do.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            text = format!("# encoding failed: {error}\n# EOF\n");
        }
        self.health.scrape_seconds.set(started.elapsed().as_secs_f64());
        text
    }

    /// Records a poll of `vm` that took `elapsed` and got `answer`.
    pub fn record_poll(&self, vm: &str, elapsed: Duration, answer: Result<Vec<Sample>, ()>) {
        let labels = vec![("vm".to_owned(), vm.to_owned())];
        self.health.poll_seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if answer.is_err() {
            self.health.poll_errors.get_or_create(&labels).inc();
        }
        self.table.record(vm, answer);
    }

    pub fn forget(&self, vm: &str) {
        let labels = vec![("vm".to_owned(), vm.to_owned())];
        self.health.poll_errors.remove(&labels);
        self.health.poll_seconds.remove(&labels);
        self.table.forget(vm);
    }
}

impl Default for Exporter {
    fn default() -> Self {
        Self::new()
    }
}

/// What one poll found.
enum Poll {
    Answered(Vec<Sample>),
    /// The VM answered badly or not in time.
    Failed(String),
    /// Nothing listens on its control socket: the VM stopped.
    Gone,
}

/// A `counters` reply has the store's generation; a `checkpoint status` reply starts so.
fn is_counters(reply: &str) -> bool {
    reply.lines().any(|line| line.starts_with("holdfast_checkpoint_generation "))
}

fn is_status(reply: &str) -> bool {
    reply.starts_with("ok generation ")
}

fn poll(socket: &Path, vm: &str, time_limit: Duration) -> Poll {
    let counters = match super::control::request_matching(socket, vm, "counters", time_limit, is_counters) {
        Ok(reply) => reply,
        Err(Failure::Input(_)) => return Poll::Gone,
        Err(failure) => return Poll::Failed(failure.to_string()),
    };
    let mut samples = match parse_exposition(&counters) {
        Ok(samples) => samples,
        Err(error) => return Poll::Failed(format!("VM '{vm}': {error}")),
    };
    match super::control::request_matching(socket, vm, "checkpoint status", time_limit, is_status) {
        Ok(reply) => samples.extend(interval_from_status(&reply)),
        Err(Failure::Input(_)) => return Poll::Gone,
        // A slow answer leaves the interval out of this poll; the counters still count.
        Err(_) => {}
    }
    Poll::Answered(samples)
}

/// The VMs whose control sockets are in the state directory (running or not).
fn discover(state_dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| paths::check_vm_name(name).is_ok())
        .filter_map(|name| {
            let socket = paths::control_socket_beside(&paths::qmp_socket_of(&name).ok()?);
            socket.exists().then_some((name, socket))
        })
        .collect();
    found.sort();
    found
}

/// Starts the thread that finds VMs and a poller thread for each, which stops when its VM
/// does. They run for the life of the process.
pub fn start_pollers(exporter: Arc<Exporter>, state_dir: PathBuf, interval: Duration, time_limit: Duration) {
    let polling: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    std::thread::spawn(move || loop {
        for (vm, socket) in discover(&state_dir) {
            let new = polling.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(vm.clone());
            if !new {
                continue;
            }
            let exporter = exporter.clone();
            let polling = polling.clone();
            std::thread::spawn(move || {
                loop {
                    let started = Instant::now();
                    match poll(&socket, &vm, time_limit) {
                        Poll::Answered(samples) => exporter.record_poll(&vm, started.elapsed(), Ok(samples)),
                        Poll::Failed(why) => {
                            eprintln!("holdfast exporter: {why}");
                            exporter.record_poll(&vm, started.elapsed(), Err(()));
                        }
                        Poll::Gone => break,
                    }
                    std::thread::sleep(interval.saturating_sub(started.elapsed()));
                }
                exporter.forget(&vm);
                polling.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&vm);
            });
        }
        std::thread::sleep(interval);
    });
}

/// Refuses anything but a loopback address: the counters are not for the network.
pub fn check_listen(address: SocketAddr) -> Result<(), Failure> {
    if address.ip().is_loopback() {
        Ok(())
    } else {
        Err(Failure::input(format!(
            "the exporter listens on loopback addresses only (127.0.0.1:PORT), not {address}"
        )))
    }
}

pub fn run(arguments: ExporterArguments) -> Result<ExitCode, Failure> {
    check_listen(arguments.listen)?;
    if arguments.poll_interval_ms == 0 || arguments.answer_time_limit_ms == 0 {
        return Err(Failure::input("--poll-interval-ms and --answer-time-limit-ms must be above 0"));
    }
    let state_dir = paths::state_dir()?;
    let exporter = Arc::new(Exporter::new());
    start_pollers(
        exporter.clone(),
        state_dir.clone(),
        Duration::from_millis(arguments.poll_interval_ms),
        Duration::from_millis(arguments.answer_time_limit_ms),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|error| Failure::other(format!("cannot start the exporter's runtime: {error}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(arguments.listen)
            .await
            .map_err(|error| Failure::other(format!("cannot listen on {}: {error}", arguments.listen)))?;
        let address = listener.local_addr()?;
        // Tests and `holdfast monitor up` read the port from this line.
        eprintln!("holdfast: exporter on http://{address}/metrics (VMs under {})", state_dir.display());
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let exporter = exporter.clone();
                    async move { ([(axum::http::header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], exporter.scrape()) }
                }),
            )
            .route("/", axum::routing::get(|| async { "holdfast exporter: the metrics are at /metrics\n" }));
        axum::serve(listener, app)
            .await
            .map_err(|error| Failure::other(format!("the exporter's HTTP server stopped: {error}")))
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TP1 appliance's `counters` reply, as `holdfast vm counters` printed it.
    const TP1_COUNTERS: &str = "holdfast_checkpoint_generation 42
holdfast_checkpoint_objects_written_total 1234
holdfast_checkpoint_stabilization_seconds 0.012
holdfast_store_log_fill_ratio 0.031
holdfast_journal_commit_seconds_sum 0.5
holdfast_journal_commit_seconds_count 100
holdfast_tp1_transactions_total 1000
holdfast_tp1_errors_total{code=\"bad_token\"} 3
holdfast_tp1_errors_total{code=\"internal\"} 0
holdfast_tp1_commit_seconds_bucket{le=\"0.001\"} 10
holdfast_tp1_commit_seconds_bucket{le=\"0.01\"} 900
holdfast_tp1_commit_seconds_bucket{le=\"+Inf\"} 1000
holdfast_tp1_commit_seconds_sum 4.5
holdfast_tp1_commit_seconds_count 1000
holdfast_tp1_connections_open 8
ok
";

    #[test]
    fn parses_samples_labels_and_skips_the_ok_line() {
        let samples = parse_exposition(TP1_COUNTERS).unwrap();
        assert_eq!(samples.len(), 15);
        assert_eq!(
            samples[7],
            Sample {
                name: "holdfast_tp1_errors_total".into(),
                labels: vec![("code".into(), "bad_token".into())],
                value: 3.0
            }
        );
        assert_eq!(samples[11].value, 1000.0);
        assert!(parse_exposition("holdfast_x{code=\"a\\\"b\"} 1\n").unwrap()[0].labels[0].1 == "a\"b");
        for bad in ["9metric 1", "metric", "metric{code=\"x} 1", "metric notanumber", "me-tric 1"] {
            assert!(parse_exposition(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn interval_comes_from_checkpoint_status() {
        let sample = interval_from_status("ok generation 7 interval-ms 1500 log-fill-permille 3 degraded 0\n").unwrap();
        assert_eq!(sample.name, "holdfast_checkpoint_interval_seconds");
        assert_eq!(sample.value, 1.5);
        assert!(interval_from_status("ok generation 7\n").is_none());
    }

    #[test]
    fn replies_are_told_apart() {
        assert!(is_counters(TP1_COUNTERS));
        assert!(!is_counters("ok generation 7 interval-ms 5000\n"));
        assert!(is_status("ok generation 7 interval-ms 5000\n"));
        assert!(!is_status(TP1_COUNTERS));
    }

    #[test]
    fn only_loopback_listens() {
        assert!(check_listen("127.0.0.1:0".parse().unwrap()).is_ok());
        assert!(check_listen("0.0.0.0:9717".parse().unwrap()).is_err());
        assert!(check_listen("192.168.1.2:9717".parse().unwrap()).is_err());
    }

    /// The encoding Prometheus reads: types from names, a `vm` and `role` label on every
    /// series, histograms whole, the exporter's health beside; and a scrape of ten VMs is
    /// quick because it reads only the table (the figure is printed: `--nocapture`).
    #[test]
    fn scrape_of_ten_vms_is_typed_labelled_and_quick() {
        let exporter = Exporter::new();
        let samples = parse_exposition(TP1_COUNTERS).unwrap();
        for index in 0..10 {
            exporter.record_poll(&format!("vm{index}"), Duration::from_millis(3), Ok(samples.clone()));
        }
        exporter.record_poll("vm9", Duration::from_millis(2000), Err(()));
        let text = exporter.scrape();
        for expected in [
            "# TYPE holdfast_tp1_transactions counter",
            "holdfast_tp1_transactions_total{vm=\"vm3\",role=\"standalone\"} 1000",
            "holdfast_tp1_errors_total{vm=\"vm0\",role=\"standalone\",code=\"bad_token\"} 3",
            "# TYPE holdfast_tp1_commit_seconds histogram",
            "holdfast_tp1_commit_seconds_bucket{le=\"0.01\",vm=\"vm1\",role=\"standalone\"} 900",
            "holdfast_tp1_commit_seconds_bucket{le=\"+Inf\",vm=\"vm1\",role=\"standalone\"} 1000",
            "holdfast_journal_commit_seconds_bucket{le=\"+Inf\",vm=\"vm2\",role=\"standalone\"} 100",
            "# TYPE holdfast_checkpoint_generation gauge",
            "holdfast_checkpoint_generation{vm=\"vm4\",role=\"standalone\"} 42",
            "holdfast_exporter_vm_up{vm=\"vm0\",role=\"standalone\"} 1",
            "holdfast_exporter_vm_up{vm=\"vm9\",role=\"standalone\"} 0",
            "holdfast_exporter_poll_errors_total{vm=\"vm9\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        // Each family's descriptor once, whatever the number of VMs.
        assert_eq!(text.matches("# TYPE holdfast_tp1_commit_seconds histogram").count(), 1);

        let rounds = 100;
        let started = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(exporter.scrape());
        }
        let per_scrape = started.elapsed() / rounds;
        println!("exporter: a scrape of 10 VMs takes {:.3} ms ({} bytes)", per_scrape.as_secs_f64() * 1e3, text.len());
        assert!(per_scrape < Duration::from_millis(10), "a scrape of 10 VMs took {per_scrape:?}");
        exporter.forget("vm9");
        assert!(!exporter.scrape().contains("vm=\"vm9\""));
    }
}
