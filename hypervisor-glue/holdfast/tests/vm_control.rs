//! Controlling a running VM over QMP: `holdfast run --stay-up --name` in the background,
//! `holdfast vm status|pause|resume|quit` against it.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use support::{KillOnDrop, holdfast, image_dir, run_holdfast};

fn vm(verb: &str, name: &str) -> String {
    let run = run_holdfast(&["vm", verb, name]);
    assert_eq!(
        run.status,
        Some(0),
        "holdfast vm {verb} {name}\n{}",
        run.transcript()
    );
    run.stdout
}

#[test]
fn a_named_vm_is_controlled_over_qmp() {
    let name = format!("qmp-test-{}", std::process::id());
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let child = holdfast()
        .args([
            "run",
            "--image-dir",
            &image_dir,
            "--accel",
            "tcg",
            "--stay-up",
            "--name",
            &name,
        ])
        .args(["--timeout-seconds", support::VM_TIME_LIMIT_SECONDS])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start holdfast run");
    let mut child = KillOnDrop(child);

    // Wait for the self-test's verdict: the VM is then idle and staying up.
    let stdout = child.0.stdout.take().unwrap();
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut transcript = String::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no HOLDFAST-SELFTEST line\n{transcript}"));
        transcript.push_str(&line);
        transcript.push('\n');
        if line.starts_with("HOLDFAST-SELFTEST") {
            assert_eq!(line, "HOLDFAST-SELFTEST PASS", "{transcript}");
            break;
        }
    }

    assert_eq!(vm("status", &name), format!("{name}: running\n"));
    assert_eq!(vm("pause", &name), format!("{name}: paused\n"));
    assert_eq!(vm("status", &name), format!("{name}: paused\n"));
    assert_eq!(vm("resume", &name), format!("{name}: running\n"));
    assert_eq!(vm("status", &name), format!("{name}: running\n"));

    // A second VM of the same name is refused while the first runs.
    let duplicate = run_holdfast(&[
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
        "--name",
        &name,
    ]);
    assert_eq!(duplicate.status, Some(2), "{}", duplicate.transcript());
    assert!(
        duplicate.stderr.contains("is already running"),
        "{}",
        duplicate.transcript()
    );

    assert_eq!(vm("quit", &name), format!("{name}: quit\n"));
    let status = child.0.wait().expect("wait for holdfast run");
    // The self-test passed before the quit, so the run reports success.
    assert_eq!(status.code(), Some(0));

    let gone = run_holdfast(&["vm", "status", &name]);
    assert_eq!(gone.status, Some(2), "{}", gone.transcript());
    assert!(
        gone.stderr
            .starts_with(&format!("holdfast: no VM named '{name}' is running")),
        "{}",
        gone.transcript()
    );
}
