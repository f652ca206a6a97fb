//! `holdfast run`: check the inputs, choose the accelerator, boot, copy the serial console to
//! stdout, and turn the way the VM ended into an exit status.

use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use holdfast_image_builder::ImageDir;
use holdfast_qemu::{Boot, QemuBinary, RunningVm, SelftestVerdict, VmEnding, VmReport, VmSpec};

use crate::cli::{BootMethod, RunArguments};
use crate::commands::accel;
use crate::commands::endpoint::{self, Endpoint};
use crate::failure::{Failure, exit_status};
use crate::paths;

/// The time limit of a self-test boot (no store disk) when neither `--timeout-seconds` nor
/// `--stay-up` is given: such a boot ends by itself, a TCG one within about a second, so
/// one that has not ended is stuck. A VM with a store is an appliance and runs until it is
/// stopped.
pub(crate) const SELFTEST_TIME_LIMIT: Duration = Duration::from_secs(120);

/// The kernel command-line word that keeps the VM up after its self-test.
const STAY_UP_WORD: &str = "holdfast.after=stay";

pub fn run(arguments: RunArguments) -> Result<ExitCode, Failure> {
    if let Some(name) = &arguments.name {
        paths::check_vm_name(name)?;
    }
    if let Some(uri) = &arguments.libvirt {
        if arguments.exporter.is_some() {
            return Err(Failure::input("--exporter is for a VM under QEMU here; under libvirt run `holdfast exporter` beside it"));
        }
        return super::run_libvirt::run(&arguments, uri);
    }
    if arguments.boot == BootMethod::Grub {
        if arguments.append.is_some() {
            return Err(Failure::input(
                "--append works only with --boot pvh: GRUB's kernel command line is fixed in the boot disk's grub.cfg \
                 (see 'holdfast image build --grub-append')",
            ));
        }
        if arguments.stay_up {
            return Err(Failure::input(
                "--stay-up works only with --boot pvh: GRUB's kernel command line is fixed in the boot disk's grub.cfg \
                 (see 'holdfast image build --grub-append')",
            ));
        }
    }
    let image_dir = ImageDir::new(
        arguments
            .image_dir
            .clone()
            .unwrap_or_else(paths::default_image_dir),
    );
    let boot = match arguments.boot {
        BootMethod::Pvh => {
            image_dir.check_for_pvh_boot().map_err(Failure::input)?;
            Boot::Pvh {
                kernel: image_dir.kernel(),
                initial_image: Some(image_dir.initial_image()),
                command_line: kernel_command_line(&arguments),
            }
        }
        BootMethod::Grub => {
            image_dir.check_for_disk_boot().map_err(Failure::input)?;
            Boot::Disk {
                boot_disk: image_dir.boot_disk(),
            }
        }
    };
    check_disk_images(&arguments.disks)?;
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    let accelerator = accel::resolve(arguments.accel, &qemu, &image_dir.kernel())?;

    let qmp_socket = QmpSocket::claim(arguments.name.as_deref())?;
    // Lives as long as the VM: it is the clients' way in.
    let tp1_front = tp1_front(arguments.tp1_port)?;
    if let Some(listen) = arguments.exporter {
        let address = super::exporter::start_beside(listen)?;
        eprintln!("holdfast: exporter on http://{address}/metrics");
    }
    let spec = VmSpec {
        boot,
        disks: arguments.disks.clone(),
        blkdebug: blkdebug_disks(&arguments)?,
        net_connect: arguments.net_connect.clone(),
        link_connect: None,
        tp1_port: tp1_front.as_ref().map(|(_, forward)| *forward),
        accelerator,
        memory_mib: arguments.memory_mib,
        qmp_socket: Some(qmp_socket.path.clone()),
        control_socket: Some(paths::control_socket_beside(&qmp_socket.path)),
        event_socket: Some(paths::event_socket_beside(&qmp_socket.path)),
    };
    let time_limit = time_limit(&arguments);
    let vm = RunningVm::launch(&qemu, &spec).map_err(|error| {
        Failure::other(format!(
            "cannot start QEMU ({}): {error}",
            qemu.path().display()
        ))
    })?;
    qmp_socket.record_pid(vm.pid())?;
    qmp_socket.record_disks(&arguments.disks)?;
    report_host_disk_errors(&qmp_socket.path, &arguments.disks)?;
    let mut stdout = std::io::stdout().lock();
    let report = vm
        .wait(time_limit, |line| {
            // A closed stdout must not stop the VM: the exit status still tells the result.
            let _ = write!(stdout, "{}{}", line.text, line.line_ending());
            let _ = stdout.flush();
            ControlFlow::Continue(())
        })
        .map_err(|error| Failure::other(format!("lost track of QEMU: {error}")))?;
    drop(qmp_socket);
    outcome(&report)
}

/// Says on standard error, once per disk and kind of error, when the host fails the
/// guest's reads or writes of a disk image (a full file system, a file gone): the guest
/// is told too and marks that mirror failed, but only the host knows why.
pub(crate) fn report_host_disk_errors(qmp_socket: &Path, disks: &[PathBuf]) -> Result<(), Failure> {
    let disks = disks.to_vec();
    let mut reported = std::collections::HashSet::new();
    holdfast_qemu::events::watch_block_io_errors(paths::event_socket_beside(qmp_socket), move |error| {
        let disk = error
            .disk_index()
            .and_then(|index| disks.get(index))
            .map_or_else(|| error.device.clone(), |path| path.display().to_string());
        if reported.insert((disk.clone(), error.operation.clone(), error.reason.clone())) {
            eprintln!(
                "holdfast: host I/O error on disk '{disk}': {} failed: {} (QEMU's action: {})",
                error.operation, error.reason, error.action
            );
        }
    })
    .map(drop)
    .map_err(|error| Failure::other(format!("cannot follow QEMU's events: {error}")))
}

/// `--timeout-seconds`, else no limit for a VM that stays up or has a store, else the
/// self-test's limit.
pub(crate) fn time_limit(arguments: &RunArguments) -> Option<Duration> {
    match arguments.timeout_seconds {
        Some(seconds) => Some(Duration::from_secs(seconds)),
        None if arguments.stay_up || !arguments.disks.is_empty() => None,
        None => Some(SELFTEST_TIME_LIMIT),
    }
}

/// `--append`'s words, then `holdfast.after=stay` for `--stay-up`.
pub(crate) fn kernel_command_line(arguments: &RunArguments) -> String {
    let mut words: Vec<&str> = arguments
        .append
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    if arguments.stay_up {
        words.push(STAY_UP_WORD);
    }
    words.join(" ")
}

/// Each disk image must be a regular file or a block device that this user can read and
/// write, and no image may be given twice, so that the user gets one clear line before QEMU
/// starts rather than QEMU's error, or a guest whose store silently does not persist.
pub(crate) fn check_disk_images(disks: &[PathBuf]) -> Result<(), Failure> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut seen: Vec<(u64, u64, &Path)> = Vec::with_capacity(disks.len());
    for disk in disks {
        let metadata = std::fs::metadata(disk).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => {
                Failure::input(format!("disk image '{}' not found", disk.display()))
            }
            _ => Failure::input(format!("disk image '{}' cannot be read: {error}", disk.display())),
        })?;
        let file_type = metadata.file_type();
        if !(file_type.is_file() || file_type.is_block_device()) {
            return Err(Failure::input(format!(
                "disk image '{}' is not a regular file or a block device",
                disk.display()
            )));
        }
        let unusable = |error: std::io::Error| {
            Failure::input(format!(
                "disk image '{}' cannot be opened for reading and writing: {error}",
                disk.display()
            ))
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(disk)
            .map_err(unusable)?;
        file.read(&mut [0u8; 1]).map_err(unusable)?;
        let identity = (metadata.dev(), metadata.ino());
        if let Some((_, _, first)) = seen.iter().find(|(device, inode, _)| (*device, *inode) == identity) {
            return Err(Failure::input(format!(
                "disk image '{}' is given twice (as '{}'): each mirror must be its own image",
                disk.display(),
                first.display()
            )));
        }
        seen.push((identity.0, identity.1, disk));
    }
    Ok(())
}

/// `--disk-blkdebug N=CONFIG`'s disks: each names a `--disk` by its 0-based position, once.
fn blkdebug_disks(arguments: &RunArguments) -> Result<Vec<(usize, PathBuf)>, Failure> {
    let mut disks: Vec<(usize, PathBuf)> = Vec::new();
    for word in &arguments.disk_blkdebug {
        let refuse = |why: &str| Failure::input(format!("--disk-blkdebug {word}: {why}"));
        let (index, config) = word.split_once('=').ok_or_else(|| refuse("expected N=CONFIG"))?;
        let index: usize = index.parse().map_err(|_| refuse("N is not a disk number"))?;
        if index >= arguments.disks.len() {
            return Err(refuse(&format!("there are {} --disk images", arguments.disks.len())));
        }
        if disks.iter().any(|(seen, _)| *seen == index) {
            return Err(refuse("that disk has a blkdebug configuration already"));
        }
        std::fs::metadata(config).map_err(|error| refuse(&format!("{config}: {error}")))?;
        disks.push((index, PathBuf::from(config)));
    }
    Ok(disks)
}

/// The exit status for the way the VM ended, or the failure to report.
fn outcome(report: &VmReport) -> Result<ExitCode, Failure> {
    let qemu_said = || {
        let lines: Vec<&str> = report
            .qemu_stderr
            .lines()
            .filter(|line| !line.trim().is_empty())
            .collect();
        if lines.is_empty() {
            String::new()
        } else {
            format!(": {}", lines.join("; "))
        }
    };
    match report.ending {
        VmEnding::GuestPassed => Ok(ExitCode::from(exit_status::GUEST_PASSED)),
        VmEnding::GuestFailed => {
            eprintln!("holdfast: the guest reported failure");
            Ok(ExitCode::from(exit_status::GUEST_FAILED))
        }
        // Quit over QMP after the self-test (a VM that stayed up): its verdict stands.
        VmEnding::QemuExited {
            status: Some(0), ..
        } if report.selftest.is_some() => match report.selftest {
            Some(SelftestVerdict::Pass) => Ok(ExitCode::from(exit_status::GUEST_PASSED)),
            _ => Ok(ExitCode::from(exit_status::GUEST_FAILED)),
        },
        VmEnding::QemuExited {
            status: Some(0), ..
        } => Err(Failure::other(format!(
            "QEMU exited (status 0) before the guest reported a result: quit over QMP, or a guest reset (triple fault?){}",
            qemu_said()
        ))),
        ending @ VmEnding::QemuExited { .. } => {
            Err(Failure::other(format!("{ending}{}", qemu_said())))
        }
        VmEnding::TimedOut { limit } => Err(Failure::other(format!(
            "the VM did not finish within {} s; QEMU was killed (--timeout-seconds sets the limit)",
            limit.as_secs()
        ))),
        VmEnding::StoppedByCaller => Err(Failure::other("the VM was stopped")),
    }
}

/// The VM's QMP socket: named VMs' sockets are in the state directory (for `holdfast vm`),
/// others' in a private temporary directory. Removed when dropped.
pub(crate) struct QmpSocket {
    pub(crate) path: PathBuf,
}

impl QmpSocket {
    pub(crate) fn claim(name: Option<&str>) -> Result<Self, Failure> {
        let path = match name {
            Some(name) => paths::qmp_socket_of(name)?,
            None => paths::private_qmp_socket()?,
        };
        if UnixStream::connect(&path).is_ok() {
            return Err(Failure::input(format!(
                "a VM named '{}' is already running (its QMP socket {} answers)",
                name.unwrap_or_default(),
                path.display()
            )));
        }
        let directory = path.parent().expect("the socket is inside a directory");
        let prepared =
            std::fs::create_dir_all(directory).and_then(|()| match std::fs::remove_file(&path) {
                // A socket left by a VM that was killed.
                Ok(()) => Ok(()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
            });
        prepared.map_err(|error| {
            Failure::other(format!(
                "cannot prepare the QMP socket directory '{}': {error}",
                directory.display()
            ))
        })?;
        Ok(Self { path })
    }
}

impl QmpSocket {
    /// Writes QEMU's pid beside the socket, for `holdfast vm kill`.
    pub(crate) fn record_pid(&self, pid: u32) -> Result<(), Failure> {
        let file = paths::pid_file_beside(&self.path);
        std::fs::write(&file, format!("{pid}\n")).map_err(|error| {
            Failure::other(format!("cannot write '{}': {error}", file.display()))
        })
    }
}

impl QmpSocket {
    /// Writes the VM's disk images beside the socket, for `holdfast vm list`.
    pub(crate) fn record_disks(&self, disks: &[PathBuf]) -> Result<(), Failure> {
        let file = paths::disks_file_beside(&self.path);
        let mut text = String::new();
        for disk in disks {
            let absolute = std::path::absolute(disk).unwrap_or_else(|_| disk.clone());
            text.push_str(&format!("{}\n", absolute.display()));
        }
        std::fs::write(&file, text).map_err(|error| {
            Failure::other(format!("cannot write '{}': {error}", file.display()))
        })
    }
}

impl Drop for QmpSocket {
    fn drop(&mut self) {
        // Leftovers are harmless: the next run of the same name removes a stale socket, and
        // `vm kill` checks that a pid is QEMU's before it kills.
        let _ = std::fs::remove_file(paths::pid_file_beside(&self.path));
        let _ = std::fs::remove_file(paths::control_socket_beside(&self.path));
        let _ = std::fs::remove_file(paths::event_socket_beside(&self.path));
        let _ = std::fs::remove_file(paths::disks_file_beside(&self.path));
        let _ = std::fs::remove_file(&self.path);
        if let Some(directory) = self.path.parent() {
            let _ = std::fs::remove_dir(directory);
        }
    }
}

/// `--tp1-port`: the endpoint clients connect to, on the port given or (0 or none given) a
/// free one, printed; and the port of QEMU's own forward (under libvirt too), which only the
/// endpoint connects to (the endpoint's module says why).
pub(crate) fn tp1_front(asked: Option<u16>) -> Result<Option<(Endpoint, u16)>, Failure> {
    let Some(asked) = asked else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", asked))
        .map_err(|error| Failure::input(format!("cannot listen on 127.0.0.1:{asked} for TP1 clients: {error}")))?;
    let front = Endpoint::start(listener, endpoint::HOLD_TIME_LIMIT)?;
    let forward = free_port()?;
    front.switch(Some(std::net::SocketAddr::from(([127, 0, 0, 1], forward))));
    eprintln!("holdfast: tp1 port {}", front.address());
    Ok(Some((front, forward)))
}

/// The kernel's choice of a free port on 127.0.0.1, released at once for QEMU to take
/// (another program could take it first: QEMU then fails to start, and says so).
pub(crate) fn free_port() -> Result<u16, Failure> {
    let unavailable = |error: std::io::Error| Failure::other(format!("cannot find a free port on 127.0.0.1: {error}"));
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(unavailable)?;
    Ok(listener.local_addr().map_err(unavailable)?.port())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn run_arguments(words: &[&str]) -> RunArguments {
        let mut all = vec!["holdfast", "run"];
        all.extend_from_slice(words);
        match Cli::parse_from(all).command {
            Command::Run(arguments) => arguments,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_self_test_boot_has_a_time_limit_and_an_appliance_has_none() {
        assert_eq!(time_limit(&run_arguments(&[])), Some(SELFTEST_TIME_LIMIT));
        assert_eq!(time_limit(&run_arguments(&["--disk", "store.img"])), None);
        assert_eq!(time_limit(&run_arguments(&["--stay-up"])), None);
        assert_eq!(
            time_limit(&run_arguments(&["--disk", "store.img", "--timeout-seconds", "7"])),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn tp1_port_takes_a_port_or_none_and_excludes_net_connect() {
        assert_eq!(run_arguments(&[]).tp1_port, None);
        assert_eq!(run_arguments(&["--tp1-port", "7100"]).tp1_port, Some(7100));
        assert_eq!(run_arguments(&["--tp1-port"]).tp1_port, Some(0));
        let both = Cli::try_parse_from(["holdfast", "run", "--tp1-port", "1", "--net-connect", "127.0.0.1:2"]);
        assert!(both.is_err(), "--tp1-port and --net-connect are one device");
    }

    #[test]
    fn the_tp1_port_is_an_endpoint_in_front_of_qemus_forward_and_a_taken_one_is_refused() {
        use std::io::{Read, Write};
        let (front, forward) = tp1_front(Some(0)).expect("a front").expect("asked for");
        assert_ne!(front.address().port(), forward);
        // QEMU's forward, as the VM would listen on it.
        let qemu = std::net::TcpListener::bind(("127.0.0.1", forward)).expect("the forward's port is free");
        let mut client = std::net::TcpStream::connect(front.address()).expect("the front listens");
        client.write_all(b"x").expect("send");
        let (mut forwarded, _) = qemu.accept().expect("the front connects to the forward");
        let mut byte = [0u8; 1];
        forwarded.read_exact(&mut byte).expect("what the client sent");
        assert_eq!(&byte, b"x");
        let taken = tp1_front(Some(front.address().port())).err().expect("a taken port is refused");
        assert!(taken.to_string().contains(&format!("cannot listen on 127.0.0.1:{} for TP1 clients", front.address().port())), "{taken}");
    }
}
