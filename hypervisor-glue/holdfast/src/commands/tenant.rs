//! `holdfast tenant audit|revoke VM NAME`, `holdfast tenant create|quota VM NAME --pages N
//! --nodes N --cpu-percent P [--tp1]`, `holdfast tenant list VM`: a running appliance's tenants,
//! through its admin service (see [`super::control`]) and its reference monitor
//! (services/keysafe).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cli::{TenantCommand, TenantCreateArguments, TenantLimitsArguments};
use crate::failure::Failure;

/// How long `create` and `quota` wait for the checkpoints that make the change durable.
const DURABLE_TIME_LIMIT: Duration = Duration::from_secs(60);
/// How often they ask whether a checkpoint has committed (one takes tens of milliseconds).
const DURABLE_POLL: Duration = Duration::from_millis(20);

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
        TenantCommand::Create(TenantCreateArguments { limits: arguments, tp1 }) => {
            if tp1 {
                eprintln!("{}: making tenant {} and its TP1 service", arguments.vm, arguments.name);
            }
            let said = limits(&arguments, "create", tp1)?;
            let number = said.trim_end().strip_prefix("ok number ").unwrap_or("?").to_owned();
            let generation = wait_until_durable(&arguments.vm)?;
            println!(
                "{}: tenant {} created (compartment {number}, at most {} pages and {} nodes, {}% of the CPU{}), durable from checkpoint {generation}",
                arguments.vm,
                arguments.name,
                arguments.pages,
                arguments.nodes,
                arguments.cpu_percent,
                if tp1 { ", its own TP1 service" } else { "" }
            );
            Ok(ExitCode::SUCCESS)
        }
        TenantCommand::Quota(arguments) => {
            limits(&arguments, "quota", false)?;
            let generation = wait_until_durable(&arguments.vm)?;
            println!(
                "{}: tenant {} may hold {} pages and {} nodes and use {}% of the CPU, durable from checkpoint {generation}",
                arguments.vm, arguments.name, arguments.pages, arguments.nodes, arguments.cpu_percent
            );
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

/// `tenant create|quota NAME PAGES NODES CPU-PERCENT [tp1]` to the admin service; its reply.
fn limits(arguments: &TenantLimitsArguments, verb: &str, tp1: bool) -> Result<String, Failure> {
    check_name(&arguments.name)?;
    let request = format!(
        "tenant {verb} {} {} {} {}{}",
        arguments.name,
        arguments.pages,
        arguments.nodes,
        arguments.cpu_percent,
        if tp1 { " tp1" } else { "" }
    );
    super::control::request(&arguments.vm, &request).map_err(|failure| {
        let text = failure.to_string();
        if text.contains("exists already") {
            Failure::input(format!("a tenant named '{}' exists already on this appliance", arguments.name))
        } else {
            unknown_tenant(failure, &arguments.name)
        }
    })
}

/// Has checkpoints taken until one that began after this call has committed; returns its
/// generation. Two commits: a checkpoint being stabilized when the change was made may
/// have taken its snapshot before it.
fn wait_until_durable(vm: &str) -> Result<u64, Failure> {
    let deadline = Instant::now() + DURABLE_TIME_LIMIT;
    let ask = |request: &str| super::control::request(vm, request);
    let too_late = || {
        Failure::other(format!(
            "{vm}: the change is made, but no checkpoint committed within {} s: it is lost if the VM stops before one does (see `holdfast checkpoint status {vm}`)",
            DURABLE_TIME_LIMIT.as_secs()
        ))
    };
    let mut newest = 0;
    for _ in 0..2 {
        newest = super::control::checkpoint_and_wait(ask, deadline, DURABLE_POLL)?.ok_or_else(too_late)?;
    }
    Ok(newest)
}

/// A tenant's name as the monitor takes it, checked here so that a typo is a usage error
/// before the VM is asked.
pub(crate) fn check_name(name: &str) -> Result<(), Failure> {
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
