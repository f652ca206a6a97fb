//! `holdfast bench tp1`: TP1 (TPC-B) transactions against the Holdfast appliance in a TCG
//! guest, PostgreSQL 15 in a Debian guest under the same QEMU, and PostgreSQL 15 on the
//! host, one after another in one run, with the same load generator (`holdfast-tp1-load`),
//! scale, client counts and durations; one table with ratios and the goals of issue 16.
//!
//! Per system: load at the scale (timed), closed loop at each client count (throughput, and
//! the flushes and kernel invocations counted around the run), then open loop at 80 % of that
//! system's best closed-loop rate, with the clients that reached it (latency from each
//! transaction's intended send time).
//! A system that cannot run says why in its column; nothing is made up.

pub mod guest_postgres;
pub mod host_postgres;
pub mod table;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_qemu::{Accelerator, QemuBinary};
use holdfast_tp1_load::holdfast::HoldfastTarget;
use holdfast_tp1_load::ledger::Ledger;
use holdfast_tp1_load::postgres::PostgresTarget;
use holdfast_tp1_load::run::{RunOptions as LoadRunOptions, RunReport, run as run_load};
use holdfast_tp1_load::target::Target;
use holdfast_tp1_protocol::Token;

/// PostgreSQL's settings in both peers (the guest's are written by build-image.sh, and a
/// unit test checks they agree): durable commits (`fsync`, `synchronous_commit`, full page
/// writes, WAL flushed with fdatasync as the appliance's journal is) and memory that suits
/// the guest; 64 clients each have a backend.
pub const POSTGRES_SETTINGS: &[(&str, &str)] = &[
    ("max_connections", "80"),
    ("fsync", "on"),
    ("synchronous_commit", "on"),
    ("full_page_writes", "on"),
    ("wal_sync_method", "fdatasync"),
    ("shared_buffers", "32MB"),
];

/// The goals (judged, never asserted).
pub const GOAL_RATIO_TO_GUEST_POSTGRES_MIN: f64 = 10.0;
pub const GOAL_RATIO_TO_HOST_POSTGRES_MIN: f64 = 1.0;
pub const GOAL_OPEN_LOOP_P99_MAX: Duration = Duration::from_millis(50);
pub const GOAL_COMMITS_PER_FLUSH_MIN: f64 = 4.0;
/// The clients at which commits per flush are judged.
pub const COMMITS_PER_FLUSH_CLIENTS: u32 = 64;
/// Open loop runs at this fraction of each system's best closed-loop rate.
pub const OPEN_LOOP_LOAD_FRACTION: f64 = 0.8;

/// Starts the appliance.
pub type Launcher = Box<dyn Fn(&ApplianceRequest) -> anyhow::Result<Appliance>>;

/// How the Holdfast appliance is started, given by the CLI (which owns `holdfast run`).
pub enum HoldfastSide {
    /// It cannot run in this tree; the column says why.
    Unavailable(String),
    Launcher(Launcher),
}

/// What the appliance must be started with: the peers' VM.
#[derive(Clone, Debug)]
pub struct ApplianceRequest {
    pub accelerator: Accelerator,
    pub memory_mib: u32,
}

/// A running appliance; dropping it stops it.
pub struct Appliance {
    /// Its TP1 port on 127.0.0.1.
    pub address: SocketAddr,
    pub client_token: Token,
    /// For `load`.
    pub admin_token: Token,
    /// Reads its counters, cumulative (`None` where it has none).
    pub counters: Box<dyn FnMut() -> anyhow::Result<Counters>>,
    /// Takes a checkpoint that starts after every write so far and waits until it is
    /// committed, so that a run after a load does not pay for writing the loaded data
    /// (`holdfast bench pair` uses it; `holdfast bench tp1` does not).
    pub checkpoint: Box<dyn FnMut() -> anyhow::Result<()>>,
    pub guard: Box<dyn std::any::Any>,
}

/// Cumulative counters of a system, read before and after a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    /// Journal flushes (Holdfast) or WAL syncs (PostgreSQL's `pg_stat_wal.wal_sync`).
    pub flushes: Option<u64>,
    /// Kernel invocations (Holdfast only).
    pub invocations: Option<u64>,
    /// Seconds the kernel spent on background steps at ring 3's timer ticks, every process
    /// waiting (Holdfast only: `holdfast_background_steps_at_ticks_seconds_total`).
    pub steps_at_ticks_seconds: Option<f64>,
    /// Seconds the kernel waited for its disk, no process running (Holdfast only:
    /// `holdfast_disk_wait_seconds_total`).
    pub disk_wait_seconds: Option<f64>,
}

/// Whether the PostgreSQL guest runs.
#[derive(Clone, Debug)]
pub enum GuestPeer {
    Run,
    /// Not run, and why (the table says so).
    Skip(String),
}

/// What `holdfast bench tp1` runs.
pub struct Tp1BenchOptions {
    pub quick: bool,
    pub accelerator: Accelerator,
    pub memory_mib: u32,
    pub scale: u32,
    /// Closed-loop runs, one per client count.
    pub closed_clients: Vec<u32>,
    /// Each run's duration, and how long transactions in flight may take after it.
    pub duration: Duration,
    pub drain: Duration,
    pub seed: u64,
    pub qemu_binary: Option<PathBuf>,
    /// Run files: the ledgers, the guest's disk copy.
    pub run_dir: PathBuf,
    /// Where the PostgreSQL guest image is cached.
    pub image_cache_dir: PathBuf,
    pub postgres_bin_dir: PathBuf,
    pub guest: GuestPeer,
    pub holdfast: HoldfastSide,
}

impl Tp1BenchOptions {
    /// The full run: scale 10 (as issue 16's peers were measured), 1, 8 and 64 clients,
    /// 30 s a run.
    pub fn new(holdfast: HoldfastSide, image_cache_dir: PathBuf) -> Self {
        Self {
            quick: false,
            accelerator: Accelerator::Tcg,
            memory_mib: 512,
            scale: 10,
            closed_clients: vec![1, 8, 64],
            duration: Duration::from_secs(30),
            drain: Duration::from_secs(30),
            seed: holdfast_tp1_load::random_seed(),
            qemu_binary: None,
            run_dir: crate::default_cache_dir().join("tp1"),
            image_cache_dir,
            postgres_bin_dir: host_postgres::DEBIAN_BIN_DIR.into(),
            guest: GuestPeer::Run,
            holdfast,
        }
    }

    /// For CI: scale 1, 1 and 64 clients (64: the commits-per-flush goal's), 5 s a run.
    pub fn quick(holdfast: HoldfastSide, image_cache_dir: PathBuf) -> Self {
        Self {
            quick: true,
            scale: 1,
            closed_clients: vec![1, 64],
            duration: Duration::from_secs(5),
            drain: Duration::from_secs(20),
            ..Self::new(holdfast, image_cache_dir)
        }
    }
}

/// One closed- or open-loop run and the counters' change over it.
#[derive(Clone, Debug)]
pub struct Measured {
    pub report: RunReport,
    pub flushes: Option<u64>,
    pub invocations: Option<u64>,
    pub steps_at_ticks_seconds: Option<f64>,
    pub disk_wait_seconds: Option<f64>,
}

/// Everything measured of one system.
#[derive(Clone, Debug)]
pub struct SystemFigures {
    pub load_time: Duration,
    pub closed: Vec<Measured>,
    pub open: Measured,
    /// A line on what ran (PostgreSQL's version, the guest's boot time).
    pub about: String,
}

/// A system's column: measured, not run (why), or failed (the error).
#[derive(Clone, Debug)]
pub enum Outcome {
    Measured(Box<SystemFigures>),
    NotRun(String),
    Failed(String),
}

/// The three columns.
#[derive(Clone, Debug)]
pub struct Tp1Report {
    pub holdfast: Outcome,
    pub guest_postgres: Outcome,
    pub host_postgres: Outcome,
}

/// Runs the benchmark and prints its table on stdout (progress on stderr). Fails, after
/// the table, if a system that was to run failed.
pub fn tp1(options: Tp1BenchOptions) -> anyhow::Result<Tp1Report> {
    let started = Instant::now();
    let report = measure_tp1(&options)?;
    print!("{}", table::render(&options, &report));
    eprintln!(
        "holdfast bench tp1: took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let failures: Vec<String> = [
        ("Holdfast", &report.holdfast),
        ("PostgreSQL in the guest", &report.guest_postgres),
        ("PostgreSQL on the host", &report.host_postgres),
    ]
    .into_iter()
    .filter_map(|(name, outcome)| match outcome {
        Outcome::Failed(error) => Some(format!("{name}: {error}")),
        _ => None,
    })
    .collect();
    if !failures.is_empty() {
        anyhow::bail!("holdfast bench tp1: {}", failures.join("\n"));
    }
    Ok(report)
}

/// Measures every system, one after another (each alone on the machine).
pub fn measure_tp1(options: &Tp1BenchOptions) -> anyhow::Result<Tp1Report> {
    anyhow::ensure!(
        !options.closed_clients.is_empty(),
        "no closed-loop client counts"
    );
    anyhow::ensure!(
        options.closed_clients.iter().all(|&clients| clients >= 1),
        "a run needs a client"
    );
    std::fs::create_dir_all(&options.run_dir)
        .with_context(|| format!("creating {}", options.run_dir.display()))?;
    let qemu = match &options.qemu_binary {
        Some(path) => QemuBinary::find_with(Some(path.as_os_str()), None)?,
        None => QemuBinary::find()?,
    };
    let outcome = |result: anyhow::Result<SystemFigures>, name: &str| match result {
        Ok(figures) => Outcome::Measured(Box::new(figures)),
        Err(error) => {
            eprintln!("holdfast bench tp1: {name} failed: {error:#}");
            Outcome::Failed(format!("{error:#}"))
        }
    };

    eprintln!("holdfast bench tp1: PostgreSQL on the host");
    let host_postgres = outcome(measure_host_postgres(options), "PostgreSQL on the host");

    let guest_postgres = match &options.guest {
        GuestPeer::Skip(why) => Outcome::NotRun(why.clone()),
        GuestPeer::Run => {
            eprintln!("holdfast bench tp1: PostgreSQL in the guest");
            outcome(
                measure_guest_postgres(options, &qemu),
                "PostgreSQL in the guest",
            )
        }
    };

    let holdfast = match &options.holdfast {
        HoldfastSide::Unavailable(why) => Outcome::NotRun(why.clone()),
        HoldfastSide::Launcher(launch) => {
            eprintln!("holdfast bench tp1: Holdfast");
            outcome(measure_holdfast(options, launch.as_ref()), "Holdfast")
        }
    };
    Ok(Tp1Report {
        holdfast,
        guest_postgres,
        host_postgres,
    })
}

fn measure_host_postgres(options: &Tp1BenchOptions) -> anyhow::Result<SystemFigures> {
    let cluster = host_postgres::HostPostgres::start(&options.postgres_bin_dir, "bench-tp1")?;
    let url = cluster.url();
    let target = Arc::new(PostgresTarget::new(&url)?);
    let mut counters = || postgres_counters(&url);
    let mut figures = measure_system(
        "postgres-host",
        options,
        &*target,
        target.clone(),
        &mut counters,
    )?;
    figures.about = format!("{}, host", cluster.version());
    Ok(figures)
}

fn measure_guest_postgres(
    options: &Tp1BenchOptions,
    qemu: &QemuBinary,
) -> anyhow::Result<SystemFigures> {
    let image = guest_postgres::GuestImage::prepare(&options.image_cache_dir)?;
    let guest = guest_postgres::GuestPostgres::start(
        qemu,
        &image,
        options.accelerator,
        options.memory_mib,
        &options.run_dir,
    )?;
    eprintln!(
        "holdfast bench tp1: the PostgreSQL guest was ready {:.1} s after QEMU started",
        guest.boot_time.as_secs_f64()
    );
    let url = guest.url();
    let target = Arc::new(PostgresTarget::new(&url)?);
    let mut counters = || postgres_counters(&url);
    let mut figures = measure_system(
        "postgres-guest",
        options,
        &*target,
        target.clone(),
        &mut counters,
    )
    .map_err(|error| anyhow::anyhow!("{error:#}\nconsole:\n{}", guest.console()))?;
    let version =
        postgres_version(&url).unwrap_or_else(|error| format!("version unknown: {error:#}"));
    // The kernel package, from the image's record of what it installed.
    let kernel = std::fs::read_to_string(image.dir.join("packages.txt"))
        .ok()
        .and_then(|packages| {
            packages
                .lines()
                .find(|line| line.starts_with("linux-image-") && line.contains("-cloud-amd64 "))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "kernel unknown".to_owned());
    figures.about = format!(
        "{version}, Debian 12 guest ({kernel}), ready {:.1} s after QEMU started",
        guest.boot_time.as_secs_f64()
    );
    drop(guest);
    Ok(figures)
}

fn measure_holdfast(
    options: &Tp1BenchOptions,
    launch: &dyn Fn(&ApplianceRequest) -> anyhow::Result<Appliance>,
) -> anyhow::Result<SystemFigures> {
    let mut appliance = launch(&ApplianceRequest {
        accelerator: options.accelerator,
        memory_mib: options.memory_mib,
    })?;
    let loader = HoldfastTarget::new(appliance.address, appliance.admin_token)?;
    let target = Arc::new(HoldfastTarget::new(
        appliance.address,
        appliance.client_token,
    )?);
    let mut figures = measure_system(
        "holdfast",
        options,
        &loader,
        target,
        &mut *appliance.counters,
    )?;
    figures.about = format!("appliance at {}", appliance.address);
    drop(appliance);
    Ok(figures)
}

/// Loads `scale` through `loader`, then the closed-loop runs and the open-loop run
/// through `target`, with `counters` read around each run.
fn measure_system<L: Target, T: Target>(
    name: &str,
    options: &Tp1BenchOptions,
    loader: &L,
    target: Arc<T>,
    counters: &mut dyn FnMut() -> anyhow::Result<Counters>,
) -> anyhow::Result<SystemFigures> {
    let started = Instant::now();
    holdfast_tp1_load::block_on(loader.load(options.scale, true))?
        .with_context(|| format!("loading scale {}", options.scale))?;
    let load_time = started.elapsed();
    eprintln!(
        "holdfast bench tp1: {name}: loaded scale {} in {:.1} s",
        options.scale,
        load_time.as_secs_f64()
    );
    let ledger_dir = options.run_dir.join(format!("ledger-{name}"));
    Ledger::reset(&ledger_dir)?;
    let ledger = Arc::new(Ledger::open(&ledger_dir)?);
    // Each run its own seed: a seed repeats its transaction ids, and a repeated id is
    // answered as a retry without being applied, which would make later runs cheap.
    let mut runs = 0u64;
    let mut one_run = |clients: u32, rate: Option<f64>| -> anyhow::Result<Measured> {
        runs += 1;
        let before = counters()?;
        let load_options = LoadRunOptions {
            clients,
            rate_per_second: rate,
            pipeline: 1,
            duration: options.duration,
            drain: options.drain,
            seed: options.seed.wrapping_add(runs - 1),
            progress: false,
        };
        let report = holdfast_tp1_load::block_on(run_load(
            Arc::clone(&target),
            Arc::clone(&ledger),
            load_options,
        ))??;
        let after = counters()?;
        let difference = |before: Option<u64>, after: Option<u64>| after?.checked_sub(before?);
        let seconds_difference = |before: Option<f64>, after: Option<f64>| Some(after? - before?);
        let measured = Measured {
            flushes: difference(before.flushes, after.flushes),
            invocations: difference(before.invocations, after.invocations),
            steps_at_ticks_seconds: seconds_difference(before.steps_at_ticks_seconds, after.steps_at_ticks_seconds),
            disk_wait_seconds: seconds_difference(before.disk_wait_seconds, after.disk_wait_seconds),
            report,
        };
        let report = &measured.report;
        eprintln!(
            "holdfast bench tp1: {name}: {} loop, {clients} client{}{}: {:.1} tps acknowledged ({} acknowledged, {} refused, {} failed, {} unfinished), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms{}{}",
            report.mode,
            if clients == 1 { "" } else { "s" },
            rate.map(|rate| format!(" at {rate:.1}/s"))
                .unwrap_or_default(),
            report.accepted_per_second,
            report.acknowledged,
            report.refused.values().sum::<u64>(),
            report.failed,
            report.unfinished,
            report.latency.p50_us as f64 / 1000.0,
            report.latency.p99_us as f64 / 1000.0,
            report.latency.max_us as f64 / 1000.0,
            measured
                .flushes
                .map(|flushes| format!(", {flushes} flushes"))
                .unwrap_or_default(),
            // Where the kernel's time went that no process could use: what the latency
            // tail follows.
            measured
                .steps_at_ticks_seconds
                .zip(measured.disk_wait_seconds)
                .map(|(ticks, disk)| format!(", kernel steps at ticks {ticks:.2} s, disk waits {disk:.2} s"))
                .unwrap_or_default(),
        );
        Ok(measured)
    };
    let mut closed = Vec::new();
    for &clients in &options.closed_clients {
        closed.push(one_run(clients, None)?);
    }
    // Open loop with the clients of the best closed-loop run: 80 % of a rate that a
    // number of connections reached, offered over as many.
    let best = closed
        .iter()
        .max_by(|a, b| {
            a.report
                .accepted_per_second
                .total_cmp(&b.report.accepted_per_second)
        })
        .map(|run| (run.report.accepted_per_second, run.report.clients))
        .filter(|(rate, _)| *rate > 0.0);
    let Some((best_rate, best_clients)) = best else {
        anyhow::bail!("no transaction was acknowledged in closed loop");
    };
    let open = one_run(best_clients, Some(best_rate * OPEN_LOOP_LOAD_FRACTION))?;
    Ok(SystemFigures {
        load_time,
        closed,
        open,
        about: String::new(),
    })
}

/// PostgreSQL's WAL syncs (`pg_stat_wal.wal_sync`, PostgreSQL 14 on), once the run's
/// backends have ended and reported their statistics (a backend reports at exit, the WAL
/// writer each cycle; a second's wait covers both). `None` without `pg_stat_wal`.
fn postgres_counters(url: &str) -> anyhow::Result<Counters> {
    let config: tokio_postgres::Config = url.parse().with_context(|| format!("parsing {url}"))?;
    holdfast_tp1_load::block_on(async move {
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to {url} for pg_stat_wal"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let others: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await?
                .get(0);
            if others == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let flushes = match client
            .query_one("SELECT wal_sync FROM pg_stat_wal", &[])
            .await
        {
            Ok(row) => u64::try_from(row.get::<_, i64>(0)).ok(),
            Err(_) => None,
        };
        Ok(Counters {
            flushes,
            ..Counters::default()
        })
    })?
}

fn postgres_version(url: &str) -> anyhow::Result<String> {
    let config: tokio_postgres::Config = url.parse().with_context(|| format!("parsing {url}"))?;
    holdfast_tp1_load::block_on(async move {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
        anyhow::Ok(format!("PostgreSQL {version}"))
    })?
}

/// A port on 127.0.0.1 that nothing listens on now (the kernel's choice for port 0).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("binding 127.0.0.1:0 for a free port")?;
    Ok(listener.local_addr()?.port())
}
