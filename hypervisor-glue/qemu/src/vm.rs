//! Running a VM: QEMU as a child process with its serial console on a pipe, watched line by
//! line until it exits, times out, or the caller has seen enough.

use std::fmt;
use std::io::{self, Read};
use std::ops::ControlFlow;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use holdfast_abi::exit::{QEMU_STATUS_FAILURE, QEMU_STATUS_SUCCESS};

use crate::binary::QemuBinary;
use crate::child;
use crate::command_line::VmSpec;
use crate::serial::{
    LineSplitter, ReadyMarker, SelftestVerdict, SerialLine, parse_ready_microseconds,
    parse_selftest_verdict,
};

/// How a VM run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmEnding {
    /// QEMU exited with status 33: the guest reported success through `isa-debug-exit`.
    GuestPassed,
    /// QEMU exited with status 35: the guest reported failure through `isa-debug-exit`.
    GuestFailed,
    /// QEMU exited otherwise: with another status (0 after a QMP `quit`, a guest reset under
    /// `-no-reboot`, or a signal to QEMU; 1 when QEMU rejected its configuration) or killed
    /// by a signal.
    QemuExited {
        status: Option<i32>,
        signal: Option<i32>,
    },
    /// The time limit passed; QEMU was killed.
    TimedOut { limit: Duration },
    /// The caller's line observer asked to stop; QEMU was killed.
    StoppedByCaller,
}

impl fmt::Display for VmEnding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::GuestPassed => write!(f, "the guest reported success"),
            Self::GuestFailed => write!(f, "the guest reported failure"),
            Self::QemuExited {
                status: Some(status),
                ..
            } => write!(f, "QEMU exited with status {status}"),
            Self::QemuExited {
                signal: Some(signal),
                ..
            } => write!(f, "QEMU was killed by signal {signal}"),
            Self::QemuExited { .. } => write!(f, "QEMU ended"),
            Self::TimedOut { limit } => {
                write!(f, "the VM did not finish within {} s", limit.as_secs_f64())
            }
            Self::StoppedByCaller => write!(f, "the VM was stopped"),
        }
    }
}

impl VmEnding {
    fn from_exit_status(status: ExitStatus) -> Self {
        match status.code() {
            Some(QEMU_STATUS_SUCCESS) => Self::GuestPassed,
            Some(QEMU_STATUS_FAILURE) => Self::GuestFailed,
            code => Self::QemuExited {
                status: code,
                signal: status.signal(),
            },
        }
    }
}

/// What a finished run showed.
#[derive(Clone, Debug)]
pub struct VmReport {
    pub ending: VmEnding,
    /// The kernel's `HOLDFAST-READY` marker, if it got that far.
    pub ready: Option<ReadyMarker>,
    /// The kernel's `HOLDFAST-SELFTEST` verdict, if it printed one.
    pub selftest: Option<SelftestVerdict>,
    /// What QEMU wrote to its stderr (its own errors and warnings), at most 64 KiB.
    pub qemu_stderr: String,
    /// From launch to the end of the run.
    pub elapsed: Duration,
}

/// A QEMU process running a Holdfast VM. Dropping it kills QEMU.
pub struct RunningVm {
    child: Child,
    reaped: bool,
    launched_at: Instant,
    serial_lines: Receiver<SerialLine>,
    stderr_reader: Option<JoinHandle<String>>,
    qmp_socket: Option<PathBuf>,
}

impl RunningVm {
    /// Starts QEMU for `spec`. QEMU is killed (SIGKILL) when the thread that called this
    /// ends, so that a VM never outlives its launcher: call it from a thread that lives as
    /// long as the VM should (the main thread, in the CLI).
    pub fn launch(qemu: &QemuBinary, spec: &VmSpec) -> io::Result<Self> {
        let mut command = qemu.command();
        command
            .args(spec.qemu_arguments())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // prctl(2), which is async-signal-safe and touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let launched_at = Instant::now();
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, serial_lines) = mpsc::channel();
        thread::Builder::new()
            .name("qemu-serial".into())
            .spawn(move || {
                read_serial_lines(stdout, launched_at, |line| sender.send(line).is_ok())
            })?;
        let stderr_reader = thread::Builder::new()
            .name("qemu-stderr".into())
            .spawn(move || child::read_capped(stderr, child::STDERR_BYTES_MAX))?;
        Ok(Self {
            child,
            reaped: false,
            launched_at,
            serial_lines,
            stderr_reader: Some(stderr_reader),
            qmp_socket: spec.qmp_socket.clone(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn launched_at(&self) -> Instant {
        self.launched_at
    }

    /// The QMP socket given in the spec, if any.
    pub fn qmp_socket(&self) -> Option<&Path> {
        self.qmp_socket.as_deref()
    }

    /// Follows the serial console until QEMU exits, `time_limit` (counted from launch)
    /// passes, or `on_line` returns `Break`. Every line goes to `on_line` as it arrives.
    pub fn wait(
        mut self,
        time_limit: Option<Duration>,
        mut on_line: impl FnMut(&SerialLine) -> ControlFlow<()>,
    ) -> io::Result<VmReport> {
        let deadline = time_limit.map(|limit| self.launched_at + limit);
        let mut ready = None;
        let mut selftest = None;
        let ending = loop {
            let received = match deadline {
                Some(deadline) => self
                    .serial_lines
                    .recv_timeout(deadline.saturating_duration_since(Instant::now())),
                None => self
                    .serial_lines
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            match received {
                Ok(line) => {
                    if let Some(guest_microseconds) = parse_ready_microseconds(&line.text) {
                        ready.get_or_insert(ReadyMarker {
                            guest_microseconds,
                            since_launch: line.since_launch,
                        });
                    }
                    selftest = parse_selftest_verdict(&line.text).or(selftest);
                    if on_line(&line).is_break() {
                        self.kill()?;
                        break VmEnding::StoppedByCaller;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.kill()?;
                    break VmEnding::TimedOut {
                        limit: time_limit.unwrap_or_default(),
                    };
                }
                // The serial console closed: QEMU is exiting.
                Err(RecvTimeoutError::Disconnected) => break self.reap(deadline, time_limit)?,
            }
        };
        let qemu_stderr = self
            .stderr_reader
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        Ok(VmReport {
            ending,
            ready,
            selftest,
            qemu_stderr,
            elapsed: self.launched_at.elapsed(),
        })
    }

    /// Kills QEMU (SIGKILL) and reaps it. Does nothing if it has already exited.
    pub fn kill(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        self.child.kill()?;
        self.child.wait()?;
        self.reaped = true;
        Ok(())
    }

    /// Waits for QEMU, whose serial console has closed, to exit; kills it at the deadline.
    fn reap(
        &mut self,
        deadline: Option<Instant>,
        time_limit: Option<Duration>,
    ) -> io::Result<VmEnding> {
        match child::wait_until(&mut self.child, deadline)? {
            Some(status) => {
                self.reaped = true;
                Ok(VmEnding::from_exit_status(status))
            }
            None => {
                self.kill()?;
                Ok(VmEnding::TimedOut {
                    limit: time_limit.unwrap_or_default(),
                })
            }
        }
    }
}

impl Drop for RunningVm {
    fn drop(&mut self) {
        // Nothing more can be done about a failure here; the death signal set at launch
        // still ends QEMU when the launching thread ends.
        let _ = self.kill();
    }
}

/// Reads QEMU's stdout until it closes and hands each line to `deliver`, which returns
/// false once nobody listens any more.
fn read_serial_lines(
    mut stdout: impl Read,
    launched_at: Instant,
    mut deliver: impl FnMut(SerialLine) -> bool,
) {
    let mut splitter = LineSplitter::default();
    let mut buffer = [0u8; 4096];
    let mut listening = true;
    while listening {
        let length = match stdout.read(&mut buffer) {
            Ok(0) => break,
            Ok(length) => length,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let since_launch = launched_at.elapsed();
        splitter.push(&buffer[..length], |text| {
            listening = listening && deliver(SerialLine { text, since_launch, cut_short: false });
        });
    }
    if let Some(text) = splitter.finish() {
        deliver(SerialLine {
            text,
            since_launch: launched_at.elapsed(),
            cut_short: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_last_line_the_console_closed_on_is_marked_cut_short() {
        let mut lines = Vec::new();
        read_serial_lines(&b"persist-counter: 364904448\npersist-counter: 36"[..], Instant::now(), |line| {
            lines.push((line.text, line.cut_short));
            true
        });
        assert_eq!(
            lines,
            [("persist-counter: 364904448".to_owned(), false), ("persist-counter: 36".to_owned(), true)]
        );
    }
}
