//! What the benchmarks' timing programs (`bench_micro.rs`, `bench_services.rs`) share: the
//! TSC read they time with, a measure's spread over its rounds, and the lines the host
//! reads (`bench/src/figure_lines.rs`). Included by `#[path]` into each bin, as the bins
//! of this crate share no library.

use holdfast_userlib as user;

pub fn read_tsc() -> u64 {
    // SAFETY: rdtsc only reads the time-stamp counter; ring 3 may (CR4.TSD is clear).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A measure's rounds (or single timings): their median and their maximum.
#[derive(Clone, Copy)]
pub struct Spread {
    pub median: u64,
    pub max: u64,
}

/// Callers time an odd number of rounds, so that the median is one round's figure.
pub fn spread(values: &mut [u64]) -> Spread {
    values.sort_unstable();
    Spread {
        median: values[values.len() / 2],
        max: values[values.len() - 1],
    }
}

/// A program's figure lines, each starting with its marker (`HOLDFAST-MICRO`), which the
/// host looks for: per measure `<marker> <name>_tsc_cycles <median>` and `<marker>
/// <name>_max_tsc_cycles <max>`, or `<marker>-FAILED <what>`.
pub struct FigureLines {
    marker: &'static str,
}

impl FigureLines {
    pub const fn new(marker: &'static str) -> Self {
        Self { marker }
    }

    /// `name`: the measure's name without its unit.
    pub fn report(&self, name: &str, cycles: Spread) {
        let mut median_digits = [0u8; 20];
        let mut max_digits = [0u8; 20];
        user::print_parts(&[
            self.marker.as_bytes(),
            b" ",
            name.as_bytes(),
            b"_tsc_cycles ",
            user::decimal(cycles.median, &mut median_digits),
            b"\n",
            self.marker.as_bytes(),
            b" ",
            name.as_bytes(),
            b"_max_tsc_cycles ",
            user::decimal(cycles.max, &mut max_digits),
            b"\n",
        ]);
    }

    /// Says why the program measured nothing and returns its exit code, 1: a figure for
    /// work the kernel or a service did not do as asked would be wrong.
    pub fn fail(&self, what: &str) -> u64 {
        user::print(self.marker);
        user::print("-FAILED ");
        user::print(what);
        user::print("\n");
        1
    }
}
