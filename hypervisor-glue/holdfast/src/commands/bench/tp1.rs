//! `holdfast bench tp1`: the options, and how the Holdfast column's appliance is started
//! (this CLI's own `holdfast run --tp1-port` and `holdfast tp1 token`, as a user would).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use holdfast_bench::Accelerator;
use holdfast_bench::tp1::{
    Appliance, ApplianceRequest, Counters, GuestPeer, HoldfastSide, Tp1BenchOptions,
};
use holdfast_tp1_protocol::Token;

use crate::cli::{AccelArgument, BenchTp1Arguments};
use crate::failure::{Failure, exit_status};
use crate::paths;

/// The TP1 appliance's system, relative to the source tree.
pub(super) const TP1_MANIFEST: &str = "services/tp1-manifest.toml";
/// Its store: the first checkpoint writes its whole database (~140 MiB) through the log.
const STORE_MIB: &str = "2048";
/// How long the appliance may take to boot and mint a token under TCG on a busy host.
pub(super) const APPLIANCE_START_TIMEOUT: Duration = Duration::from_secs(300);
/// Lines of the appliance's output kept for an error message.
pub(super) const TRANSCRIPT_LINES: usize = 40;

pub fn tp1(arguments: BenchTp1Arguments) -> Result<ExitCode, Failure> {
    let image_cache_dir = paths::cache_dir()?;
    let holdfast = holdfast_side(&paths::source_dir());
    let mut options = if arguments.quick {
        Tp1BenchOptions::quick(holdfast, image_cache_dir)
    } else {
        Tp1BenchOptions::new(holdfast, image_cache_dir)
    };
    options.accelerator = match arguments.accel {
        AccelArgument::Tcg => Accelerator::Tcg,
        AccelArgument::Kvm => Accelerator::Kvm,
        // The goals are set for TCG; auto's probe needs a built Holdfast kernel, which the
        // PostgreSQL columns do not.
        AccelArgument::Auto => {
            return Err(Failure::input(
                "holdfast bench tp1 takes --accel tcg or --accel kvm (the goals are for TCG)",
            ));
        }
    };
    options.memory_mib = arguments.memory_mib;
    if let Some(scale) = arguments.scale {
        options.scale = scale;
    }
    if let Some(seconds) = arguments.duration_s {
        options.duration = Duration::from_secs(u64::from(seconds));
    }
    if let Some(seed) = arguments.seed {
        options.seed = seed;
    }
    if arguments.no_guest {
        options.guest = GuestPeer::Skip("left out (--no-guest)".into());
    }
    holdfast_bench::tp1::tp1(options)?;
    Ok(ExitCode::SUCCESS)
}

/// The appliance's launcher, or why there is none in this source tree.
fn holdfast_side(source_dir: &Path) -> HoldfastSide {
    let manifest = source_dir.join(TP1_MANIFEST);
    if !manifest.is_file() {
        return HoldfastSide::Unavailable(format!(
            "the TP1 service is not in this source tree ({TP1_MANIFEST} missing)"
        ));
    }
    HoldfastSide::Launcher(Box::new(move |request| launch(&manifest, request)))
}

/// `--accel`'s word for an accelerator.
pub(super) fn accel_name(accelerator: Accelerator) -> &'static str {
    match accelerator {
        Accelerator::Tcg => "tcg",
        Accelerator::Kvm => "kvm",
    }
}

/// The appliance's process (or the pair's supervisor); killed, and its state folder
/// removed, when dropped.
pub(super) struct Running {
    pub(super) child: Child,
    pub(super) state_dir: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Builds the appliance image (`holdfast image build --manifest services/tp1-manifest.toml`)
/// in a state folder of its own, then boots it as [`boot`] does.
fn launch(manifest: &Path, request: &ApplianceRequest) -> anyhow::Result<Appliance> {
    let state_dir = fresh_state_dir("tp1")?;
    let image_dir = state_dir.join("image");
    build_image(manifest, &image_dir, &state_dir)?;
    // One disk, as PostgreSQL's columns have.
    boot(&image_dir, state_dir, request, Mirrors::One)
}

/// How many store images an appliance the benchmarks boot has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mirrors {
    One,
    /// Mirrored, as each node of a pair (and the Terraform example's appliance).
    Two,
}

/// An empty folder for a benchmark's `HOLDFAST_STATE_DIR` (VM sockets, stores), named by
/// the benchmark and this process.
pub(super) fn fresh_state_dir(bench: &str) -> anyhow::Result<PathBuf> {
    let state_dir = std::env::temp_dir().join(format!("holdfast-bench-{bench}-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state_dir);
    std::fs::create_dir_all(&state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
    Ok(state_dir)
}

/// Runs this program as `holdfast ARGUMENTS` with `state_dir` as its state folder; its
/// stderr in the error if it fails.
pub(super) fn holdfast_step(state_dir: &Path, arguments: &[&std::ffi::OsStr]) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding this program")?;
    let output = Command::new(&exe)
        .args(arguments)
        .env("HOLDFAST_STATE_DIR", state_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running holdfast {arguments:?}"))?;
    if !output.status.success() {
        bail!(
            "holdfast {arguments:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `holdfast image build --manifest MANIFEST --out IMAGE_DIR`.
pub(super) fn build_image(manifest: &Path, image_dir: &Path, state_dir: &Path) -> anyhow::Result<()> {
    holdfast_step(
        state_dir,
        &["image".as_ref(), "build".as_ref(), "--manifest".as_ref(), manifest.as_os_str(), "--out".as_ref(), image_dir.as_os_str()],
    )
    .map(drop)
}

/// Formats a store in `state_dir` (on one image or two mirrors) and boots the image in
/// `image_dir` on it with `holdfast run --tp1-port`, then mints a client and an admin token
/// with `holdfast tp1 token`, retried until the appliance answers. Its counters come from
/// `holdfast vm counters`. The appliance owns `state_dir` and removes it when it stops.
pub(super) fn boot(image_dir: &Path, state_dir: PathBuf, request: &ApplianceRequest, mirrors: Mirrors) -> anyhow::Result<Appliance> {
    let exe = std::env::current_exe().context("finding this program")?;
    let stores = match mirrors {
        Mirrors::One => vec![state_dir.join("store.img")],
        Mirrors::Two => vec![state_dir.join("store-a.img"), state_dir.join("store-b.img")],
    };
    let mut format: Vec<&std::ffi::OsStr> = vec!["store".as_ref(), "format".as_ref(), "--size-mib".as_ref(), STORE_MIB.as_ref()];
    format.extend(stores.iter().map(|store| store.as_os_str()));
    holdfast_step(&state_dir, &format)?;
    let port = holdfast_bench::tp1::free_port()?;
    let accel = accel_name(request.accelerator);
    let name = format!("bench-tp1-{}", std::process::id());
    let mut command = Command::new(&exe);
    command
        .args(["run", "--name", &name])
        .args(["--tp1-port", &port.to_string()])
        .arg("--image-dir")
        .arg(image_dir)
        .args(stores.iter().flat_map(|store| [std::ffi::OsStr::new("--disk"), store.as_os_str()]))
        .args(["--accel", accel])
        .args(["--memory-mib", &request.memory_mib.to_string()])
        .env("HOLDFAST_STATE_DIR", &state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let transcript = Arc::new(Mutex::new(VecDeque::new()));
    for stream in [
        child
            .stdout
            .take()
            .map(|out| Box::new(out) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|err| Box::new(err) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let transcript = Arc::clone(&transcript);
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut kept = transcript
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if kept.len() == TRANSCRIPT_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
    }
    let mut running = Running { child, state_dir: state_dir.clone() };
    let console = || -> String {
        let kept = transcript
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.iter().map(|line| format!("  | {line}\n")).collect()
    };
    let deadline = Instant::now() + APPLIANCE_START_TIMEOUT;
    let tokens = (|| -> anyhow::Result<(Token, Token)> {
        Ok((
            mint(&exe, &mut running, &name, false, deadline)?,
            mint(&exe, &mut running, &name, true, deadline)?,
        ))
    })();
    let (client_token, admin_token) =
        tokens.map_err(|error| anyhow::anyhow!("{error:#}\nholdfast run:\n{}", console()))?;
    let counters_exe = exe.clone();
    let checkpoint_state_dir = state_dir.clone();
    let checkpoint_name = name.clone();
    Ok(Appliance {
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        client_token,
        admin_token,
        counters: Box::new(move || appliance_counters(&counters_exe, &name, &state_dir)),
        checkpoint: Box::new(move || checkpoint_after_writes(&checkpoint_state_dir, &checkpoint_name)),
        guard: Box::new(running),
    })
}

/// How long a checkpoint asked for may take to be committed.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(120);

/// Takes two checkpoints one after the other with `holdfast checkpoint now VM`, each waited
/// for with `checkpoint status` (its generation moves): the first may have begun before the
/// caller's last write, the second began after it.
pub(super) fn checkpoint_after_writes(state_dir: &Path, vm: &str) -> anyhow::Result<()> {
    for _ in 0..2 {
        let before = checkpoint_generation(state_dir, vm)?;
        holdfast_step(state_dir, &["checkpoint".as_ref(), "now".as_ref(), vm.as_ref()])?;
        let deadline = Instant::now() + CHECKPOINT_TIMEOUT;
        while checkpoint_generation(state_dir, vm)? <= before {
            if Instant::now() >= deadline {
                bail!("{vm}: no checkpoint committed within {} s of checkpoint now", CHECKPOINT_TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// The newest committed checkpoint's generation, from `holdfast checkpoint status VM`
/// (`VM: generation G interval-ms ...`).
fn checkpoint_generation(state_dir: &Path, vm: &str) -> anyhow::Result<u64> {
    let said = holdfast_step(state_dir, &["checkpoint".as_ref(), "status".as_ref(), vm.as_ref()])?;
    parse_generation(&said).with_context(|| format!("checkpoint status {vm}: no generation in '{}'", said.trim()))
}

fn parse_generation(said: &str) -> Option<u64> {
    let mut words = said.split_whitespace();
    words.find(|word| *word == "generation")?;
    words.next()?.parse().ok()
}

/// The appliance's journal flushes, kernel invocations and kernel time (background steps
/// at ticks, disk waits) since it was made, from its
/// admin service's counters (`holdfast vm counters`).
fn appliance_counters(exe: &Path, name: &str, state_dir: &Path) -> anyhow::Result<Counters> {
    let output = Command::new(exe)
        .args(["vm", "counters", name])
        .env("HOLDFAST_STATE_DIR", state_dir)
        .stdin(Stdio::null())
        .output()
        .context("running holdfast vm counters")?;
    if !output.status.success() {
        bail!("holdfast vm counters: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let value = |metric: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(metric)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse::<f64>().ok())
    };
    let count = |metric: &str| value(metric).map(|value| value as u64);
    Ok(Counters {
        flushes: count("holdfast_journal_writes_total"),
        invocations: count("holdfast_invocations_total"),
        steps_at_ticks_seconds: value("holdfast_background_steps_at_ticks_seconds_total"),
        disk_wait_seconds: value("holdfast_disk_wait_seconds_total"),
    })
}

/// Mints a token with `holdfast tp1 token VM NAME [--admin]`, retried while the appliance
/// is starting; fails at once if `holdfast run` ended or the command line was refused, else
/// at `deadline`.
pub(super) fn mint(exe: &Path, running: &mut Running, vm: &str, admin: bool, deadline: Instant) -> anyhow::Result<Token> {
    let command_text = format!("holdfast tp1 token {vm}{}", if admin { " --admin" } else { "" });
    loop {
        if let Some(status) = running.child.try_wait()? {
            bail!("the VM's holdfast process ended ({status}) before {command_text} gave a token");
        }
        let mut command = Command::new(exe);
        command.args(["tp1", "token", vm, if admin { "bench-admin" } else { "bench" }]);
        if admin {
            command.arg("--admin");
        }
        command.env("HOLDFAST_STATE_DIR", &running.state_dir);
        let output = command
            .output()
            .with_context(|| format!("running {command_text}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if output.status.success()
            && let Some(token) = stdout.split_whitespace().rev().find_map(Token::from_hex)
        {
            return Ok(token);
        }
        // A usage error is final; "no VM named ... is running" (also exit 2) is not while the
        // VM starts.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let refused = output.status.code() == Some(i32::from(exit_status::INPUT_ERROR)) && !stderr.contains("is running");
        if refused || Instant::now() >= deadline {
            bail!(
                "{command_text} gave no token{}: {} {}",
                if refused {
                    String::new()
                } else {
                    format!(" within {} s", APPLIANCE_START_TIMEOUT.as_secs())
                },
                stdout.trim(),
                stderr.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generation_is_read_from_checkpoint_status() {
        let said = "bench-1: generation 42 interval-ms 5000 log-fill-permille 3 degraded 0 failures-since-commit 0\n";
        assert_eq!(parse_generation(said), Some(42));
        assert_eq!(parse_generation("bench-1: generation x"), None);
        assert_eq!(parse_generation("bench-1: interval-ms 5000"), None);
    }

    #[test]
    fn without_the_tp1_manifest_the_column_says_why() {
        let dir =
            std::env::temp_dir().join(format!("holdfast-bench-tp1-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        match holdfast_side(&dir) {
            HoldfastSide::Unavailable(why) => assert!(why.contains(TP1_MANIFEST), "{why}"),
            HoldfastSide::Launcher(_) => panic!("a launcher without a manifest"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
