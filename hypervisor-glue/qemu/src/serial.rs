//! The guest's serial console as the host sees it: lines, and the markers the kernel prints
//! (see `holdfast_abi::serial`).

use std::time::Duration;

use holdfast_abi::serial::{READY_MARKER, SELFTEST_MARKER};

/// One line of serial output, without its line ending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerialLine {
    pub text: String,
    /// When the host read the line, counted from QEMU's launch.
    pub since_launch: Duration,
    /// The console closed before the line's end (a VM killed while printing it): a copy
    /// of the console leaves it without a line ending, so that readers of the copy do not
    /// take `persist-counter: 36` for a whole line.
    pub cut_short: bool,
}

impl SerialLine {
    /// What ends the line in a copy of the console: a newline, but none after a line the
    /// console closed on.
    pub fn line_ending(&self) -> &'static str {
        if self.cut_short { "" } else { "\n" }
    }
}

/// The kernel's `HOLDFAST-READY <us>` line: it is initialised and about to start ring 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyMarker {
    /// What the kernel measured: microseconds from its first instruction to the marker.
    pub guest_microseconds: u64,
    /// What the host measured: from QEMU's launch to reading the marker.
    pub since_launch: Duration,
}

/// The kernel's `HOLDFAST-SELFTEST PASS|FAIL` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelftestVerdict {
    Pass,
    Fail,
}

/// The microseconds of a `HOLDFAST-READY <us>` line. Text before the marker is allowed: a
/// boot loader may leave escape sequences on the console's current line.
pub fn parse_ready_microseconds(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once(READY_MARKER)?;
    rest.trim().parse().ok()
}

/// The verdict of a `HOLDFAST-SELFTEST PASS|FAIL` line.
pub fn parse_selftest_verdict(line: &str) -> Option<SelftestVerdict> {
    let (_, rest) = line.split_once(SELFTEST_MARKER)?;
    match rest.trim() {
        "PASS" => Some(SelftestVerdict::Pass),
        "FAIL" => Some(SelftestVerdict::Fail),
        _ => None,
    }
}

/// The longest line kept whole; a guest that prints more without a line ending gets its
/// output cut into lines of this length rather than held in memory.
pub const SERIAL_LINE_BYTES_MAX: usize = 16 * 1024;

/// Serial bytes to text lines: splits on `\n`, drops a `\r` before it, and replaces bytes
/// that are not UTF-8 (a guest may print anything).
#[derive(Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    pub fn push(&mut self, bytes: &[u8], mut emit: impl FnMut(String)) {
        for &byte in bytes {
            if byte == b'\n' {
                emit(Self::take_text(&mut self.pending));
            } else {
                self.pending.push(byte);
                if self.pending.len() >= SERIAL_LINE_BYTES_MAX {
                    emit(Self::take_text(&mut self.pending));
                }
            }
        }
    }

    /// The last line if it had no line ending.
    pub fn finish(&mut self) -> Option<String> {
        (!self.pending.is_empty()).then(|| Self::take_text(&mut self.pending))
    }

    fn take_text(pending: &mut Vec<u8>) -> String {
        if pending.last() == Some(&b'\r') {
            pending.pop();
        }
        let text = String::from_utf8_lossy(pending).into_owned();
        pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_parse() {
        assert_eq!(parse_ready_microseconds("HOLDFAST-READY 1234"), Some(1234));
        assert_eq!(
            parse_ready_microseconds("\x1b[0mHOLDFAST-READY 7\r"),
            Some(7)
        );
        assert_eq!(parse_ready_microseconds("HOLDFAST-READY soon"), None);
        assert_eq!(
            parse_selftest_verdict("HOLDFAST-SELFTEST PASS"),
            Some(SelftestVerdict::Pass)
        );
        assert_eq!(
            parse_selftest_verdict("HOLDFAST-SELFTEST FAIL"),
            Some(SelftestVerdict::Fail)
        );
        assert_eq!(parse_selftest_verdict("selftest: timer ok"), None);
    }

    #[test]
    fn splitter_handles_crlf_and_partial_lines() {
        let mut splitter = LineSplitter::default();
        let mut lines = Vec::new();
        splitter.push(b"one\r\ntw", |line| lines.push(line));
        splitter.push(b"o\nthree", |line| lines.push(line));
        assert_eq!(lines, ["one", "two"]);
        assert_eq!(splitter.finish().as_deref(), Some("three"));
        assert_eq!(splitter.finish(), None);
    }

    #[test]
    fn splitter_cuts_endless_lines() {
        let mut splitter = LineSplitter::default();
        let mut lengths = Vec::new();
        splitter.push(&vec![b'x'; SERIAL_LINE_BYTES_MAX * 2 + 5], |line| {
            lengths.push(line.len())
        });
        assert_eq!(lengths, [SERIAL_LINE_BYTES_MAX, SERIAL_LINE_BYTES_MAX]);
        assert_eq!(splitter.finish().map(|line| line.len()), Some(5));
    }
}
