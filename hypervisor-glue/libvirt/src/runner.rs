//! Running a Holdfast domain through libvirtd with libvirt's own client library (the `virt`
//! crate): connect, start, follow the serial console, stop.
//!
//! The domain is **transient** and **auto-destroyed**: `virDomainCreateXML` with
//! `VIR_DOMAIN_START_AUTODESTROY` starts it without a persistent definition, and libvirtd
//! destroys it when the connection that started it closes. So no error, crash or kill of
//! the runner can leave a defined-but-dead or running-but-unwatched domain behind (the
//! QEMU runner gets the same from `PR_SET_PDEATHSIG`), and there is nothing to undefine.
//! A persistent definition would add nothing: the appliance's state is in its store, and
//! the runner rebuilds the XML from the same inputs each time.
//!
//! It starts paused, the console stream is opened, and only then do its CPUs run: the
//! first line the kernel prints is read like the last.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use holdfast_qemu::{LineSplitter, SerialLine};
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::ErrorNumber;
use virt::stream::Stream;
use virt::sys;

/// A libvirt call that failed: what was being done, and libvirt's message.
#[derive(Debug, thiserror::Error)]
#[error("{doing}: {message}")]
pub struct LibvirtError {
    pub doing: String,
    pub message: String,
    pub code: Option<ErrorNumber>,
}

impl LibvirtError {
    fn new(doing: impl Into<String>, error: virt::error::Error) -> Self {
        Self {
            doing: doing.into(),
            message: error.message().trim_end_matches('.').to_owned(),
            code: Some(error.code()),
        }
    }
}

/// Why libvirtd could not be reached, with what fixes it.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "libvirtd is not running for {uri} ({message}): start it ('systemctl start libvirtd'; without systemd, as root: 'virtlogd -d && libvirtd -d')"
    )]
    DaemonNotRunning { uri: String, message: String },
    #[error(
        "libvirt at {uri} refused this user ({message}): run as root, or add the user to the 'libvirt' group ('adduser USER libvirt', then log in again)"
    )]
    PermissionDenied { uri: String, message: String },
    #[error("cannot connect to libvirt at {uri}: {message}")]
    Other { uri: String, message: String },
}

impl ConnectError {
    /// Sorts libvirt's connect failure by what the user must do. libvirt reports both a
    /// missing daemon and a refused user as "no connection" with the system error in the
    /// message, so the message is what tells them apart.
    fn classify(uri: &str, error: &virt::error::Error) -> Self {
        let message = error.message().trim_end_matches('.').to_owned();
        let uri = uri.to_owned();
        let lowered = message.to_lowercase();
        let refused = matches!(
            error.code(),
            ErrorNumber::AuthFailed | ErrorNumber::AuthCancelled | ErrorNumber::AuthUnavailable
        ) || ["permission denied", "authentication", "polkit", "system bus", "not authorized"]
            .iter()
            .any(|word| lowered.contains(word));
        let absent = ["no such file or directory", "connection refused", "failed to connect socket"]
            .iter()
            .any(|word| lowered.contains(word));
        if refused {
            Self::PermissionDenied { uri, message }
        } else if absent {
            Self::DaemonNotRunning { uri, message }
        } else {
            Self::Other { uri, message }
        }
    }
}

/// An open connection to libvirtd. Closed when dropped, which destroys any domain started
/// through it that still runs.
pub struct Hypervisor {
    connection: Option<Connect>,
    uri: String,
}

impl Hypervisor {
    /// Connects to `uri` (`qemu:///system`, ...). libvirt's default error handler, which
    /// prints every error on stderr, is silenced: errors come back as values.
    pub fn connect(uri: &str) -> Result<Self, ConnectError> {
        virt::error::clear_error_callback();
        match Connect::open(Some(uri)) {
            Ok(connection) => Ok(Self {
                connection: Some(connection),
                uri: uri.to_owned(),
            }),
            Err(error) => Err(ConnectError::classify(uri, &error)),
        }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn connection(&self) -> &Connect {
        self.connection.as_ref().expect("open until dropped")
    }

    /// Whether libvirt knows a domain of this name, running or defined.
    pub fn has_domain(&self, name: &str) -> Result<bool, LibvirtError> {
        match Domain::lookup_by_name(self.connection(), name) {
            Ok(_) => Ok(true),
            Err(error) if error.code() == ErrorNumber::NoDomain => Ok(false),
            Err(error) => Err(LibvirtError::new(format!("looking up domain '{name}'"), error)),
        }
    }

    /// Starts the domain `xml` describes (transient, auto-destroyed, validated against
    /// libvirt's schema) and follows its serial console. The connection goes with the
    /// domain: it must stay open for as long as the domain should run.
    pub fn start(self, xml: &str) -> Result<RunningDomain, LibvirtError> {
        let flags = sys::VIR_DOMAIN_START_PAUSED
            | sys::VIR_DOMAIN_START_AUTODESTROY
            | sys::VIR_DOMAIN_START_VALIDATE;
        let domain = Domain::create_xml(self.connection(), xml, flags)
            .map_err(|error| LibvirtError::new("starting the domain", error))?;
        self.follow(domain)
    }

    /// Defines the domain `name` as `xml` describes (persistent: `virsh list --all` shows
    /// it, and [`Hypervisor::undefine`] removes it; a definition of the same name that does
    /// not run is replaced),
    /// starts it auto-destroyed (it ends when this connection closes, so it never outlives
    /// the process that watches it) and follows its serial console, as [`Hypervisor::start`].
    /// A domain defined here that then fails to start is undefined again: no
    /// half-made domain is left.
    pub fn define_and_start(self, name: &str, xml: &str) -> Result<RunningDomain, LibvirtError> {
        // The XML carries no UUID, so libvirt would refuse it beside an older definition of
        // the same name (which has one): a definition that does not run goes first.
        match Domain::lookup_by_name(self.connection(), name) {
            Ok(old) => {
                if old.is_active().map_err(|error| LibvirtError::new(format!("asking about domain '{name}'"), error))? {
                    return Err(LibvirtError {
                        doing: format!("defining domain '{name}'"),
                        message: "a domain of that name runs".into(),
                        code: None,
                    });
                }
                old.undefine().map_err(|error| LibvirtError::new(format!("replacing the definition of domain '{name}'"), error))?;
            }
            Err(error) if error.code() == ErrorNumber::NoDomain => {}
            Err(error) => return Err(LibvirtError::new(format!("looking up domain '{name}'"), error)),
        }
        let domain = Domain::define_xml_flags(self.connection(), xml, sys::VIR_DOMAIN_DEFINE_VALIDATE)
            .map_err(|error| LibvirtError::new("defining the domain", error))?;
        if let Err(error) = domain.create_with_flags(sys::VIR_DOMAIN_START_PAUSED | sys::VIR_DOMAIN_START_AUTODESTROY) {
            let _ = domain.undefine();
            return Err(LibvirtError::new("starting the domain", error));
        }
        self.follow(domain)
    }

    /// Ends and undefines the domain `name` if libvirt knows it; whether it did.
    pub fn undefine(&self, name: &str) -> Result<bool, LibvirtError> {
        let domain = match Domain::lookup_by_name(self.connection(), name) {
            Ok(domain) => domain,
            Err(error) if error.code() == ErrorNumber::NoDomain => return Ok(false),
            Err(error) => return Err(LibvirtError::new(format!("looking up domain '{name}'"), error)),
        };
        let handle = DomainHandle { domain, name: name.to_owned() };
        handle.destroy()?;
        match handle.domain.undefine() {
            Ok(()) => Ok(true),
            // A transient domain that ended is gone already.
            Err(error) if matches!(error.code(), ErrorNumber::NoDomain | ErrorNumber::OperationInvalid) => Ok(true),
            Err(error) => Err(LibvirtError::new(format!("undefining domain '{name}'"), error)),
        }
    }

    /// Whether the domain `name` runs (false if libvirt does not know it).
    pub fn is_running(&self, name: &str) -> Result<bool, LibvirtError> {
        match Domain::lookup_by_name(self.connection(), name) {
            Ok(domain) => domain.is_active().map_err(|error| LibvirtError::new(format!("asking about domain '{name}'"), error)),
            Err(error) if error.code() == ErrorNumber::NoDomain => Ok(false),
            Err(error) => Err(LibvirtError::new(format!("looking up domain '{name}'"), error)),
        }
    }

    /// Opens `domain`'s console, resumes its CPUs and hands both back.
    fn follow(self, domain: Domain) -> Result<RunningDomain, LibvirtError> {
        let name = domain.get_name().unwrap_or_default();
        // From here on the domain exists: dropping `running` on an error destroys it.
        let mut running = RunningDomain {
            domain: Some(domain),
            name,
            lines: mpsc::channel().1,
            reader: None,
            started_at: Instant::now(),
            hypervisor: self,
        };
        let stream = Stream::new(running.hypervisor.connection(), 0)
            .map_err(|error| LibvirtError::new("making a stream for the console", error))?;
        running
            .domain()
            .open_console(None, &stream, sys::VIR_DOMAIN_CONSOLE_FORCE)
            .map_err(|error| LibvirtError::new("opening the domain's serial console", error))?;
        let (sender, lines) = mpsc::channel();
        let started_at = running.started_at;
        running.lines = lines;
        running.reader = Some(
            thread::Builder::new()
                .name("libvirt-console".into())
                .spawn(move || read_console(stream, started_at, |line| sender.send(line).is_ok()))
                .map_err(|error| LibvirtError {
                    doing: "starting the console reader".into(),
                    message: error.to_string(),
                    code: None,
                })?,
        );
        running
            .domain()
            .resume()
            .map_err(|error| LibvirtError::new("resuming the domain's CPUs", error))?;
        Ok(running)
    }
}

impl Drop for Hypervisor {
    fn drop(&mut self) {
        if let Some(mut connection) = self.connection.take() {
            // Nothing more can be done about a failure here.
            let _ = connection.close();
        }
    }
}

/// How [`RunningDomain::stop`] ended the domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// QEMU took libvirt's SIGTERM: it stopped the CPUs, flushed every disk and exited.
    Gracefully,
    /// QEMU did not exit on SIGTERM in libvirt's bounded wait: it was killed.
    Forcibly,
    /// The domain had ended already.
    AlreadyEnded,
}

/// A started domain and its console. Dropping it destroys the domain if it still runs.
pub struct RunningDomain {
    hypervisor: Hypervisor,
    domain: Option<Domain>,
    name: String,
    lines: Receiver<SerialLine>,
    reader: Option<JoinHandle<()>>,
    started_at: Instant,
}

impl RunningDomain {
    fn domain(&self) -> &Domain {
        self.domain.as_ref().expect("present until dropped")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle on the domain that another thread can fence with.
    pub fn handle(&self) -> DomainHandle {
        DomainHandle { domain: self.domain().clone(), name: self.name.clone() }
    }

    pub fn started_at(&self) -> Instant {
        self.started_at
    }

    /// The next console line, waiting at most `wait`. `Disconnected` means the console
    /// closed: the domain has ended.
    pub fn next_line(&self, wait: Duration) -> Result<SerialLine, RecvTimeoutError> {
        self.lines.recv_timeout(wait)
    }

    /// Whether the domain still runs (a transient domain that ended is gone from libvirt).
    pub fn is_active(&self) -> Result<bool, LibvirtError> {
        match self.domain().is_active() {
            Ok(active) => Ok(active),
            Err(error) if error.code() == ErrorNumber::NoDomain => Ok(false),
            Err(error) => Err(LibvirtError::new(format!("asking about domain '{}'", self.name), error)),
        }
    }

    /// Ends the domain: QEMU is asked to exit (libvirt's graceful destroy, SIGTERM, on
    /// which QEMU stops the CPUs, flushes its disks and exits; libvirt waits for it about
    /// 10 s), and killed if it has not. The Holdfast kernel has no ACPI and no shutdown
    /// protocol: every journal commit it acknowledged is on disk already, and a restart
    /// starts from the store; a final checkpoint, if wanted, is the caller's to ask for
    /// first over the control channel.
    pub fn stop(&mut self) -> Result<Stopped, LibvirtError> {
        if !self.is_active()? {
            return Ok(Stopped::AlreadyEnded);
        }
        let stopped = match self.domain().destroy_flags(sys::VIR_DOMAIN_DESTROY_GRACEFUL) {
            Ok(_) => Stopped::Gracefully,
            Err(error) if error.code() == ErrorNumber::NoDomain => Stopped::AlreadyEnded,
            Err(_) => match self.domain().destroy() {
                Ok(()) => Stopped::Forcibly,
                Err(error) if error.code() == ErrorNumber::NoDomain => Stopped::AlreadyEnded,
                Err(error) => {
                    return Err(LibvirtError::new(format!("destroying domain '{}'", self.name), error));
                }
            },
        };
        self.join_reader();
        Ok(stopped)
    }

    /// Closes the connection without destroying the domain: for a domain that has ended,
    /// whose name a new start may already be using (the same definition started again),
    /// which the destroy of [`Drop`] must not meet.
    pub fn release(mut self) {
        self.domain = None;
    }

    /// Waits for the console reader, which ends with the console stream.
    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for RunningDomain {
    fn drop(&mut self) {
        // A domain is never left running unwatched: destroy it (closing the connection
        // would too, by auto-destroy; this does not wait for that).
        if let Some(domain) = self.domain.take()
            && domain.is_active().unwrap_or(false)
        {
            let _ = domain.destroy();
        }
        // The console reader is not waited for: if the domain could not be destroyed its
        // stream may never end. Closing the connection (the `hypervisor` field, dropped
        // next) ends both.
    }
}

/// A domain to be fenced or asked about from a thread other than the one that follows it.
#[derive(Clone)]
pub struct DomainHandle {
    domain: Domain,
    name: String,
}

impl DomainHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Ends the domain at once (virDomainDestroy: QEMU is sent SIGTERM, then SIGKILL if it
    /// lingers) and returns once it is gone. A domain that had ended is not an error.
    pub fn destroy(&self) -> Result<(), LibvirtError> {
        match self.domain.destroy() {
            Ok(()) => Ok(()),
            Err(error) if matches!(error.code(), ErrorNumber::NoDomain | ErrorNumber::OperationInvalid) => Ok(()),
            Err(error) => Err(LibvirtError::new(format!("destroying domain '{}'", self.name), error)),
        }
    }

    /// Whether the domain runs: libvirt's state of it, which turns to shut off once its QEMU
    /// is gone, however it went.
    pub fn is_active(&self) -> Result<bool, LibvirtError> {
        match self.domain.is_active() {
            Ok(active) => Ok(active),
            Err(error) if error.code() == ErrorNumber::NoDomain => Ok(false),
            Err(error) => Err(LibvirtError::new(format!("asking about domain '{}'", self.name), error)),
        }
    }
}

/// Reads the console stream until it ends and hands each line to `deliver`, which returns
/// false once nobody listens any more.
fn read_console(stream: Stream, started_at: Instant, mut deliver: impl FnMut(SerialLine) -> bool) {
    let mut splitter = LineSplitter::default();
    let mut buffer = [0u8; 4096];
    let mut listening = true;
    while listening {
        let length = match stream.recv(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(length) => length,
        };
        let since_launch = started_at.elapsed();
        splitter.push(&buffer[..length], |text| {
            listening = listening && deliver(SerialLine { text, since_launch, cut_short: false });
        });
    }
    if let Some(text) = splitter.finish() {
        deliver(SerialLine {
            text,
            since_launch: started_at.elapsed(),
            cut_short: true,
        });
    }
    // The console ends with the domain; aborting an ended stream only frees it.
    let _ = stream.abort();
}
