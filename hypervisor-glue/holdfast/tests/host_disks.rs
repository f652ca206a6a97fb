//! The host's side of a store's disks: `holdfast store format` and `holdfast run` refuse
//! images that cannot make a working store in one line (exit 2) before QEMU starts; a
//! format that fails leaves no half-written image; a long format shows progress; a named
//! VM is listed with its store; a host file system that fills up under a running VM is
//! reported by the host and survived by the guest.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{KillOnDrop, SmallFileSystem, assert_one_line_error, build_image, holdfast, image_dir, run_holdfast, scratch_dir, source_dir};

const INPUT_ERROR: i32 = 2;

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn run_with_disks(disks: &[&Path]) -> support::Run {
    let image_dir = text(image_dir()).to_owned();
    let mut arguments = vec!["run", "--image-dir", &image_dir, "--accel", "tcg"];
    for disk in disks {
        arguments.extend(["--disk", text(disk)]);
    }
    run_holdfast(&arguments)
}

fn format(size_mib: &str, images: &[&Path]) -> support::Run {
    let mut arguments = vec!["store", "format", "--size-mib", size_mib, "--force"];
    arguments.extend(images.iter().map(|image| text(image)));
    run_holdfast(&arguments)
}

#[test]
fn a_store_too_small_for_a_checkpoint_is_refused_and_leaves_no_file() {
    let dir = scratch_dir("format-too-small");
    let image = dir.join("small.img");
    let run = format("1", &[&image]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        "holdfast: a store of 1 MiB is too small: its log (an eighth) would hold 32 blocks, \
         and a checkpoint needs 128; use --size-mib 4 or more",
    );
    assert!(!image.exists(), "a refused format left {}", image.display());
    assert_eq!(format("4", &[&image]).status, Some(0));
}

#[test]
fn one_file_is_never_both_mirrors() {
    let dir = scratch_dir("same-mirror");
    let image = dir.join("a.img");
    assert_eq!(format("4", &[&image]).status, Some(0));
    let formatted = format("4", &[&image, &image]);
    assert_one_line_error(
        &formatted,
        INPUT_ERROR,
        &format!("holdfast: {0} and {0} are the same file: each mirror must be its own image", image.display()),
    );
    // The same file by another name is still the same file.
    let other_name = dir.join("b.img");
    std::fs::hard_link(&image, &other_name).unwrap();
    let run = run_with_disks(&[&image, &other_name]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: disk image '{}' is given twice (as '{}'): each mirror must be its own image",
            other_name.display(),
            image.display()
        ),
    );
}

#[test]
fn a_device_that_is_not_a_disk_is_refused() {
    let run = run_with_disks(&[Path::new("/dev/null")]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        "holdfast: disk image '/dev/null' is not a regular file or a block device",
    );
}

/// Root may write any file, so the test runs `holdfast` as `nobody` on an image it may only
/// read.
#[test]
fn an_image_that_cannot_be_written_is_refused() {
    let dir = scratch_dir("unwritable-disk");
    let image = dir.join("read-only.img");
    assert_eq!(format("4", &[&image]).status, Some(0));
    let mut permissions = std::fs::metadata(&image).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o444);
    std::fs::set_permissions(&image, permissions).unwrap();
    // `nobody` must reach the image and the boot image through their directories.
    for directory in [dir.as_path(), image_dir()] {
        let mut ancestor = Some(directory);
        while let Some(path) = ancestor {
            let mut permissions = std::fs::metadata(path).unwrap().permissions();
            let mode = std::os::unix::fs::PermissionsExt::mode(&permissions);
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, mode | 0o005);
            std::fs::set_permissions(path, permissions).unwrap();
            ancestor = path.parent();
        }
    }
    let mut command = holdfast();
    command
        .env("HOLDFAST_STATE_DIR", "/nonexistent")
        .args(["run", "--image-dir", text(image_dir()), "--accel", "tcg", "--disk", text(&image)]);
    let run = support::run_command(&mut as_user_nobody(&command));
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: disk image '{}' cannot be opened for reading and writing: Permission denied (os error 13)",
            image.display()
        ),
    );
}

/// `command` run through `setpriv` as the user and group `nobody` (65534), with its
/// environment.
fn as_user_nobody(command: &Command) -> Command {
    let mut wrapped = Command::new("setpriv");
    wrapped.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    wrapped.arg(command.get_program()).args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped.stdin(Stdio::null());
    wrapped
}

/// A format that writes more than 256 MiB of log says so on stderr, and still prints only
/// the store's summary on stdout.
#[test]
fn a_long_format_shows_progress() {
    let dir = scratch_dir("format-progress");
    let image = dir.join("big.img");
    let run = format("4096", &[&image]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    assert!(
        run.stderr.starts_with("holdfast: store format: writing 512 MiB of log"),
        "{}",
        run.transcript()
    );
    assert!(run.stdout.contains("geometry"), "{}", run.transcript());
    std::fs::remove_file(&image).unwrap();
}

/// `holdfast run` with its stdout and stderr lines both sent, as they come, to one channel.
fn spawn_with_both_streams(command: &mut Command) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start holdfast run");
    let (sender, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    for stream in [Box::new(stdout) as Box<dyn std::io::Read + Send>, Box::new(stderr)] {
        let sender = sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
    }
    (KillOnDrop(child), lines)
}

/// Mirror 0 lives on a host file system that is full: its first write to a block the
/// sparse image never had fails with ENOSPC. The VM does not freeze (QEMU's default): the
/// host says which disk and why in one line, the guest marks that mirror failed and goes
/// on checkpointing to the other, and `holdfast vm list` shows the VM running with both.
#[test]
fn a_full_host_disk_is_reported_and_the_store_goes_on_degraded() {
    let dir = scratch_dir("full-host-disk");
    let small = match SmallFileSystem::mount(dir.join("small"), 4) {
        Ok(small) => small,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for a full host disk ({why})");
            return;
        }
    };
    let (a, b) = (small.mount_point.join("a.img"), dir.join("b.img"));
    assert_eq!(format("16", &[&a, &b]).status, Some(0));
    small.fill();

    let image = build_image("persist-image", Some(&source_dir().join("services/persist-manifest.toml")));
    let name = format!("full-disk-{}", std::process::id());
    let (_child, lines) = spawn_with_both_streams(holdfast().args([
        "run",
        "--image-dir",
        text(&image),
        "--accel",
        "tcg",
        "--name",
        &name,
        "--timeout-seconds",
        "120",
        "--append",
        "holdfast.checkpoint-interval-ms=500",
        "--disk",
        text(&a),
        "--disk",
        text(&b),
    ]));
    let expected_host_line = format!(
        "holdfast: host I/O error on disk '{}': write failed: No space left on device (QEMU's action: report)",
        a.display()
    );
    let mut transcript = String::new();
    let (mut host_said, mut degraded, mut checkpoints_after) = (false, false, 0);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(host_said && degraded && checkpoints_after >= 2) {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("host line {host_said}, degraded {degraded}, checkpoints after {checkpoints_after}\n{transcript}"));
        if !line.starts_with("persist-counter") {
            transcript.push_str(&line);
            transcript.push('\n');
        }
        host_said |= line == expected_host_line;
        degraded |= line == "holdfast: store: DEGRADED: 1 of 2 mirrors (mirror 0 failed: Io)";
        if degraded && line.starts_with("holdfast: checkpoint ") && line.contains(" committed") {
            checkpoints_after += 1;
        }
    }
    let list = run_holdfast(&["vm", "list"]);
    assert_eq!(list.status, Some(0), "{}", list.transcript());
    let row = list.stdout.lines().find(|row| row.starts_with(&name)).unwrap_or_else(|| panic!("{}", list.stdout));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns, [name.as_str(), "running", text(&a), "+", text(&b)], "{}", list.stdout);
    assert_eq!(run_holdfast(&["vm", "quit", &name]).status, Some(0));
}
