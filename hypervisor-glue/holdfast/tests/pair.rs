//! A pair of TP1 appliances under `holdfast pair up`, driven as an operator would: the
//! primary serves through the pair's endpoint, the standby gets a whole copy over the link,
//! TP1 load runs through the endpoint, the primary's QEMU is SIGKILLed under that load, the
//! supervisor fences it and promotes the standby, the generator reconnects through the same
//! endpoint and retries by id, and `holdfast tp1 check` on the new primary finds every
//! acknowledged transaction once and the sums equal. Then `pair history`, `status` and
//! `down`. Beside it, a second pair watched by `holdfast exporter`.

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

/// `GET /metrics` from the exporter on 127.0.0.1:port over HTTP/1.0: the body.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the exporter");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("a read timeout");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").expect("ask");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("the answer");
    assert!(response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"), "{response}");
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned()
}

/// The value of the line `series ` (a name and its labels, as the exporter writes them).
fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `holdfast exporter` beside a real pair finds its supervisor and serves the pair's series:
/// up, each node's role (a state set), promotions, term, heartbeats missed; the pair's VMs
/// carry their pair role, never `standalone`; after a `pair failover` the promotion is
/// counted and the roles have changed, on the pair's series and on the new primary's own;
/// and after `pair down` the series are gone. (Another pair may be up beside this one, from
/// the test above: only this pair's series are looked at.)
#[test]
fn the_exporter_serves_a_running_pairs_roles_promotions_and_heartbeats() {
    let started = Instant::now();
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let name = format!("pairmon-{}", std::process::id());
    let state_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state");
    let pair_dir = state_dir.join("pairs").join(&name);
    let _ = std::fs::remove_dir_all(&pair_dir);
    let up = spawn_reading_lines(
        holdfast().args(["pair", "up", &name, "--accel", "tcg", "--store-mib", "2048"]).arg("--image-dir").arg(&image_dir),
    );
    let mut seen = Vec::new();
    let prefix = format!("pair {name}: ");
    wait_for(&up.lines, &mut seen, Duration::from_secs(300), "ready primary", |line| {
        line.starts_with(&format!("{prefix}node 1 ({name}-1) ready, primary"))
    });

    let mut exporter = KillOnDrop(
        holdfast()
            .args(["exporter", "--listen", "127.0.0.1:0", "--poll-interval-ms", "500", "--answer-time-limit-ms", "2000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start holdfast exporter"),
    );
    let mut stderr = std::io::BufReader::new(exporter.0.stderr.take().expect("piped"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).expect("the exporter's first line");
    let port: u16 = line
        .strip_prefix("holdfast: exporter on http://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no address in the exporter's line {line:?}"));
    // Keep reading its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in std::io::BufRead::lines(stderr) {});

    let pair = format!("pair=\"{name}\"");
    let role = |node: u8, role: &str| format!("holdfast_pair_role{{{pair},node=\"{node}\",vm=\"{name}-{node}\",role=\"{role}\"}}");
    let primary_up = format!("holdfast_exporter_vm_up{{vm=\"{name}-1\",role=\"primary\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = scrape(port);
        let ready = value_of(&text, &format!("holdfast_pair_up{{{pair}}}")) == Some(1.0)
            && value_of(&text, &role(1, "primary")) == Some(1.0)
            && value_of(&text, &role(2, "standby")) == Some(1.0)
            && value_of(&text, &primary_up) == Some(1.0);
        if ready {
            break text;
        }
        assert!(Instant::now() < deadline, "the exporter did not serve pair {name} within 60 s:\n{text}\n{}", tail(&seen));
        std::thread::sleep(Duration::from_millis(250));
    };
    for (node, current) in [(1, "primary"), (2, "standby")] {
        for other in ["primary", "standby", "fenced", "deposed", "exited"].into_iter().filter(|other| *other != current) {
            assert_eq!(value_of(&text, &role(node, other)), Some(0.0), "node {node} {other}:\n{text}");
        }
        let missed = value_of(&text, &format!("holdfast_pair_heartbeats_missed_total{{{pair},node=\"{node}\",vm=\"{name}-{node}\"}}"));
        println!("pair exporter: node {node} heartbeats missed so far: {missed:?}");
        assert!(missed.is_some(), "no heartbeats_missed for node {node}:\n{text}");
    }
    assert_eq!(value_of(&text, &format!("holdfast_pair_promotions_total{{{pair}}}")), Some(0.0), "{text}");
    assert_eq!(value_of(&text, &format!("holdfast_pair_term{{{pair}}}")), Some(0.0), "{text}");
    // The primary's own series carry its pair role; neither VM shows as standalone.
    assert!(value_of(&text, &format!("holdfast_checkpoint_generation{{vm=\"{name}-1\",role=\"primary\"}}")).is_some(), "{text}");
    for node in [1, 2] {
        let standalone = format!("vm=\"{name}-{node}\",role=\"standalone\"");
        assert!(!text.contains(&standalone), "{standalone} in:\n{text}");
    }
    println!("pair exporter: pair {name} served {:.1} s after the start", started.elapsed().as_secs_f64());

    // A forced failover, once the standby has a whole copy (the supervisor refuses one before).
    let consistent = format!("{prefix}node 2 ({name}-2) standby: consistent");
    if !seen.iter().any(|line| line.starts_with(&consistent)) {
        wait_for(&up.lines, &mut seen, Duration::from_secs(300), "consistent standby", |line| line.starts_with(&consistent));
    }
    let failover = run_holdfast(&["pair", "failover", &name]);
    assert_eq!(failover.status, Some(0), "{}\n{}", failover.transcript(), tail(&seen));
    let new_primary_up = format!("holdfast_exporter_vm_up{{vm=\"{name}-2\",role=\"primary\"}}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = scrape(port);
        let promoted = value_of(&text, &format!("holdfast_pair_promotions_total{{{pair}}}")) == Some(1.0)
            && value_of(&text, &format!("holdfast_pair_term{{{pair}}}")) == Some(1.0)
            && value_of(&text, &role(1, "fenced")) == Some(1.0)
            && value_of(&text, &role(1, "primary")) == Some(0.0)
            && value_of(&text, &role(2, "primary")) == Some(1.0)
            && value_of(&text, &role(2, "standby")) == Some(0.0)
            && value_of(&text, &new_primary_up) == Some(1.0);
        if promoted {
            break;
        }
        assert!(Instant::now() < deadline, "the exporter did not show the failover within 120 s:\n{text}\n{}", tail(&seen));
        std::thread::sleep(Duration::from_millis(250));
    }
    println!("pair exporter: failover seen {:.1} s after the start", started.elapsed().as_secs_f64());

    let down = run_holdfast(&["pair", "down", &name]);
    assert_eq!(down.status, Some(0), "{}", down.transcript());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(port);
        if !text.contains(&pair) {
            break;
        }
        assert!(Instant::now() < deadline, "pair {name}'s series stayed after `pair down`:\n{text}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut up = up;
    let ended = up.child.0.wait().expect("pair up ends");
    assert!(ended.success(), "pair up after down: {ended}");
    let _ = std::fs::remove_dir_all(&pair_dir);
    println!("pair exporter: test took {:.1} s", started.elapsed().as_secs_f64());
}
