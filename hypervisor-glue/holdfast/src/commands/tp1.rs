//! `holdfast tp1 load|run|check`: the TP1 load generator and checker
//! (`holdfast-tp1-load`) against the Holdfast TP1 service or PostgreSQL.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use holdfast_tp1_load::check::check;
use holdfast_tp1_load::holdfast::HoldfastTarget;
use holdfast_tp1_load::ledger::{Ledger, LedgerContents};
use holdfast_tp1_load::postgres::PostgresTarget;
use holdfast_tp1_load::run::{RunOptions, run as run_load};
use holdfast_tp1_load::target::Target;
use holdfast_tp1_protocol::Token;

use crate::cli::{Tp1Command, Tp1TargetArguments, Tp1TargetKind};
use crate::failure::{Failure, exit_status};
use crate::paths;

pub fn run(command: Tp1Command) -> Result<ExitCode, Failure> {
    if let Tp1Command::Token(arguments) = &command {
        return mint_token(arguments);
    }
    let arguments = match &command {
        Tp1Command::Load(arguments) => &arguments.target,
        Tp1Command::Run(arguments) => &arguments.target,
        Tp1Command::Check(arguments) => &arguments.target,
        Tp1Command::Token(_) => unreachable!("answered above"),
    };
    match arguments.target {
        Tp1TargetKind::Holdfast => {
            let (Some(address), Some(token)) = (arguments.address, &arguments.token) else {
                return Err(Failure::input(
                    "--target holdfast needs --address 127.0.0.1:PORT and --token HEX",
                ));
            };
            if arguments.pg.is_some() {
                return Err(Failure::input("--pg is for --target postgres"));
            }
            let token = Token::from_hex(token)
                .ok_or_else(|| Failure::input("--token is not 32 hexadecimal digits"))?;
            let target = HoldfastTarget::new(address, token)
                .map_err(|error| Failure::input(format!("{error:#}")))?;
            let dir = ledger_dir(arguments, &target.describe())?;
            with_target(target, dir, command)
        }
        Tp1TargetKind::Postgres => {
            let Some(url) = &arguments.pg else {
                return Err(Failure::input("--target postgres needs --pg URL"));
            };
            if arguments.address.is_some() || arguments.token.is_some() {
                return Err(Failure::input(
                    "--address and --token are for --target holdfast",
                ));
            }
            let target =
                PostgresTarget::new(url).map_err(|error| Failure::input(format!("{error:#}")))?;
            let dir = ledger_dir(arguments, &target.describe())?;
            with_target(target, dir, command)
        }
    }
}

/// `--state-dir`, else `tp1/<target>` in the state directory, the target's description
/// made into a file name (`holdfast-127.0.0.1-7070`).
fn ledger_dir(arguments: &Tp1TargetArguments, description: &str) -> Result<PathBuf, Failure> {
    if let Some(dir) = &arguments.state_dir {
        return Ok(dir.clone());
    }
    let name: String = description
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || character == '.' {
                character
            } else {
                '-'
            }
        })
        .collect();
    Ok(paths::state_dir()?.join("tp1").join(name))
}

fn with_target<T: Target>(
    target: T,
    dir: PathBuf,
    command: Tp1Command,
) -> Result<ExitCode, Failure> {
    let description = target.describe();
    let target = Arc::new(target);
    match command {
        Tp1Command::Load(load) => {
            let started = std::time::Instant::now();
            holdfast_tp1_load::block_on(target.load(load.scale, load.replace))??;
            Ledger::reset(&dir)?;
            println!(
                "{description}: loaded scale {} in {:.1} s; ledger {} emptied",
                load.scale,
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Tp1Command::Run(arguments) => {
            let ledger = Arc::new(Ledger::open(&dir)?);
            let options = RunOptions {
                clients: arguments.clients,
                rate_per_second: arguments.rate,
                pipeline: arguments.pipeline,
                duration: arguments.duration,
                drain: arguments.drain,
                seed: arguments
                    .seed
                    .unwrap_or_else(holdfast_tp1_load::random_seed),
                progress: !arguments.quiet,
            };
            if let Some(rate) = options.rate_per_second
                && !(rate.is_finite() && rate > 0.0)
            {
                return Err(Failure::input(format!(
                    "--rate {rate}: give a positive number of transactions per second"
                )));
            }
            if options.pipeline > 1 && !target.pipelines() {
                return Err(Failure::input(format!(
                    "{description} runs one transaction at a time per connection: use --clients, not --pipeline"
                )));
            }
            let report =
                holdfast_tp1_load::block_on(run_load(Arc::clone(&target), ledger, options))??;
            if arguments.json {
                println!("{}", holdfast_tp1_load::to_json(&report));
            } else {
                print!("{}", report.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Tp1Command::Check(arguments) => {
            let ledger = LedgerContents::read(&dir)?;
            let snapshot = holdfast_tp1_load::block_on(target.snapshot())??;
            let report = check(description, &snapshot, &ledger);
            if arguments.json {
                println!("{}", holdfast_tp1_load::to_json(&report));
            } else {
                print!("{}", report.render());
            }
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(exit_status::GUEST_FAILED)
            })
        }
        Tp1Command::Token(_) => unreachable!("answered in `run`"),
    }
}

/// `holdfast tp1 token VM NAME [--admin]`: asks the appliance's admin service to mint one.
fn mint_token(arguments: &crate::cli::Tp1TokenArguments) -> Result<ExitCode, Failure> {
    println!("{}", mint(&arguments.vm, &arguments.name, arguments.admin, arguments.tenant.as_deref())?);
    Ok(ExitCode::SUCCESS)
}

/// Asks VM `vm`'s admin service for a token named `name`, for tenant `tenant`'s TP1 service
/// or (`None`) the appliance's own; returns it in hexadecimal.
pub fn mint(vm: &str, name: &str, admin: bool, tenant: Option<&str>) -> Result<String, Failure> {
    if name.is_empty() || name.len() > 32 || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(Failure::input(format!(
            "'{name}' is not a token name: use 1 to 32 printable characters without spaces"
        )));
    }
    let kind = if admin { " admin" } else { "" };
    let request = match tenant {
        None => format!("tp1 token {name}{kind}"),
        Some(tenant) => {
            super::tenant::check_name(tenant)?;
            format!("tenant token {tenant} {name}{kind}")
        }
    };
    let reply = super::control::request(vm, &request).map_err(|failure| match tenant {
        Some(tenant) if failure.to_string().contains(&format!("no tenant named {tenant}")) => {
            Failure::input(format!("no tenant named '{tenant}' on {vm}"))
        }
        Some(tenant) if failure.to_string().contains("has no TP1 service") => Failure::input(format!(
            "tenant '{tenant}' has no TP1 service of its own (make tenants with `holdfast tenant create --tp1`)"
        )),
        _ => failure,
    })?;
    match reply.trim_end().strip_prefix("ok token ") {
        Some(token) if Token::from_hex(token).is_some() => Ok(token.to_owned()),
        _ => Err(Failure::other(format!("{vm}: the appliance answered '{}'", reply.trim_end()))),
    }
}
