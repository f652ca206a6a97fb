//! What the integration tests share: running the built `holdfast` binary as a user would,
//! and the image it boots, built once.
// Each test crate uses only some of these helpers.
#![allow(dead_code)]


pub mod libvirtd;
pub mod pair;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

/// Longest a test lets one VM run; a TCG boot through the self-test takes about a second.
pub const VM_TIME_LIMIT_SECONDS: &str = "60";

/// The kernel command-line word that makes a boot exercise its devices (write a test
/// disk's sectors, ping the network): the test harness's, never a production boot's.
pub const DEVICE_SELFTEST: &str = "holdfast.device-selftest";

/// The repository root.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Cargo's target directory (the parent of the integration tests' scratch directory).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target directory")
        .to_owned()
}

/// A scratch directory for one test, emptied first.
pub fn scratch_dir(test_name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("holdfast-{test_name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove old scratch directory");
    }
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// The `holdfast` binary with its per-user directories pointed into the target directory,
/// so that tests neither read nor disturb the user's VMs and cache.
pub fn holdfast() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    command
        .env("HOLDFAST_SOURCE_DIR", source_dir())
        .env(
            "HOLDFAST_STATE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-state"),
        )
        .env(
            "HOLDFAST_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("holdfast-cache"),
        )
        .env_remove("HOLDFAST_QEMU")
        .stdin(Stdio::null());
    command
}

/// What a finished `holdfast` run showed.
pub struct Run {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from_output(output: Output) -> Self {
        Self {
            status: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Both streams, for assertion messages.
    pub fn transcript(&self) -> String {
        format!(
            "exit status {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `holdfast` with `arguments` to the end.
pub fn run_holdfast(arguments: &[&str]) -> Run {
    run_command(holdfast().args(arguments))
}

pub fn run_command(command: &mut Command) -> Run {
    Run::from_output(command.output().expect("run holdfast"))
}

/// `holdfast run` of the test image under TCG, with a time limit, plus `arguments`.
pub fn boot(arguments: &[&str]) -> Run {
    let image_dir = image_dir().to_str().expect("UTF-8 path").to_owned();
    let mut all = vec![
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
        "--timeout-seconds",
        VM_TIME_LIMIT_SECONDS,
    ];
    all.extend_from_slice(arguments);
    run_holdfast(&all)
}

/// The image every test boots: `holdfast image build --out <target>/test-image`, run once
/// per test process.
pub fn image_dir() -> &'static Path {
    static IMAGE_DIR: OnceLock<PathBuf> = OnceLock::new();
    IMAGE_DIR.get_or_init(|| build_image("test-image", None))
}

/// Builds the image `name` from `manifest` (the default one if `None`) once per test binary:
/// the tests of one binary share it. A file lock keeps test processes that run at the same
/// time from building over each other, and the builder's renames keep a VM started from an
/// earlier build reading whole files.
pub fn build_image(name: &str, manifest: Option<&Path>) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, Option<PathBuf>)>> = std::sync::Mutex::new(Vec::new());
    let dir = target_dir().join(name);
    // Held through the build: a second test asking for the same image waits for it.
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let wanted = (name.to_owned(), manifest.map(Path::to_owned));
    if let Some(earlier) = built.iter().find(|(earlier, _)| earlier == name) {
        assert_eq!(earlier, &wanted, "two manifests for the image '{name}'");
        return dir;
    }
    let lock = File::create(target_dir().join(format!("{name}.lock"))).expect("create lock file");
    lock.lock().expect("lock the image directory");
    let mut arguments = vec!["image", "build", "--out", dir.to_str().expect("UTF-8 path")];
    if let Some(manifest) = manifest {
        arguments.extend(["--manifest", manifest.to_str().expect("UTF-8 path")]);
    }
    let build = run_holdfast(&arguments);
    assert_eq!(
        build.status,
        Some(0),
        "holdfast image build failed\n{}",
        build.transcript()
    );
    built.push(wanted);
    dir
}

/// A child process that is killed if the test ends (or panics) before it exits.
pub struct KillOnDrop(pub Child);

/// A `holdfast run` (or any command) started with its stdout piped: the child, killed if the
/// test ends first, and its stdout lines as they come, from a thread that ends with the
/// stream (join `reader` to know every line has been sent).
pub struct LineReader {
    pub child: KillOnDrop,
    pub lines: std::sync::mpsc::Receiver<String>,
    pub reader: std::thread::JoinHandle<()>,
}

/// Kills the VM `name` (`holdfast vm kill`, a crash) and waits for its `holdfast run` to
/// end, which it does once its QEMU is gone: only then are the VM's name (its QMP socket)
/// and its disks (QEMU's locks on them) free for a restart. Dropping the run at once raced
/// the dying QEMU, and a restart on a loaded host found both taken and printed nothing.
pub fn kill_and_wait(name: &str, vm: LineReader) {
    let kill = run_holdfast(&["vm", "kill", name]);
    assert_eq!(kill.status, Some(0), "holdfast vm kill failed\n{}", kill.transcript());
    let mut run = vm.child;
    let ended = run.0.wait().expect("the killed VM's holdfast run ends");
    assert!(!ended.success(), "a killed VM is not a success: {ended}");
}

pub fn spawn_reading_lines(command: &mut Command) -> LineReader {
    use std::io::{BufRead, BufReader};
    let mut child = KillOnDrop(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the command"),
    );
    let stdout = child.0.stdout.take().expect("piped");
    let (sender, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        while matches!(stdout.read_line(&mut line), Ok(1..)) {
            // A last line without its newline was cut short by the command's end (a VM
            // killed while printing it): not a line. Parsed as one, `persist-counter: 42`
            // once failed a test that counts.
            let Some(whole) = line.strip_suffix('\n') else { break };
            if sender.send(whole.strip_suffix('\r').unwrap_or(whole).to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    LineReader { child, lines, reader }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Asserts that `run` failed with `status` and exactly one stderr line, `expected`.
pub fn assert_one_line_error(run: &Run, status: i32, expected: &str) {
    assert_eq!(run.status, Some(status), "{}", run.transcript());
    assert_eq!(run.stderr, format!("{expected}\n"), "{}", run.transcript());
}

/// A mount of a small tmpfs, for a host file system that fills up; unmounted when dropped.
pub struct SmallFileSystem {
    pub mount_point: PathBuf,
}

impl SmallFileSystem {
    /// Mounts one, or says why it cannot (the test needs root and a kernel that lets it
    /// mount).
    pub fn mount(mount_point: PathBuf, size_mib: u32) -> Result<Self, String> {
        std::fs::create_dir_all(&mount_point).map_err(|error| error.to_string())?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}M"), "tmpfs"])
            .arg(&mount_point)
            .status()
            .map_err(|error| error.to_string())?;
        if status.success() { Ok(Self { mount_point }) } else { Err(format!("mount exited with {status}")) }
    }

    /// Fills what is left of it with a file of zeros.
    pub fn fill(&self) {
        let filler = self.mount_point.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let zeros = vec![0u8; 4096];
        while std::io::Write::write_all(&mut file, &zeros).is_ok() {}
    }
}

impl Drop for SmallFileSystem {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount_point).status();
    }
}

/// An HTTP/1.0 GET of `path` from 127.0.0.1:`port`: the status code and the body.
#[allow(dead_code)] // not every test binary scrapes
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    Ok((status, body))
}
