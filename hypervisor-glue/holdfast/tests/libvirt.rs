//! `holdfast run --libvirt`: the TP1 appliance under the real libvirtd (started here when
//! none runs, see support/libvirtd.rs), domain type `qemu` (TCG). It boots a formatted
//! store, serves TP1 on its forwarded 127.0.0.1 port (a token minted over the control
//! channel, a load, 3 s of transactions, a check), stops gracefully on SIGTERM, and the
//! domain is gone afterwards. And the error that names the fix when libvirtd is not there.

mod support;

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use support::libvirtd::{self, SYSTEM_URI};
use support::*;

#[test]
fn the_appliance_runs_under_libvirtd_serves_tp1_and_stops_gracefully() {
    libvirtd::ensure_running();
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let directory = scratch_dir("libvirt-appliance");
    let store = directory.join("store.img");
    let format = run_holdfast(&["store", "format", "--size-mib", "2048", store.to_str().expect("UTF-8 path")]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("lv{}", std::process::id());
    let domain = format!("holdfast-{name}");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let vm = spawn_reading_lines(
        holdfast()
            .args(["run", "--libvirt", SYSTEM_URI, "--name", &name, "--accel", "tcg", "--memory-mib", "512"])
            .args(["--tp1-port", &port.to_string()])
            .arg("--disk")
            .arg(&store)
            .arg("--image-dir")
            .arg(&image_dir),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        match vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let serving = line == "tp1: serving on 7100";
                seen.push(line);
                if serving {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("the appliance did not serve within 120 s:\n{}", seen.join("\n"))
            }
        }
    }
    assert!(seen.iter().any(|line| line.starts_with("HOLDFAST-READY ")), "{}", seen.join("\n"));
    assert!(libvirtd::has_domain(&domain), "libvirt knows the running domain");

    let minted = run_holdfast(&["tp1", "token", &name, "root", "--admin"]);
    assert_eq!(minted.status, Some(0), "{}", minted.transcript());
    let token = minted.stdout.trim().to_owned();
    let address = format!("127.0.0.1:{port}");
    let ledger = directory.join("ledger");
    let tp1 = |arguments: &[&str]| {
        let mut command = holdfast();
        command.arg("tp1").args(arguments).args(["--address", &address, "--token", &token]).arg("--state-dir").arg(&ledger);
        run_command(&mut command)
    };
    let load = tp1(&["load", "--scale", "1"]);
    assert_eq!(load.status, Some(0), "{}", load.transcript());
    let load_run = tp1(&["run", "--clients", "4", "--duration", "3s"]);
    assert_eq!(load_run.status, Some(0), "{}", load_run.transcript());
    let acknowledged: u64 = load_run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("transactions")?.split(" sent, ").nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no acknowledged count\n{}", load_run.transcript()));
    assert!(acknowledged > 0, "{}", load_run.transcript());
    let check = tp1(&["check"]);
    assert_eq!(check.status, Some(0), "{}", check.transcript());

    // SIGTERM, as a service manager stops it: a final checkpoint, QEMU's orderly exit.
    let mut run = vm.child;
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(run.0.id() as i32, libc::SIGTERM) }, 0);
    let stopped_by = Instant::now();
    let status = run.0.wait().expect("holdfast run ends");
    assert!(status.success(), "a requested stop is a success: {status}");
    assert!(stopped_by.elapsed() < Duration::from_secs(30), "stopped in {:?}", stopped_by.elapsed());
    assert!(!libvirtd::has_domain(&domain), "the transient domain is gone after the stop");
}

#[test]
fn no_libvirtd_is_an_error_that_names_the_fix() {
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let absent = run_holdfast(&[
        "run",
        "--libvirt",
        "qemu:///system?socket=/nonexistent/libvirt-sock",
        "--accel",
        "tcg",
        "--image-dir",
        image_dir.to_str().expect("UTF-8 path"),
    ]);
    assert_eq!(absent.status, Some(3), "{}", absent.transcript());
    assert!(
        absent.stderr.starts_with("holdfast: libvirtd is not running for qemu:///system?socket=/nonexistent/libvirt-sock (")
            && absent.stderr.contains("'virtlogd -d && libvirtd -d'"),
        "{}",
        absent.transcript()
    );
    refused_user_is_an_error_that_names_the_fix(&image_dir);
    let grub = run_holdfast(&["run", "--libvirt", SYSTEM_URI, "--boot", "grub"]);
    assert_one_line_error(&grub, 2, "holdfast: --libvirt boots by PVH only (libvirt's <os><kernel>); --boot grub is for the QEMU runner");
}

/// A user libvirtd refuses (here `nobody`: polkit decides, and without a system bus it
/// refuses) gets the group to join. Needs root to become `nobody`, and a tree `nobody` can
/// read; otherwise it says so and checks nothing.
fn refused_user_is_an_error_that_names_the_fix(image_dir: &std::path::Path) {
    libvirtd::ensure_running();
    let binary = env!("CARGO_BIN_EXE_holdfast");
    let can_run = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "test", "-x", binary, "-a", "-r"])
        .arg(image_dir.join("holdfast-kernel.elf"))
        .status()
        .is_ok_and(|status| status.success());
    if !can_run {
        eprintln!("skipped: cannot run {binary} as nobody (not root, or the tree is not readable by nobody)");
        return;
    }
    let output = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "env", "HOLDFAST_STATE_DIR=/nonexistent/state", "HOLDFAST_CACHE_DIR=/nonexistent/cache"])
        .args([binary, "run", "--libvirt", SYSTEM_URI, "--accel", "tcg", "--image-dir"])
        .arg(image_dir)
        .output()
        .expect("runuser");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.starts_with("holdfast: libvirt at qemu:///system refused this user (")
            && stderr.ends_with("): run as root, or add the user to the 'libvirt' group ('adduser USER libvirt', then log in again)\n"),
        "{stderr}"
    );
}

// The pair under libvirtd (`pair up --libvirt --detach`, a kill drill under TP1 load through
// its endpoint seen at once through the QEMU's pid descriptor, nothing lost, `pair down`
// undefining both domains) is ansible/test.sh's: deploy/README.md's Ansible block runs
// exactly that pair and drill, and the test checks the same. It ran here too until it was
// found twice in CI's time.
