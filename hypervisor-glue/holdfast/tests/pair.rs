//! Pairs of TP1 appliances under `holdfast pair up`, driven as an operator would.
//!
//! - Drills: ten failovers under TP1 load through the pair's endpoint (SIGKILL, a frozen
//!   VM, an isolated one), each checked on the new primary with no acknowledged
//!   transaction lost, the old primary rejoining as the standby each time; then a planned
//!   switchover under load, `history`, `status` and `down`.
//! - Faults beyond the primary's death: a delayed link, a standby crash (commits wait, then
//!   go on once it rejoins; or the primary degrades, and says so), a primary promoted past
//!   without being killed (it acknowledges nothing, and says FENCED once it hears the new
//!   term), and both VMs crashing under load.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::pair::Pair;
use support::*;

/// Held by each test for its whole run, so that one pair runs at a time. Two at once (four
/// guests and two relays on CI's two cores, beside the test threads) starved a standby's
/// first full copy of the primary's store past its 300 s limit.
static ONE_PAIR_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lock of [`ONE_PAIR_AT_A_TIME`], also after another test failed holding it.
fn one_pair_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_PAIR_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `holdfast tp1 ARGUMENTS --address ADDRESS --token TOKEN --state-dir LEDGER`.
fn tp1(arguments: &[&str], address: &str, token: &str, ledger: &Path) -> Command {
    let mut command = holdfast();
    command.arg("tp1").args(arguments).args(["--address", address, "--token", token]).arg("--state-dir").arg(ledger);
    command
}

fn tp1_json(command: &mut Command) -> Value {
    let run = run_command(command);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    serde_json::from_str(&run.stdout).expect("the report is JSON")
}

/// A `tp1 run` in the background: started, and its first progress line seen.
struct Generator {
    child: KillOnDrop,
}

impl Generator {
    fn start(command: &mut Command) -> Self {
        let mut child = KillOnDrop(command.arg("--json").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the generator"));
        let mut progress = std::io::BufReader::new(child.0.stderr.take().expect("piped"));
        let mut first = String::new();
        use std::io::BufRead;
        progress.read_line(&mut first).expect("the generator's progress");
        assert!(first.starts_with("tp1 "), "no load: {first:?}");
        // Keep reading, so that the generator never blocks on a full pipe.
        std::thread::spawn(move || for _ in progress.lines() {});
        Self { child }
    }

    fn report(mut self) -> Value {
        use std::io::Read;
        let mut out = String::new();
        self.child.0.stdout.take().expect("piped").read_to_string(&mut out).expect("the report");
        let ended = self.child.0.wait().expect("the generator ends");
        assert!(ended.success(), "the generator failed: {ended}\n{out}");
        serde_json::from_str(&out).expect("the report is JSON")
    }
}

#[test]
fn ten_failover_drills_and_a_switchover_under_load_lose_no_acknowledged_transaction() {
    let _one_pair = one_pair_at_a_time();
    let name = format!("drill-{}", std::process::id());
    let mut pair = Pair::up(&name, &["--exporter", "127.0.0.1:0"], true);
    let endpoint = pair.endpoint();
    // The exporter started with the pair serves it (the exporter's own test is below).
    let exporter_line = pair.said(Duration::from_secs(60), "exporter on http://127.0.0.1:");
    let exporter_port: u16 = exporter_line
        .rsplit("127.0.0.1:")
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {exporter_line:?}"));
    pair.ready(1, 2);
    let primary_role = format!("holdfast_pair_role{{pair=\"{name}\",node=\"1\",vm=\"{name}-1\",role=\"primary\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while value_of(&scrape(exporter_port), &primary_role) != Some(1.0) {
        assert!(Instant::now() < deadline, "pair up --exporter does not serve {primary_role}:\n{}", scrape(exporter_port));
        std::thread::sleep(Duration::from_millis(500));
    }

    // Six SIGKILLs, two frozen VMs and two isolated ones, the primary alternating.
    let drill = run_holdfast(&["pair", "drill", &name, "--count", "10", "--kinds", "kill,kill,freeze,kill,cut", "--seed", "11", "--json"]);
    println!("{}", drill.stderr);
    assert_eq!(drill.status, Some(0), "{}\n{}", drill.transcript(), pair.tail());
    let reports: Value = serde_json::from_str(&drill.stdout).expect("the drill's JSON");
    let reports = reports.as_array().expect("one report per drill");
    assert_eq!(reports.len(), 10, "{}", drill.stdout);
    for report in reports {
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(report["check_passed"], true, "{report}");
        assert_ne!(report["old_primary"], report["new_primary"], "{report}");
        if report["kind"] == "kill" {
            // A SIGKILLed QEMU is seen at once, not after the heartbeat timeout.
            assert!(report["detection_ms"].as_u64().unwrap() < 1000, "{report}");
        } else {
            // Heartbeats stop at the fault; the last came up to an interval or two before.
            assert!(report["detection_ms"].as_u64().unwrap() >= 1800, "detected before the heartbeat timeout: {report}");
        }
    }
    let history: Value = serde_json::from_str(&pair.verb(&["history", "--json"]).stdout).expect("JSON");
    assert_eq!(history.as_array().map(Vec::len), Some(10), "{history}");
    // Ten promotions from node 1: node 1 is the primary again.
    let status = pair.status();
    assert_eq!(status["primary"], 1, "{status}");
    assert_eq!(status["term"], 10, "{status}");

    // A planned switchover under load: nothing acknowledged is lost, and the old primary
    // is the standby after it.
    let ledger = pair.dir.join("drill-ledger");
    let client = pair.token(1, "switchover", false);
    let generator = Generator::start(&mut tp1(&["run", "--clients", "4", "--duration", "6", "--drain", "120"], &endpoint, &client, &ledger));
    let switched = pair.verb(&["switchover"]);
    assert!(switched.stdout.contains("node 2 is the primary"), "{}", switched.stdout);
    let report = generator.report();
    println!("switchover under load: {report}");
    assert!(report["acknowledged"].as_u64().unwrap() > 0, "{report}");
    let check = run_command(&mut tp1(&["check"], &endpoint, &client, &ledger));
    assert_eq!(check.status, Some(0), "acknowledged transactions lost in a switchover\n{}\n{}", check.transcript(), pair.tail());
    pair.said(Duration::from_secs(300), &format!("node 1 ({}) standby: consistent", pair.vm(1)));
    let history: Value = serde_json::from_str(&pair.verb(&["history", "--json"]).stdout).expect("JSON");
    assert_eq!(history[10]["reason"], "switchover requested", "{history}");
    let status = pair.status();
    assert_eq!((status["primary"].clone(), status["nodes"][0]["role"].clone()), (2.into(), "standby".into()), "{status}");
    println!("{}", pair.verb(&["status"]).stdout);
    pair.down();
}

#[test]
fn a_delayed_link_a_standby_crash_a_deposed_primary_and_a_double_crash_lose_nothing() {
    let _one_pair = one_pair_at_a_time();
    let name = format!("faults-{}", std::process::id());
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut pair = Pair::up(&name, &["--on-standby-loss", "wait", "--tp1-port", &port], true);
    let endpoint = pair.endpoint();
    assert_eq!(endpoint, format!("127.0.0.1:{port}"));
    pair.ready(1, 2);
    let ledger = scratch_dir(&format!("pair-faults-ledger-{}", std::process::id()));
    let (admin, client) = (pair.token(1, "root", true), pair.token(1, "alice", false));
    let loaded = run_command(&mut tp1(&["load", "--scale", "1"], &endpoint, &admin, &ledger));
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());
    let check = |pair: &Pair, when: &str| {
        let check = run_command(&mut tp1(&["check"], &endpoint, &client, &ledger));
        assert_eq!(check.status, Some(0), "{when}: acknowledged transactions lost\n{}\n{}", check.transcript(), pair.tail());
    };

    // A delayed link: every synchronous commit waits for the stream and its
    // acknowledgement, each held 150 ms on the host.
    pair.verb(&["link", "hold-ms", "150"]);
    let held = tp1_json(&mut tp1(&["run", "--clients", "2", "--duration", "3", "--quiet", "--json"], &endpoint, &client, &ledger));
    pair.verb(&["link", "restore"]);
    assert!(held["acknowledged"].as_u64().unwrap() > 0, "{held}");
    assert!(held["latency"]["p50_us"].as_u64().unwrap() >= 300_000, "commits did not wait for the held link: {held}");

    // The standby crashes; under --on-standby-loss wait the primary acknowledges nothing
    // until it is back.
    run_holdfast(&["vm", "kill", &pair.vm(2)]);
    pair.said(Duration::from_secs(60), "the standby failed (its QEMU exited): synchronous commits wait");
    let waiting = tp1_json(&mut tp1(&["run", "--clients", "2", "--duration", "2", "--drain", "1", "--quiet", "--json"], &endpoint, &client, &ledger));
    assert_eq!(waiting["acknowledged"], 0, "acknowledged without the standby under --on-standby-loss wait: {waiting}");
    pair.verb(&["rejoin"]);
    pair.said(Duration::from_secs(300), &format!("node 2 ({}) standby: consistent", pair.vm(2)));
    let resumed = tp1_json(&mut tp1(&["run", "--clients", "2", "--duration", "2", "--quiet", "--json"], &endpoint, &client, &ledger));
    assert!(resumed["acknowledged"].as_u64().unwrap() > 0, "{resumed}");
    check(&pair, "after the standby's crash and rejoin");

    // The link is cut and the standby promoted without the primary being killed: the old
    // primary, still running and still reached directly by clients, acknowledges nothing,
    // and says FENCED once the new primary's term reaches it.
    let old_primary = pair.status()["nodes"][0]["tp1"].as_str().expect("node 1's TP1 address").to_owned();
    pair.verb(&["link", "cut"]);
    let direct = Generator::start(&mut tp1(&["run", "--clients", "2", "--duration", "5", "--drain", "3"], &old_primary, &client, &ledger));
    pair.verb(&["failover", "--no-fence"]);
    pair.said(Duration::from_secs(60), "FAILOVER: failover requested, without fencing; node 1 NOT fenced");
    pair.wait_for(Duration::from_secs(120), "the new primary serving", |line| line.contains("node 2 (") && line.contains("ready, primary"));
    pair.verb(&["link", "restore"]);
    let fenced_line = format!("pair {name}: node 1 ({}) says it is FENCED", pair.vm(1));
    pair.wait_for(Duration::from_secs(60), "FENCED", |line| line.starts_with(&fenced_line));
    let direct = direct.report();
    assert_eq!(direct["acknowledged"], 0, "the deposed primary acknowledged commits: {direct}");
    assert_eq!(pair.status()["nodes"][0]["role"], "deposed");
    check(&pair, "after the deposed primary's clients");

    // Both VMs crash under load: `pair up` again starts from their disks, the generator
    // reconnects to the same endpoint and retries by id, nothing acknowledged is lost.
    pair.verb(&["rejoin"]);
    pair.said(Duration::from_secs(300), &format!("node 1 ({}) standby: consistent", pair.vm(1)));
    let generator = Generator::start(&mut tp1(&["run", "--clients", "4", "--duration", "4", "--drain", "300"], &endpoint, &client, &ledger));
    // With both gone the supervisor cannot promote, and says so.
    pair.bad.retain(|bad| *bad != "NOT PROMOTING");
    run_holdfast(&["vm", "kill", &pair.vm(1)]);
    run_holdfast(&["vm", "kill", &pair.vm(2)]);
    pair.said(Duration::from_secs(60), "both VMs are gone");
    let ended = pair.up.child.0.wait().expect("the supervisor ends");
    assert!(!ended.success(), "a supervisor whose VMs both died is not a success: {ended}");
    pair.remove_on_drop = false;
    drop(pair);
    let mut pair = Pair::up(&name, &["--on-standby-loss", "degrade", "--tp1-port", &port], false);
    pair.ready(2, 1);
    let report = generator.report();
    assert!(report["reconnects"].as_u64().unwrap() > 0, "{report}");
    check(&pair, "after both VMs crashed");

    // Under --on-standby-loss degrade, a standby crash makes the primary acknowledge
    // without it, and the supervisor and the primary both say so.
    run_holdfast(&["vm", "kill", &pair.vm(1)]);
    pair.said(Duration::from_secs(60), "DEGRADED: the standby failed");
    pair.wait_for(Duration::from_secs(60), "the primary's DEGRADED", |line| line.contains("says it is DEGRADED"));
    let degraded = tp1_json(&mut tp1(&["run", "--clients", "2", "--duration", "2", "--quiet", "--json"], &endpoint, &client, &ledger));
    assert!(degraded["acknowledged"].as_u64().unwrap() > 0, "{degraded}");
    check(&pair, "degraded");
    pair.down();
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
    let _one_pair = one_pair_at_a_time();
    let started = Instant::now();
    let name = format!("pairmon-{}", std::process::id());
    let mut pair_up = Pair::up(&name, &[], true);
    pair_up.said(Duration::from_secs(300), &format!("node 1 ({name}-1) ready, primary"));

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
        assert!(Instant::now() < deadline, "the exporter did not serve pair {name} within 60 s:\n{text}\n{}", pair_up.tail());
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
    let consistent = format!("pair {name}: node 2 ({name}-2) standby: consistent");
    if !pair_up.seen.iter().any(|line| line.starts_with(&consistent)) {
        pair_up.said(Duration::from_secs(300), &format!("node 2 ({name}-2) standby: consistent"));
    }
    pair_up.verb(&["failover"]);
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
        assert!(Instant::now() < deadline, "the exporter did not show the failover within 120 s:\n{text}\n{}", pair_up.tail());
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
    let ended = pair_up.up.child.0.wait().expect("pair up ends");
    assert!(ended.success(), "pair up after down: {ended}");
    println!("pair exporter: test took {:.1} s", started.elapsed().as_secs_f64());
}
