//! Requests to a running VM's admin service over its control channel: a line out, lines
//! back until one that starts with `ok` or `error` (services/admin/src/main.rs).

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::failure::Failure;
use crate::paths;

/// How long the admin service may take to answer: a guest under TCG on a busy host answers
/// within a second; a system without the admin service never does.
const ANSWER_TIME_LIMIT: Duration = Duration::from_secs(30);

/// The newest committed checkpoint's generation in a `checkpoint status` reply.
pub fn status_generation(reply: &str) -> Option<u64> {
    reply.trim_end().strip_prefix("ok generation ")?.split_whitespace().next()?.parse().ok()
}

/// Has the VM take a checkpoint and waits until one has committed since this call, asking
/// `checkpoint status` every `poll`; `ask` sends a request and returns its reply. Returns
/// the newer generation, or `None` if none committed before `deadline`.
pub fn checkpoint_and_wait(
    ask: impl Fn(&str) -> Result<String, Failure>,
    deadline: Instant,
    poll: Duration,
) -> Result<Option<u64>, Failure> {
    let before = ask("checkpoint status")?;
    let before = status_generation(&before)
        .ok_or_else(|| Failure::other(format!("unexpected reply '{}'", before.trim_end())))?;
    ask("checkpoint now")?;
    while Instant::now() < deadline {
        if let Some(now) = status_generation(&ask("checkpoint status")?).filter(|&now| now > before) {
            return Ok(Some(now));
        }
        thread::sleep(poll);
    }
    Ok(None)
}

/// Sends `request` to VM `name` and returns the reply's body and `ok` line; an `error`
/// reply is a failure naming what the guest said.
pub fn request(name: &str, request: &str) -> Result<String, Failure> {
    paths::check_vm_name(name)?;
    let socket = paths::control_socket_beside(&paths::qmp_socket_of(name)?);
    request_on(&socket, name, request, ANSWER_TIME_LIMIT)
}

/// `request` to the VM called `name` whose control channel is `socket`, waiting at most
/// `time_limit` for each read and write (`holdfast exporter` asks with a short one).
pub fn request_on(socket: &Path, name: &str, request: &str, time_limit: Duration) -> Result<String, Failure> {
    request_matching(socket, name, request, time_limit, |_| true)
}

/// `request_on`, skipping replies that `expected` rejects. A client that gave up on a slow
/// guest leaves its reply to come out on the next connection, ahead of that one's own: the
/// exporter, which gives up after a short time, reads past such a reply to its own.
pub fn request_matching(
    socket: &Path,
    name: &str,
    request: &str,
    time_limit: Duration,
    expected: impl Fn(&str) -> bool,
) -> Result<String, Failure> {
    let stream = UnixStream::connect(socket).map_err(|error| match error.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => Failure::input(format!(
            "no VM named '{name}' is running (nothing answers on {})",
            socket.display()
        )),
        _ => Failure::other(format!("VM '{name}': connecting to {}: {error}", socket.display())),
    })?;
    stream
        .set_read_timeout(Some(time_limit))
        .and_then(|()| stream.set_write_timeout(Some(time_limit)))
        .map_err(|error| Failure::other(format!("VM '{name}': {error}")))?;
    let mut stream = stream;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .map_err(|error| Failure::other(format!("VM '{name}': sending the request: {error}")))?;
    let mut reader = BufReader::new(stream);
    // Two replies at most: one left over from a client that gave up, then ours.
    for _ in 0..2 {
        let reply = read_reply(&mut reader, name, time_limit)?;
        if expected(&reply) {
            return Ok(reply);
        }
    }
    Err(Failure::other(format!("VM '{name}': the replies to '{request}' are not what it asked for")))
}

/// One reply: lines up to one that starts with `ok`, or an `error` line as a failure.
fn read_reply(reader: &mut BufReader<UnixStream>, name: &str, time_limit: Duration) -> Result<String, Failure> {
    let mut reply = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return Err(Failure::other(format!("VM '{name}' closed its control channel before answering"))),
            Ok(_) => {}
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Failure::other(format!(
                    "VM '{name}' did not answer on its control channel within {:.1} s (is the admin service in its system?)",
                    time_limit.as_secs_f64()
                )));
            }
            Err(error) => return Err(Failure::other(format!("VM '{name}': reading the reply: {error}"))),
        }
        if let Some(what) = line.strip_prefix("error ") {
            return Err(Failure::other(format!("VM '{name}': {}", what.trim_end())));
        }
        let done = line.starts_with("ok");
        reply.push_str(&line);
        if done {
            return Ok(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_status_reply_gives_its_generation() {
        assert_eq!(status_generation("ok generation 12 interval-ms 5000 log-fill-permille 3 degraded 0\n"), Some(12));
        assert_eq!(status_generation("error no checkpoint\n"), None);
        assert_eq!(status_generation("ok generation x\n"), None);
    }

    #[test]
    fn the_wait_ends_at_a_newer_commit_or_the_deadline() {
        // A VM whose generation moves on at its third status reply after the request.
        let asked = RefCell::new(Vec::new());
        let ask = |request: &str| {
            asked.borrow_mut().push(request.to_owned());
            let statuses = asked.borrow().iter().filter(|asked| *asked == "checkpoint status").count();
            Ok(format!("ok generation {}\n", if statuses >= 4 { 8 } else { 7 }))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        assert_eq!(checkpoint_and_wait(ask, deadline, Duration::ZERO).unwrap(), Some(8));
        assert_eq!(asked.borrow()[..2], ["checkpoint status", "checkpoint now"]);
        // A generation that never moves: none by the deadline.
        let still = |_: &str| Ok("ok generation 7\n".to_owned());
        assert_eq!(checkpoint_and_wait(still, Instant::now() + Duration::from_millis(50), Duration::from_millis(5)).unwrap(), None);
    }
}
