//! `holdfast checkpoint status|interval|now NAME`: a running VM's checkpoints, through its
//! admin service (see [`super::control`]).

use std::process::ExitCode;

use crate::cli::CheckpointCommand;
use crate::failure::Failure;

pub fn run(command: CheckpointCommand) -> Result<ExitCode, Failure> {
    let (name, request) = match &command {
        CheckpointCommand::Status(vm) => (&vm.name, "checkpoint status".to_owned()),
        CheckpointCommand::Interval(arguments) => {
            if !(10..=86_400_000).contains(&arguments.milliseconds) {
                return Err(Failure::input(format!(
                    "{} ms is not a checkpoint interval: use 10 to 86400000",
                    arguments.milliseconds
                )));
            }
            (&arguments.name, format!("checkpoint interval {}", arguments.milliseconds))
        }
        CheckpointCommand::Now(vm) => (&vm.name, "checkpoint now".to_owned()),
    };
    let reply = super::control::request(name, &request)?;
    // `ok` alone, or `ok` and what the guest says.
    let said = reply.trim_end().strip_prefix("ok").unwrap_or_default().trim_start();
    match (&command, said) {
        (CheckpointCommand::Now(_), _) => println!("{name}: checkpoint requested"),
        (_, said) => println!("{name}: {said}"),
    }
    Ok(ExitCode::SUCCESS)
}
