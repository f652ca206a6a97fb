//! `holdfast-store-sim`: replays one seed (`--seed N`, optionally `--crash-point N`)
//! printing what it does, or runs a campaign over many seeds, each crashed at every write
//! boundary (`--campaign --seeds K`, or `--campaign --crash-points N` for as many seeds as
//! it takes; `--jobs J` runs seeds on J threads).

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use holdfast_store_sim::campaign::{CampaignReport, run_seed};
use holdfast_store_sim::scenario::{FaultMode, Options, run};

#[derive(Parser)]
#[command(about = "Deterministic crash and fault simulator for the Holdfast store")]
struct Arguments {
    /// The seed to replay, or the first seed of a campaign.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Crash just before this device write or flush (1-based) of the run.
    #[arg(long)]
    crash_point: Option<u64>,
    /// Run a campaign: every seed from --seed on, each at every write and flush boundary.
    #[arg(long)]
    campaign: bool,
    /// Seeds in a campaign.
    #[arg(long, default_value_t = 70)]
    seeds: u64,
    /// Workload steps per run.
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// In a campaign, crash at every n-th boundary only.
    #[arg(long, default_value_t = 1)]
    stride: u64,
    /// In a campaign, run seeds from --seed on until this many crash points were checked
    /// (instead of --seeds seeds).
    #[arg(long)]
    crash_points: Option<u64>,
    /// Campaign worker threads (seeds are independent).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
}

/// Runs the campaign's seeds on `jobs` threads; the first failure stops every worker.
fn campaign(arguments: &Arguments) -> Result<CampaignReport, String> {
    let seed_next = AtomicU64::new(arguments.seed);
    let seed_end = match arguments.crash_points {
        Some(_) => u64::MAX,
        None => arguments.seed + arguments.seeds,
    };
    let crash_points = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let total = Mutex::new(CampaignReport::default());
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..arguments.jobs.max(1) {
            scope.spawn(|| {
                let mut report = CampaignReport::default();
                loop {
                    let reached = arguments
                        .crash_points
                        .is_some_and(|goal| crash_points.load(Ordering::Relaxed) >= goal);
                    if reached || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let seed = seed_next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seed_end {
                        break;
                    }
                    let before = report.crash_points_checked;
                    if let Err(error) =
                        run_seed(seed, arguments.steps, arguments.stride.max(1), &mut report)
                    {
                        failed.store(true, Ordering::Relaxed);
                        failure.lock().expect("no worker panics").get_or_insert(error.to_string());
                        break;
                    }
                    crash_points.fetch_add(report.crash_points_checked - before, Ordering::Relaxed);
                }
                total.lock().expect("no worker panics").merge(&report);
            });
        }
    });
    if let Some(failure) = failure.into_inner().expect("no worker panics") {
        return Err(failure);
    }
    Ok(total.into_inner().expect("no worker panics"))
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    if arguments.campaign {
        let started = Instant::now();
        return match campaign(&arguments) {
            Ok(report) => {
                println!("{report}, in {:.1} s", started.elapsed().as_secs_f64());
                ExitCode::SUCCESS
            }
            Err(failure) => {
                eprintln!("{failure}");
                ExitCode::FAILURE
            }
        };
    }
    println!(
        "seed {} ({:?})",
        arguments.seed,
        FaultMode::of_seed(arguments.seed)
    );
    let options = Options {
        seed: arguments.seed,
        crash_point: arguments.crash_point,
        step_count: arguments.steps,
        trace: true,
    };
    match run(&options) {
        Ok(report) => {
            println!(
                "ok: {} device writes and flushes, {} crash points checked, {} checkpoints, {} journal commits acknowledged, \
                 {} mirror repairs, {} corruptions reported as errors, {} opens refused for mid-log damage; {}",
                report.device_requests_total,
                report.crash_points_checked,
                report.checkpoints_committed,
                report.journal_commits_acknowledged,
                report.mirror_repairs,
                report.corruption_reported,
                report.log_damage_refused,
                report.faults
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("{failure}");
            ExitCode::FAILURE
        }
    }
}
