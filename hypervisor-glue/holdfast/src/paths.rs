//! Where things are: the source tree, the default image directory, per-VM state, the cache.

use std::path::{Component, Path, PathBuf};

use crate::failure::Failure;

/// Set by the `./holdfast` script to the repository root.
const SOURCE_DIR_VARIABLE: &str = "HOLDFAST_SOURCE_DIR";
/// Overrides where named VMs keep their QMP sockets (`<dir>/<name>/qmp.sock`).
const STATE_DIR_VARIABLE: &str = "HOLDFAST_STATE_DIR";
/// Overrides where the accelerator verdict is cached.
const CACHE_DIR_VARIABLE: &str = "HOLDFAST_CACHE_DIR";

/// The longest path a Unix socket address holds (`sun_path` less its terminating NUL).
const UNIX_SOCKET_PATH_BYTES_MAX: usize = 107;

/// The repository root: `$HOLDFAST_SOURCE_DIR`, else where this binary was built from.
pub fn source_dir() -> PathBuf {
    match std::env::var_os(SOURCE_DIR_VARIABLE) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")),
    }
}

/// `build/image` in the source tree: where `holdfast image build` writes by default.
pub fn default_image_dir() -> PathBuf {
    source_dir().join("build/image")
}

/// The directory of per-VM state: `$HOLDFAST_STATE_DIR`, else `$XDG_STATE_HOME/holdfast`,
/// else `~/.local/state/holdfast`.
pub fn state_dir() -> Result<PathBuf, Failure> {
    base_dir(STATE_DIR_VARIABLE, "XDG_STATE_HOME", ".local/state")
}

/// The accelerator verdict cache file: in `$HOLDFAST_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/holdfast`, else `~/.cache/holdfast`.
pub fn accel_cache_file() -> Result<PathBuf, Failure> {
    Ok(base_dir(CACHE_DIR_VARIABLE, "XDG_CACHE_HOME", ".cache")?.join("accel.toml"))
}

/// The cache folder: `$HOLDFAST_CACHE_DIR`, else `$XDG_CACHE_HOME/holdfast`, else
/// `~/.cache/holdfast` (the accelerator verdict, the TP1 benchmark's PostgreSQL guest image).
pub fn cache_dir() -> Result<PathBuf, Failure> {
    base_dir(CACHE_DIR_VARIABLE, "XDG_CACHE_HOME", ".cache")
}

/// Where the VM named `name` listens for QMP clients.
pub fn qmp_socket_of(name: &str) -> Result<PathBuf, Failure> {
    let socket = state_dir()?.join(name).join("qmp.sock");
    check_socket_path(&socket)?;
    Ok(socket)
}

/// Where `holdfast run` records QEMU's pid: beside the VM's QMP socket.
pub fn pid_file_beside(qmp_socket: &Path) -> PathBuf {
    qmp_socket.with_file_name("qemu.pid")
}

/// Where QEMU listens for `holdfast checkpoint` and `holdfast store counters`: the host's
/// end of the guest's control channel, beside the VM's QMP socket.
pub fn control_socket_beside(qmp_socket: &Path) -> PathBuf {
    qmp_socket.with_file_name("control.sock")
}

/// Where QEMU reports its events to `holdfast run` (a second QMP monitor, so that the VM's
/// QMP socket stays free for `holdfast vm`): beside the VM's QMP socket.
pub fn event_socket_beside(qmp_socket: &Path) -> PathBuf {
    qmp_socket.with_file_name("events.sock")
}

/// Where `holdfast run` records the VM's disk images, one absolute path a line, for
/// `holdfast vm list`: beside the VM's QMP socket.
pub fn disks_file_beside(qmp_socket: &Path) -> PathBuf {
    qmp_socket.with_file_name("disks")
}

/// A QMP socket path for a VM without a name, private to this process.
pub fn private_qmp_socket() -> Result<PathBuf, Failure> {
    let socket = std::env::temp_dir()
        .join(format!("holdfast-run-{}", std::process::id()))
        .join("qmp.sock");
    check_socket_path(&socket)?;
    Ok(socket)
}

/// A VM name must make one path component and read well in messages.
pub fn check_vm_name(name: &str) -> Result<(), Failure> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(Failure::input(format!(
            "'{name}' is not a VM name: use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.' or '-'"
        )))
    }
}

fn check_socket_path(socket: &Path) -> Result<(), Failure> {
    if socket.as_os_str().len() > UNIX_SOCKET_PATH_BYTES_MAX {
        return Err(Failure::input(format!(
            "QMP socket path '{}' is longer than {UNIX_SOCKET_PATH_BYTES_MAX} bytes: set {STATE_DIR_VARIABLE} to a shorter directory",
            socket.display()
        )));
    }
    Ok(())
}

fn base_dir(
    override_variable: &str,
    xdg_variable: &str,
    home_relative: &str,
) -> Result<PathBuf, Failure> {
    let from_variable = |name| {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = from_variable(override_variable) {
        return Ok(dir);
    }
    if let Some(dir) = from_variable(xdg_variable) {
        return Ok(dir.join("holdfast"));
    }
    match from_variable("HOME") {
        Some(home) => Ok(home.join(home_relative).join("holdfast")),
        None => Err(Failure::input(format!(
            "neither {override_variable} nor HOME is set"
        ))),
    }
}

/// Drops `.` and resolves `..` textually, so messages show `/repo/build/image` rather than
/// `/repo/hypervisor-glue/holdfast/../../build/image`.
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_parent_components() {
        assert_eq!(
            normalize(Path::new("/a/b/c/../../d/./e")),
            PathBuf::from("/a/d/e")
        );
    }

    #[test]
    fn vm_names_are_single_safe_components() {
        assert!(check_vm_name("primary-1.test").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "-flag", "sp ace"] {
            assert!(check_vm_name(bad).is_err(), "{bad:?}");
        }
    }
}
