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

/// A pair that ends with the test, passed or not: `pair down` (which undefines its
/// domains), then its directory (four 2 GiB sparse images) removed.
struct DetachedPair {
    name: String,
    dir: std::path::PathBuf,
}

impl Drop for DetachedPair {
    fn drop(&mut self) {
        let _ = run_holdfast(&["pair", "down", &self.name]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `pair up --libvirt --detach`: both VMs libvirt domains under the real libvirtd, the
/// command returning once the pair serves; a SIGKILL drill under TP1 load through the
/// pair's endpoint
/// (seen at once through the QEMU's pid descriptor, the standby promoted, nothing
/// acknowledged lost, the old primary's domain defined and started again as the standby);
/// `pair down` leaves no domain defined.
#[test]
fn a_pair_under_libvirtd_detaches_serves_tp1_survives_a_kill_drill_and_leaves_no_domain() {
    libvirtd::ensure_running();
    let started = Instant::now();
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let name = format!("lvpair{}", std::process::id());
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state").join("pairs").join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    let pair = DetachedPair { name: name.clone(), dir: dir.clone() };
    let up = run_holdfast(&[
        "pair", "up", &name, "--libvirt", SYSTEM_URI, "--detach", "--ready-timeout-seconds", "90", "--accel", "tcg",
        "--mode", "sync-durable", "--store-mib", "2048", "--image-dir", image_dir.to_str().expect("UTF-8 path"),
    ]);
    assert_eq!(up.status, Some(0), "{}", up.transcript());
    let lines: Vec<&str> = up.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", up.transcript());
    let endpoint = lines[0].strip_prefix(&format!("pair {name}: endpoint 127.0.0.1:")).map(|port| format!("127.0.0.1:{port}"));
    let endpoint = endpoint.unwrap_or_else(|| panic!("no endpoint line\n{}", up.transcript()));
    assert!(lines[1].starts_with(&format!("pair {name}: supervisor pid ")) && lines[1].ends_with("/supervisor.log"), "{}", up.transcript());
    assert!(lines[2].starts_with(&format!("pair {name}: serving: primary node 1, standby node 2 (")), "{}", up.transcript());
    let log = std::fs::read_to_string(dir.join("supervisor.log")).expect("the supervisor's log");
    println!("pair up --libvirt --detach: serving after {:?}", started.elapsed());

    let status = run_holdfast(&["pair", "status", &name, "--json"]);
    assert_eq!(status.status, Some(0), "{}", status.transcript());
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status is JSON");
    assert_eq!(status["libvirt"], SYSTEM_URI, "{status}");
    assert_eq!(status["endpoint"], endpoint.as_str(), "the endpoint printed is the pair's: {status}");
    let domains: Vec<String> = (0..2).map(|node| status["nodes"][node]["domain"].as_str().expect("a domain per node").to_owned()).collect();
    for domain in &domains {
        assert!(domain.starts_with(&format!("holdfast-pair-{name}-")), "{domain}");
        assert!(libvirtd::has_domain(domain), "libvirt knows {domain}\n{log}");
    }

    // It loads TP1 (scale 1) through the endpoint, runs TP1 load through it, kills the
    // primary's QEMU under that load, checks the new primary against its ledger, and
    // rejoins the old primary as the standby.
    let drill_started = Instant::now();
    let drill = run_holdfast(&["pair", "drill", &name, "--count", "1", "--kinds", "kill", "--json"]);
    println!("{}pair drill: {:?}", drill.stderr, drill_started.elapsed());
    let log = || std::fs::read_to_string(dir.join("supervisor.log")).unwrap_or_default();
    assert_eq!(drill.status, Some(0), "{}\n{}", drill.transcript(), log());
    let reports: serde_json::Value = serde_json::from_str(&drill.stdout).expect("the drill's JSON");
    let report = &reports[0];
    assert_eq!(reports.as_array().map(Vec::len), Some(1), "{reports}");
    assert_eq!((report["lost"].clone(), report["check_passed"].clone()), (0.into(), true.into()), "{report}");
    assert_eq!((report["old_primary"].clone(), report["new_primary"].clone()), (1.into(), 2.into()), "{report}");
    // The drill's TP1 load went through the endpoint, to both primaries in turn.
    assert!(report["acknowledged"].as_u64().expect("acknowledged") > 0, "{report}");
    // Seen through the pid descriptor, not after the 2 s heartbeat timeout.
    assert!(report["detection_ms"].as_u64().expect("detection_ms") < 1000, "{report}\n{}", log());
    assert!(log().contains(&format!("domain '{}': its QEMU exited", domains[0])), "{}", log());

    let down = run_holdfast(&["pair", "down", &name]);
    assert_eq!(down.status, Some(0), "{}", down.transcript());
    assert_eq!(down.stdout, format!("{name}: down; domains {} and {} undefined\n", domains[0], domains[1]), "{}", down.transcript());
    for domain in &domains {
        assert!(!libvirtd::has_domain(domain), "{domain} is still defined after pair down");
    }
    let after = run_holdfast(&["pair", "status", &name]);
    assert_eq!(after.status, Some(2), "the supervisor ended with down: {}", after.transcript());
    drop(pair);
    println!("the libvirt pair test took {:?}", started.elapsed());
}
