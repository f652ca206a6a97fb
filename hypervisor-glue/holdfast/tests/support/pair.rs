//! `holdfast pair up` in the background, driven as an operator would (tests/pair.rs,
//! tests/monitoring.rs).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// A `pair up` in the background and the lines it printed so far.
pub struct Pair {
    pub name: String,
    pub dir: PathBuf,
    pub up: LineReader,
    pub seen: Vec<String>,
    /// Whether dropping this removes the pair's directory (four 2 GiB images, sparse).
    pub remove_on_drop: bool,
    /// Lines that would fail the test, as `wait_for` reads them.
    pub bad: Vec<&'static str>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        // The VMs die with their supervisor.
        let _ = self.up.child.0.kill();
        let _ = self.up.child.0.wait();
        if self.remove_on_drop {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Pair {
    pub fn up(name: &str, extra: &[&str], fresh: bool) -> Self {
        let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state").join("pairs").join(name);
        if fresh {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let up = spawn_reading_lines(
            holdfast()
                .args(["pair", "up", name, "--accel", "tcg", "--mode", "sync-durable", "--store-mib", "2048"])
                .args(extra)
                .arg("--image-dir")
                .arg(&image_dir),
        );
        Self { name: name.to_owned(), dir, up, seen: Vec::new(), remove_on_drop: true, bad: BAD_LINES.to_vec() }
    }

    /// Waits for a line of the supervisor's output that `wanted` accepts, failing on one
    /// that says something went wrong.
    pub fn wait_for(&mut self, within: Duration, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        wait_for(&self.up.lines, &mut self.seen, &self.bad, within, what, wanted)
    }

    /// Waits for "pair NAME: <text>..." from the supervisor.
    pub fn said(&mut self, within: Duration, text: &str) -> String {
        let line = format!("pair {}: {text}", self.name);
        self.wait_for(within, text, |said| said.starts_with(&line))
    }

    pub fn endpoint(&mut self) -> String {
        let line = self.said(Duration::from_secs(120), "endpoint ");
        line.rsplit(' ').next().expect("an address").to_owned()
    }

    pub fn vm(&self, node: u8) -> String {
        format!("{}-{node}", self.name)
    }

    pub fn ready(&mut self, primary: u8, standby: u8) {
        let (primary_vm, standby_vm) = (self.vm(primary), self.vm(standby));
        self.said(Duration::from_secs(300), &format!("node {primary} ({primary_vm}) ready, primary"));
        self.said(Duration::from_secs(300), &format!("node {standby} ({standby_vm}) standby: consistent"));
    }

    pub fn verb(&self, arguments: &[&str]) -> Run {
        let mut all = vec!["pair"];
        all.extend_from_slice(&arguments[..1]);
        all.push(&self.name);
        all.extend_from_slice(&arguments[1..]);
        let run = run_holdfast(&all);
        if run.status != Some(0) {
            let unread: Vec<String> = self.up.lines.try_iter().collect();
            panic!("pair {arguments:?}\n{}\n{}\n{}", run.transcript(), self.tail(), unread.join("\n"));
        }
        run
    }

    pub fn status(&self) -> Value {
        serde_json::from_str(&self.verb(&["status", "--json"]).stdout).expect("status is JSON")
    }

    pub fn token(&self, node: u8, who: &str, admin: bool) -> String {
        let vm = self.vm(node);
        let mut arguments = vec!["tp1", "token", &vm, who];
        if admin {
            arguments.push("--admin");
        }
        let minted = run_holdfast(&arguments);
        assert_eq!(minted.status, Some(0), "{}", minted.transcript());
        minted.stdout.trim().to_owned()
    }

    pub fn tail(&self) -> String {
        tail(&self.seen)
    }

    pub fn down(mut self) {
        self.verb(&["down"]);
        let ended = self.up.child.0.wait().expect("pair up ends");
        assert!(ended.success(), "pair up after down: {ended}");
    }
}

/// Lines that say something went wrong.
pub const BAD_LINES: [&str; 4] = ["kernel panic", "STORE LOST", "FAILOVER FAILED", "NOT PROMOTING"];

pub fn wait_for(lines: &Receiver<String>, seen: &mut Vec<String>, bad: &[&str], within: Duration, what: &str, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                for bad in bad {
                    assert!(!line.contains(bad), "{line}\n{}", tail(seen));
                }
                seen.push(line.clone());
                if wanted(&line) {
                    return line;
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("no {what} within {} s:\n{}", within.as_secs(), tail(seen))
            }
        }
    }
}

pub fn tail(lines: &[String]) -> String {
    lines[lines.len().saturating_sub(60)..].join("\n")
}
