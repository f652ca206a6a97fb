//! `holdfast vm list`: the named VMs that answer on their QMP sockets; `holdfast vm
//! status|pause|resume|quit NAME`: QMP commands to a named VM; `holdfast vm kill NAME`:
//! SIGKILL to its QEMU.

use std::process::ExitCode;

use holdfast_qemu::{QmpClient, QmpError};

use crate::cli::VmCommand;
use crate::failure::Failure;
use crate::paths;

pub fn run(command: VmCommand) -> Result<ExitCode, Failure> {
    let vm = match &command {
        VmCommand::List => return list(),
        VmCommand::Status(vm)
        | VmCommand::Pause(vm)
        | VmCommand::Resume(vm)
        | VmCommand::Quit(vm)
        | VmCommand::Kill(vm)
        | VmCommand::Counters(vm) => vm,
    };
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
        VmCommand::List | VmCommand::Counters(_) => unreachable!("answered above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends SIGKILL to the QEMU that serves `socket` (it answered just now), after checking
/// that the recorded pid is a QEMU process: a stale pid may name another program.
pub fn kill_qemu(name: &str, socket: &std::path::Path) -> Result<u32, Failure> {
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

/// One row of `holdfast vm list`.
struct ListedVm {
    name: String,
    state: String,
    store: String,
}

/// Prints the VMs whose QMP sockets are in the state directory and answer, with their run
/// state and store disks. A socket that nothing answers is a VM that was killed: not listed.
fn list() -> Result<ExitCode, Failure> {
    let state_dir = paths::state_dir()?;
    let entries = match std::fs::read_dir(&state_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            println!("no VMs are running (state directory {} does not exist)", state_dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => {
            return Err(Failure::other(format!("cannot list '{}': {error}", state_dir.display())));
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| paths::check_vm_name(name).is_ok())
        .collect();
    names.sort();
    let mut rows = Vec::new();
    for name in names {
        let socket = paths::qmp_socket_of(&name)?;
        if !socket.exists() {
            continue;
        }
        let state = match QmpClient::connect(&socket).and_then(|mut client| client.status()) {
            Ok(status) => status.state.to_owned(),
            Err(QmpError::NotListening { .. }) => continue,
            // QEMU serves one QMP client at a time: another `holdfast vm` may hold it.
            Err(error) => format!("unreachable ({error})"),
        };
        let disks = std::fs::read_to_string(paths::disks_file_beside(&socket)).unwrap_or_default();
        let disks: Vec<&str> = disks.lines().filter(|line| !line.is_empty()).collect();
        let store = if disks.is_empty() { "-".to_owned() } else { disks.join(" + ") };
        rows.push(ListedVm { name, state, store });
    }
    if rows.is_empty() {
        println!("no VMs are running (state directory {})", state_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let name_width = rows.iter().map(|row| row.name.len()).max().unwrap_or(0).max("NAME".len());
    let state_width = rows.iter().map(|row| row.state.len()).max().unwrap_or(0).max("STATE".len());
    println!("{:name_width$}  {:state_width$}  STORE", "NAME", "STATE");
    for row in rows {
        println!("{:name_width$}  {:state_width$}  {}", row.name, row.state, row.store);
    }
    Ok(ExitCode::SUCCESS)
}
