//! `pair up --detach`: the supervisor in the background, for Terraform, Ansible and
//! service scripts that want a command which returns once the pair serves.
//!
//! The supervisor is this same program run again with the same arguments less `--detach`,
//! in a session of its own (no terminal, so a closed shell does not end it) with its
//! output appended to `supervisor.log` in the pair's state directory. This process then
//! asks the supervisor for its status until the primary serves and the standby has been
//! heard from, and returns; or, if the supervisor ends or the time runs out, says why with
//! the log's tail and makes sure nothing of the pair is left running.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{PairPaths, ask};
use crate::cli::PairUpArguments;
use crate::failure::Failure;

/// The supervisor's log in the pair's directory.
pub const LOG_FILE: &str = "supervisor.log";
/// How often the supervisor is asked whether the pair serves.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How many lines of the log a failure shows.
const TAIL_LINES: usize = 40;
/// How long a supervisor that did not come up in time gets to end after `down` (its
/// fences wait for each VM to be gone) before it is killed.
const DOWN_TIME_LIMIT: Duration = Duration::from_secs(60);

pub fn up(arguments: &PairUpArguments) -> Result<ExitCode, Failure> {
    let paths = PairPaths::of(&arguments.name)?;
    let name = &arguments.name;
    if std::os::unix::net::UnixStream::connect(&paths.socket).is_ok() {
        return Err(Failure::input(format!("pair '{name}' is already up (its supervisor answers on {})", paths.socket.display())));
    }
    std::fs::create_dir_all(&paths.dir)
        .map_err(|error| Failure::other(format!("cannot create '{}': {error}", paths.dir.display())))?;
    let log_path = paths.dir.join(LOG_FILE);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|error| Failure::other(format!("cannot open '{}': {error}", log_path.display())))?;
    // Only what this run wrote is shown on a failure.
    let log_start = log.seek(SeekFrom::End(0))?;
    writeln!(log, "--- pair up {name} --detach at {} ---", super::state::utc_text(super::state::unix_ms_now()))?;
    let program = std::env::current_exe().map_err(|error| Failure::other(format!("cannot find this program's path: {error}")))?;
    let mut command = Command::new(&program);
    command
        .args(supervisor_arguments(std::env::args_os().skip(1)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid(2) is async-signal-safe and touches no memory: it is all the child
    // does between fork and exec. A new session has no controlling terminal, so a hangup
    // of the terminal `up` ran in does not reach the supervisor.
    unsafe {
        command.pre_exec(|| if libc::setsid() < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    let mut child = command
        .spawn()
        .map_err(|error| Failure::other(format!("cannot start the supervisor ({}): {error}", program.display())))?;
    let deadline = Instant::now() + Duration::from_secs(arguments.ready_timeout_seconds);
    loop {
        if let Some(ended) = child.try_wait()? {
            // Its exit status is passed on: 2 for a usage error, 3 for the rest.
            eprintln!(
                "holdfast: pair '{name}': the supervisor ended ({ended}) before the pair served; the end of {}:\n{}",
                log_path.display(),
                tail(&log_path, log_start)
            );
            let code = ended.code().and_then(|code| u8::try_from(code).ok()).filter(|code| *code != 0);
            return Ok(ExitCode::from(code.unwrap_or(crate::failure::exit_status::OTHER_FAILURE)));
        }
        // A refusal or no answer yet (the socket comes first, the VMs later): asked again.
        if let Ok(status) = ask(name, "status")
            && let Some(serving) = serving(&status)
        {
            println!("pair {name}: endpoint {}", status["endpoint"].as_str().unwrap_or_default());
            println!("pair {name}: supervisor pid {}, log {}", child.id(), log_path.display());
            println!("pair {name}: serving: {serving}");
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() >= deadline {
            stop(name, &mut child);
            return Err(Failure::other(format!(
                "pair '{name}': not serving within {} s (--ready-timeout-seconds); the supervisor was stopped; the end of {}:\n{}",
                arguments.ready_timeout_seconds,
                log_path.display(),
                tail(&log_path, log_start)
            )));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The supervisor's command line: this one's, less `--detach` and the options that only
/// `--detach` takes.
fn supervisor_arguments(arguments: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut kept = Vec::new();
    let mut skip_value = false;
    for argument in arguments {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match argument.to_str() {
            Some("--detach") => {}
            Some("--ready-timeout-seconds") => skip_value = true,
            Some(text) if text.starts_with("--ready-timeout-seconds=") => {}
            _ => kept.push(argument),
        }
    }
    kept
}

/// "primary node N, standby node M (STATE)" once the primary serves and the standby has
/// sent a heartbeat; `None` before.
fn serving(status: &Value) -> Option<String> {
    let nodes = status["nodes"].as_array()?;
    let primary = nodes.iter().find(|node| node["role"] == "primary")?;
    let standby = nodes.iter().find(|node| node["role"] == "standby")?;
    let primary_serves = primary["state"].as_str().is_some_and(|state| state.starts_with("serving"));
    let standby_heard = !standby["status"].is_null() && !standby["state"].as_str().unwrap_or("failed").starts_with("failed");
    (primary_serves && standby_heard).then(|| {
        format!("primary node {}, standby node {} ({})", primary["node"], standby["node"], standby["state"].as_str().unwrap_or("-"))
    })
}

/// Ends a supervisor that did not come up in time: `down` if it answers, else (or if it does
/// not end) SIGKILL, which ends its VMs with it.
fn stop(name: &str, child: &mut Child) {
    if ask(name, "down").is_ok() {
        let deadline = Instant::now() + DOWN_TIME_LIMIT;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last [`TAIL_LINES`] lines of the log from `start` on.
fn tail(log_path: &Path, start: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log_path)
        && file.seek(SeekFrom::Start(start)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisor_gets_the_same_arguments_less_the_detach_options() {
        let given = ["pair", "up", "p", "--detach", "--ready-timeout-seconds", "30", "--accel", "tcg", "--ready-timeout-seconds=5", "--libvirt", "qemu:///system"];
        let kept = supervisor_arguments(given.iter().map(OsString::from));
        assert_eq!(kept, ["pair", "up", "p", "--accel", "tcg", "--libvirt", "qemu:///system"].map(OsString::from));
    }

    #[test]
    fn a_pair_serves_once_its_primary_serves_and_its_standby_was_heard() {
        let mut status = serde_json::json!({ "nodes": [
            { "node": 1, "role": "primary", "state": "starting", "status": null },
            { "node": 2, "role": "standby", "state": "starting", "status": null },
        ]});
        assert_eq!(serving(&status), None);
        status["nodes"][0]["state"] = "serving".into();
        assert_eq!(serving(&status), None, "the standby not heard from yet");
        status["nodes"][1]["status"] = serde_json::json!({ "role": "standby" });
        status["nodes"][1]["state"] = "copying".into();
        assert_eq!(serving(&status).as_deref(), Some("primary node 1, standby node 2 (copying)"));
        status["nodes"][1]["state"] = "failed: no heartbeat".into();
        assert_eq!(serving(&status), None);
    }
}
