//! Controlling a running VM over its QMP socket, through the `qapi` crate's QMP client.
//!
//! QEMU serves one QMP client at a time on a socket, so a client should connect, do its
//! work and drop the connection.

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use qapi::{Enum, ExecuteError, Qmp, Stream, qmp};

/// How long a QMP exchange may take before the VM is taken to be unresponsive.
pub const QMP_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// Nothing listens on the socket: the VM is not running (or the socket is stale).
    #[error("no QMP socket at '{}' answers: {source}", socket.display())]
    NotListening { socket: PathBuf, source: io::Error },
    #[error("QMP connection to '{}' failed: {source}", socket.display())]
    Io { socket: PathBuf, source: io::Error },
    /// QEMU answered the command with an error.
    #[error("QEMU refused '{command}': {message}")]
    Refused {
        command: &'static str,
        message: String,
    },
}

/// The VM's run state as QMP `query-status` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStatus {
    /// Whether the virtual CPUs are running.
    pub running: bool,
    /// QEMU's name for the run state: `running`, `paused`, `shutdown`, `internal-error`, ...
    pub state: &'static str,
}

type QmpStream = Stream<BufReader<UnixStream>, UnixStream>;

/// A connected, negotiated QMP session.
pub struct QmpClient {
    socket: PathBuf,
    session: Qmp<QmpStream>,
}

impl QmpClient {
    /// Connects to the socket and negotiates capabilities.
    pub fn connect(socket: &Path) -> Result<Self, QmpError> {
        let io_error = |source| QmpError::Io {
            socket: socket.to_owned(),
            source,
        };
        let stream = UnixStream::connect(socket).map_err(|source| QmpError::NotListening {
            socket: socket.to_owned(),
            source,
        })?;
        stream
            .set_read_timeout(Some(QMP_REPLY_TIMEOUT))
            .map_err(io_error)?;
        stream
            .set_write_timeout(Some(QMP_REPLY_TIMEOUT))
            .map_err(io_error)?;
        let reader = BufReader::new(stream.try_clone().map_err(io_error)?);
        let mut session = Qmp::new(Stream::new(reader, stream));
        // qapi's greeting reader panics on end of file, which a QEMU that is just exiting
        // gives; see that the greeting is there first.
        if session.inner_mut().fill_buf().map_err(io_error)?.is_empty() {
            return Err(io_error(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "QEMU closed the connection before its greeting",
            )));
        }
        let mut client = Self {
            socket: socket.to_owned(),
            session,
        };
        client
            .session
            .handshake()
            .map_err(|error| client.error("qmp_capabilities", error))?;
        Ok(client)
    }

    pub fn status(&mut self) -> Result<RunStatus, QmpError> {
        let info = self
            .session
            .execute(&qmp::query_status {})
            .map_err(|error| self.error("query-status", error))?;
        Ok(RunStatus {
            running: info.running,
            state: info.status.name(),
        })
    }

    /// Stops the virtual CPUs.
    pub fn pause(&mut self) -> Result<(), QmpError> {
        self.session
            .execute(&qmp::stop {})
            .map_err(|error| self.error("stop", error))?;
        Ok(())
    }

    /// Restarts the virtual CPUs.
    pub fn resume(&mut self) -> Result<(), QmpError> {
        self.session
            .execute(&qmp::cont {})
            .map_err(|error| self.error("cont", error))?;
        Ok(())
    }

    /// Runs a human-monitor (HMP) command and returns what it printed. A test aid: HMP's
    /// `qemu-io DRIVE "break write_aio TAG"` suspends the next write to a drive under
    /// `blkdebug`, a disk that stops answering.
    pub fn human_monitor_command(&mut self, command_line: &str) -> Result<String, QmpError> {
        self.session
            .execute(&qmp::human_monitor_command { command_line: command_line.to_owned(), cpu_index: None })
            .map_err(|error| self.error("human-monitor-command", error))
    }

    /// Ends QEMU (it exits with status 0).
    pub fn quit(mut self) -> Result<(), QmpError> {
        match self.session.execute(&qmp::quit {}) {
            Ok(_) => Ok(()),
            // QEMU may close the socket before its reply is read: that is the quit done.
            Err(ExecuteError::Io(error)) if is_disconnect(&error) => Ok(()),
            Err(error) => Err(self.error("quit", error)),
        }
    }

    fn error(&self, command: &'static str, error: ExecuteError) -> QmpError {
        match error {
            ExecuteError::Qapi(error) => QmpError::Refused {
                command,
                message: error.desc,
            },
            ExecuteError::Io(source) => QmpError::Io {
                socket: self.socket.clone(),
                source,
            },
        }
    }
}

fn is_disconnect(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}
