//! Booting the appliance as a user would: `holdfast run`, by PVH and by GRUB, and a
//! deliberate kernel fault.

mod support;

use support::{boot, image_dir};

/// What every passing boot prints, whichever way it was booted: the ready marker, the
/// ring-3 programs' own lines and the kernel's verdict on each process of
/// `services/manifest.toml`. A program's exit code is its number of failed checks.
fn assert_selftest_passed(stdout: &str, transcript: &str) {
    let expected = [
        "HOLDFAST-READY ",
        "selftest: initial image: 21 programs",
        "selftest: initial system: 21 processes [ok]",
        "hello from ring 3",
        "ticker: round 0",
        "selftest: ring3 fault-null: contained vector 14 (#PF page fault)",
        "selftest: ring3 fault-gp: contained vector 13 (#GP general protection)",
        "selftest: ring3 fault-ud: contained vector 6 (#UD invalid opcode)",
        "selftest: ring3 fault-kernel-read: contained vector 14 (#PF page fault)",
        "selftest: ring3 fault-int: contained vector 13 (#GP general protection)",

        // The IPC, object, space, keeper and meter checks, each with its own lines above.
        "ipc-client: busy target: the call waits and then gets its reply [ok]",
        "ipc-client: indirector: void once revoked [ok]",
        "ipc-client: node.sense: a start capability is described, not called [ok]",
        "ipc-client: node.sense: an empty slot is void [ok]",
        "space-test: space.occupied says the slot was empty and now holds the page [ok]",
        "space-test: its replacement is seen at the next access [ok]",
        "space-test: a page another process swaps into the tree is seen at the next access [ok]",
        "zero-client: three faults resolved by the keeper with zeroed pages [ok]",
        "meter-client: the meter ran out and its keeper refilled it [ok]",
        "meter-client: on a 5 ms share it ran a tick every other period, its debt paid [ok]",
        // A process made from a node, given a space and started, runs a real program.
        "objects-test: page: copy_from copies every byte, through a read-only capability to the source [ok]",
        "objects-test: process: a made process without a meter is not started [ok]",
        "objects-test: process: start runs a made process on this program's code in its space [ok]",
        "selftest: ring3 (made): stopped with exit code 0 after 1 invocations [ok]",
        "HOLDFAST-SELFTEST PASS",
    ];
    for text in expected {
        assert!(stdout.contains(text), "missing {text:?}\n{transcript}");
    }
    // W^X: code written into data or onto the stack is never executed (error 0x15: a user
    // instruction fetch from a present page).
    for program in ["fault-exec-data", "fault-exec-stack"] {
        let prefix = format!("selftest: ring3 {program}: contained vector 14 (#PF page fault) error 0x15 ");
        let line = stdout.lines().find(|line| line.starts_with(&prefix));
        assert!(
            line.is_some_and(|line| line.ends_with("(instruction fetch from a no-execute page) [ok]")),
            "{program}: {line:?}\n{transcript}"
        );
    }
    for program in [
        "ticker",
        "hello",
        "ipc-client",
        "objects-test",
        "space-test",
        "zero-client",
        "exception-client",
        "meter-client",
        "hostile",
    ] {
        let verdict = format!("selftest: ring3 {program}: stopped with exit code 0 ");
        assert!(
            stdout.contains(&verdict),
            "missing {verdict:?}\n{transcript}"
        );
    }
    for server in [
        "echo-server",
        "zero-keeper",
        "exception-keeper",
        "meter-refiller",
    ] {
        let verdict = format!("selftest: ring3 {server}: serving");
        assert!(
            stdout.contains(&verdict),
            "missing {verdict:?}\n{transcript}"
        );
    }
    assert!(!stdout.contains("FAILED"), "a check failed\n{transcript}");
}

/// The hostile program's seed line and summary line (its counts of what it did).
fn hostile_lines(stdout: &str) -> (Option<u64>, Option<&str>) {
    let seed = stdout
        .lines()
        .find_map(|line| line.strip_prefix("hostile: seed ")?.parse().ok());
    let summary = stdout
        .lines()
        .find(|line| line.starts_with("hostile: ") && line.ends_with("kernel and other processes unharmed"));
    (seed, summary)
}

/// The number before `what` in the hostile program's summary.
fn hostile_count(summary: &str, what: &str) -> u64 {
    let before = summary.split(what).next().unwrap_or_default();
    before.rsplit(' ').find(|word| !word.is_empty()).and_then(|word| word.parse().ok()).unwrap_or(0)
}

/// The hostile program (services/selftest/src/hostile.rs) makes 3,000 random invocations,
/// among them `make_process`, `make_indirector`, `make_start`, `process.start`, the echo
/// server's start capability and used resume capabilities; the kernel and every other
/// process come through (the self-test passes). It prints its seed, takes one from the
/// command line, and the same seed gives the same counts.
#[test]
fn a_hostile_program_cannot_harm_the_kernel_or_other_processes() {
    const SEED: u64 = 1_234_567;
    let append = format!("holdfast.fuzz-seed={SEED}");
    let mut summaries = Vec::new();
    for _ in 0..2 {
        let run = boot(&["--append", &append]);
        assert_eq!(run.status, Some(0), "{}", run.transcript());
        assert_selftest_passed(&run.stdout, &run.transcript());
        let (seed, summary) = hostile_lines(&run.stdout);
        assert_eq!(seed, Some(SEED), "the seed given\n{}", run.transcript());
        let summary = summary.unwrap_or_else(|| panic!("no summary from hostile\n{}", run.transcript())).to_owned();
        assert_eq!(hostile_count(&summary, " random invocations"), 3000, "{summary}");
        for what in [" make_process", " make_indirector", " make_start", " start,", " to the echo server", " to used resume"] {
            assert!(hostile_count(&summary, what) > 0, "no{what} in {summary:?}");
        }
        summaries.push(summary);
    }
    assert_eq!(summaries[0], summaries[1], "the same seed, other counts");
    println!("hostile, seed {SEED}: {}", summaries[0]);
    // Without a seed it takes the clock's, and says which.
    let run = boot(&[]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let (seed, summary) = hostile_lines(&run.stdout);
    assert!(seed.is_some() && summary.is_some(), "{}", run.transcript());
}

#[test]
fn pvh_boot_passes_the_selftest() {
    let run = boot(&[]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    assert!(run.stdout.contains("booted by pvh"), "{}", run.transcript());
    assert_selftest_passed(&run.stdout, &run.transcript());
}

#[test]
fn grub_boot_passes_the_selftest() {
    let run = boot(&["--boot", "grub"]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    // GRUB's own line shows that the firmware booted the disk, not QEMU's -kernel.
    assert!(
        run.stdout.contains("Booting `Holdfast'"),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout.contains("booted by multiboot2"),
        "{}",
        run.transcript()
    );
    assert_selftest_passed(&run.stdout, &run.transcript());
}

#[test]
fn grub_disk_holds_the_kernel_and_the_initial_image() {
    let disk = std::fs::read(image_dir().join("holdfast-boot.img")).expect("read boot disk");
    let kernel = std::fs::read(image_dir().join("holdfast-kernel.elf")).expect("read kernel");
    // ISO 9660 stores files whole: the kernel's first bytes appear on the disk, and so does
    // the grub.cfg text.
    let kernel_start = &kernel[..4096];
    assert!(
        disk.windows(kernel_start.len())
            .any(|window| window == kernel_start)
    );
    let config = "module2 /boot/initial.hfi initial";
    assert!(
        disk.windows(config.len())
            .any(|window| window == config.as_bytes())
    );
}

#[test]
fn kernel_fault_is_reported_and_fails_the_run() {
    let run = boot(&["--append", "holdfast.kernel-fault=ud"]);
    assert_eq!(run.status, Some(1), "{}", run.transcript());
    let report = run
        .stdout
        .lines()
        .find(|line| line.starts_with("holdfast: kernel fault: "))
        .unwrap_or_else(|| panic!("no kernel fault report\n{}", run.transcript()));
    assert!(report.contains("vector 6 (#UD invalid opcode)"), "{report}");
    let rip = report
        .split_once(" rip 0x")
        .map(|(_, rest)| rest.split_whitespace().next().unwrap_or(""));
    assert!(
        rip.is_some_and(|hex| !hex.is_empty() && u64::from_str_radix(hex, 16).is_ok()),
        "no rip in {report:?}"
    );
    assert!(
        !run.stdout.contains("HOLDFAST-SELFTEST PASS"),
        "{}",
        run.transcript()
    );
}

/// W^X in the kernel: its data is not executable, and it may neither execute (SMEP) nor
/// touch (SMAP) a user page at its user address (it reaches process memory only through
/// the direct map). Each deliberate violation is a kernel fault report that names it.
#[test]
fn kernel_w_xor_x_violations_are_reported_as_kernel_faults() {
    let cases: [(&str, &[&str]); 3] = [
        ("user-read", &["error 0x1 rip 0xffffffff8", "address 0x400000 (kernel access to a user page: SMAP)"]),
        ("user-exec", &["error 0x11 rip 0x400000 address 0x400000 (kernel instruction fetch from a user page: SMEP)"]),
        ("data-exec", &["error 0x11 rip 0xffffffff8", "(instruction fetch from a no-execute page)"]),
    ];
    for (kind, cause) in cases {
        let run = boot(&["--append", &format!("holdfast.kernel-fault={kind}")]);
        assert_eq!(run.status, Some(1), "{kind}\n{}", run.transcript());
        let report = run
            .stdout
            .lines()
            .find(|line| line.starts_with("holdfast: kernel fault: vector 14 (#PF page fault) "))
            .unwrap_or_else(|| panic!("{kind}: no page fault report\n{}", run.transcript()));
        for &text in cause {
            assert!(report.contains(text), "{kind}: {text:?} not in {report:?}");
        }
    }
}

#[test]
fn time_limit_kills_a_vm_that_stays_up() {
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let run = support::run_holdfast(&[
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
        "--stay-up",
        "--timeout-seconds",
        "2",
    ]);
    support::assert_one_line_error(
        &run,
        3,
        "holdfast: the VM did not finish within 2 s; QEMU was killed (--timeout-seconds sets the limit)",
    );
}
