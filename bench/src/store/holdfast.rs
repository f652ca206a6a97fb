//! The store benchmark's Holdfast guest: the kernel and an initial image of the system
//! `bench/store-manifest.toml` describes (`bench-store`), booted on a freshly formatted
//! store, then booted again on that store; and the host's side of the program's control channel, on which it wakes the program.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_image_builder::{Manifest, guest_build, initial_image};

use super::figures::{
    KERNEL_FAILURES, QUIESCENT_LINE, RESTART_LINE_PREFIX, SERVING_LINE, SLEEP_LINE,
};
use crate::linux_peer;
use crate::runner::LineAction;

/// The benchmark's system, relative to the source tree.
pub const MANIFEST: &str = "bench/store-manifest.toml";
/// The program that measures (`services/selftest`).
pub const PROGRAM: &str = "bench-store";

/// How long the host waits before it answers the program's sleep request.
pub const SLEEP: Duration = Duration::from_millis(10);
/// What the host sends the program: the end of a sleep, the news of a restart.
pub const WAKE_BYTE: u8 = b'w';
pub const RESTARTED_BYTE: u8 = b'r';

/// What the Holdfast guest boots from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldfastFiles {
    pub kernel: PathBuf,
    pub initial_image: PathBuf,
}

/// Reads the benchmark's manifest, builds the guest crates of `source_dir` (cargo,
/// incrementally: its progress goes to stderr) and keeps the initial image at
/// `cache_directory`/`<program>.hfi`.
pub fn prepare(source_dir: &Path, cache_directory: &Path) -> anyhow::Result<HoldfastFiles> {
    let manifest = Manifest::load(&source_dir.join(MANIFEST))?;
    let artifacts = guest_build::build_guest_crates(source_dir)?;
    let image = initial_image(&manifest, &artifacts.programs)?;
    Ok(HoldfastFiles {
        kernel: artifacts.kernel,
        initial_image: linux_peer::write_cached(
            cache_directory,
            &format!("{PROGRAM}.hfi"),
            &image,
        )?,
    })
}

/// The initial image of `manifest`'s system, its programs found in `programs`.
pub fn initial_image(
    manifest: &Manifest,
    programs: &BTreeMap<String, PathBuf>,
) -> anyhow::Result<Vec<u8>> {
    initial_image::make_initial_image(manifest, programs)
        .with_context(|| format!("cannot make the benchmark's initial image from {MANIFEST}"))
}

/// Which boot of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boot {
    /// On a freshly formatted store: runs the benchmark until the program is quiescent.
    First,
    /// On the store the first boot left: until the restarted program prints.
    Restart,
}

/// What to do about one serial line of a Holdfast boot, and what to send the program
/// (and when). Separate from the socket so that it can be tested.
pub fn react(boot: Boot, line: &str) -> (LineAction, Option<(Duration, u8)>) {
    if line.starts_with("HOLDFAST-STORE-FAILED")
        || KERNEL_FAILURES.iter().any(|failure| line.contains(failure))
    {
        return (LineAction::Fail, None);
    }
    match boot {
        Boot::First if line == SLEEP_LINE => (LineAction::Continue, Some((SLEEP, WAKE_BYTE))),
        Boot::First if line == QUIESCENT_LINE => (LineAction::Finish, None),
        Boot::Restart if line.starts_with(RESTART_LINE_PREFIX) => {
            (LineAction::Continue, Some((Duration::ZERO, RESTARTED_BYTE)))
        }
        Boot::Restart if line == SERVING_LINE => (LineAction::Finish, None),
        // A restarted program still asleep from before the kill may ask again: not answered,
        // the restart byte wakes it.
        _ => (LineAction::Continue, None),
    }
}

/// The host's end of the control channel: a thread that connects to QEMU's socket (once
/// QEMU has made it) and sends each byte at its time.
pub struct ControlChannel {
    sender: Option<mpsc::Sender<(Instant, u8)>>,
    thread: Option<thread::JoinHandle<Result<(), String>>>,
}

/// How long the channel waits for QEMU's socket to appear.
const CONNECT_TIME_LIMIT: Duration = Duration::from_secs(30);

impl ControlChannel {
    pub fn new(socket: PathBuf) -> Self {
        let (sender, receiver) = mpsc::channel::<(Instant, u8)>();
        let thread = thread::spawn(move || -> Result<(), String> {
            let mut stream: Option<UnixStream> = None;
            for (at, byte) in receiver {
                if stream.is_none() {
                    let give_up = Instant::now() + CONNECT_TIME_LIMIT;
                    loop {
                        match UnixStream::connect(&socket) {
                            Ok(connected) => {
                                stream = Some(connected);
                                break;
                            }
                            Err(error) if Instant::now() >= give_up => {
                                return Err(format!(
                                    "cannot connect to {}: {error}",
                                    socket.display()
                                ));
                            }
                            Err(_) => thread::sleep(Duration::from_millis(20)),
                        }
                    }
                }
                let wait = at.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    thread::sleep(wait);
                }
                if let Some(stream) = stream.as_mut() {
                    // QEMU gone (the run ended): nothing more to send to.
                    if stream.write_all(&[byte]).is_err() {
                        return Ok(());
                    }
                }
            }
            Ok(())
        });
        Self {
            sender: Some(sender),
            thread: Some(thread),
        }
    }

    /// Sends `byte` after `delay`.
    pub fn send_after(&self, delay: Duration, byte: u8) {
        if let Some(sender) = &self.sender {
            let _ = sender.send((Instant::now() + delay, byte));
        }
    }

    /// Stops the thread (after what was queued) and says whether it could not connect.
    pub fn close(mut self) -> anyhow::Result<()> {
        self.sender.take();
        match self.thread.take().map(thread::JoinHandle::join) {
            Some(Ok(Err(why))) => anyhow::bail!("the control channel: {why}"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_runs_bench_store_with_its_capabilities() {
        use holdfast_boot_image::system_table::Target;
        let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifest = Manifest::load(&source_dir.join(MANIFEST)).unwrap();
        assert_eq!(manifest.processes[0].program, PROGRAM);
        let targets: Vec<_> = manifest.processes[0].registers[..5]
            .iter()
            .map(|c| c.target)
            .collect();
        assert_eq!(
            targets,
            [
                Target::Console,
                Target::Checkpoint,
                Target::Journal,
                Target::Page(0),
                Target::Control
            ]
        );
    }

    #[test]
    fn the_host_answers_sleeps_ends_at_quiescence_and_wakes_a_restart() {
        assert_eq!(
            react(Boot::First, SLEEP_LINE),
            (LineAction::Continue, Some((SLEEP, WAKE_BYTE)))
        );
        assert_eq!(
            react(Boot::First, QUIESCENT_LINE),
            (LineAction::Finish, None)
        );
        assert_eq!(
            react(Boot::First, "holdfast: checkpoint 2 committed: ..."),
            (LineAction::Continue, None)
        );
        assert_eq!(
            react(Boot::Restart, SLEEP_LINE),
            (LineAction::Continue, None)
        );
        assert_eq!(
            react(
                Boot::Restart,
                "holdfast: restarted from checkpoint 4: 1 processes"
            ),
            (LineAction::Continue, Some((Duration::ZERO, RESTARTED_BYTE)))
        );
        assert_eq!(
            react(Boot::Restart, SERVING_LINE),
            (LineAction::Finish, None)
        );
        for failure in [
            "HOLDFAST-STORE-FAILED journal commit refused",
            "holdfast: checkpoint failed: device error; no further checkpoints this run",
            "holdfast: kernel panic: oops",
        ] {
            assert_eq!(react(Boot::First, failure).0, LineAction::Fail, "{failure}");
            assert_eq!(
                react(Boot::Restart, failure).0,
                LineAction::Fail,
                "{failure}"
            );
        }
    }

    #[test]
    fn the_control_channel_sends_bytes_in_order_at_their_time() {
        use std::io::Read;
        use std::os::unix::net::UnixListener;
        let socket =
            std::env::temp_dir().join(format!("holdfast-bench-store-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let channel = ControlChannel::new(socket.clone());
        let started = Instant::now();
        channel.send_after(Duration::from_millis(50), WAKE_BYTE);
        channel.send_after(Duration::ZERO, RESTARTED_BYTE);
        let (mut stream, _) = listener.accept().unwrap();
        let mut bytes = [0u8; 2];
        stream.read_exact(&mut bytes).unwrap();
        assert_eq!(&bytes, b"wr");
        assert!(started.elapsed() >= Duration::from_millis(50));
        channel.close().unwrap();
        std::fs::remove_file(&socket).unwrap();
    }
}
