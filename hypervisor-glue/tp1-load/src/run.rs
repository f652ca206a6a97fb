//! `holdfast tp1 run`: clients send TPC-B transactions to a target for a duration, closed
//! loop (each client sends its next transaction when one of its `pipeline` in flight comes
//! back) or open loop (`rate` per second in all, each transaction with an intended send
//! time; its latency is measured from that time, so a target that falls behind shows it in
//! its latency instead of in fewer, later requests: no coordinated omission).
//!
//! A transaction whose connection breaks is retried with the same id after a reconnect
//! (exactly once is the target's promise); a transaction unfinished when the drain time
//! after the run runs out is counted as unfinished. Every id goes into the ledger before it
//! is first sent, and into its acknowledged file when a reply says it is durable.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use holdfast_tp1_protocol::{Transaction, TransactionResult};
use serde::Serialize;
use tokio::time::Instant;

use crate::generator::Generator;
use crate::ledger::Ledger;
use crate::target::{Session, Target, TransactionError};

/// How often a transaction refused with a retryable error (deadlock, `internal`) is tried
/// before it counts as failed.
const RETRYABLE_ATTEMPTS_MAX: u32 = 20;
/// The pauses between connection attempts while a target is away (restarting, failing
/// over): the first this short, each next one twice the last, up to the longest. A fixed
/// 200 ms pause added up to 200 ms to every failover's outage after the new primary served,
/// and so did doubling up to 200 ms (the pause under way when it served, 150 ms into
/// the failover, ended 310 ms in); a refused attempt costs the host microseconds.
const RECONNECT_PAUSE_FIRST: Duration = Duration::from_millis(10);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_millis(40);
/// Latencies are recorded in microseconds, from 1 µs to an hour, to three significant
/// digits.
const LATENCY_US_MAX: u64 = 3_600_000_000;

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Client connections.
    pub clients: u32,
    /// Open loop at this many transactions per second in all; `None` for closed loop.
    pub rate_per_second: Option<f64>,
    /// Transactions in flight per client at most (1 = one at a time).
    pub pipeline: u32,
    /// How long new transactions are started.
    pub duration: Duration,
    /// After `duration`, how long transactions in flight (and reconnects) may still take.
    pub drain: Duration,
    pub seed: u64,
    /// Print a progress line to stderr each second.
    pub progress: bool,
}

/// Latency percentiles, in microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p99_9_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    fn of(histogram: &Histogram<u64>) -> Latency {
        Latency {
            count: histogram.len(),
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            p99_9_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
            mean_us: histogram.mean(),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub target: String,
    pub scale: u32,
    /// `closed` or `open`.
    pub mode: &'static str,
    pub clients: u32,
    pub pipeline: u32,
    pub seed: u64,
    pub duration_seconds: f64,
    /// Transactions offered per second: the open loop's rate, or for a closed loop the
    /// transactions started per second of the run.
    pub offered_per_second: f64,
    /// Transactions acknowledged per second: over the run, or until the last
    /// acknowledgement if that came after the run's end.
    pub accepted_per_second: f64,
    /// Transactions started (each id once, however often it was retried).
    pub sent: u64,
    pub acknowledged: u64,
    /// Refusals by status name (not applied).
    pub refused: BTreeMap<String, u64>,
    /// Transactions given up after repeated retryable failures.
    pub failed: u64,
    /// Transactions still in flight when the drain time ran out.
    pub unfinished: u64,
    /// Open loop only: transactions whose intended time fell within the run but that were
    /// not sent because every client had `pipeline` in flight until the end.
    pub not_sent: u64,
    /// Attempts repeated after a lost connection or a retryable failure.
    pub retries: u64,
    /// Connections made again after one was lost.
    pub reconnects: u64,
    /// Latency of acknowledged transactions (from intended send time in open loop).
    pub latency: Latency,
    /// The longest time between two acknowledgements (any clients'): what the clients saw
    /// of an outage — a crash and restart, or a pair's failover.
    pub silence_us_max: u64,
    /// When that silence began, in seconds from the start of the run.
    pub silence_from_seconds: f64,
    /// When the run's clock started, once every client had connected: what
    /// `silence_from_seconds` counts from.
    #[serde(skip)]
    pub started_at: std::time::Instant,
}

impl RunReport {
    /// `silence_from_ms` in words: `40 ms after`, `40 ms before`.
    pub fn silence_from_words(milliseconds: i64) -> String {
        let side = if milliseconds < 0 { "before" } else { "after" };
        format!("{} ms {side}", milliseconds.unsigned_abs())
    }

    /// When the longest silence began, in milliseconds from `moment` of the caller's (a
    /// fault it injected), negative when it began before; see also
    /// [`RunReport::silence_from_words`].
    pub fn silence_from_ms(&self, moment: std::time::Instant) -> i64 {
        let began = self.started_at + Duration::from_secs_f64(self.silence_from_seconds);
        match began.checked_duration_since(moment) {
            Some(after) => after.as_millis() as i64,
            None => -(moment.duration_since(began).as_millis() as i64),
        }
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let refused: u64 = self.refused.values().sum();
        let refused_detail = if self.refused.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = self
                .refused
                .iter()
                .map(|(name, count)| format!("{name} {count}"))
                .collect();
            format!(" ({})", parts.join(", "))
        };
        let rate = match self.mode {
            "open" => "open loop".to_string(),
            _ => "closed loop".to_string(),
        };
        let millis = |us: u64| us as f64 / 1000.0;
        format!(
            "target        {} (scale {})\n\
             mode          {rate}, {} clients, pipeline {}, {:.1} s, seed {}\n\
             rate          offered {:.1}/s, accepted {:.1}/s\n\
             transactions  {} sent, {} acknowledged, {refused} refused{refused_detail}, {} failed, {} unfinished, {} not sent\n\
             retries       {} retries, {} reconnects\n\
             latency       p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms  (mean {:.3} ms, {} samples)\n\
             silence       {:.1} ms at most without an acknowledgement, from {:.1} s\n",
            self.target,
            self.scale,
            self.clients,
            self.pipeline,
            self.duration_seconds,
            self.seed,
            self.offered_per_second,
            self.accepted_per_second,
            self.sent,
            self.acknowledged,
            self.failed,
            self.unfinished,
            self.not_sent,
            self.retries,
            self.reconnects,
            millis(self.latency.p50_us),
            millis(self.latency.p90_us),
            millis(self.latency.p99_us),
            millis(self.latency.p99_9_us),
            millis(self.latency.max_us),
            self.latency.mean_us / 1000.0,
            self.latency.count,
            millis(self.silence_us_max),
            self.silence_from_seconds,
        )
    }
}

/// Counters the clients share and the progress line reads.
struct Stats {
    histograms: Mutex<(Histogram<u64>, Histogram<u64>)>,
    refused: Mutex<BTreeMap<String, u64>>,
    sent: AtomicU64,
    acknowledged: AtomicU64,
    failed: AtomicU64,
    unfinished: AtomicU64,
    not_sent: AtomicU64,
    retries: AtomicU64,
    reconnects: AtomicU64,
    last_acknowledged_us: AtomicU64,
    /// The longest gap between acknowledgements, and when it began (microseconds from the
    /// start).
    silence: Mutex<(u64, u64)>,
}

impl Stats {
    fn new() -> anyhow::Result<Self> {
        let histogram = || Histogram::new_with_bounds(1, LATENCY_US_MAX, 3);
        Ok(Stats {
            histograms: Mutex::new((histogram()?, histogram()?)),
            refused: Mutex::new(BTreeMap::new()),
            sent: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            unfinished: AtomicU64::new(0),
            not_sent: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            last_acknowledged_us: AtomicU64::new(0),
            silence: Mutex::new((0, 0)),
        })
    }

    fn record_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut histograms = lock(&self.histograms);
        histograms.0.saturating_record(us);
        histograms.1.saturating_record(us);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How one transaction ended.
enum Outcome {
    Acknowledged(TransactionResult),
    Refused(String),
    Failed,
    Unfinished,
}

/// One client's connection, made again when it breaks.
struct Client<T: Target> {
    target: Arc<T>,
    /// The session and its generation (how many were made), `None` while broken.
    session: tokio::sync::Mutex<(u64, Option<Arc<T::Session>>)>,
    stats: Arc<Stats>,
}

impl<T: Target> Client<T> {
    /// The current session, connecting (again) if there is none, retrying until the
    /// caller's deadline cancels it.
    async fn session(&self) -> (u64, Arc<T::Session>) {
        let mut guard = self.session.lock().await;
        if let (generation, Some(session)) = &*guard {
            return (*generation, Arc::clone(session));
        }
        let mut pause = RECONNECT_PAUSE_FIRST;
        loop {
            match self.target.connect().await {
                Ok(session) => {
                    let session = Arc::new(session);
                    if guard.0 > 0 {
                        self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                    guard.0 += 1;
                    guard.1 = Some(Arc::clone(&session));
                    return (guard.0, session);
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                }
            }
        }
    }

    /// Drops the session of `generation` if it is still the current one.
    async fn discard(&self, generation: u64) {
        let mut guard = self.session.lock().await;
        if guard.0 == generation {
            guard.1 = None;
        }
    }

    /// Runs `transaction` until it is acknowledged or refused, retrying the same id.
    async fn execute(&self, transaction: &Transaction) -> Outcome {
        let mut retryable_failures = 0;
        loop {
            let (generation, session) = self.session().await;
            match session.transaction(transaction).await {
                Ok(result) => return Outcome::Acknowledged(result),
                Err(TransactionError::Refused(status)) => {
                    return Outcome::Refused(status.name().to_owned());
                }
                Err(TransactionError::Disconnected(_)) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    drop(session);
                    self.discard(generation).await;
                }
                Err(TransactionError::Retryable(_)) => {
                    retryable_failures += 1;
                    if retryable_failures >= RETRYABLE_ATTEMPTS_MAX {
                        return Outcome::Failed;
                    }
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// Runs the load. The target must be loaded; its scale decides the transactions' ids.
pub async fn run<T: Target>(
    target: Arc<T>,
    ledger: Arc<Ledger>,
    options: RunOptions,
) -> anyhow::Result<RunReport> {
    anyhow::ensure!(options.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(options.pipeline >= 1, "--pipeline must be at least 1");
    if options.pipeline > 1 && !target.pipelines() {
        anyhow::bail!(
            "{} runs one transaction at a time per connection: --pipeline {} would only queue them (use more --clients)",
            target.describe(),
            options.pipeline
        );
    }
    if let Some(rate) = options.rate_per_second {
        anyhow::ensure!(
            rate.is_finite() && rate > 0.0,
            "--rate must be a positive number"
        );
    }
    let scale = target.scale().await?;
    let stats = Arc::new(Stats::new()?);
    // Connect every client before the clock starts, so that connection set-up is not
    // counted as latency; a target that refuses connections fails the run here.
    let mut clients = Vec::new();
    for _ in 0..options.clients {
        let session = target.connect().await?;
        clients.push(Arc::new(Client {
            target: Arc::clone(&target),
            session: tokio::sync::Mutex::new((1, Some(Arc::new(session)))),
            stats: Arc::clone(&stats),
        }));
    }
    let start = Instant::now();
    let end = start + options.duration;
    let give_up = end + options.drain;
    let progress = options.progress.then(|| {
        tokio::spawn(print_progress(
            Arc::clone(&stats),
            start,
            end,
            options.rate_per_second,
        ))
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (index, client) in clients.into_iter().enumerate() {
        let generator = Generator::new(options.seed, index as u64, scale);
        let ledger = Arc::clone(&ledger);
        let stats = Arc::clone(&stats);
        let options = options.clone();
        tasks.spawn(drive_client(
            client,
            generator,
            ledger,
            stats,
            options,
            index as u32,
            start,
            end,
            give_up,
        ));
    }
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                first_error.get_or_insert(anyhow::anyhow!("a client task failed: {error}"));
            }
        }
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    let duration_seconds = options.duration.as_secs_f64();
    let sent = stats.sent.load(Ordering::Relaxed);
    let acknowledged = stats.acknowledged.load(Ordering::Relaxed);
    let last_acknowledged_seconds = stats.last_acknowledged_us.load(Ordering::Relaxed) as f64 / 1e6;
    // Over the run, or until the last acknowledgement if that came later (a target that
    // fell behind): a target that stopped answering early still gets the whole run.
    let accepted_per_second =
        acknowledged as f64 / last_acknowledged_seconds.max(duration_seconds).max(1e-6);
    let latency = Latency::of(&lock(&stats.histograms).0);
    let (silence_us_max, silence_from_us) = *lock(&stats.silence);
    Ok(RunReport {
        target: target.describe(),
        scale,
        mode: if options.rate_per_second.is_some() {
            "open"
        } else {
            "closed"
        },
        clients: options.clients,
        pipeline: options.pipeline,
        seed: options.seed,
        duration_seconds,
        offered_per_second: match options.rate_per_second {
            Some(rate) => rate,
            None => sent as f64 / duration_seconds.max(1e-6),
        },
        accepted_per_second,
        sent,
        acknowledged,
        refused: lock(&stats.refused).clone(),
        failed: stats.failed.load(Ordering::Relaxed),
        unfinished: stats.unfinished.load(Ordering::Relaxed),
        not_sent: stats.not_sent.load(Ordering::Relaxed),
        retries: stats.retries.load(Ordering::Relaxed),
        reconnects: stats.reconnects.load(Ordering::Relaxed),
        latency,
        silence_us_max,
        silence_from_seconds: silence_from_us as f64 / 1e6,
        started_at: start.into_std(),
    })
}

/// One client: starts transactions (closed or open loop) until `end`, then waits for those
/// in flight until `give_up`.
#[allow(clippy::too_many_arguments)]
async fn drive_client<T: Target>(
    client: Arc<Client<T>>,
    mut generator: Generator,
    ledger: Arc<Ledger>,
    stats: Arc<Stats>,
    options: RunOptions,
    index: u32,
    start: Instant,
    end: Instant,
    give_up: Instant,
) -> anyhow::Result<()> {
    let pipeline = options.pipeline as usize;
    // Open loop: this client's share of the schedule, every `clients / rate` seconds,
    // staggered by its index so that the clients' sends interleave evenly.
    let schedule = options.rate_per_second.map(|rate| {
        let period = Duration::from_secs_f64(f64::from(options.clients) / rate);
        let offset = Duration::from_secs_f64(f64::from(index) / rate);
        (period, offset)
    });
    let mut next_number: u32 = 0;
    let intended_time = |number: u32| -> Option<Instant> {
        let (period, offset) = schedule?;
        Some(start + offset + period.checked_mul(number)?)
    };
    let mut in_flight = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        let next_intended = intended_time(next_number);
        let may_start = match next_intended {
            Some(intended) => intended < end,
            None => now < end,
        };
        if may_start && in_flight.len() < pipeline {
            if let Some(intended) = next_intended
                && intended > now
            {
                // Wait for the intended time, or a completion, whichever is first.
                tokio::select! {
                    () = tokio::time::sleep_until(intended) => {}
                    Some((started, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                        account(&stats, &ledger, started, outcome, start)?;
                    }
                }
                continue;
            }
            let transaction = generator.next_transaction();
            ledger.record_sent(&transaction.transaction_id)?;
            stats.sent.fetch_add(1, Ordering::Relaxed);
            let started = next_intended.unwrap_or(now);
            next_number += 1;
            let client = Arc::clone(&client);
            in_flight.push(async move {
                let outcome = tokio::time::timeout_at(give_up, client.execute(&transaction))
                    .await
                    .unwrap_or(Outcome::Unfinished);
                (started, (transaction, outcome))
            });
            continue;
        }
        if !may_start && in_flight.is_empty() {
            break;
        }
        // Full pipeline, or the run is over: wait for a completion (the next intended send
        // time, if due, is then late, and its latency says so).
        match in_flight.next().await {
            Some((started, outcome)) => account(&stats, &ledger, started, outcome, start)?,
            None => break,
        }
    }
    if let Some((period, offset)) = schedule {
        // Intended times within the run that were never reached: a pipeline full to the end.
        let span = end.saturating_duration_since(start + offset).as_secs_f64();
        let scheduled = (span / period.as_secs_f64()).ceil() as u64;
        stats.not_sent.fetch_add(
            scheduled.saturating_sub(u64::from(next_number)),
            Ordering::Relaxed,
        );
    }
    Ok(())
}

fn account(
    stats: &Stats,
    ledger: &Ledger,
    started: Instant,
    (transaction, outcome): (Transaction, Outcome),
    run_start: Instant,
) -> anyhow::Result<()> {
    match outcome {
        Outcome::Acknowledged(result) => {
            let now = Instant::now();
            ledger.record_acknowledged(&transaction.transaction_id, &result)?;
            stats.record_latency(now.saturating_duration_since(started));
            stats.acknowledged.fetch_add(1, Ordering::Relaxed);
            let since_start_us =
                u64::try_from(now.saturating_duration_since(run_start).as_micros())
                    .unwrap_or(u64::MAX);
            let previous_us = stats
                .last_acknowledged_us
                .fetch_max(since_start_us, Ordering::Relaxed);
            // From the first acknowledgement on (before it, the run was starting up).
            if previous_us > 0 && since_start_us > previous_us {
                let mut silence = lock(&stats.silence);
                if since_start_us - previous_us > silence.0 {
                    *silence = (since_start_us - previous_us, previous_us);
                }
            }
        }
        Outcome::Refused(status) => *lock(&stats.refused).entry(status).or_default() += 1,
        Outcome::Failed => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
        Outcome::Unfinished => {
            stats.unfinished.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// A line on stderr each second: that second's acknowledged rate and latency, totals so far.
async fn print_progress(stats: Arc<Stats>, start: Instant, end: Instant, rate: Option<f64>) {
    let mut ticker =
        tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    let mut previous_acknowledged = 0;
    loop {
        let tick = ticker.tick().await;
        let acknowledged = stats.acknowledged.load(Ordering::Relaxed);
        let (p50_us, p99_us, max_us) = {
            let mut histograms = lock(&stats.histograms);
            let interval = &mut histograms.1;
            let figures = (
                interval.value_at_quantile(0.5),
                interval.value_at_quantile(0.99),
                interval.max(),
            );
            interval.reset();
            figures
        };
        let refused: u64 = lock(&stats.refused).values().sum();
        let offered = rate
            .map(|rate| format!(" (offered {rate:.0}/s)"))
            .unwrap_or_default();
        let phase = if tick > end { " draining" } else { "" };
        eprintln!(
            "tp1 {:>4} s{phase}: {} tps{offered}  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  acknowledged {}  refused {}  retries {}  reconnects {}",
            tick.saturating_duration_since(start).as_secs(),
            acknowledged - previous_acknowledged,
            p50_us as f64 / 1000.0,
            p99_us as f64 / 1000.0,
            max_us as f64 / 1000.0,
            acknowledged,
            refused,
            stats.retries.load(Ordering::Relaxed),
            stats.reconnects.load(Ordering::Relaxed),
        );
        previous_acknowledged = acknowledged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report_started(started_at: std::time::Instant, silence_from_seconds: f64) -> RunReport {
        let latency = Latency {
            count: 0,
            p50_us: 0,
            p90_us: 0,
            p99_us: 0,
            p99_9_us: 0,
            max_us: 0,
            mean_us: 0.0,
        };
        RunReport {
            target: "t".into(),
            scale: 1,
            mode: "closed",
            clients: 1,
            pipeline: 1,
            seed: 0,
            duration_seconds: 1.0,
            offered_per_second: 0.0,
            accepted_per_second: 0.0,
            sent: 0,
            acknowledged: 0,
            refused: BTreeMap::new(),
            failed: 0,
            unfinished: 0,
            not_sent: 0,
            retries: 0,
            reconnects: 0,
            latency,
            silence_us_max: 0,
            silence_from_seconds,
            started_at,
        }
    }

    /// The silence is placed by the run's own clock, which starts once the clients have
    /// connected, not by the caller's: a fault 200 ms after the caller started the load,
    /// with the run's clock starting 90 ms after that, and the silence 110 ms into the run,
    /// began at the fault.
    #[test]
    fn the_silence_is_placed_from_the_run_clock_not_the_callers() {
        assert_eq!(RunReport::silence_from_words(40), "40 ms after");
        assert_eq!(RunReport::silence_from_words(-40), "40 ms before");
        let load_started = std::time::Instant::now();
        let fault = load_started + Duration::from_millis(200);
        let report = report_started(load_started + Duration::from_millis(90), 0.110);
        assert_eq!(report.silence_from_ms(fault), 0);
        assert_eq!(report.silence_from_ms(fault + Duration::from_millis(30)), -30);
        assert_eq!(report.silence_from_ms(fault - Duration::from_millis(25)), 25);
    }
}
