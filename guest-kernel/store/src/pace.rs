//! Pacing for work the kernel does at timer ticks (a checkpoint's stabilization, its
//! migration home): every process waits while a tick's step runs, so a large checkpoint is
//! spread over a span of ticks instead of taken whole at the first ones.

/// `total` objects to be done by `deadline_tick`, begun at `start_tick`: on schedule while
/// what is left is on or below the straight line from `total` at the start to none at the
/// deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    start_tick: u64,
    deadline_tick: u64,
    total: u64,
}

impl Pace {
    /// `total` objects from `now_tick`, done `ticks` later (at least one tick).
    pub fn new(total: u64, now_tick: u64, ticks: u64) -> Self {
        Self { start_tick: now_tick, deadline_tick: now_tick + ticks.max(1), total }
    }

    /// How many of the `left` objects are behind schedule at `now_tick`: none while other
    /// work (the idle loop's steps) keeps ahead of the line, all of them from the deadline on.
    pub fn behind(&self, left: u64, now_tick: u64) -> u64 {
        let span = self.deadline_tick - self.start_tick;
        let elapsed = now_tick.saturating_sub(self.start_tick).min(span);
        let on_line = u128::from(self.total) * u128::from(span - elapsed) / u128::from(span);
        left.saturating_sub(on_line as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;

    #[test]
    fn a_step_at_each_tick_that_takes_what_is_behind_ends_at_the_deadline() {
        let pace = Pace::new(1000, 50, 200);
        let mut left = 1000;
        let mut tick = 50;
        while left > 0 {
            tick += 1;
            let taken = pace.behind(left, tick);
            assert!(taken <= 1000_u64.div_ceil(200) + 1, "an even share a tick, not a burst: {taken} at tick {tick}");
            left -= taken;
        }
        assert_eq!(tick, 250);
    }

    #[test]
    fn nothing_is_behind_while_ahead_of_the_line_and_everything_from_the_deadline_on() {
        let pace = Pace::new(100, 0, 10);
        assert_eq!(pace.behind(100, 0), 0);
        assert_eq!(pace.behind(100, 5), 50);
        assert_eq!(pace.behind(40, 5), 0, "the idle loop did more than the line asks");
        assert_eq!(pace.behind(40, 10), 40);
        assert_eq!(pace.behind(40, 1_000), 40);
        assert_eq!(pace.behind(0, 5), 0);
    }

    #[test]
    fn a_span_of_no_ticks_is_one_tick_and_a_clock_before_the_start_is_the_start() {
        let pace = Pace::new(7, 100, 0);
        assert_eq!(pace.behind(7, 100), 0);
        assert_eq!(pace.behind(7, 101), 7);
        assert_eq!(pace.behind(7, 3), 0);
        let huge = Pace::new(u64::MAX, 0, u64::MAX / 2);
        assert!(huge.behind(u64::MAX, 1) <= 3, "no overflow in the line");
    }
}
