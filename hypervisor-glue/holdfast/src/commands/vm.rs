//! `holdfast vm status|pause|resume|quit NAME`: QMP commands to a named VM.

use std::process::ExitCode;

use holdfast_qemu::{QmpClient, QmpError};

use crate::cli::VmCommand;
use crate::failure::Failure;
use crate::paths;

pub fn run(command: VmCommand) -> Result<ExitCode, Failure> {
    let (VmCommand::Status(vm)
    | VmCommand::Pause(vm)
    | VmCommand::Resume(vm)
    | VmCommand::Quit(vm)) = &command;
    let name = vm.name.as_str();
    paths::check_vm_name(name)?;
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
    }
    Ok(ExitCode::SUCCESS)
}
