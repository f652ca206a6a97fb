//! `holdfast tenant audit|revoke VM NAME`, `holdfast tenant list VM`: a running appliance's
//! tenants, through its admin service (see [`super::control`]) and its reference monitor
//! (services/keysafe).

use std::process::ExitCode;

use crate::cli::TenantCommand;
use crate::failure::Failure;

pub fn run(command: TenantCommand) -> Result<ExitCode, Failure> {
    match command {
        TenantCommand::Audit(arguments) => {
            check_name(&arguments.name)?;
            let reply = super::control::request(&arguments.vm, &format!("tenant audit {}", arguments.name))
                .map_err(|failure| unknown_tenant(failure, &arguments.name))?;
            // The records, then `ok records <n>`.
            for line in reply.lines().filter(|line| !line.starts_with("ok")) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        TenantCommand::List(vm) => {
            let reply = super::control::request(&vm.name, "tenant list")?;
            for line in reply.lines().filter(|line| !line.starts_with("ok")) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        TenantCommand::Revoke(arguments) => {
            check_name(&arguments.name)?;
            let reply = super::control::request(&arguments.vm, &format!("tenant revoke {}", arguments.name))
                .map_err(|failure| unknown_tenant(failure, &arguments.name))?;
            let objects = reply.trim_end().strip_prefix("ok objects ").unwrap_or("?");
            println!("{}: tenant {} revoked ({objects} objects destroyed)", arguments.vm, arguments.name);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A tenant's name as the monitor takes it, checked here so that a typo is a usage error
/// before the VM is asked.
fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() || name.len() > 16 || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(Failure::input(format!(
            "'{name}' is not a tenant name: use 1 to 16 printable characters without spaces"
        )));
    }
    Ok(())
}

/// No record names the tenant: a usage error (a name the appliance never had), not a fault.
fn unknown_tenant(failure: Failure, name: &str) -> Failure {
    let text = failure.to_string();
    if text.contains("has an audit record") || text.ends_with(&format!("no tenant named {name}")) {
        Failure::input(format!("no tenant named '{name}' on this appliance (no audit record names it)"))
    } else {
        failure
    }
}
