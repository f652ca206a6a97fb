//! QEMU as a child process: waiting for it to exit with a deadline, and keeping what it
//! writes to its standard error. Shared by the launcher and the benchmarks' runner.

use std::io::{self, Read};
use std::process::{Child, ExitStatus};
use std::time::Instant;

use wait_timeout::ChildExt;

/// How much of QEMU's standard error is kept for error messages.
pub const STDERR_BYTES_MAX: usize = 64 * 1024;

/// Waits for `child` to exit, but not past `deadline` (`None`: as long as it takes).
/// `Ok(None)` when the deadline passed first; the child is then still running.
pub fn wait_until(child: &mut Child, deadline: Option<Instant>) -> io::Result<Option<ExitStatus>> {
    let Some(deadline) = deadline else {
        return child.wait().map(Some);
    };
    // `wait_timeout` blocks until SIGCHLD or the timeout rather than polling, so the exit is
    // seen the moment it happens. It counts the timeout in whole milliseconds rounded down
    // and so may return up to one early: the loop waits out the rest.
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Some(status) = child.wait_timeout(left)? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
    }
}

/// Reads `stream` to its end, keeping the first `bytes_max` bytes. The rest is read and
/// dropped: a writer blocked on a full pipe would stall QEMU.
pub fn read_capped(mut stream: impl Read, bytes_max: usize) -> String {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(length) => {
                let room = bytes_max.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..length.min(room)]);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            // An error only ends the capture early; what was read is still worth showing.
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    #[test]
    fn an_exit_before_the_deadline_gives_its_status() {
        let mut child = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = wait_until(&mut child, Some(deadline)).unwrap();
        assert_eq!(status.and_then(|status| status.code()), Some(7));
        let status = wait_until(&mut child, None).unwrap();
        assert_eq!(status.and_then(|status| status.code()), Some(7));
    }

    #[test]
    fn a_child_running_past_the_deadline_gives_none_at_the_deadline() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let started = Instant::now();
        let status = wait_until(&mut child, Some(started + Duration::from_millis(200))).unwrap();
        assert_eq!(status, None);
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(10));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn capped_reading_keeps_the_start_and_drains_the_rest() {
        let mut child = Command::new("sh")
            .args(["-c", "head -c 200000 /dev/zero | tr '\\0' x"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let text = read_capped(child.stdout.take().unwrap(), 1000);
        assert_eq!(text, "x".repeat(1000));
        // The writer was never blocked: it got to its end.
        assert!(child.wait().unwrap().success());
    }
}
