//! A running VM's checkpoints and counters from the host: `holdfast checkpoint
//! status|interval|now` and `holdfast vm counters` go over the VM's control channel (its
//! COM2) to the admin service (services/admin), which acts with its checkpoint capability.

mod support;

use std::io::Write;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use support::{assert_one_line_error, build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// The fields of a `checkpoint status` line: `NAME: generation G interval-ms MS ...`.
fn status_field(stdout: &str, field: &str) -> u64 {
    let words: Vec<&str> = stdout.split_whitespace().collect();
    let at = words.iter().position(|word| *word == field).unwrap_or_else(|| panic!("no {field} in {stdout:?}"));
    words[at + 1].parse().unwrap_or_else(|_| panic!("{field} is not a number in {stdout:?}"))
}

fn holdfast_ok(arguments: &[&str]) -> String {
    let run = run_holdfast(arguments);
    assert_eq!(run.status, Some(0), "holdfast {arguments:?}\n{}", run.transcript());
    run.stdout
}

#[test]
fn checkpoints_are_controlled_and_counted_from_the_host() {
    let manifest = source_dir().join("services/journal-manifest.toml");
    let image_dir = build_image("control-image", Some(&manifest));
    let directory = scratch_dir("control");
    let store = directory.join("store.img");
    let store_path = store.to_str().expect("UTF-8 path");
    assert_eq!(run_holdfast(&["store", "format", "--size-mib", "16", store_path]).status, Some(0));

    let name = format!("control-test-{}", std::process::id());
    let vm = spawn_reading_lines(
        holdfast()
            .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "300", "--disk", store_path])
            .arg("--image-dir")
            .arg(&image_dir),
    );
    let receiver = &vm.lines;
    // The first checkpoint is taken at once; the admin service serves after it. The
    // journal's guarded write is checked from ring 3 meanwhile (services/selftest/src/journal_guard.rs).
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut committed, mut guard_line) = (false, None);
    while !committed || guard_line.is_none() {
        let line = receiver
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the first checkpoint commits, and journal-guard reports, within 120 s");
        committed |= line.starts_with("holdfast: checkpoint 1 committed");
        if line.starts_with("journal-guard: ") {
            guard_line = Some(line);
        }
    }
    assert_eq!(guard_line.as_deref(), Some("journal-guard: ok"));

    let status = holdfast_ok(&["checkpoint", "status", &name]);
    assert!(status.starts_with(&format!("{name}: generation ")), "{status}");
    assert_eq!(status_field(&status, "interval-ms"), 5000, "the default interval: {status}");
    assert_eq!(status_field(&status, "degraded"), 0, "{status}");

    assert_eq!(status_field(&status, "failures-since-commit"), 0, "{status}");

    // A client that gives up before its answers come leaves them on the channel for the
    // next one, an error among them: the next client's tag tells its own reply apart.
    let control_socket = Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state").join(&name).join("control.sock");
    let mut client = std::os::unix::net::UnixStream::connect(&control_socket).expect("the control socket");
    client.write_all(b"no such request\ncounters\n").expect("requests");
    drop(client);
    let status = holdfast_ok(&["checkpoint", "status", &name]);
    assert!(status.starts_with(&format!("{name}: generation ")), "{status}");

    // A day: from here on only the request and the log's filling make checkpoints (the
    // request alone: checkpoint_now_puts_what_was_done_just_before_on_disk).
    assert_eq!(holdfast_ok(&["checkpoint", "interval", &name, "86400000"]), format!("{name}: interval-ms 86400000\n"));
    let before = status_field(&holdfast_ok(&["checkpoint", "status", &name]), "generation");
    assert_eq!(holdfast_ok(&["checkpoint", "now", &name]), format!("{name}: checkpoint requested\n"));
    let wait_for_generation_above = |generation: u64, why: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = holdfast_ok(&["checkpoint", "status", &name]);
            assert_eq!(status_field(&status, "interval-ms"), 86400000, "{status}");
            // Never near full: the checkpoint forced at 65 % frees it.
            assert!(status_field(&status, "log-fill-permille") < 850, "{status}");
            let now = status_field(&status, "generation");
            if now > generation {
                return now;
            }
            assert!(Instant::now() < deadline, "no checkpoint {why}: {status}");
            thread::sleep(Duration::from_millis(200));
        }
    };
    let requested = wait_for_generation_above(before, "after 'checkpoint now'");
    // The journal writers fill the log: a checkpoint at 65 % comes well within the day.
    wait_for_generation_above(requested, "forced by the log filling up");

    let counters = holdfast_ok(&["vm", "counters", &name]);
    let value = |metric: &str| -> f64 {
        let line = counters.lines().find(|line| line.split(' ').next() == Some(metric));
        let line = line.unwrap_or_else(|| panic!("no {metric} in\n{counters}"));
        line.split(' ').nth(1).and_then(|value| value.parse().ok()).unwrap_or_else(|| panic!("bad line {line}"))
    };
    assert!(value("holdfast_checkpoint_generation") > before as f64, "{counters}");
    // Three writers commit at once: commits share disk writes (group commit).
    assert!(value("holdfast_journal_commits_total") > value("holdfast_journal_writes_total"), "{counters}");
    assert!(value("holdfast_journal_writes_total") > 0.0, "{counters}");
    assert!(value("holdfast_journal_commit_seconds_count") > 0.0, "{counters}");
    assert!(value("holdfast_checkpoint_snapshot_pause_last_seconds") > 0.0, "{counters}");
    assert_eq!(value("holdfast_checkpoint_failures_total"), 0.0, "{counters}");
    // Where the kernel's time went: the writers' commits wait for the disk, the checkpoints
    // took steps, and every first touch of a page after a snapshot faulted.
    assert!(value("holdfast_disk_waits_total") > 0.0 && value("holdfast_disk_wait_seconds_total") > 0.0, "{counters}");
    let steps_seconds = value("holdfast_background_steps_at_ticks_seconds_total") + value("holdfast_background_steps_idle_seconds_total");
    assert!(steps_seconds > 0.0 && value("holdfast_background_steps_at_ticks_total") >= 0.0, "{counters}");
    assert!(value("holdfast_page_faults_resolved_total") > 0.0 && value("holdfast_page_fault_seconds_total") > 0.0, "{counters}");
    for metric in [
        "holdfast_checkpoint_objects_written_total",
        "holdfast_checkpoint_stabilization_last_seconds",
        "holdfast_store_log_fill_ratio",
        "holdfast_migration_backlog_objects",
        "holdfast_journal_commit_seconds_sum",
    ] {
        assert!(value(metric) >= 0.0, "{metric}");
    }
    // The three histograms, whole (`checkpoint.counters` pages never cut a family; the
    // text is about 3.7 KB here, 4 KB on a pair's primary, and grows past a page with any
    // more series): each counts every checkpoint or commit, cumulative up to `+Inf`.
    let checkpoints = value("holdfast_checkpoint_generation");
    for (histogram, at_least) in [
        ("holdfast_checkpoint_snapshot_pause_seconds", checkpoints),
        ("holdfast_checkpoint_stabilization_seconds", checkpoints),
        ("holdfast_journal_commit_seconds", 1.0),
    ] {
        let count = value(&format!("{histogram}_count"));
        assert!(count >= at_least, "{histogram}_count {count} below {at_least}:\n{counters}");
        let buckets: Vec<(String, f64)> = counters
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(histogram)?.strip_prefix("_bucket{le=\"")?;
                let (bound, value) = rest.split_once("\"} ")?;
                Some((bound.to_owned(), value.parse().ok()?))
            })
            .collect();
        assert!(buckets.len() >= 10, "{histogram}: {buckets:?}");
        assert!(buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1), "{histogram} not cumulative: {buckets:?}");
        assert_eq!(buckets.last(), Some(&("+Inf".to_owned(), count)), "{histogram}");
        assert!(value(&format!("{histogram}_sum")) > 0.0, "{histogram}");
    }
    assert_eq!(counters.lines().last(), Some("ok"), "{counters}");

    assert_one_line_error(
        &run_holdfast(&["checkpoint", "interval", &name, "5"]),
        2,
        "holdfast: 5 ms is not a checkpoint interval: use 10 to 86400000",
    );
    let missing = run_holdfast(&["checkpoint", "status", "no-such-vm"]);
    assert_eq!(missing.status, Some(2), "{}", missing.transcript());
    assert!(missing.stderr.starts_with("holdfast: no VM named 'no-such-vm' is running"), "{}", missing.transcript());

    assert_eq!(run_holdfast(&["vm", "kill", &name]).status, Some(0));
}

/// `checkpoint now` must take a checkpoint, not merely answer: with the interval a day and
/// no journal to fill the log (services/persist-manifest.toml), only the request can make
/// checkpoint 2, and the counter's progress up to the request is on disk only if it did —
/// a kill right after it and a restart show the counter at least where it was.
#[test]
fn checkpoint_now_puts_what_was_done_just_before_on_disk() {
    let manifest = source_dir().join("services/persist-manifest.toml");
    let image_dir = build_image("persist-image", Some(&manifest));
    let directory = scratch_dir("checkpoint-now");
    let store = directory.join("store.img");
    let store_path = store.to_str().expect("UTF-8 path");
    assert_eq!(run_holdfast(&["store", "format", "--size-mib", "16", "--force", store_path]).status, Some(0));
    let name = format!("checkpoint-now-{}", std::process::id());
    let boot = || {
        spawn_reading_lines(
            holdfast()
                .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "300", "--disk", store_path])
                .args(["--append", "holdfast.checkpoint-interval-ms=86400000"])
                .arg("--image-dir")
                .arg(&image_dir),
        )
    };
    let count = |line: &str| line.strip_prefix("persist-counter: ")?.parse::<u64>().ok();
    let vm = boot();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    let mut next_line = || {
        let line = vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        let line = line.unwrap_or_else(|_| panic!("nothing awaited within 120 s:\n{}", seen.join("\n")));
        seen.push(line.clone());
        line
    };
    // The first checkpoint (at once), then three counts after it: what only a later
    // checkpoint can hold.
    while !next_line().starts_with("holdfast: checkpoint 1 committed") {}
    let mut counts = Vec::new();
    while counts.len() < 3 {
        counts.extend(count(&next_line()));
    }
    let before = *counts.last().expect("three counts");
    let status = holdfast_ok(&["checkpoint", "status", &name]);
    assert_eq!(status_field(&status, "generation"), 1, "{status}");
    assert_eq!(holdfast_ok(&["checkpoint", "now", &name]), format!("{name}: checkpoint requested\n"));
    let deadline_commit = Instant::now() + Duration::from_secs(60);
    loop {
        let status = holdfast_ok(&["checkpoint", "status", &name]);
        if status_field(&status, "generation") >= 2 {
            break;
        }
        assert!(Instant::now() < deadline_commit, "'checkpoint now' took no checkpoint within 60 s: {status}");
        thread::sleep(Duration::from_millis(100));
    }
    support::kill_and_wait(&name, vm);

    let vm = boot();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    let first = loop {
        let line = vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        let line = line.unwrap_or_else(|_| panic!("no count after the restart within 120 s:\n{}", seen.join("\n")));
        seen.push(line.clone());
        if let Some(restarted) = line.strip_prefix("holdfast: restarted from checkpoint ") {
            assert!(restarted.starts_with("2:"), "{line}");
        }
        if let Some(count) = count(&line) {
            break count;
        }
    };
    assert!(first >= before, "restarted at count {first}, behind {before}, printed before 'checkpoint now':\n{}", seen.join("\n"));
    assert_eq!(run_holdfast(&["vm", "kill", &name]).status, Some(0));
}

/// A request line cut short, then a checkpoint that holds the admin service with the part it
/// read, then a crash: after the restart the next client's request must be answered, not
/// glued onto the part of a line whose client is long gone (the admin service tells a
/// restart by its clock's boot count).
#[test]
fn a_request_cut_short_before_a_crash_does_not_spoil_the_next_one() {
    let manifest = source_dir().join("services/persist-manifest.toml");
    let image_dir = build_image("persist-image", Some(&manifest));
    let directory = scratch_dir("request-cut-short");
    let store = directory.join("store.img");
    let store_path = store.to_str().expect("UTF-8 path");
    assert_eq!(run_holdfast(&["store", "format", "--size-mib", "16", "--force", store_path]).status, Some(0));
    let name = format!("request-cut-short-{}", std::process::id());
    let boot = || {
        spawn_reading_lines(
            holdfast()
                .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "300", "--disk", store_path])
                .args(["--append", "holdfast.checkpoint-interval-ms=300"])
                .arg("--image-dir")
                .arg(&image_dir),
        )
    };
    let wait_for = |vm: &support::LineReader, what: &str, prefix: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let line = vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()));
            let line = line.unwrap_or_else(|_| panic!("no {what} within 120 s"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    };
    let vm = boot();
    wait_for(&vm, "first checkpoint", "holdfast: checkpoint 1 committed");
    // The admin service answers: it is reading its control channel.
    holdfast_ok(&["checkpoint", "status", &name]);
    let control_socket = Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state").join(&name).join("control.sock");
    let mut client = std::os::unix::net::UnixStream::connect(&control_socket).expect("the control socket");
    client.write_all(b"checkpoint sta").expect("half a request");
    drop(client);
    // Two checkpoints later the part read is on disk with the admin service's memory.
    let committed = |line: &str| line.strip_prefix("holdfast: checkpoint ")?.split(' ').next()?.parse::<u64>().ok();
    let first = committed(&wait_for(&vm, "a checkpoint", "holdfast: checkpoint ")).unwrap_or(0);
    loop {
        if committed(&wait_for(&vm, "a checkpoint", "holdfast: checkpoint ")).is_some_and(|generation| generation >= first + 2) {
            break;
        }
    }
    support::kill_and_wait(&name, vm);

    let vm = boot();
    wait_for(&vm, "the restart", "holdfast: restarted from checkpoint ");
    let status = run_holdfast(&["checkpoint", "status", &name]);
    assert_eq!(status.status, Some(0), "the first request after the restart: {}", status.transcript());
    assert!(status.stdout.starts_with(&format!("{name}: generation ")), "{}", status.stdout);
    assert_eq!(run_holdfast(&["vm", "kill", &name]).status, Some(0));
}
