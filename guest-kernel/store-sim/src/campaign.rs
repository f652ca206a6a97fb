//! Campaigns: each seed runs once to count its device writes and flushes, then once per
//! such boundary with the crash just before it.

use crate::disk::FaultCounts;
use crate::scenario::{Failure, FaultMode, Options, RunReport, run};

#[derive(Clone, Debug, Default)]
pub struct CampaignReport {
    pub seeds: u64,
    pub runs: u64,
    pub crash_points_checked: u64,
    pub corruption_reported: u64,
    pub checkpoints_committed: u64,
    pub journal_commits_acknowledged: u64,
    pub mirror_repairs: u64,
    pub faults: FaultCounts,
    pub log_damage_refused: u64,
}

/// The campaign's totals, as the CLI and the CI test print them.
impl core::fmt::Display for CampaignReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} seeds, {} runs, {} crash points checked, {} checkpoints committed, {} journal \
             commits acknowledged, {} mirror repairs, {} corruptions reported as errors, {} \
             opens refused for mid-log damage naming the loss; {}",
            self.seeds,
            self.runs,
            self.crash_points_checked,
            self.checkpoints_committed,
            self.journal_commits_acknowledged,
            self.mirror_repairs,
            self.corruption_reported,
            self.log_damage_refused,
            self.faults
        )
    }
}

impl CampaignReport {
    /// Adds another campaign's totals (a worker thread's).
    pub fn merge(&mut self, other: &CampaignReport) {
        self.seeds += other.seeds;
        self.runs += other.runs;
        self.crash_points_checked += other.crash_points_checked;
        self.corruption_reported += other.corruption_reported;
        self.checkpoints_committed += other.checkpoints_committed;
        self.journal_commits_acknowledged += other.journal_commits_acknowledged;
        self.mirror_repairs += other.mirror_repairs;
        self.faults += other.faults;
        self.log_damage_refused += other.log_damage_refused;
    }

    fn add(&mut self, report: &RunReport) {
        self.runs += 1;
        self.crash_points_checked += report.crash_points_checked;
        self.corruption_reported += report.corruption_reported;
        self.checkpoints_committed += report.checkpoints_committed;
        self.journal_commits_acknowledged += report.journal_commits_acknowledged;
        self.mirror_repairs += report.mirror_repairs;
        self.faults += report.faults;
        self.log_damage_refused += report.log_damage_refused;
    }
}

/// Runs `seed` uninterrupted, then crashed before each of its writes (every `stride`-th
/// write or flush boundary; 1 for all of them). Fails if the seed's runs injected none of
/// its fault mode's faults.
pub fn run_seed(
    seed: u64,
    step_count: usize,
    stride: u64,
    report: &mut CampaignReport,
) -> Result<(), Failure> {
    let options = Options {
        seed,
        crash_point: None,
        step_count,
        trace: false,
    };
    let first = run(&options)?;
    let mut faults = first.faults;
    report.add(&first);
    let mut crash_point = 1;
    while crash_point <= first.device_requests_total {
        let crashed = run(&Options {
            crash_point: Some(crash_point),
            ..options
        })?;
        faults += crashed.faults;
        report.add(&crashed);
        crash_point += stride;
    }
    FaultMode::of_seed(seed)
        .injected(&faults)
        .map_err(|message| Failure {
            seed,
            crash_point: None,
            step_count,
            message,
        })?;
    report.seeds += 1;
    Ok(())
}
