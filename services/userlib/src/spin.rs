//! Spinning on the processor while measuring what a meter lets a program have: the
//! meters' and hostile tenants' tests read it to judge shares and quanta.

/// A gap between two clock reads longer than this was spent off the processor.
const RUNNING_GAP_NS: u64 = 1_000_000;

/// What [`spin`] measured.
pub struct Spun {
    /// The time it ran.
    pub ran_ns: u64,
    /// Thousandths of the window it ran.
    pub ran_permille: u64,
    /// Its longest run without a gap: the scheduling quantum as the timer gave it.
    pub longest_run_us: u64,
}

/// Reads the clock (`now`, nanoseconds) in a loop for `window_ns`, counting the time it ran
/// (gaps between reads shorter than a millisecond; a longer one is time another process
/// had) and its longest run.
pub fn spin(window_ns: u64, mut now: impl FnMut() -> u64) -> Spun {
    let start = now();
    let mut last = start;
    let (mut ran_ns, mut run_ns, mut longest_run_ns) = (0, 0, 0);
    while last - start < window_ns {
        let read = now();
        if read - last < RUNNING_GAP_NS {
            ran_ns += read - last;
            run_ns += read - last;
            longest_run_ns = longest_run_ns.max(run_ns);
        } else {
            run_ns = 0;
        }
        last = read;
    }
    Spun { ran_ns, ran_permille: ran_ns * 1000 / (last - start).max(1), longest_run_us: longest_run_ns / 1000 }
}
