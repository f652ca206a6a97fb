//! QEMU's asynchronous events, read on a QMP monitor of their own so that the VM's main QMP
//! socket stays free for `holdfast vm` (QEMU serves one client per monitor).
//!
//! The one event watched today is `BLOCK_IO_ERROR`: the host could not read or write a disk
//! image (its file system is full, the file went away). The guest is told too (its drives
//! report errors rather than pause the VM, see [`crate::command_line`]) and marks that mirror
//! failed; the host says in one line what the host saw.

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use qapi::{Qmp, Stream};
use serde::Deserialize;

/// How long QEMU may take to create its event socket after it was spawned.
const SOCKET_WAIT: Duration = Duration::from_secs(30);
const SOCKET_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A `BLOCK_IO_ERROR` event: QEMU failed a request of the guest's on a host disk image.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct BlockIoError {
    /// The drive's id: `disk<N>` for the `N`-th `--disk` (see [`crate::command_line`]).
    pub device: String,
    /// `read` or `write`.
    pub operation: String,
    /// What QEMU did: `report` (the guest got the error), `stop` (the VM paused), `ignore`.
    pub action: String,
    /// The host's error, as `strerror` says it.
    pub reason: String,
    /// Whether the host's file system is out of space.
    #[serde(default)]
    pub nospace: bool,
}

impl BlockIoError {
    /// The index of the `--disk` this error is about, if its drive id is one of ours.
    pub fn disk_index(&self) -> Option<usize> {
        self.device.strip_prefix("disk")?.parse().ok()
    }
}

#[derive(Deserialize)]
struct EventMessage {
    event: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
}

/// Follows the events on the QMP `socket` (the VM's [`crate::VmSpec::event_socket`]) in a
/// thread of its own, calling `on_error` for each `BLOCK_IO_ERROR`, until QEMU closes the
/// socket. The socket may not exist yet: QEMU is given [`SOCKET_WAIT`] to make it.
pub fn watch_block_io_errors(
    socket: PathBuf,
    mut on_error: impl FnMut(BlockIoError) + Send + 'static,
) -> io::Result<JoinHandle<io::Result<()>>> {
    thread::Builder::new()
        .name("qemu-events".into())
        .spawn(move || {
            let stream = connect_when_ready(&socket)?;
            let mut session = Qmp::new(Stream::new(BufReader::new(stream.try_clone()?), stream));
            session.handshake().map_err(|error| io::Error::other(format!("{error:?}")))?;
            let (mut reader, _writer) = session.into_inner().into_inner();
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                // A message that is not an event we know is skipped: QEMU may add events
                // and fields at any version.
                let Ok(message) = serde_json::from_str::<EventMessage>(&line) else { continue };
                if message.event != "BLOCK_IO_ERROR" {
                    continue;
                }
                if let Some(error) = message.data.and_then(|data| serde_json::from_value(data).ok()) {
                    on_error(error);
                }
            }
        })
}

fn connect_when_ready(socket: &std::path::Path) -> io::Result<UnixStream> {
    let deadline = Instant::now() + SOCKET_WAIT;
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => thread::sleep(SOCKET_POLL_INTERVAL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_io_error_event_is_read_with_its_disk() {
        let line = r##"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "BLOCK_IO_ERROR",
            "data": {"device": "disk1", "nospace": true, "node-name": "#block123",
                     "reason": "No space left on device", "operation": "write", "action": "report"}}"##;
        let message: EventMessage = serde_json::from_str(line).unwrap();
        assert_eq!(message.event, "BLOCK_IO_ERROR");
        let error: BlockIoError = serde_json::from_value(message.data.unwrap()).unwrap();
        assert_eq!(error.disk_index(), Some(1));
        assert!(error.nospace);
        assert_eq!((error.operation.as_str(), error.action.as_str()), ("write", "report"));
    }

    #[test]
    fn a_drive_that_is_not_a_disk_has_no_index() {
        let error = BlockIoError {
            device: "bootdisk".into(),
            operation: "read".into(),
            action: "report".into(),
            reason: "Input/output error".into(),
            nospace: false,
        };
        assert_eq!(error.disk_index(), None);
    }
}
