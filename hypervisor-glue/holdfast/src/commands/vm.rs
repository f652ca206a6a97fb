//! `holdfast vm status|pause|resume|quit NAME`: QMP commands to a named VM; `holdfast vm
//! kill NAME`: SIGKILL to its QEMU.

use std::process::ExitCode;

use holdfast_qemu::{QmpClient, QmpError};

use crate::cli::VmCommand;
use crate::failure::Failure;
use crate::paths;

pub fn run(command: VmCommand) -> Result<ExitCode, Failure> {
    let (VmCommand::Status(vm)
    | VmCommand::Pause(vm)
    | VmCommand::Resume(vm)
    | VmCommand::Quit(vm)
    | VmCommand::Kill(vm)
    | VmCommand::Counters(vm)) = &command;
    let name = vm.name.as_str();
    paths::check_vm_name(name)?;
    if let VmCommand::Counters(_) = &command {
        print!("{}", super::control::request(name, "counters")?);
        return Ok(ExitCode::SUCCESS);
    }
    let socket = paths::qmp_socket_of(name)?;
    let mut client = QmpClient::connect(&socket).map_err(|error| match error {
        QmpError::NotListening { .. } => Failure::input(format!(
            "no VM named '{name}' is running (nothing answers on {})",
            socket.display()
        )),
        other => Failure::other(format!("VM '{name}': {other}")),
    })?;
    let failed = |error: QmpError| Failure::other(format!("VM '{name}': {error}"));
    match command {
        VmCommand::Status(_) => {
            let status = client.status().map_err(failed)?;
            println!("{name}: {}", status.state);
        }
        VmCommand::Pause(_) => {
            client.pause().map_err(failed)?;
            println!("{name}: paused");
        }
        VmCommand::Resume(_) => {
            client.resume().map_err(failed)?;
            println!("{name}: running");
        }
        VmCommand::Quit(_) => {
            client.quit().map_err(failed)?;
            println!("{name}: quit");
        }
        VmCommand::Kill(_) => {
            let pid = kill_qemu(name, &socket)?;
            println!("{name}: killed (SIGKILL to QEMU, pid {pid})");
        }
        VmCommand::Counters(_) => unreachable!("answered above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends SIGKILL to the QEMU that serves `socket` (it answered just now), after checking
/// that the recorded pid is a QEMU process: a stale pid may name another program.
fn kill_qemu(name: &str, socket: &std::path::Path) -> Result<u32, Failure> {
    let pid_file = paths::pid_file_beside(socket);
    let text = std::fs::read_to_string(&pid_file).map_err(|error| {
        Failure::other(format!("VM '{name}': cannot read its pid from '{}': {error}", pid_file.display()))
    })?;
    let pid: u32 = text.trim().parse().map_err(|_| {
        Failure::other(format!("VM '{name}': '{}' does not hold a pid", pid_file.display()))
    })?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if !command.starts_with("qemu") {
        return Err(Failure::other(format!(
            "VM '{name}': pid {pid} from '{}' is not QEMU (it is {:?}); not killed",
            pid_file.display(),
            command.trim()
        )));
    }
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| Failure::other(format!("VM '{name}': pid {pid} out of range")))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid_t, libc::SIGKILL) } != 0 {
        return Err(Failure::other(format!(
            "VM '{name}': SIGKILL to pid {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(pid)
}
