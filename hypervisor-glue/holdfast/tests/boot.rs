//! Booting the appliance as a user would: `holdfast run`, by PVH and by GRUB, and a
//! deliberate kernel fault.

mod support;

use support::{boot, image_dir};

/// What every passing boot prints, whichever way it was booted: the ready marker, the
/// ring-3 programs' own lines and the kernel's verdict on each.
fn assert_selftest_passed(stdout: &str, transcript: &str) {
    let expected = [
        "HOLDFAST-READY ",
        "selftest: initial image: 7 programs",
        "hello from ring 3",
        "ticker: round 0",
        "selftest: ring3 ticker: stopped with exit code 0",
        "selftest: ring3 hello: stopped with exit code 0",
        "selftest: ring3 fault-null: contained vector 14 (#PF page fault)",
        "selftest: ring3 fault-gp: contained vector 13 (#GP general protection)",
        "selftest: ring3 fault-ud: contained vector 6 (#UD invalid opcode)",
        "selftest: ring3 fault-kernel-read: contained vector 14 (#PF page fault)",
        "selftest: ring3 fault-int: contained vector 13 (#GP general protection)",
        "HOLDFAST-SELFTEST PASS",
    ];
    for text in expected {
        assert!(stdout.contains(text), "missing {text:?}\n{transcript}");
    }
    assert!(!stdout.contains("FAILED"), "a check failed\n{transcript}");
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
