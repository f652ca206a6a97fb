//! `holdfast`: build the appliance image, run it under QEMU, control running VMs.
//!
//! Every failure is one line on stderr, `holdfast: <what is wrong>`, and an exit status
//! that says whose fault it was (see [`exit_status`]).

mod cli;
mod commands;
mod failure;
mod loopback_http;
mod paths;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::failure::exit_status;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return cli::report_parse_error(error),
    };
    let result = match cli.command {
        Command::Image(command) => commands::image::run(command),
        Command::Run(arguments) => commands::run::run(arguments),
        Command::Vm(command) => commands::vm::run(command),
        Command::Accel(arguments) => commands::accel::run(arguments),
        Command::Bench(command) => commands::bench::run(command),
        Command::Store(command) => commands::store::run(command),
        Command::Checkpoint(command) => commands::checkpoint::run(command),
        Command::Tp1(command) => commands::tp1::run(command),
        Command::Tenant(command) => commands::tenant::run(command),
        Command::Exporter(arguments) => commands::exporter::run(arguments),
        Command::Monitor(command) => commands::monitor::run(command),
        Command::Pair(command) => commands::pair::run(command),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("holdfast: {failure}");
            ExitCode::from(exit_status::of(&failure))
        }
    }
}
