//! A libvirtd for the tests that need one. CI's machine has no systemd: when no daemon
//! answers on the system socket, `virtlogd -d` and `libvirtd -d` (Debian's
//! libvirt-daemon-system, which ci/setup.sh installs) are started here, as root, and
//! left running for later tests; a lock keeps test processes from starting two.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub const SYSTEM_URI: &str = "qemu:///system";
const LIBVIRTD_SOCKET: &str = "/run/libvirt/libvirt-sock";
const VIRTLOGD_SOCKET: &str = "/run/libvirt/virtlogd-sock";

fn answers(socket: &str) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// Makes sure libvirtd (and virtlogd, which it sends QEMU's output to) answer.
pub fn ensure_running() {
    let lock = std::fs::File::create(super::target_dir().join("libvirtd.lock")).expect("create lock file");
    lock.lock().expect("lock");
    for (socket, daemon) in [(VIRTLOGD_SOCKET, "virtlogd"), (LIBVIRTD_SOCKET, "libvirtd")] {
        if answers(socket) {
            continue;
        }
        let program = Path::new("/usr/sbin").join(daemon);
        let status = Command::new(&program)
            .arg("-d")
            .status()
            .unwrap_or_else(|error| panic!("{} (ci/setup.sh installs libvirt-daemon-system): {error}", program.display()));
        assert!(status.success(), "{daemon} -d: {status}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !answers(socket) {
            assert!(Instant::now() < deadline, "{daemon} started but {socket} does not answer after 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether libvirt at [`SYSTEM_URI`] knows a domain of this name (virsh is the test's
/// witness, independent of the runner's client library).
pub fn has_domain(name: &str) -> bool {
    let output = Command::new("virsh")
        .args(["-c", SYSTEM_URI, "domstate", name])
        .output()
        .expect("run virsh (libvirt-clients)");
    output.status.success()
}
