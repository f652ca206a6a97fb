//! Space banks and constructors (services/space-bank, services/constructor,
//! services/bank-manifest.toml). The bank's test program (services/selftest/src/bank_test.rs)
//! checks limits, selling back, a bank tree and the destruction of a bank; the constructor
//! test (constructor_test.rs) the confinement answers of three constructors and yields paid
//! for by a bank, whose processes (constructed.rs) check what they were given; the virtual
//! copy keeper's test (virtual_copy_test.rs) writes through copies of a space. Then the
//! system is killed after a checkpoint and restarted, and the bank's test checks that the
//! banks and what they sold came back as the checkpoint caught them, and that destroying a
//! manifest bank voids what it sold.

mod support;

use std::time::{Duration, Instant};

use support::{build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// Waits for a line containing `wanted`, failing on a line with a word of `BAD`.
fn wait_for(vm: &support::LineReader, seen: &mut Vec<String>, wanted: impl Fn(&str) -> bool) {
    const BAD: [&str; 4] = ["MISMATCH", "kernel panic", "checkpoint failed", "faulted"];
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let Ok(line) = vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            panic!("no awaited line within 240 s:\n{}", seen.join("\n"));
        };
        seen.push(line.clone());
        if let Some(word) = BAD.iter().find(|word| line.contains(*word)) {
            panic!("'{word}' printed:\n{}", seen.join("\n"));
        }
        if wanted(&line) {
            return;
        }
    }
}

fn committed(line: &str) -> bool {
    line.starts_with("holdfast: checkpoint ") && line.contains(" committed")
}

#[test]
fn banks_sell_within_limits_destroy_all_they_sold_and_come_back_after_a_kill() {
    let image_dir = build_image("bank-image", Some(&source_dir().join("services/bank-manifest.toml")));
    let store = scratch_dir("banks").join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "64", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("banks-{}", std::process::id());
    let run = || {
        spawn_reading_lines(
            holdfast()
                .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "600"])
                .arg("--image-dir")
                .arg(&image_dir)
                .args(["--disk", store, "--append", "holdfast.checkpoint-interval-ms=1000"]),
        )
    };

    let vm = run();
    let mut seen = Vec::new();
    // The programs run side by side: their lines come in any order.
    let mut awaited =
        vec!["bank-test: before the restart: passed", "constructor-test: passed", "constructed: passed", "virtual-copy-test: passed"];
    while !awaited.is_empty() {
        wait_for(&vm, &mut seen, |line| awaited.contains(&line));
        let last = seen.last().expect("a line was seen").clone();
        awaited.retain(|line| *line != last);
    }
    // Two processes yielded, each printed.
    let yielded = |seen: &[String]| seen.iter().filter(|line| *line == "constructed: passed").count();
    if yielded(&seen) < 2 {
        wait_for(&vm, &mut seen, |line| line == "constructed: passed");
    }
    assert_eq!(yielded(&seen), 2, "{}", seen.join("\n"));
    // The second commit from here began after the test's last change.
    wait_for(&vm, &mut seen, committed);
    wait_for(&vm, &mut seen, committed);
    support::kill_and_wait(&name, vm);

    let vm = run();
    let mut seen = Vec::new();
    wait_for(&vm, &mut seen, |line| line.starts_with("holdfast: restarted from checkpoint "));
    wait_for(&vm, &mut seen, |line| line == "bank-test: after the restart: passed");
    support::kill_and_wait(&name, vm);
}
