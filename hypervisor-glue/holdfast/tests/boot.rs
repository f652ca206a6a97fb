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
        "selftest: initial image: 20 programs",
        "selftest: initial system: 20 processes [ok]",
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
        "space-test: its replacement is seen at the next access [ok]",
        "zero-client: three faults resolved by the keeper with zeroed pages [ok]",
        "meter-client: the meter ran out and its keeper refilled it [ok]",
        // A process made from a node, given a space and started, runs a real program.
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
        "meter-keeper",
    ] {
        let verdict = format!("selftest: ring3 {server}: serving");
        assert!(
            stdout.contains(&verdict),
            "missing {verdict:?}\n{transcript}"
        );
    }
    assert!(!stdout.contains("FAILED"), "a check failed\n{transcript}");
}

/// The hostile program's count of random invocations: it must have made many, and the
/// kernel and every other process must have come through (the checks above).
fn hostile_invocations(stdout: &str) -> Option<u64> {
    let line = stdout.lines().find(|line| line.starts_with("hostile: "))?;
    line.strip_prefix("hostile: ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn a_hostile_program_cannot_harm_the_kernel_or_other_processes() {
    let run = boot(&[]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let invocations = hostile_invocations(&run.stdout);
    assert!(
        invocations.is_some_and(|count| count >= 1000),
        "hostile made {invocations:?} invocations\n{}",
        run.transcript()
    );
    println!(
        "hostile: {} random invocations in 10 s",
        invocations.unwrap_or(0)
    );
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
