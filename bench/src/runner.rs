//! Boots one guest and times it: QEMU's serial console is read from its standard output,
//! every line is timestamped on the host as it arrives, and the guest's ready line gives
//! both the host's figure (spawn → line) and the guest's own (the number on the line).
//!
//! This is the host-side boot timer in the manner of Firecracker's: the guest signals
//! "ready" with a serial marker and the host timestamps it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use holdfast_qemu::child;

/// How a guest writes its own "time since the kernel's first instruction" after the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestClock {
    /// An integer number of microseconds (Holdfast: `HOLDFAST-READY 14414`).
    Microseconds,
    /// Seconds with a decimal fraction, as `/proc/uptime` shows them (`LINUX-READY 1.27`).
    Seconds,
}

/// The line a guest prints once it is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyMarker {
    pub text: &'static str,
    pub clock: GuestClock,
}

/// What a guest must do for a boot to count.
#[derive(Clone, Debug)]
pub struct BootExpectation {
    pub marker: ReadyMarker,
    /// When set, the guest is ready only when a line containing this text arrives after
    /// the marker: Holdfast's kernel prints its marker before any ring-3 program runs, and
    /// this is a line a ring-3 program prints, as Linux's `/init` prints Linux's marker.
    /// The guest's figure is then the marker's plus the host's time between the two lines.
    pub first_program_line: Option<&'static str>,
    /// QEMU's exit status once the guest has finished (Holdfast's self-test passing: 33;
    /// Linux powering off: 0).
    pub exit_code: i32,
    /// Longest a boot may take, ready line and exit included; QEMU is killed after it.
    pub timeout: Duration,
}

/// One measured boot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BootSample {
    /// From just before QEMU was spawned to the ready line's arrival on the host (the first
    /// program's line where one is awaited).
    pub ready_from_qemu_start: Duration,
    /// The guest's own figure on the ready line (plus, where the first program's line is
    /// awaited, the host's time from the ready line to it).
    pub ready_from_first_instruction: Duration,
}

/// Finds `marker` in a serial line and reads the guest's figure after it. `None` when the
/// line is not a ready line; `Some(Err)` when it is but the figure cannot be read, which
/// must fail the run rather than be skipped.
///
/// The marker may be preceded by other output on the same line (SeaBIOS prints
/// "Booting from ROM.." and terminal resets with no newline before the kernel's first
/// line) but must be a whole word once terminal escape sequences are removed.
pub fn parse_ready_line(line: &str, marker: &ReadyMarker) -> Option<Result<Duration, String>> {
    let line = &strip_terminal_escapes(line);
    let mut search_from = 0;
    while let Some(found) = line[search_from..].find(marker.text) {
        let start = search_from + found;
        let after = &line[start + marker.text.len()..];
        let starts_word = line[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric() && c != '-');
        if starts_word && (after.is_empty() || after.starts_with(char::is_whitespace)) {
            let figure = after.split_whitespace().next().unwrap_or("");
            return Some(parse_figure(figure, marker.clock).ok_or_else(|| {
                format!(
                    "ready line {line:?}: {figure:?} is not a time in {:?}",
                    marker.clock
                )
            }));
        }
        search_from = start + marker.text.len();
    }
    None
}

/// `line` without ANSI terminal escape sequences: `ESC [ parameters final-byte` (CSI,
/// such as SeaBIOS's `ESC [2J` screen clear) and two-byte ones (`ESC c`, reset).
fn strip_terminal_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI ends at its first byte in '@'..='~'; any other escape is two characters.
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

fn parse_figure(figure: &str, clock: GuestClock) -> Option<Duration> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match clock {
        GuestClock::Microseconds => {
            if !all_digits(figure) {
                return None;
            }
            figure.parse().ok().map(Duration::from_micros)
        }
        GuestClock::Seconds => {
            // Parsed exactly as decimal digits rather than through a float.
            let (whole, fraction) = figure.split_once('.').unwrap_or((figure, ""));
            if !all_digits(whole)
                || !(fraction.is_empty() || all_digits(fraction))
                || fraction.len() > 9
            {
                return None;
            }
            let nanos = format!("{fraction:0<9}").parse::<u32>().ok()?;
            Some(Duration::new(whole.parse().ok()?, nanos))
        }
    }
}

/// How many serial lines a failure report quotes.
const TRANSCRIPT_TAIL_LINES: usize = 30;

/// How many serial lines [`run_guest`] keeps for its caller; a guest printing more of them
/// is runaway output, not figures.
const KEPT_LINES_MAX: usize = 256;

/// One guest run: the boot's timing and the serial lines the caller asked to keep.
#[derive(Clone, Debug, PartialEq)]
pub struct GuestRun {
    pub sample: BootSample,
    /// The lines that contain one of the words asked for, in order, terminal escapes
    /// removed; at most [`KEPT_LINES_MAX`].
    pub kept_lines: Vec<String>,
    /// When each kept line arrived, from just before QEMU was spawned.
    pub kept_lines_at: Vec<Duration>,
}

/// What [`run_guest_with`] does after a serial line, as its caller's `on_line` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineAction {
    Continue,
    /// The guest has done what it was run for: QEMU is killed and the run counts (for a
    /// guest that never exits by itself, such as Holdfast checkpointing to a store).
    Finish,
    /// The guest failed: the run fails, quoting the console.
    Fail,
}

/// Runs `command` (a QEMU invocation whose standard output is the guest's serial console)
/// to completion and returns the boot's timing. Fails, quoting the console and QEMU's
/// standard error, if the ready line never comes, is malformed, QEMU exits with another
/// status than expected, or the timeout passes (QEMU is then killed).
pub fn run_boot(command: Command, expectation: &BootExpectation) -> anyhow::Result<BootSample> {
    run_guest(command, expectation, &[]).map(|run| run.sample)
}

/// [`run_boot`], also keeping every serial line that contains one of `keep_lines_with`
/// (the figures a benchmark program prints after the boot).
pub fn run_guest(
    command: Command,
    expectation: &BootExpectation,
    keep_lines_with: &[&str],
) -> anyhow::Result<GuestRun> {
    run_guest_with(command, expectation, keep_lines_with, &mut |_| LineAction::Continue)
}

/// [`run_guest`], showing every serial line (terminal escapes removed) to `on_line` as it
/// arrives, which may end the run early, successful or not: [`LineAction`].
pub fn run_guest_with(
    mut command: Command,
    expectation: &BootExpectation,
    keep_lines_with: &[&str],
    on_line: &mut dyn FnMut(&str) -> LineAction,
) -> anyhow::Result<GuestRun> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = format!("{command:?}");
    // The clock starts before the spawn: starting QEMU's process is part of the boot.
    let spawned_at = Instant::now();
    let deadline = spawned_at + expectation.timeout;
    let child = command
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let mut guard = KillOnDrop(child);
    let child = &mut guard.0;

    let stdout = child.stdout.take().expect("stdout was piped");
    let stderr = child.stderr.take().expect("stderr was piped");
    let (line_sender, lines) = mpsc::channel::<(Instant, String)>();
    // A thread of its own per pipe, so that a line is timestamped the moment it arrives and
    // QEMU never blocks on a full stderr pipe.
    let stdout_thread = thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let arrived_at = Instant::now();
                    let text = String::from_utf8_lossy(&line)
                        .trim_end_matches(['\r', '\n'])
                        .to_owned();
                    if line_sender.send((arrived_at, text)).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let stderr_thread = thread::spawn(move || child::read_capped(stderr, child::STDERR_BYTES_MAX));

    // Only the tail is kept: a runaway guest may print for the whole timeout.
    let mut transcript: VecDeque<String> = VecDeque::with_capacity(TRANSCRIPT_TAIL_LINES);
    let mut ready: Option<(Instant, Result<Duration, String>)> = None;
    // The marker, while a first program's line is awaited after it.
    let mut marker_seen: Option<(Instant, Result<Duration, String>)> = None;
    let mut kept_lines = Vec::new();
    let mut kept_lines_at = Vec::new();
    let mut timed_out = false;
    let mut finished = false;
    let mut failed_at_line = false;
    loop {
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            break;
        }
        match lines.recv_timeout(deadline - now) {
            Ok((arrived_at, line)) => {
                if ready.is_none() {
                    if let Some((marker_at, figure)) = &marker_seen
                        && expectation
                            .first_program_line
                            .is_some_and(|text| line.contains(text))
                    {
                        let since_marker = arrived_at - *marker_at;
                        ready = Some((arrived_at, figure.clone().map(|at| at + since_marker)));
                    } else if marker_seen.is_none()
                        && let Some(figure) = parse_ready_line(&line, &expectation.marker)
                    {
                        if expectation.first_program_line.is_some() {
                            marker_seen = Some((arrived_at, figure));
                        } else {
                            ready = Some((arrived_at, figure));
                        }
                    }
                }
                let clean = strip_terminal_escapes(&line);
                if kept_lines.len() < KEPT_LINES_MAX
                    && keep_lines_with.iter().any(|word| line.contains(word))
                {
                    kept_lines.push(clean.clone());
                    kept_lines_at.push(arrived_at - spawned_at);
                }
                if transcript.len() == TRANSCRIPT_TAIL_LINES {
                    transcript.pop_front();
                }
                transcript.push_back(line);
                match on_line(&clean) {
                    LineAction::Continue => {}
                    LineAction::Finish => {
                        finished = true;
                        break;
                    }
                    LineAction::Fail => {
                        failed_at_line = true;
                        break;
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
        }
    }

    // Standard output is closed: QEMU is exiting. Wait for it, but not past the deadline.
    // A run ended by its caller kills QEMU instead.
    let status = if timed_out || finished || failed_at_line {
        None
    } else {
        child::wait_until(child, Some(deadline)).context("waiting for QEMU")?
    };
    if status.is_none() {
        timed_out = !(finished || failed_at_line);
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(guard);
    let _ = stdout_thread.join();
    let stderr_text = stderr_thread.join().unwrap_or_default();

    let failure = |reason: String| -> anyhow::Error {
        let mut report = format!(
            "{reason}\n  command: {program}\n  serial console (last {} lines):",
            transcript.len()
        );
        for line in &transcript {
            report.push_str("\n    | ");
            report.push_str(line);
        }
        if !stderr_text.trim().is_empty() {
            report.push_str("\n  QEMU's standard error:");
            for line in stderr_text.lines() {
                report.push_str("\n    | ");
                report.push_str(line);
            }
        }
        anyhow!(report)
    };

    if failed_at_line {
        bail!(failure("the guest reported a failure; QEMU was killed".to_owned()));
    }
    let Some((arrived_at, figure)) = ready else {
        let awaited = match (expectation.first_program_line, &marker_seen) {
            (Some(text), Some(_)) => format!("{text:?} line after {}", expectation.marker.text),
            _ => format!("{} line", expectation.marker.text),
        };
        let why = if timed_out {
            format!(
                "no {awaited} within {:?}; QEMU was killed",
                expectation.timeout
            )
        } else {
            format!("QEMU exited ({}) without printing a {awaited}", describe(status))
        };
        return Err(failure(why));
    };
    let ready_from_first_instruction = figure.map_err(failure)?;
    if finished {
        return Ok(GuestRun {
            sample: BootSample {
                ready_from_qemu_start: arrived_at - spawned_at,
                ready_from_first_instruction,
            },
            kept_lines,
            kept_lines_at,
        });
    }
    if timed_out {
        bail!(failure(format!(
            "the guest was ready but QEMU had not exited within {:?}; it was killed",
            expectation.timeout
        )));
    }
    if status.and_then(|status| status.code()) != Some(expectation.exit_code) {
        bail!(failure(format!(
            "QEMU exited with {} where {} was expected",
            describe(status),
            expectation.exit_code
        )));
    }
    Ok(GuestRun {
        sample: BootSample {
            ready_from_qemu_start: arrived_at - spawned_at,
            ready_from_first_instruction,
        },
        kept_lines,
        kept_lines_at,
    })
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(status) => status.to_string(),
        None => "no status".to_owned(),
    }
}

/// Kills QEMU if the run is abandoned by an early return or a panic, so that no guest is
/// left running behind the benchmark. On a child already reaped both calls do nothing.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLDFAST: ReadyMarker = ReadyMarker {
        text: "HOLDFAST-READY",
        clock: GuestClock::Microseconds,
    };
    const LINUX: ReadyMarker = ReadyMarker {
        text: "LINUX-READY",
        clock: GuestClock::Seconds,
    };

    #[test]
    fn holdfast_marker_gives_microseconds() {
        assert_eq!(
            parse_ready_line("HOLDFAST-READY 14414", &HOLDFAST),
            Some(Ok(Duration::from_micros(14414)))
        );
        assert_eq!(
            parse_ready_line("HOLDFAST-READY 0\r", &HOLDFAST),
            Some(Ok(Duration::ZERO))
        );
    }

    #[test]
    fn marker_after_firmware_output_on_the_same_line_is_found() {
        let line = "\u{1b}[0mBooting from ROM..HOLDFAST-READY 250";
        assert_eq!(
            parse_ready_line(line, &HOLDFAST),
            Some(Ok(Duration::from_micros(250)))
        );
    }

    #[test]
    fn marker_after_terminal_escapes_is_found() {
        // As captured from a real Linux boot: SeaBIOS's reset and clear, then /init's line.
        let line = "Booting from ROM..\u{1b}c\u{1b}[?7l\u{1b}[2JLINUX-READY 1.98";
        assert_eq!(
            parse_ready_line(line, &LINUX),
            Some(Ok(Duration::from_millis(1980)))
        );
        assert_eq!(strip_terminal_escapes("a\u{1b}[0mb\u{1b}cc\u{1b}"), "abc");
    }

    #[test]
    fn linux_marker_gives_exact_seconds() {
        assert_eq!(
            parse_ready_line("LINUX-READY 1.27", &LINUX),
            Some(Ok(Duration::from_millis(1270)))
        );
        assert_eq!(
            parse_ready_line("LINUX-READY 12", &LINUX),
            Some(Ok(Duration::from_secs(12)))
        );
        assert_eq!(
            parse_ready_line("LINUX-READY 0.000000001 extra", &LINUX),
            Some(Ok(Duration::from_nanos(1)))
        );
    }

    #[test]
    fn other_lines_are_not_ready_lines() {
        assert_eq!(parse_ready_line("HOLDFAST-SELFTEST PASS", &HOLDFAST), None);
        assert_eq!(parse_ready_line("HOLDFAST-READYNESS 5", &HOLDFAST), None);
        assert_eq!(parse_ready_line("NOT-HOLDFAST-READY 5", &HOLDFAST), None);
        assert_eq!(parse_ready_line("", &LINUX), None);
    }

    #[test]
    fn a_ready_line_with_a_bad_figure_is_an_error_not_a_skip() {
        for line in [
            "HOLDFAST-READY",
            "HOLDFAST-READY 12ms",
            "HOLDFAST-READY -3",
            "HOLDFAST-READY 1.5",
        ] {
            assert!(
                matches!(parse_ready_line(line, &HOLDFAST), Some(Err(_))),
                "{line}"
            );
        }
        for line in [
            "LINUX-READY ",
            "LINUX-READY 1.2.3",
            "LINUX-READY .5",
            "LINUX-READY 1.0000000001",
        ] {
            assert!(
                matches!(parse_ready_line(line, &LINUX), Some(Err(_))),
                "{line}"
            );
        }
    }

    /// The runner end to end with a shell standing in for QEMU: it prints a ready line and
    /// exits with the expected status.
    #[test]
    fn a_guest_that_prints_the_marker_and_exits_is_measured() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo firmware; echo 'HOLDFAST-READY 1234'; echo after; exit 33",
        ]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: None,
            exit_code: 33,
            timeout: Duration::from_secs(20),
        };
        let sample = run_boot(command, &expectation).unwrap();
        assert_eq!(
            sample.ready_from_first_instruction,
            Duration::from_micros(1234)
        );
        assert!(sample.ready_from_qemu_start < Duration::from_secs(20));
    }

    /// Ready at the first program's line: the marker's figure plus the host's time from the
    /// marker to that line (here a sleep of 0.3 s between them).
    #[test]
    fn ready_may_wait_for_the_first_programs_line_after_the_marker() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo 'hello early'; echo 'HOLDFAST-READY 1000'; sleep 0.3; echo 'hello from ring 3'; exit 33",
        ]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: Some("hello from ring 3"),
            exit_code: 33,
            timeout: Duration::from_secs(20),
        };
        let sample = run_boot(command, &expectation).unwrap();
        // The gap is timed from when the host read the marker, which a busy host reads late
        // (CI once saw under 301 ms): 200 ms tells the sleep was counted from 1 ms without it.
        assert!(
            sample.ready_from_first_instruction >= Duration::from_millis(200)
                && sample.ready_from_first_instruction < Duration::from_secs(10),
            "{sample:?}"
        );
        assert!(sample.ready_from_qemu_start >= Duration::from_millis(300), "{sample:?}");

        // A first program's line before the marker does not count; none after it fails.
        let mut command = Command::new("sh");
        command.args(["-c", "echo 'hello from ring 3'; echo 'HOLDFAST-READY 1000'; exit 33"]);
        let error = run_boot(command, &expectation).unwrap_err().to_string();
        assert!(
            error.contains("without printing a \"hello from ring 3\" line after HOLDFAST-READY"),
            "{error}"
        );
    }

    #[test]
    fn lines_with_the_words_asked_for_are_kept() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo 'HOLDFAST-READY 1'; echo 'X-MICRO a 1'; echo other; printf '\\033[0mX-MICRO b 2\\n'; exit 33",
        ]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: None,
            exit_code: 33,
            timeout: Duration::from_secs(20),
        };
        let run = run_guest(command, &expectation, &["X-MICRO"]).unwrap();
        assert_eq!(run.kept_lines, ["X-MICRO a 1", "X-MICRO b 2"]);
    }

    #[test]
    fn the_caller_may_end_a_run_that_never_exits() {
        let mut command = Command::new("sh");
        // `exec` so that the killed process is the one holding the pipe.
        command.args([
            "-c",
            "echo 'HOLDFAST-READY 7'; echo 'X-STORE a 1'; echo 'X-STORE-DONE'; exec sleep 30",
        ]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: None,
            exit_code: 33,
            timeout: Duration::from_secs(20),
        };
        let started = Instant::now();
        let mut seen = Vec::new();
        let run = run_guest_with(command, &expectation, &["X-STORE"], &mut |line| {
            seen.push(line.to_owned());
            if line == "X-STORE-DONE" {
                LineAction::Finish
            } else {
                LineAction::Continue
            }
        })
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(seen, ["HOLDFAST-READY 7", "X-STORE a 1", "X-STORE-DONE"]);
        assert_eq!(run.kept_lines, ["X-STORE a 1", "X-STORE-DONE"]);
        assert_eq!(run.kept_lines_at.len(), 2);
        assert!(run.kept_lines_at[0] <= run.kept_lines_at[1]);
        assert!(run.sample.ready_from_qemu_start <= run.kept_lines_at[0]);

        let mut command = Command::new("sh");
        command.args(["-c", "echo 'HOLDFAST-READY 7'; echo 'X-STORE-FAILED why'; exec sleep 30"]);
        let error = run_guest_with(command, &expectation, &[], &mut |line| {
            if line.contains("FAILED") {
                LineAction::Fail
            } else {
                LineAction::Continue
            }
        })
        .unwrap_err()
        .to_string();
        assert!(error.contains("reported a failure"), "{error}");
        assert!(error.contains("X-STORE-FAILED why"), "{error}");
    }

    #[test]
    fn a_missing_marker_fails_loudly_with_the_transcript() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "echo 'Kernel panic - not syncing'; echo oops >&2; exit 0",
        ]);
        let expectation = BootExpectation {
            marker: LINUX,
            first_program_line: None,
            exit_code: 0,
            timeout: Duration::from_secs(20),
        };
        let error = run_boot(command, &expectation).unwrap_err().to_string();
        assert!(
            error.contains("without printing a LINUX-READY line"),
            "{error}"
        );
        assert!(error.contains("Kernel panic"), "{error}");
        assert!(error.contains("oops"), "{error}");
    }

    #[test]
    fn a_failure_quotes_only_the_last_lines() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "i=1; while [ $i -le 100 ]; do echo line$i; i=$((i+1)); done",
        ]);
        let expectation = BootExpectation {
            marker: LINUX,
            first_program_line: None,
            exit_code: 0,
            timeout: Duration::from_secs(20),
        };
        let error = run_boot(command, &expectation).unwrap_err().to_string();
        assert!(error.contains("(last 30 lines)"), "{error}");
        assert!(
            error.contains("| line71\n") && error.contains("| line100"),
            "{error}"
        );
        assert!(!error.contains("| line70\n"), "{error}");
    }

    #[test]
    fn a_wrong_exit_status_fails() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo 'HOLDFAST-READY 1'; exit 35"]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: None,
            exit_code: 33,
            timeout: Duration::from_secs(20),
        };
        let error = run_boot(command, &expectation).unwrap_err().to_string();
        assert!(error.contains("where 33 was expected"), "{error}");
    }

    #[test]
    fn a_hung_guest_is_killed_at_the_timeout() {
        let mut command = Command::new("sh");
        // `exec` so that the killed process is the one holding the pipe.
        command.args(["-c", "echo 'HOLDFAST-READY 1'; exec sleep 30"]);
        let expectation = BootExpectation {
            marker: HOLDFAST,
            first_program_line: None,
            exit_code: 33,
            timeout: Duration::from_millis(300),
        };
        let started = Instant::now();
        let error = run_boot(command, &expectation).unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(error.contains("had not exited"), "{error}");
    }
}
