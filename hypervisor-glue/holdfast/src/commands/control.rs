//! Requests to a running VM's admin service over its control channel: a line out, lines
//! back until one that starts with `ok` or `error` (services/admin/src/main.rs).

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::failure::Failure;
use crate::paths;

/// How long the admin service may take to answer: a guest under TCG on a busy host answers
/// within a second; a system without the admin service never does.
const ANSWER_TIME_LIMIT: Duration = Duration::from_secs(30);

/// How the admin service's list of requests, in its refusal of an unknown one, shows the
/// tag: an admin service from before tags does not.
const TAG_SYNTAX: &str = "[@<tag> ]";

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
/// `time_limit` for the reply (`holdfast exporter` asks with a short one).
///
/// The request goes with a tag that its reply echoes first (services/admin/src/main.rs),
/// after a line holding only [`DISCARD`]: a client that gave up on a slow guest may leave
/// its reply to come out ahead of ours, which the tag tells apart, or the part of its
/// request the guest had read, which the discard line ends and has dropped (never carried
/// out: `tenant revoke al`, cut from `alice`, would be a request). An admin service from
/// before tags (a store keeps the programs it was made with) refuses the tagged line as an
/// unknown request, and its list of requests lacks [`TAG_SYNTAX`]: the request is then sent
/// again untagged, and its reply is the first line after that is not such a refusal (as
/// before tags, a reply left over for another client may be taken for it).
pub fn request_on(socket: &Path, name: &str, request: &str, time_limit: Duration) -> Result<String, Failure> {
    static SENT: AtomicU64 = AtomicU64::new(0);
    let deadline = Instant::now() + time_limit;
    let tag = format!("@{}-{}", std::process::id(), SENT.fetch_add(1, Ordering::Relaxed));
    let tagged = format!("{tag} {request}");
    if tagged.len() > REQUEST_BYTES_MAX {
        return Err(Failure::input(format!(
            "the request to VM '{name}' is longer than the admin service takes ({REQUEST_BYTES_MAX} bytes with its tag)"
        )));
    }
    let stream = UnixStream::connect(socket).map_err(|error| match error.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => Failure::input(format!(
            "no VM named '{name}' is running (nothing answers on {})",
            socket.display()
        )),
        _ => Failure::other(format!("VM '{name}': connecting to {}: {error}", socket.display())),
    })?;
    let mut reader = BufReader::new(stream);
    send(reader.get_mut(), name, &format!("{DISCARD}\n{tagged}"), deadline)?;
    let (mut line, mut sent_untagged) = (String::new(), false);
    loop {
        line.clear();
        read_line(&mut reader, &mut line, name, deadline)?;
        if line.trim_end() == tag {
            return read_reply(&mut reader, String::new(), name, deadline);
        }
        if line.starts_with("error unknown request") && !line.contains(TAG_SYNTAX) {
            if !sent_untagged {
                send(reader.get_mut(), name, request, deadline)?;
                sent_untagged = true;
            }
        } else if sent_untagged {
            return read_reply(&mut reader, line, name, deadline);
        }
        // Otherwise a line of a reply left over for another client: skipped.
    }
}

/// The longest request line the admin service takes, tag included.
const REQUEST_BYTES_MAX: usize = 256;

/// The byte whose line the admin service drops whole (ASCII CAN, "cancel").
const DISCARD: char = '\u{18}';

fn send(stream: &mut UnixStream, name: &str, request: &str, deadline: Instant) -> Result<(), Failure> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    stream
        .set_write_timeout(Some(left))
        .and_then(|()| stream.write_all(format!("{request}\n").as_bytes()))
        .map_err(|error| Failure::other(format!("VM '{name}': sending the request: {error}")))
}

/// Reads one line into `line`, waiting until `deadline` at most.
fn read_line(reader: &mut BufReader<UnixStream>, line: &mut String, name: &str, deadline: Instant) -> Result<(), Failure> {
    let late = || Failure::other(format!("VM '{name}' did not answer on its control channel in time (is the admin service in its system?)"));
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(late());
    }
    reader
        .get_ref()
        .set_read_timeout(Some(left))
        .map_err(|error| Failure::other(format!("VM '{name}': {error}")))?;
    match reader.read_line(line) {
        Ok(0) => Err(Failure::other(format!("VM '{name}' closed its control channel before answering"))),
        Ok(_) => Ok(()),
        Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Err(late()),
        Err(error) => Err(Failure::other(format!("VM '{name}': reading the reply: {error}"))),
    }
}

/// One reply, from its line `first` if already read (empty if not): lines up to one that
/// starts with `ok`, or an `error` line as a failure.
fn read_reply(reader: &mut BufReader<UnixStream>, first: String, name: &str, deadline: Instant) -> Result<String, Failure> {
    let (mut reply, mut line) = (String::new(), first);
    loop {
        if line.is_empty() {
            read_line(reader, &mut line, name, deadline)?;
        }
        if let Some(what) = line.strip_prefix("error ") {
            return Err(Failure::other(format!("VM '{name}': {}", what.trim_end())));
        }
        let done = line.starts_with("ok");
        reply.push_str(&line);
        if done {
            return Ok(reply);
        }
        line.clear();
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

    /// A guest's control channel on a socket in a scratch directory, removed when dropped:
    /// `answer` gets each line and returns what the guest writes back. As with QEMU's serial
    /// line, the clients one after another are one stream of bytes to the guest: a line one
    /// client left unfinished goes on with the next client's bytes.
    struct Guest {
        socket: std::path::PathBuf,
    }

    impl Guest {
        fn new(test: &str, answer: impl Fn(&str) -> String + Send + 'static) -> Guest {
            use std::io::Read;
            let directory = std::env::temp_dir().join(format!("holdfast-control-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&directory);
            std::fs::create_dir_all(&directory).unwrap();
            let socket = directory.join("control.sock");
            let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
            thread::spawn(move || {
                let mut line = Vec::new();
                for stream in listener.incoming() {
                    let mut stream = stream.unwrap();
                    let mut bytes = [0u8; 256];
                    while let Ok(count @ 1..) = stream.read(&mut bytes) {
                        for &byte in &bytes[..count] {
                            if byte != b'\n' {
                                line.push(byte);
                                continue;
                            }
                            let _ = stream.write_all(answer(&String::from_utf8_lossy(&line)).as_bytes());
                            line.clear();
                        }
                    }
                }
            });
            Guest { socket }
        }

        /// A guest whose admin service takes tags: it drops blank lines and lines with
        /// [`DISCARD`], and answers a tagged request with its tag, then `reply(request)`.
        fn tagging(test: &str, reply: impl Fn(&str) -> String + Send + 'static) -> Guest {
            Guest::new(test, move |line| {
                if line.is_empty() || line.contains(DISCARD) {
                    return String::new();
                }
                match line.split_once(' ') {
                    Some((tag, request)) if tag.starts_with('@') => format!("{tag}\n{}", reply(request)),
                    _ => reply(line),
                }
            })
        }
    }

    impl Drop for Guest {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.socket.parent().unwrap());
        }
    }

    #[test]
    fn a_reply_left_over_for_another_client_is_skipped() {
        // Ahead of ours: a counters reply, an error and the refusal of an untagged request,
        // each for a client that gave up.
        let guest = Guest::new("leftover", |line| match line.split_once(' ') {
            _ if line.contains(DISCARD) => {
                "holdfast_x 1\nok\nerror no tenant named x\nerror unknown request ([@<tag> ] counters)\n".to_owned()
            }
            Some((tag, request)) => format!("{tag}\nok generation 9 for {request}\n"),
            None => panic!("{line}"),
        });
        let reply = request_on(&guest.socket, "vm", "checkpoint status", Duration::from_secs(10)).unwrap();
        assert_eq!(reply, "ok generation 9 for checkpoint status\n");
        // Our own error is a failure.
        let guest = Guest::tagging("error", |_| "error no tenant named x\n".to_owned());
        let failure = request_on(&guest.socket, "vm", "tenant revoke x", Duration::from_secs(10)).unwrap_err();
        assert_eq!(failure.to_string(), "VM 'vm': no tenant named x");
    }

    #[test]
    fn a_request_left_unfinished_is_dropped_not_carried_out() {
        let carried_out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&carried_out);
        let guest = Guest::tagging("unfinished", move |request| {
            log.lock().unwrap().push(request.to_owned());
            "ok\n".to_owned()
        });
        let mut unfinished = UnixStream::connect(&guest.socket).unwrap();
        unfinished.write_all(b"tenant revoke al").unwrap();
        drop(unfinished);
        assert_eq!(request_on(&guest.socket, "vm", "counters", Duration::from_secs(10)).unwrap(), "ok\n");
        assert_eq!(*carried_out.lock().unwrap(), ["counters"]);
    }

    #[test]
    fn an_admin_service_from_before_tags_is_asked_again_without_one() {
        // Every line it does not know is refused, untagged; three refusals of lines an
        // earlier client left come before those of ours.
        let refusal = "error unknown request (checkpoint status | counters)\n";
        let guest = Guest::new("untagged", move |line| match line {
            "counters" => "holdfast_x 1\nok\n".to_owned(),
            _ if line.contains(DISCARD) => refusal.repeat(4),
            _ => refusal.to_owned(),
        });
        assert_eq!(request_on(&guest.socket, "vm", "counters", Duration::from_secs(10)).unwrap(), "holdfast_x 1\nok\n");
    }

    #[test]
    fn a_guest_that_never_tags_its_reply_times_out() {
        let guest = Guest::new("silent", |_| "holdfast_x 1\nok\n".to_owned());
        let started = Instant::now();
        let failure = request_on(&guest.socket, "vm", "counters", Duration::from_millis(300)).unwrap_err();
        assert!(failure.to_string().contains("did not answer"), "{failure}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_request_too_long_for_the_admin_service_is_refused_before_it_is_sent() {
        let failure = request_on(Path::new("/nonexistent"), "vm", &"x".repeat(250), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(failure, Failure::Input(_)), "{failure}");
        assert!(failure.to_string().contains("longer than the admin service takes"), "{failure}");
    }
}
