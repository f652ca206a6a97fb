//! `holdfast-store-sim`: replays one seed (`--seed N`, optionally `--crash-point N`)
//! printing what it does, or runs a campaign over many seeds, each crashed at every write
//! boundary (`--campaign --seeds K`).

use std::process::ExitCode;
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
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    if arguments.campaign {
        let started = Instant::now();
        let mut report = CampaignReport::default();
        for seed in arguments.seed..arguments.seed + arguments.seeds {
            if let Err(failure) =
                run_seed(seed, arguments.steps, arguments.stride.max(1), &mut report)
            {
                eprintln!("{failure}");
                return ExitCode::FAILURE;
            }
        }
        println!("{report}, in {:.1} s", started.elapsed().as_secs_f64());
        return ExitCode::SUCCESS;
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
