//! Finding the QEMU binary.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The QEMU system emulator Holdfast runs on.
pub const QEMU_PROGRAM: &str = "qemu-system-x86_64";

/// Environment variable naming a QEMU binary to use instead of searching `PATH`.
pub const QEMU_OVERRIDE_VARIABLE: &str = "HOLDFAST_QEMU";

/// Why no QEMU could be found. The messages are what the user sees.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QemuNotFound {
    #[error("QEMU not found: install qemu-system-x86 (looked for {QEMU_PROGRAM} in PATH)")]
    NotInPath,
    #[error("QEMU not found: {QEMU_OVERRIDE_VARIABLE} names '{}', which {problem}", path.display())]
    OverrideUnusable {
        path: PathBuf,
        problem: &'static str,
    },
}

/// A QEMU binary that exists and is executable.
#[derive(Clone, Debug)]
pub struct QemuBinary {
    path: PathBuf,
}

impl QemuBinary {
    /// `$HOLDFAST_QEMU` if set, otherwise `qemu-system-x86_64` from `PATH`.
    pub fn find() -> Result<Self, QemuNotFound> {
        Self::find_with(
            std::env::var_os(QEMU_OVERRIDE_VARIABLE).as_deref(),
            std::env::var_os("PATH").as_deref(),
        )
    }

    /// [`Self::find`] with the two environment variables passed in (for tests).
    pub fn find_with(
        override_path: Option<&OsStr>,
        search_path: Option<&OsStr>,
    ) -> Result<Self, QemuNotFound> {
        if let Some(path) = override_path.filter(|path| !path.is_empty()) {
            let path = PathBuf::from(path);
            return match executable_problem(&path) {
                None => Ok(Self { path }),
                Some(problem) => Err(QemuNotFound::OverrideUnusable { path, problem }),
            };
        }
        let search_path = search_path.map(OsString::from).unwrap_or_default();
        std::env::split_paths(&search_path)
            .map(|directory| directory.join(QEMU_PROGRAM))
            .find(|candidate| executable_problem(candidate).is_none())
            .map(|path| Self { path })
            .ok_or(QemuNotFound::NotInPath)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command that runs this QEMU, with no arguments yet.
    pub fn command(&self) -> Command {
        Command::new(&self.path)
    }

    /// QEMU's version as it reports it, e.g. `7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)`.
    pub fn version(&self) -> io::Result<String> {
        let output = self
            .command()
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let first_line = text.lines().next().unwrap_or_default();
        let version = first_line
            .strip_prefix("QEMU emulator version ")
            .unwrap_or(first_line)
            .trim();
        if !output.status.success() || version.is_empty() {
            return Err(io::Error::other(format!(
                "'{} --version' did not report a version",
                self.path.display()
            )));
        }
        Ok(version.to_owned())
    }
}

/// `None` when `path` is an executable file, otherwise what is wrong with it.
fn executable_problem(path: &Path) -> Option<&'static str> {
    match std::fs::metadata(path) {
        Err(_) => Some("does not exist"),
        Ok(metadata) if !metadata.is_file() => Some("is not a file"),
        Ok(metadata) if metadata.permissions().mode() & 0o111 == 0 => Some("is not executable"),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_search_path_names_the_package() {
        let error = QemuBinary::find_with(None, Some(OsStr::new(""))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "QEMU not found: install qemu-system-x86 (looked for qemu-system-x86_64 in PATH)"
        );
    }

    #[test]
    fn missing_override_is_named() {
        let error = QemuBinary::find_with(Some(OsStr::new("/nonexistent/qemu")), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "QEMU not found: HOLDFAST_QEMU names '/nonexistent/qemu', which does not exist"
        );
    }

    #[test]
    fn override_wins_over_search_path() {
        let found =
            QemuBinary::find_with(Some(OsStr::new("/bin/sh")), Some(OsStr::new(""))).unwrap();
        assert_eq!(found.path(), Path::new("/bin/sh"));
    }
}
