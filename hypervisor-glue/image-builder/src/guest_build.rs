//! Building the guest crates (kernel and ring-3 programs) with cargo.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The guest target: bare x86-64, no operating system underneath.
pub const GUEST_TARGET: &str = "x86_64-unknown-none";

/// The crates that make up the guest.
pub const GUEST_PACKAGES: &[&str] = &["holdfast-kernel", "holdfast-selftest", "holdfast-admin", "holdfast-net", "holdfast-tp1", "holdfast-space-bank", "holdfast-constructor", "holdfast-virtual-copy", "holdfast-meter-keeper", "holdfast-keysafe"];

/// The kernel's binary target name.
pub const KERNEL_BINARY: &str = "holdfast-kernel";

/// The build command as the user should read it in progress lines.
pub const CARGO_COMMAND_TEXT: &str =
    "cargo build --release --target x86_64-unknown-none -p holdfast-kernel -p holdfast-selftest -p holdfast-admin -p holdfast-net -p holdfast-tp1 -p holdfast-space-bank -p holdfast-constructor -p holdfast-virtual-copy -p holdfast-meter-keeper -p holdfast-keysafe";

#[derive(Debug, thiserror::Error)]
pub enum GuestBuildError {
    #[error("cannot run cargo: {0}")]
    CargoNotRun(std::io::Error),
    #[error("building the guest crates failed ({status}); cargo's messages are above")]
    CargoFailed { status: std::process::ExitStatus },
    #[error("the guest build made no kernel binary '{KERNEL_BINARY}'")]
    KernelMissing,
}

/// What the guest build produced: the kernel and every ring-3 program, by binary name.
#[derive(Clone, Debug)]
pub struct GuestArtifacts {
    pub kernel: PathBuf,
    pub programs: BTreeMap<String, PathBuf>,
}

/// Runs cargo for the guest crates in `source_dir` (release profile, guest target).
/// Cargo's own progress and diagnostics go to stderr as usual; the executables' paths come
/// from its JSON messages, so `CARGO_TARGET_DIR` and the like are respected.
pub fn build_guest_crates(source_dir: &Path) -> Result<GuestArtifacts, GuestBuildError> {
    // Run the same cargo as our caller when there is one (`cargo test`, `cargo run`).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(source_dir)
        .args(["build", "--release", "--target", GUEST_TARGET])
        .args(GUEST_PACKAGES.iter().flat_map(|package| ["-p", package]))
        .arg("--message-format=json-render-diagnostics")
        // The guest's compiler flags come from .cargo/config.toml; RUSTFLAGS set for host
        // builds would replace them (and the guest must be linked without PIE).
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().map_err(GuestBuildError::CargoNotRun)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut executables = BTreeMap::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(GuestBuildError::CargoNotRun)?;
        if let Some((name, path)) = executable_of_message(&line) {
            executables.insert(name, path);
        }
    }
    let status = child.wait().map_err(GuestBuildError::CargoNotRun)?;
    if !status.success() {
        return Err(GuestBuildError::CargoFailed { status });
    }
    let kernel = executables
        .remove(KERNEL_BINARY)
        .ok_or(GuestBuildError::KernelMissing)?;
    Ok(GuestArtifacts {
        kernel,
        programs: executables,
    })
}

/// The (binary name, executable path) of a cargo `compiler-artifact` message that made an
/// executable.
fn executable_of_message(line: &str) -> Option<(String, PathBuf)> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let executable = message.get("executable")?.as_str()?;
    let name = message.get("target")?.get("name")?.as_str()?;
    Some((name.to_owned(), PathBuf::from(executable)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_are_taken_from_artifact_messages() {
        let artifact = r#"{"reason":"compiler-artifact","target":{"name":"hello","kind":["bin"]},"executable":"/t/release/hello"}"#;
        assert_eq!(
            executable_of_message(artifact),
            Some(("hello".to_owned(), PathBuf::from("/t/release/hello")))
        );
        let library =
            r#"{"reason":"compiler-artifact","target":{"name":"userlib"},"executable":null}"#;
        assert_eq!(executable_of_message(library), None);
        assert_eq!(
            executable_of_message(r#"{"reason":"build-finished","success":true}"#),
            None
        );
        assert_eq!(executable_of_message("not json"), None);
    }

    #[test]
    fn command_text_matches_the_constants() {
        let packages: Vec<_> = GUEST_PACKAGES.iter().map(|p| format!("-p {p}")).collect();
        assert_eq!(
            CARGO_COMMAND_TEXT,
            format!(
                "cargo build --release --target {GUEST_TARGET} {}",
                packages.join(" ")
            )
        );
    }
}
