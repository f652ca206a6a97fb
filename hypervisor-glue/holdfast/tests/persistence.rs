//! No program can switch persistence off: the checkpoint directory grows with the system
//! (10,000 processes made by one program are checkpointed and all come back after a
//! kill), and a checkpoint that fails is retried at the next interval, counted and shown,
//! and the system persists again.

mod support;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use support::{LineReader, SmallFileSystem, build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// Waits for a line `accept` takes (returning what it makes of it), failing with the lines
/// seen if none comes within `limit` or one contains a word of `bad`.
fn wait_for<T>(lines: &Receiver<String>, seen: &mut Vec<String>, limit: Duration, bad: &[&str], mut accept: impl FnMut(&str) -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            panic!("no line awaited within {limit:?}:\n{}", seen.join("\n"));
        };
        seen.push(line.clone());
        if let Some(word) = bad.iter().find(|word| line.contains(*word)) {
            panic!("'{word}' printed:\n{}", seen.join("\n"));
        }
        if let Some(value) = accept(&line) {
            return value;
        }
    }
}

fn committed(line: &str) -> Option<u64> {
    let (generation, rest) = line.strip_prefix("holdfast: checkpoint ")?.split_once(' ')?;
    rest.starts_with("committed").then(|| generation.parse().ok())?
}

fn run_vm(name: &str, image_dir: &Path, disk: &str, append: &str, memory_mib: &str) -> LineReader {
    spawn_reading_lines(
        holdfast()
            .args(["run", "--name", name, "--accel", "tcg", "--timeout-seconds", "600", "--memory-mib", memory_mib])
            .arg("--image-dir")
            .arg(image_dir)
            .args(["--disk", disk, "--append", append]),
    )
}


/// The many-processes manifest: `process-maker` (services/selftest/src/process_maker.rs)
/// and a tree of `leaves` empty nodes for it to make processes of, three levels of 32; it
/// waits `delay_ns` nanoseconds before it begins.
fn many_processes_manifest(leaves: usize, delay_ns: u64) -> String {
    let mut manifest = format!(
        "[[process]]\nname = \"process-maker\"\nprogram = \"process-maker\"\n\
         registers = {{ 0 = {{ console = {{}} }}, 1 = {{ node = \"tree\" }}, 2 = {{ clock = {{}} }}, 7 = {{ number = [{delay_ns}, 0] }} }}\n",
    );
    let branches = leaves.div_ceil(32);
    let middles = branches.div_ceil(32);
    let slots = |names: Vec<String>| {
        let entries: Vec<String> =
            names.iter().enumerate().map(|(slot, name)| format!("{slot} = {{ node = \"{name}\" }}")).collect();
        format!("slots = {{ {} }}\n", entries.join(", "))
    };
    manifest += "\n[[node]]\nname = \"tree\"\n";
    manifest += &slots((0..middles).map(|middle| format!("middle-{middle}")).collect());
    for middle in 0..middles {
        let _ = write!(manifest, "\n[[node]]\nname = \"middle-{middle}\"\n");
        manifest += &slots((middle * 32..branches.min(middle * 32 + 32)).map(|branch| format!("branch-{branch}")).collect());
    }
    for branch in 0..branches {
        let _ = write!(manifest, "\n[[node]]\nname = \"branch-{branch}\"\n");
        manifest += &slots((branch * 32..leaves.min(branch * 32 + 32)).map(|leaf| format!("leaf-{leaf}")).collect());
    }
    for leaf in 0..leaves {
        let _ = write!(manifest, "\n[[node]]\nname = \"leaf-{leaf}\"\n");
    }
    manifest
}

/// Lines that end a many-processes test at once.
const MANY_PROCESSES_BAD: [&str; 5] = ["MISMATCH", "kernel panic", "checkpoint failed", "STORE LOST", "selftest: store:"];

/// The image of `process-maker` with a tree for `processes` processes (begun after
/// `delay_ns`), and a fresh store for it in the scratch directory `test_name` (256 MiB:
/// the root nodes and the tree need more nodes than a small store has).
fn many_processes_system(test_name: &str, processes: usize, delay_ns: u64) -> (std::path::PathBuf, std::path::PathBuf) {
    let directory = scratch_dir(test_name);
    let manifest = directory.join("many-processes.toml");
    std::fs::write(&manifest, many_processes_manifest(processes, delay_ns)).expect("write the manifest");
    // An image of its own: the two tests' manifests differ, and may run at once.
    let image_dir = build_image(&format!("{test_name}-image"), Some(&manifest));
    let store = directory.join("store.img");
    let format = run_holdfast(&["store", "format", "--size-mib", "256", "--force", store.to_str().expect("UTF-8 path")]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    (image_dir, store)
}

#[test]
fn ten_thousand_processes_are_checkpointed_and_all_come_back_after_a_kill() {
    const PROCESSES: usize = 10_000;
    let (image_dir, store) = many_processes_system("many-processes", PROCESSES, 0);
    let store = store.to_str().expect("UTF-8 path");
    let name = format!("many-processes-{}", std::process::id());
    let bad = MANY_PROCESSES_BAD;
    let append = "holdfast.checkpoint-interval-ms=1000";

    let started = Instant::now();
    let vm = run_vm(&name, &image_dir, store, append, "512");
    let mut seen = Vec::new();
    let limit = Duration::from_secs(300);
    let made = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        line.strip_prefix("process-maker: made ")?.strip_suffix(" processes")?.parse::<usize>().ok()
    });
    assert_eq!(made, PROCESSES, "{}", seen.join("\n"));
    // A checkpoint that began after the last was made holds them all: the second commit
    // from here.
    let mut commits = 0;
    let generation = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        commits += usize::from(committed(line).is_some());
        committed(line).filter(|_| commits == 2)
    });
    eprintln!("{PROCESSES} processes made and checkpoint {generation} committed in {:?}", started.elapsed());
    support::kill_and_wait(&name, vm);

    let restarted = Instant::now();
    let vm = run_vm(&name, &image_dir, store, append, "512");
    let mut seen = Vec::new();
    let (from, count) = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        let (from, rest) = line.strip_prefix("holdfast: restarted from checkpoint ")?.split_once(": ")?;
        Some((from.parse::<u64>().ok()?, rest.split(' ').next()?.parse::<usize>().ok()?))
    });
    assert!(from >= generation, "restarted from {from}, older than {generation}");
    assert_eq!(count, PROCESSES + 1, "the maker and every process it made:\n{}", seen.join("\n"));
    let back = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        line.strip_prefix("process-maker: after the restart, ")?.strip_suffix(" processes came back")?.parse::<usize>().ok()
    });
    assert_eq!(back, PROCESSES, "{}", seen.join("\n"));
    // And the system goes on checkpointing them.
    wait_for(&vm.lines, &mut seen, limit, &bad, committed);
    eprintln!("restarted with {count} processes in {:?}", restarted.elapsed());
    support::kill_and_wait(&name, vm);
}

/// Runs `process-maker` over a tree of 10,000 leaves in a guest of `memory_mib`, beginning
/// after `delay_ns`, with a checkpoint every second: `make_process` must be refused with
/// `exhausted` and two checkpoints must commit after it (the second taken after the
/// refusal), the maker never faulting. Returns how many processes it made.
fn make_processes_until_refused(test_name: &str, memory_mib: &str, delay_ns: u64) -> usize {
    const PROCESSES: usize = 10_000;
    let (image_dir, store) = many_processes_system(test_name, PROCESSES, delay_ns);
    let store = store.to_str().expect("UTF-8 path");
    let name = format!("{test_name}-{}", std::process::id());
    let bad = MANY_PROCESSES_BAD;
    let started = Instant::now();
    let vm = run_vm(&name, &image_dir, store, "holdfast.checkpoint-interval-ms=1000", memory_mib);
    let mut seen = Vec::new();
    let limit = Duration::from_secs(120);
    let made = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        line.strip_prefix("process-maker: make_process refused (exhausted) after ")?.strip_suffix(" processes")?.parse::<usize>().ok()
    });
    assert!(made < PROCESSES, "{made} processes made:\n{}", seen.join("\n"));
    let mut commits = 0;
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        commits += usize::from(committed(line).is_some());
        (commits == 2).then_some(())
    });
    assert!(!seen.iter().any(|line| line.contains("faulted")), "the maker faulted:\n{}", seen.join("\n"));
    eprintln!("{made} processes made in a {memory_mib} MiB guest before make_process was refused, in {:?}", started.elapsed());
    support::kill_and_wait(&name, vm);
    made
}

/// The one limit left on processes is memory for their tables: in a 48 MiB guest the
/// kernel refuses `make_process` with `exhausted` before its heap runs out, and the system
/// goes on and checkpoints the processes it has.
///
/// The maker waits 0.9 s before it begins, so that the first checkpoint (the whole tree,
/// 10,338 nodes, 1 s after the store is attached) is taken and stabilized while it makes,
/// as on a loaded host. So it once stalled (1 run in about 15): the byte allocator took a
/// span of frames out of the page-load reserve before the refusal (free frames 1.7 MiB,
/// the reserve 4.8), and below the reserve each of the maker's faults took a whole
/// checkpoint and evicted the pages the next fault needed; it was neither refused nor
/// made more while checkpoints went on (`persistence/eviction.rs` says how neither
/// happens now).
#[test]
fn make_process_is_refused_when_memory_runs_out_and_checkpoints_go_on() {
    let made = make_processes_until_refused("exhausted", "48", 900_000_000);
    assert!(made > 0, "not one process made in a 48 MiB guest");
}

/// Below the page-load reserve from the start (the tree alone fills most of a 36 MiB
/// guest's heap): `make_process` is refused at once and the maker runs on to say so. Before
/// `make_room` stopped evicting a working set it could not replace, every fault of the
/// maker took a whole checkpoint (2,970 in 25 s) and it never printed: the stall above,
/// every time.
#[test]
fn make_process_is_refused_below_the_reserve_without_a_stall() {
    make_processes_until_refused("exhausted-small", "36", 0);
}

/// The fields of a `checkpoint status` line.
fn status_field(status: &str, field: &str) -> u64 {
    let words: Vec<&str> = status.split_whitespace().collect();
    let at = words.iter().position(|word| *word == field).unwrap_or_else(|| panic!("no {field} in {status:?}"));
    words[at + 1].parse().unwrap_or_else(|_| panic!("{field} is not a number in {status:?}"))
}

fn counter(name: &str, metric: &str) -> f64 {
    let counters = run_holdfast(&["vm", "counters", name]);
    assert_eq!(counters.status, Some(0), "{}", counters.transcript());
    let line = counters.stdout.lines().find(|line| line.split(' ').next() == Some(metric));
    let line = line.unwrap_or_else(|| panic!("no {metric} in\n{}", counters.stdout));
    line.split(' ').nth(1).and_then(|value| value.parse().ok()).unwrap_or_else(|| panic!("bad line {line}"))
}

/// Checkpoints taken in the middle of a page fault (here `holdfast.test-dirty-pages-max=3`
/// puts the dirty pages at their limit at nearly every fault, as a nearly full log does)
/// write the faulting process's registers as they were at the fault. A restart from one
/// brings `register-witness` (services/selftest/src/register_witness.rs) back with its step
/// register and its memory from one moment, which it checks at every step: a kernel that
/// wrote the registers of the process's previous fault brought back a step behind its
/// memory, and the TP1 service applied a batch twice from such a checkpoint.
///
/// The first boot's checkpoint 5 fails (`holdfast.test-checkpoint-failure=5`), in a fault
/// like the others (the interval, 5 s, is not over before the twentieth): the fault's
/// process goes on, the failure is printed, later checkpoints commit, and the restarts
/// after it come back right.
#[test]
fn checkpoints_taken_in_page_faults_restart_processes_where_they_were() {
    let directory = scratch_dir("fault-checkpoints");
    let manifest = directory.join("manifest.toml");
    std::fs::write(&manifest, "[[process]]\nname = \"register-witness\"\nprogram = \"register-witness\"\nregisters = { 0 = { console = {} } }\n")
        .expect("write the manifest");
    let image_dir = build_image("fault-checkpoints-image", Some(&manifest));
    let store = directory.join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "16", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("fault-checkpoints-{}", std::process::id());
    // Seven restarts: with the old kernel about half of them brought the mismatch back.
    for boot in 0..8 {
        let (append, bad) = if boot == 0 {
            ("holdfast.test-dirty-pages-max=3 holdfast.test-checkpoint-failure=5", &["MISMATCH", "kernel panic", "STORE LOST"][..])
        } else {
            ("holdfast.test-dirty-pages-max=3", &["MISMATCH", "kernel panic", "STORE LOST", "checkpoint failed"][..])
        };
        let vm = run_vm(&name, &image_dir, store, append, "256");
        let mut seen = Vec::new();
        // Enough checkpoints that the newest is one taken in a fault, then a report.
        let mut checkpoints = 0;
        wait_for(&vm.lines, &mut seen, Duration::from_secs(120), bad, |line| {
            checkpoints += u32::from(committed(line).is_some());
            (checkpoints >= 20 && line.starts_with("register-witness: ")).then_some(())
        });
        if boot == 0 {
            let failed = seen.iter().position(|line| line.starts_with("holdfast: checkpoint failed: ") && line.contains("checkpoint 5"));
            let failed = failed.unwrap_or_else(|| panic!("checkpoint 5 did not fail:\n{}", seen.join("\n")));
            assert!(seen[failed..].iter().any(|line| committed(line).is_some_and(|generation| generation >= 5)), "{}", seen.join("\n"));
        }
        if boot > 0 {
            assert!(seen.iter().any(|line| line.starts_with("holdfast: restarted from checkpoint ")), "{}", seen.join("\n"));
        }
        support::kill_and_wait(&name, vm);
    }
}

/// Before checkpoints were retried, one failed snapshot (85 processes made it fail, which
/// any program could do) stopped every checkpoint for the rest of the run, and the system
/// ran on unpersisted. Here checkpoint 2 fails just before its commit, with every object
/// written (`holdfast.test-checkpoint-failure=2`): the failure is printed and counted, the
/// status says that nothing is persisted since checkpoint 1, the next interval's checkpoint
/// commits, and after a kill the system comes back from it with its journal commits.
#[test]
fn a_failed_checkpoint_is_counted_shown_and_retried_at_the_next_interval() {
    let manifest = source_dir().join("services/journal-manifest.toml");
    let image_dir = build_image("journal-image", Some(&manifest));
    let directory = scratch_dir("checkpoint-failure");
    let store = directory.join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "16", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("checkpoint-failure-{}", std::process::id());
    let bad = ["MISMATCH", "kernel panic", "STORE LOST", "selftest: store:"];
    let limit = Duration::from_secs(120);
    // Long enough that the status is read before the retry.
    let interval_ms = 6000;
    let append = format!("holdfast.checkpoint-interval-ms={interval_ms} holdfast.test-checkpoint-failure=2");
    let vm = run_vm(&name, &image_dir, store, &append, "256");
    let mut seen = Vec::new();
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| (committed(line) == Some(1)).then_some(()));
    let failure = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        line.starts_with("holdfast: checkpoint failed: ").then(|| line.to_owned())
    });
    assert!(
        failure.contains("checkpoint 2") && failure.contains("1 failed since checkpoint 1") && failure.contains(&format!("retried in {interval_ms} ms")),
        "{failure}"
    );
    let status = run_holdfast(&["checkpoint", "status", &name]);
    assert_eq!(status.status, Some(0), "{}", status.transcript());
    assert_eq!(status_field(&status.stdout, "failures-since-commit"), 1, "{}", status.stdout);
    assert_eq!(status_field(&status.stdout, "generation"), 1, "{}", status.stdout);
    assert_eq!(counter(&name, "holdfast_checkpoint_failures_total"), 1.0);

    // The retry takes the next generation.
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| (committed(line) == Some(3)).then_some(()));
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        (line == "holdfast: checkpoints persist again after 1 failed").then_some(())
    });
    let status = run_holdfast(&["checkpoint", "status", &name]);
    assert_eq!(status_field(&status.stdout, "failures-since-commit"), 0, "{}", status.stdout);
    assert!(status_field(&status.stdout, "generation") >= 3, "{}", status.stdout);
    assert_eq!(counter(&name, "holdfast_checkpoint_failures_total"), 1.0);
    // The journal commits acknowledged before the kill must survive it.
    let acknowledged: Vec<String> = seen.iter().filter(|line| line.contains(": acknowledged ")).cloned().collect();
    support::kill_and_wait(&name, vm);

    // Checkpoint 3 holds what checkpoint 2 had written when it failed: its pages were made
    // dirty again. The counter's registers and pages agree, and the writers' pages hold
    // their acknowledged commits.
    let vm = run_vm(&name, &image_dir, store, &format!("holdfast.checkpoint-interval-ms={interval_ms}"), "256");
    let mut seen = Vec::new();
    let (from, boot) = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        let (from, rest) = line.strip_prefix("holdfast: restarted from checkpoint ")?.split_once(':')?;
        Some((from.parse::<u64>().ok()?, rest.rsplit_once(", boot ")?.1.parse::<u64>().ok()?))
    });
    assert!(from >= 3, "restarted from checkpoint {from}");
    // This boot's lines (not ones printed again from the boot before), in any order.
    let mut held = [None; 3];
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        for writer in 1..=3 {
            let rest = line.strip_prefix(&format!("journal-writer {writer}: restarted, page holds "));
            if let Some(value) = rest.and_then(|rest| rest.strip_suffix(&format!(" at boot {boot}"))?.parse::<u64>().ok()) {
                held[writer - 1] = Some(value);
            }
        }
        held.iter().all(Option::is_some).then_some(())
    });
    for writer in 1..=3 {
        let last: u64 = acknowledged
            .iter()
            .filter_map(|line| line.strip_prefix(&format!("journal-writer {writer}: acknowledged "))?.parse().ok())
            .max()
            .unwrap_or(0);
        let held = held[writer - 1].expect("awaited");
        assert!(held >= last, "writer {writer}: acknowledged {last}, the page holds {held}");
    }
    wait_for(&vm.lines, &mut seen, limit, &bad, |line| line.starts_with("persist-counter: ").then_some(()));
    support::kill_and_wait(&name, vm);
}

/// A failed checkpoint waits for the next interval, but the dirty pages may not outgrow
/// the log meanwhile: when they reach the limit a checkpoint is taken at once, retry or
/// not. Before, the limit was skipped while a retry waited, the dirty pages grew past what
/// the log holds and no retry could commit again (a 512 MiB store under TP1). Here the
/// limit is 32 pages (`holdfast.test-dirty-pages-max`), the journal writers' guarded writes
/// (kernel writes, at the start of their invocations) pass it, checkpoint 2 fails, and
/// checkpoint 3 commits long before the minute's interval is over.
#[test]
fn the_dirty_pages_stay_within_the_log_while_a_failed_checkpoint_waits() {
    let manifest = source_dir().join("services/journal-manifest.toml");
    let image_dir = build_image("journal-image", Some(&manifest));
    let directory = scratch_dir("checkpoint-failure-limit");
    let store = directory.join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "16", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("checkpoint-failure-limit-{}", std::process::id());
    let bad = ["MISMATCH", "kernel panic", "STORE LOST", "selftest: store:"];
    let limit = Duration::from_secs(120);
    let append = "holdfast.checkpoint-interval-ms=60000 holdfast.test-checkpoint-failure=2 holdfast.test-dirty-pages-max=32";
    let vm = run_vm(&name, &image_dir, store, append, "256");
    let mut seen = Vec::new();
    let failure = wait_for(&vm.lines, &mut seen, limit, &bad, |line| {
        line.starts_with("holdfast: checkpoint failed: ").then(|| line.to_owned())
    });
    assert!(failure.contains("checkpoint 2") && failure.contains("retried in 60000 ms"), "{failure}");
    let failed_at = Instant::now();
    wait_for(&vm.lines, &mut seen, Duration::from_secs(40), &bad, |line| (committed(line) == Some(3)).then_some(()));
    assert!(failed_at.elapsed() < Duration::from_secs(40), "checkpoint 3 waited for the interval");
    let status = run_holdfast(&["checkpoint", "status", &name]);
    assert_eq!(status_field(&status.stdout, "failures-since-commit"), 0, "{}", status.stdout);
    support::kill_and_wait(&name, vm);
}

/// A store that can no longer be written stops the system, loudly, rather than let it run
/// on unpersisted: its one disk lives on a host file system that is full, so that the
/// first checkpoint's writes to blocks the sparse image never had fail (QEMU reports the
/// error to the guest), the only mirror fails, and the kernel prints `STORE LOST` and ends
/// the VM with a failure status.
#[test]
fn a_store_that_can_no_longer_be_written_stops_the_system() {
    let directory = scratch_dir("store-lost");
    let small = match SmallFileSystem::mount(directory.join("small"), 4) {
        Ok(small) => small,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for a full host disk ({why})");
            return;
        }
    };
    let store = small.mount_point.join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "16", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    small.fill();
    let image_dir = build_image("persist-image", Some(&source_dir().join("services/persist-manifest.toml")));
    let name = format!("store-lost-{}", std::process::id());
    let LineReader { mut child, lines, reader } = run_vm(&name, &image_dir, store, "holdfast.checkpoint-interval-ms=500", "256");
    let mut seen = Vec::new();
    let lost = wait_for(&lines, &mut seen, Duration::from_secs(120), &["kernel panic"], |line| {
        line.starts_with("holdfast: STORE LOST: ").then(|| line.to_owned())
    });
    assert!(lost.contains("the system stops here"), "{lost}");
    eprintln!("{lost}");
    // The VM ends by itself, and nothing after that line is committed.
    seen.extend(lines.iter());
    reader.join().expect("the reader thread ends");
    let status = child.0.wait().expect("holdfast run ends");
    assert!(!status.success(), "{status}\n{}", seen.join("\n"));
    let at = seen.iter().position(|line| *line == lost).expect("seen");
    assert!(
        !seen[at..].iter().any(|line| committed(line).is_some() || line.starts_with("persist-counter: ")),
        "{}",
        seen.join("\n")
    );
}
