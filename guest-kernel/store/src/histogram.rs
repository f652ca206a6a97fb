//! A cumulative latency histogram with fixed buckets, in seconds, written in the Prometheus
//! text format (`_bucket{le=...}`, `_sum`, `_count`): what the kernel keeps of the store's
//! stabilization time, the snapshot pause and the journal's commit latency.

use core::fmt::Write;

/// The most bounds a histogram has (its `+Inf` bucket is `count`).
pub const BOUNDS_MAX: usize = 16;

/// Snapshot pause: the world is stopped while the dirty objects are taken, 0.2 ms for a
/// small system under TCG, 10 ms at its worst seen; a second would be a stall.
pub const SNAPSHOT_PAUSE_BOUNDS_SECONDS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// Stabilization: from the snapshot to the commit record's flush, 10-20 ms for a small
/// checkpoint under TCG, seconds for hundreds of MiB of dirty pages; the alert compares it
/// with the interval (seconds).
pub const STABILIZATION_BOUNDS_SECONDS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Journal commit: from the request to its acknowledgement (the flush, and the standby's
/// copy on a pair), a fraction of a millisecond under KVM on a fast disk, 14 ms on average
/// under TCG, longer when a checkpoint's writes queue ahead. The TP1 service's commit
/// histogram (which includes this) has bounds among these.
pub const JOURNAL_COMMIT_BOUNDS_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5,
];

/// Observations counted in buckets by upper bound (`le`), with their sum and count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SecondsHistogram {
    bounds: &'static [f64],
    /// Per bound, the observations at most that bound and above the one before (not
    /// cumulative: the text's cumulative counts are summed when written).
    counts: [u64; BOUNDS_MAX],
    /// Every observation, so also the `+Inf` bucket.
    count: u64,
    sum_seconds: f64,
}

impl SecondsHistogram {
    /// An empty histogram over `bounds`, which must rise and number at most [`BOUNDS_MAX`]
    /// (checked when built, as the bounds are constants).
    pub const fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() <= BOUNDS_MAX, "too many histogram bounds");
        let mut index = 1;
        while index < bounds.len() {
            assert!(bounds[index - 1] < bounds[index], "histogram bounds must rise");
            index += 1;
        }
        Self { bounds, counts: [0; BOUNDS_MAX], count: 0, sum_seconds: 0.0 }
    }

    /// Counts one observation of `seconds` (a negative or NaN one, which a clock never
    /// gives, counts as 0).
    pub fn observe(&mut self, seconds: f64) {
        let seconds = if seconds >= 0.0 { seconds } else { 0.0 };
        if let Some(bucket) = self.bounds.iter().position(|&bound| seconds <= bound) {
            self.counts[bucket] += 1;
        }
        self.count += 1;
        self.sum_seconds += seconds;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_seconds
    }

    /// Appends the histogram's lines as metric `name` (which ends in `_seconds`): one
    /// `_bucket` line per bound and `+Inf`, cumulative, then `_sum` and `_count`.
    pub fn write_text(&self, name: &str, text: &mut alloc::string::String) {
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(self.counts) {
            cumulative += count;
            // `Display` of an f64 is the shortest decimal that reads back the same and
            // never an exponent: `0.00025`, `1`.
            let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(text, "{name}_sum {}", self.sum_seconds);
        let _ = writeln!(text, "{name}_count {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn buckets_are_cumulative_with_sum_and_count() {
        let mut histogram = SecondsHistogram::new(&[0.001, 0.01, 1.0]);
        for seconds in [0.0005, 0.001, 0.002, 0.5, 3.0, -1.0] {
            histogram.observe(seconds);
        }
        let mut text = String::new();
        histogram.write_text("holdfast_x_seconds", &mut text);
        assert_eq!(
            text,
            "holdfast_x_seconds_bucket{le=\"0.001\"} 3\n\
             holdfast_x_seconds_bucket{le=\"0.01\"} 4\n\
             holdfast_x_seconds_bucket{le=\"1\"} 5\n\
             holdfast_x_seconds_bucket{le=\"+Inf\"} 6\n\
             holdfast_x_seconds_sum 3.5035\n\
             holdfast_x_seconds_count 6\n"
        );
        assert_eq!(histogram.count(), 6);
    }

    #[test]
    fn the_kernels_bounds_rise_and_fit() {
        for bounds in [SNAPSHOT_PAUSE_BOUNDS_SECONDS, STABILIZATION_BOUNDS_SECONDS, JOURNAL_COMMIT_BOUNDS_SECONDS] {
            let histogram = SecondsHistogram::new(bounds);
            let mut text = String::new();
            histogram.write_text("holdfast_checkpoint_stabilization_seconds", &mut text);
            // One family must fit one page of `checkpoint.counters` with room to spare.
            assert!(text.len() < 2048, "{}", text.len());
        }
    }

    #[test]
    #[should_panic(expected = "must rise")]
    fn bounds_that_fall_are_refused() {
        SecondsHistogram::new(&[0.1, 0.01]);
    }
}
