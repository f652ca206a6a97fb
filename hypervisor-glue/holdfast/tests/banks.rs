//! Space banks and constructors (services/space-bank, services/constructor,
//! services/bank-manifest.toml). The bank's test program (services/selftest/src/bank_test.rs)
//! checks limits, selling back, a bank tree and the destruction of a bank; the constructor
//! test (constructor_test.rs) the confinement answers of three constructors and yields paid
//! for by a bank, whose processes (constructed.rs) check what they were given; the virtual
//! copy keeper's test (virtual_copy_test.rs) writes through copies of a space. Then the
//! system is killed after a checkpoint and restarted, and the bank's test checks that the
//! banks and what they sold came back as the checkpoint caught them, and that destroying a
//! manifest bank voids what it sold. The reference monitor's test (keysafe_test.rs) grants,
//! is refused and revokes across three compartments before the restart and revokes one
//! after it; the audit log is read from the host (`holdfast tenant audit`) before the kill
//! and after the restart; then the host revokes the last tenant (`holdfast tenant revoke`)
//! and the system is killed before any checkpoint: after the restart the revocation's record
//! is there (the journal) and the monitor does the revocation again. Then the host makes a
//! tenant and changes its quota (`holdfast tenant create|quota`), and both are there after a
//! kill straight after. A second test fills a store through a bank (store_full_test.rs).

mod support;

use std::time::{Duration, Instant};

use support::{build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// `holdfast tenant audit VM TENANT`'s records, each without its `<sequence> boot <b> `,
/// and the boot count of each; checks that the sequences rise.
fn audit(vm: &str, tenant: &str) -> (Vec<String>, Vec<u64>) {
    let run = run_holdfast(&["tenant", "audit", vm, tenant]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let mut last = None;
    let mut events = Vec::new();
    let mut boots = Vec::new();
    for line in run.stdout.lines() {
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        let [sequence, "boot", boot, event] = fields[..] else { panic!("not an audit record: '{line}'\n{}", run.transcript()) };
        let sequence: u64 = sequence.parse().expect("a sequence number");
        assert!(last < Some(sequence), "the records are not in order:\n{}", run.stdout);
        last = Some(sequence);
        boots.push(boot.parse().expect("a boot count"));
        events.push(event.to_owned());
    }
    (events, boots)
}

/// A's records: made, its policy, a grant and the refusals (a node and a start capability
/// A may not hand B, a page B may not hand A), two more grants, a policy to D (whose full
/// bank refuses the grant: not logged, as nothing crossed), its revocation.
const A_AUDIT: [&str; 11] = [
    "created A generation 1",
    "policy A -> B kinds page",
    "policy A -> C kinds page",
    "granted A -> B page",
    "refused A -> B node code 701",
    "refused A -> B start code 701",
    "refused B -> A page code 701",
    "granted A -> C page",
    "granted A -> B page",
    "policy A -> D kinds page",
    "revoked A generation 1",
];

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
    let mut awaited = vec![
        "bank-test: before the restart: passed",
        "constructor-test: passed",
        "constructed: passed",
        "virtual-copy-test: passed",
        "keysafe-test: before the restart: passed",
    ];
    while !awaited.is_empty() {
        wait_for(&vm, &mut seen, |line| awaited.contains(&line));
        let last = seen.last().expect("a line was seen").clone();
        awaited.retain(|line| *line != last);
    }
    // Three processes yielded (two paid by bank C, one by a bank below it), each printed.
    let yielded = |seen: &[String]| seen.iter().filter(|line| *line == "constructed: passed").count();
    while yielded(&seen) < 3 {
        wait_for(&vm, &mut seen, |line| line == "constructed: passed");
    }
    assert_eq!(yielded(&seen), 3, "{}", seen.join("\n"));
    // The monitor's audit log, from the host.
    let (a_before, a_boots) = audit(&name, "A");
    assert_eq!(a_before, A_AUDIT, "A's audit records");
    let unknown = run_holdfast(&["tenant", "audit", &name, "nobody"]);
    assert_eq!(unknown.status, Some(2), "{}", unknown.transcript());
    assert!(unknown.stderr.contains("no tenant named 'nobody'"), "{}", unknown.transcript());
    let bad = run_holdfast(&["tenant", "audit", &name, "has space"]);
    assert_eq!(bad.status, Some(2), "{}", bad.transcript());
    // The second commit from here began after the test's last change.
    wait_for(&vm, &mut seen, committed);
    wait_for(&vm, &mut seen, committed);
    support::kill_and_wait(&name, vm);

    let vm = run();
    let mut seen = Vec::new();
    wait_for(&vm, &mut seen, |line| line.starts_with("holdfast: restarted from checkpoint "));
    let mut awaited = vec!["bank-test: after the restart: passed", "keysafe-test: after the restart: passed"];
    while !awaited.is_empty() {
        wait_for(&vm, &mut seen, |line| awaited.contains(&line));
        let last = seen.last().expect("a line was seen").clone();
        awaited.retain(|line| *line != last);
    }
    // The log came back whole; B's grant and revocation after the restart are in a later
    // boot than its records before it.
    assert_eq!(audit(&name, "A"), (a_before, a_boots.clone()), "A's audit records changed across the restart");
    let (b_events, b_boots) = audit(&name, "B");
    assert_eq!(b_events.first().map(String::as_str), Some("created B generation 1"), "{b_events:?}");
    assert_eq!(b_events[b_events.len() - 2..], ["granted B -> C page", "revoked B generation 1"], "{b_events:?}");
    assert!(b_boots[b_boots.len() - 1] > a_boots[0], "B's revocation is not in a later boot: {b_boots:?}");

    // C is the one tenant left: its bank holds its own forwarder (the space bank's), its
    // capability's node, its inbox and the outer nodes of the three forwarders granted to it.
    let list = run_holdfast(&["tenant", "list", &name]);
    assert_eq!(list.status, Some(0), "{}", list.transcript());
    assert_eq!(list.stdout.trim_end(), "C number 2 generation 1 pages 0/0 nodes 6/8 cpu none refusals 0 logged 0", "{}", list.transcript());
    // A revocation from the host with no checkpoint after it, then a crash: its record was
    // committed through the journal, and the monitor does it again at its first request
    // after the restart (the checkpoint brought C back live).
    wait_for(&vm, &mut seen, committed);
    wait_for(&vm, &mut seen, committed);
    let interval = run_holdfast(&["checkpoint", "interval", &name, "86400000"]);
    assert_eq!(interval.status, Some(0), "{}", interval.transcript());
    let revoke = run_holdfast(&["tenant", "revoke", &name, "C"]);
    assert_eq!(revoke.status, Some(0), "{}", revoke.transcript());
    assert!(revoke.stdout.contains("tenant C revoked (6 objects destroyed)"), "{}", revoke.transcript());
    let again = run_holdfast(&["tenant", "revoke", &name, "C"]);
    assert_eq!(again.status, Some(2), "{}", again.transcript());
    assert!(again.stderr.contains("no tenant named 'C'"), "{}", again.transcript());
    let list = run_holdfast(&["tenant", "list", &name]);
    assert_eq!((list.status, list.stdout.as_str()), (Some(0), ""), "{}", list.transcript());
    let (c_events, _) = audit(&name, "C");
    assert_eq!(c_events.last().map(String::as_str), Some("revoked C generation 1"), "{c_events:?}");
    support::kill_and_wait(&name, vm);

    let vm = run();
    let mut seen = Vec::new();
    wait_for(&vm, &mut seen, |line| line.starts_with("holdfast: restarted from checkpoint "));
    assert_eq!(audit(&name, "C").0, c_events, "C's records did not survive the crash");
    wait_for(&vm, &mut seen, |line| line == "keysafe: revocation of C done again after a restart");
    let list = run_holdfast(&["tenant", "list", &name]);
    assert_eq!((list.status, list.stdout.as_str()), (Some(0), ""), "{}", list.transcript());

    // A tenant made from the host, its quota changed: each reported only once a checkpoint
    // holds it, so both survive the crash that follows at once.
    let create = run_holdfast(&["tenant", "create", &name, "acme", "--pages", "4", "--nodes", "8", "--cpu-percent", "20"]);
    assert_eq!(create.status, Some(0), "{}", create.transcript());
    assert!(create.stdout.contains("tenant acme created (compartment "), "{}", create.transcript());
    assert!(create.stdout.contains("at most 4 pages and 8 nodes, 20% of the CPU), durable from checkpoint "), "{}", create.transcript());
    // Its bank holds its own forwarder, its capability's node, its inbox and its meter.
    let acme_line = |list: &str| list.lines().find(|line| line.starts_with("acme number ")).map(str::to_owned);
    let list = run_holdfast(&["tenant", "list", &name]);
    let listed = acme_line(&list.stdout).unwrap_or_else(|| panic!("acme is not listed: {}", list.transcript()));
    assert!(listed.ends_with(" pages 0/4 nodes 4/8 cpu 20% refusals 0 logged 0"), "{listed}");
    let taken = run_holdfast(&["tenant", "create", &name, "acme", "--pages", "1", "--nodes", "4", "--cpu-percent", "10"]);
    assert_eq!(taken.status, Some(2), "{}", taken.transcript());
    assert!(taken.stderr.contains("a tenant named 'acme' exists already"), "{}", taken.transcript());
    let quota = run_holdfast(&["tenant", "quota", &name, "acme", "--pages", "2", "--nodes", "5", "--cpu-percent", "35"]);
    assert_eq!(quota.status, Some(0), "{}", quota.transcript());
    assert!(quota.stdout.contains("tenant acme may hold 2 pages and 5 nodes and use 35% of the CPU, durable from checkpoint "), "{}", quota.transcript());
    let nobody = run_holdfast(&["tenant", "quota", &name, "nobody", "--pages", "2", "--nodes", "5", "--cpu-percent", "35"]);
    assert_eq!(nobody.status, Some(2), "{}", nobody.transcript());
    assert!(nobody.stderr.contains("no tenant named 'nobody'"), "{}", nobody.transcript());
    let too_few = run_holdfast(&["tenant", "quota", &name, "acme", "--pages", "2", "--nodes", "3", "--cpu-percent", "35"]);
    assert_eq!(too_few.status, Some(2), "{}", too_few.transcript());
    let no_cpu = run_holdfast(&["tenant", "quota", &name, "acme", "--pages", "2", "--nodes", "5", "--cpu-percent", "0"]);
    assert_eq!(no_cpu.status, Some(2), "{}", no_cpu.transcript());
    let (acme_events, _) = audit(&name, "acme");
    assert_eq!(acme_events.len(), 1, "{acme_events:?}");
    assert!(acme_events[0].starts_with("created acme generation "), "{acme_events:?}");
    support::kill_and_wait(&name, vm);

    let vm = run();
    let mut seen = Vec::new();
    wait_for(&vm, &mut seen, |line| line.starts_with("holdfast: restarted from checkpoint "));
    let list = run_holdfast(&["tenant", "list", &name]);
    let listed = acme_line(&list.stdout).unwrap_or_else(|| panic!("acme did not survive the crash: {}", list.transcript()));
    assert!(listed.ends_with(" pages 0/2 nodes 4/5 cpu 35% refusals 0 logged 0"), "the quota did not survive the crash: {listed}");
    support::kill_and_wait(&name, vm);
}

/// A full store (services/store-full-manifest.toml on 48 MiB: the least its first checkpoint
/// fits, with the space bank's 3 MiB of accounts): the bank's buyer gets
/// `STORE_FULL` once the range has no page id left, then `exhausted` for the process the
/// checkpoint directory could not name, and checkpoints go on committing afterwards (none
/// fails: `wait_for` fails on "checkpoint failed").
#[test]
fn a_full_store_refuses_pages_and_processes_and_checkpoints_go_on() {
    let image_dir = build_image("store-full-image", Some(&source_dir().join("services/store-full-manifest.toml")));
    let store = scratch_dir("store-full").join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "48", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("store-full-{}", std::process::id());
    let vm = spawn_reading_lines(
        holdfast()
            .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "600"])
            .arg("--image-dir")
            .arg(&image_dir)
            .args(["--disk", store, "--append", "holdfast.checkpoint-interval-ms=1000"]),
    );
    let mut seen = Vec::new();
    wait_for(&vm, &mut seen, |line| line.starts_with("store-full-test: ") && line.ends_with(" processes: passed"));
    // The second commit from here began after the test's last purchase.
    wait_for(&vm, &mut seen, committed);
    wait_for(&vm, &mut seen, committed);
    support::kill_and_wait(&name, vm);
}
