//! `holdfast run --libvirt URI`: the same VM as `holdfast run`, run by libvirtd as a
//! transient domain (see `holdfast_libvirt::runner` for why transient). It prints what
//! `holdfast run` prints (the accelerator line, the TP1 port, the serial console on
//! stdout) and stops the domain on Ctrl-C or SIGTERM.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use holdfast_image_builder::ImageDir;
use holdfast_libvirt::{DomainSpec, Hypervisor, RunningDomain, Stopped};
use holdfast_qemu::serial::parse_selftest_verdict;
use holdfast_qemu::{QemuBinary, SelftestVerdict};

use crate::cli::{BootMethod, RunArguments};
use crate::commands::{accel, control, run};
use crate::failure::{Failure, exit_status};
use crate::paths;

/// How often the runner looks up from the console for a signal or its time limit.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long the final checkpoint of a graceful stop may take before the domain is stopped
/// anyway (under TCG one takes well under a second).
const FINAL_CHECKPOINT_TIME_LIMIT: Duration = Duration::from_secs(10);

pub fn run(arguments: &RunArguments, uri: &str) -> Result<ExitCode, Failure> {
    if arguments.boot != BootMethod::Pvh {
        return Err(Failure::input(
            "--libvirt boots by PVH only (libvirt's <os><kernel>); --boot grub is for the QEMU runner",
        ));
    }
    // Stop requests are noted from here on, so that one during the start is acted on as
    // soon as the domain runs (the domain, auto-destroyed, never outlives this process).
    let stop_requested = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop_requested))
            .map_err(|error| Failure::other(format!("cannot handle signal {signal}: {error}")))?;
    }
    let image_dir = ImageDir::new(arguments.image_dir.clone().unwrap_or_else(paths::default_image_dir));
    image_dir.check_for_pvh_boot().map_err(Failure::input)?;
    run::check_disk_images(&arguments.disks)?;
    let hypervisor = Hypervisor::connect(uri).map_err(Failure::other)?;
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    let accelerator = accel::resolve(arguments.accel, &qemu, &image_dir.kernel())?;

    let domain_name = match &arguments.name {
        Some(name) => format!("holdfast-{name}"),
        None => format!("holdfast-run-{}", std::process::id()),
    };
    let claimed = libvirt_error(hypervisor.has_domain(&domain_name))?;
    if claimed {
        return Err(Failure::input(format!(
            "libvirt at {uri} already has a domain named '{domain_name}' (another run of this VM, or 'virsh -c {uri} destroy {domain_name}')"
        )));
    }
    let control = ControlSocket::claim(arguments.name.as_deref())?;
    // Lives as long as the domain. libvirtd is on this host (it binds the control socket
    // above), so QEMU's forward is on this host's 127.0.0.1 too.
    let tp1_front = run::tp1_front(arguments.tp1_port)?;
    let spec = DomainSpec {
        name: domain_name.clone(),
        emulator: absolute(qemu.path())?,
        accelerator,
        memory_mib: arguments.memory_mib,
        kernel: absolute(&image_dir.kernel())?,
        initial_image: Some(absolute(&image_dir.initial_image())?),
        command_line: run::kernel_command_line(arguments),
        disks: arguments.disks.iter().map(|disk| absolute(disk)).collect::<Result<_, _>>()?,
        tp1_port: tp1_front.as_ref().map(|(_, forward)| *forward),
        control_socket: Some(control.path.clone()),
        replication_link: None,
        qmp_socket: None,
        event_socket: None,
        run_as: current_user(),
    };
    let xml = spec.to_xml().map_err(Failure::input)?;
    let mut domain = libvirt_error(hypervisor.start(&xml))?;
    eprintln!("holdfast: libvirt domain '{domain_name}' on {uri} (transient: it ends with this command)");
    let time_limit = run::time_limit(arguments);
    let ending = follow(&domain, time_limit, &stop_requested);
    let ending = match ending {
        Ending::Ended(verdict) => Ending::Ended(verdict),
        asked => {
            let why = match asked {
                Ending::StopRequested => "stop requested",
                _ => "time limit reached",
            };
            eprintln!("holdfast: stopping domain '{domain_name}' ({why})");
            if !arguments.disks.is_empty() {
                final_checkpoint(&control.path, &domain_name);
            }
            let stopped = libvirt_error(domain.stop())?;
            eprintln!(
                "holdfast: domain '{domain_name}' {}",
                match stopped {
                    Stopped::Gracefully => "stopped: QEMU flushed its disks and exited",
                    Stopped::Forcibly => "destroyed: QEMU did not exit when asked",
                    Stopped::AlreadyEnded => "had ended already",
                }
            );
            asked
        }
    };
    drop(domain);
    drop(tp1_front);
    drop(control);
    match ending {
        Ending::StopRequested => Ok(ExitCode::SUCCESS),
        Ending::TimedOut(limit) => Err(Failure::other(format!(
            "the VM did not finish within {} s; the domain was stopped (--timeout-seconds sets the limit)",
            limit.as_secs()
        ))),
        Ending::Ended(Some(SelftestVerdict::Pass)) => Ok(ExitCode::from(exit_status::GUEST_PASSED)),
        Ending::Ended(Some(SelftestVerdict::Fail)) => {
            eprintln!("holdfast: the guest reported failure");
            Ok(ExitCode::from(exit_status::GUEST_FAILED))
        }
        // libvirt does not pass on QEMU's exit status, so a kernel's fatal error (which
        // ends the VM through isa-debug-exit) looks like any other end: the console above
        // says what happened.
        Ending::Ended(None) => Err(Failure::other(format!(
            "domain '{domain_name}' ended before the guest reported a result (its console is above; QEMU's log is /var/log/libvirt/qemu/{domain_name}.log on libvirtd's host)"
        ))),
    }
}

enum Ending {
    /// The domain ended by itself, with the self-test's verdict if the guest printed one.
    Ended(Option<SelftestVerdict>),
    StopRequested,
    TimedOut(Duration),
}

/// Copies the console to stdout until the domain ends, a stop is requested or the time
/// limit passes.
fn follow(domain: &RunningDomain, time_limit: Option<Duration>, stop_requested: &AtomicBool) -> Ending {
    let mut stdout = std::io::stdout().lock();
    let mut verdict = None;
    let deadline = time_limit.map(|limit| domain.started_at() + limit);
    loop {
        if stop_requested.load(Ordering::Relaxed) {
            return Ending::StopRequested;
        }
        if let (Some(deadline), Some(limit)) = (deadline, time_limit)
            && Instant::now() >= deadline
        {
            return Ending::TimedOut(limit);
        }
        match domain.next_line(POLL_INTERVAL) {
            Ok(line) => {
                verdict = parse_selftest_verdict(&line.text).or(verdict);
                // A closed stdout must not stop the VM.
                let _ = write!(stdout, "{}{}", line.text, line.line_ending());
                let _ = stdout.flush();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ending::Ended(verdict),
        }
    }
}

/// A graceful stop's first step: a checkpoint through the admin service, waited for (its
/// generation moves), so that the next start resumes from it with no journal to replay.
/// A system without the admin service does not answer; that is said and the stop goes on.
fn final_checkpoint(socket: &Path, name: &str) {
    let deadline = Instant::now() + FINAL_CHECKPOINT_TIME_LIMIT;
    let ask = |request: &str| {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        control::request_on(socket, name, request, left)
    };
    let result = control::checkpoint_and_wait(ask, deadline, POLL_INTERVAL).and_then(|committed| {
        committed.ok_or_else(|| Failure::other(format!("no commit within {} s", FINAL_CHECKPOINT_TIME_LIMIT.as_secs())))
    });
    match result {
        Ok(generation) => eprintln!("holdfast: final checkpoint committed (generation {generation} or later)"),
        Err(failure) => eprintln!("holdfast: no final checkpoint ({failure}); stopping anyway: every acknowledged commit is on disk"),
    }
}

pub(crate) fn libvirt_error<T>(result: Result<T, holdfast_libvirt::LibvirtError>) -> Result<T, Failure> {
    result.map_err(Failure::other)
}

/// libvirtd resolves paths in its own directory, not ours.
pub(crate) fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|error| Failure::input(format!("'{}': {error}", path.display())))
}

/// The user and group this command runs as, which QEMU runs as too.
pub(crate) fn current_user() -> (u32, u32) {
    // SAFETY: getuid(2) and getgid(2) take no arguments, touch no memory and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// The host end of the guest's control channel: in the state directory for a named VM
/// (where `holdfast checkpoint`, `holdfast tp1 token` and the exporter look), else in a
/// private directory. libvirt binds it; it is removed with its directory when dropped.
struct ControlSocket {
    path: PathBuf,
}

impl ControlSocket {
    fn claim(name: Option<&str>) -> Result<Self, Failure> {
        let beside = match name {
            Some(name) => paths::qmp_socket_of(name)?,
            None => paths::private_qmp_socket()?,
        };
        let path = paths::control_socket_beside(&beside);
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(Failure::input(format!(
                "a VM named '{}' is already running (its control socket {} answers)",
                name.unwrap_or_default(),
                path.display()
            )));
        }
        let directory = path.parent().expect("the socket is inside a directory");
        let prepared = std::fs::create_dir_all(directory).and_then(|()| match std::fs::remove_file(&path) {
            // A socket left by a VM that was killed.
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        });
        prepared.map_err(|error| {
            Failure::other(format!("cannot prepare the control socket's directory '{}': {error}", directory.display()))
        })?;
        Ok(Self { path })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(directory) = self.path.parent() {
            let _ = std::fs::remove_dir(directory);
        }
    }
}

/// The pid of the QEMU that runs libvirt domain `name` on this host: the process whose
/// command line has libvirt's `-name guest=NAME,...`. libvirt's API gives no pid; it is
/// wanted for `holdfast vm kill` (a pair's kill drill), which SIGKILLs QEMU as a crash
/// would. `None` if it is not found (libvirtd on another host).
pub(crate) fn qemu_pid_of_domain(name: &str) -> Option<u32> {
    let wanted = format!("guest={name},");
    let exact = format!("guest={name}");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|text| text.parse::<u32>().ok()) else { continue };
        let Ok(command_line) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let mut words = command_line.split(|byte| *byte == 0);
        if !words.next().is_some_and(|program| program.ends_with(b"qemu-system-x86_64")) {
            continue;
        }
        while let Some(word) = words.next() {
            if word == b"-name"
                && let Some(value) = words.next()
                && (value.starts_with(wanted.as_bytes()) || value == exact.as_bytes())
            {
                return Some(pid);
            }
        }
    }
    None
}
