//! Checks for the self-test programs: each prints one line naming what it checked and
//! counts failures, which become the program's exit code.

use crate as user;

pub struct Checks {
    program: &'static str,
    pub failures: u64,
}

impl Checks {
    pub fn new(program: &'static str) -> Self {
        Self {
            program,
            failures: 0,
        }
    }

    /// Prints `<program>: <what> [ok|FAILED]`.
    pub fn check(&mut self, what: &str, passed: bool) {
        if !passed {
            self.failures += 1;
        }
        let verdict: &[u8] = if passed { b" [ok]\n" } else { b" [FAILED]\n" };
        user::print_parts(&[self.program.as_bytes(), b": ", what.as_bytes(), verdict]);
    }

    /// Checks that `got` is `expected` (both reply codes).
    pub fn code(&mut self, what: &str, got: u64, expected: u64) {
        self.check(what, got == expected);
    }
}

/// `Ok` if `condition` holds, else `what` failed: the steps of a check that [`verdict`]
/// reports.
pub fn expect(condition: bool, what: &'static str) -> Result<(), &'static str> {
    if condition { Ok(()) } else { Err(what) }
}

/// Prints `<program>: passed`, or `<program>: MISMATCH: <what>` naming the first check that
/// failed: the one-line verdict a host test waits for. Returns whether it passed.
pub fn verdict(program: &str, result: Result<(), &str>) -> bool {
    match result {
        Ok(()) => user::print_parts(&[program.as_bytes(), b": passed\n"]),
        Err(what) => user::print_parts(&[program.as_bytes(), b": MISMATCH: ", what.as_bytes(), b"\n"]),
    }
    result.is_ok()
}
