//! A pair of TP1 appliances under `holdfast pair up`, driven as an operator would: the
//! primary serves through the pair's endpoint, the standby gets a whole copy over the link,
//! TP1 load runs through the endpoint, the primary's QEMU is SIGKILLed under that load, the
//! supervisor fences it and promotes the standby, the generator reconnects through the same
//! endpoint and retries by id, and `holdfast tp1 check` on the new primary finds every
//! acknowledged transaction once and the sums equal. Then `pair history`, `status` and
//! `down`.

mod support;

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use support::*;

/// Waits for a line of the supervisor's output that `wanted` accepts, failing on a line
/// that says something went wrong.
fn wait_for(lines: &Receiver<String>, seen: &mut Vec<String>, within: Duration, what: &str, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                for bad in ["kernel panic", "STORE LOST", "FAILOVER FAILED", "NOT PROMOTING"] {
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

fn tail(lines: &[String]) -> String {
    lines[lines.len().saturating_sub(60)..].join("\n")
}

#[test]
fn a_killed_primary_is_fenced_the_standby_takes_over_and_no_acknowledged_transaction_is_lost() {
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let name = format!("pair-{}", std::process::id());
    let state_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state");
    let pair_dir = state_dir.join("pairs").join(&name);
    let _ = std::fs::remove_dir_all(&pair_dir);
    let ledger = scratch_dir("pair-ledger");

    let up = spawn_reading_lines(
        holdfast()
            .args(["pair", "up", &name, "--accel", "tcg", "--mode", "sync-durable", "--store-mib", "2048"])
            .arg("--image-dir")
            .arg(&image_dir),
    );
    let mut seen = Vec::new();
    let prefix = format!("pair {name}: ");
    let endpoint_line = wait_for(&up.lines, &mut seen, Duration::from_secs(120), "endpoint", |line| {
        line.starts_with(&format!("{prefix}endpoint "))
    });
    let endpoint = endpoint_line.rsplit(' ').next().expect("an address").to_owned();
    wait_for(&up.lines, &mut seen, Duration::from_secs(300), "ready primary", |line| {
        line.starts_with(&format!("{prefix}node 1 ({name}-1) ready, primary"))
    });
    wait_for(&up.lines, &mut seen, Duration::from_secs(300), "consistent standby", |line| {
        line.starts_with(&format!("{prefix}node 2 ({name}-2) standby: consistent"))
    });

    let token = |who: &str, admin: bool| {
        let vm = format!("{name}-1");
        let mut arguments = vec!["tp1", "token", &vm, who];
        if admin {
            arguments.push("--admin");
        }
        let minted = run_holdfast(&arguments);
        assert_eq!(minted.status, Some(0), "{}", minted.transcript());
        minted.stdout.trim().to_owned()
    };
    let admin = token("root", true);
    let client = token("alice", false);
    let tp1 = |arguments: &[&str], token: &str| {
        let mut command = holdfast();
        command.arg("tp1").args(arguments).args(["--address", &endpoint, "--token", token]).arg("--state-dir").arg(&ledger);
        run_command(&mut command)
    };
    let loaded = tp1(&["load", "--scale", "1"], &admin);
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());

    let status = run_holdfast(&["pair", "status", &name]);
    assert_eq!(status.status, Some(0), "{}", status.transcript());
    println!("{}", status.stdout);

    // Load through the endpoint; the primary is killed a second into it.
    let mut generator = KillOnDrop(
        holdfast()
            .args(["tp1", "run", "--clients", "4", "--duration", "6", "--drain", "120"])
            .args(["--address", &endpoint, "--token", &client, "--seed", "7"])
            .arg("--state-dir")
            .arg(&ledger)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the generator"),
    );
    let progress = std::io::BufReader::new(generator.0.stderr.take().expect("piped"));
    let (sender, progress_lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in progress.lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let first = progress_lines.recv_timeout(Duration::from_secs(60));
    assert!(first.as_deref().is_ok_and(|line| line.starts_with("tp1 ")), "no load: {first:?}");
    let killed_at = Instant::now();
    let kill = run_holdfast(&["vm", "kill", &format!("{name}-1")]);
    assert_eq!(kill.status, Some(0), "{}", kill.transcript());
    let failover = wait_for(&up.lines, &mut seen, Duration::from_secs(60), "failover", |line| line.starts_with(&format!("{prefix}FAILOVER: ")));
    println!("failover {:.0} ms after the kill: {failover}", killed_at.elapsed().as_secs_f64() * 1000.0);
    let ended = generator.0.wait().expect("the generator ends");
    reader.join().expect("the progress reader");
    let said: Vec<String> = progress_lines.try_iter().collect();
    let mut report = String::new();
    use std::io::Read;
    generator.0.stdout.take().expect("piped").read_to_string(&mut report).expect("the report");
    assert!(ended.success(), "the generator failed: {ended}\n{}\n{}", said.join("\n"), tail(&seen));
    println!("{report}");

    // The new primary has every acknowledged transaction, once.
    let check = tp1(&["check"], &client);
    assert_eq!(check.status, Some(0), "acknowledged transactions lost after the failover\n{}\n{}", check.transcript(), tail(&seen));
    println!("{}", check.stdout);

    let history = run_holdfast(&["pair", "history", &name, "--json"]);
    assert_eq!(history.status, Some(0), "{}", history.transcript());
    let promotions: serde_json::Value = serde_json::from_str(&history.stdout).expect("JSON");
    assert_eq!(promotions.as_array().map(Vec::len), Some(1), "{}", history.stdout);
    assert_eq!(promotions[0]["new_primary"], 2);
    assert_eq!(promotions[0]["term"], 1);
    let status = run_holdfast(&["pair", "status", &name, "--json"]);
    assert_eq!(status.status, Some(0), "{}", status.transcript());
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(status["primary"], 2, "{status}");
    assert_eq!(status["nodes"][0]["role"], "fenced", "{status}");

    let down = run_holdfast(&["pair", "down", &name]);
    assert_eq!(down.status, Some(0), "{}", down.transcript());
    let mut up = up;
    let ended = up.child.0.wait().expect("pair up ends");
    assert!(ended.success(), "pair up after down: {ended}");
    let _ = std::fs::remove_dir_all(&pair_dir);
}
