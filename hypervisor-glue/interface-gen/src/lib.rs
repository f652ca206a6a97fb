//! Generates, from the one interface description `guest-kernel/abi/interface.toml`, the
//! kernel's request decoding and the descriptor's layout, the ring-3 stubs and `syscall`,
//! and the reference documentation with its worked descriptor examples, so that the three
//! cannot disagree.

pub mod description;
pub mod invoke;
mod kernel_rust;
mod markdown;
mod userlib_rust;

use description::Description;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Paths relative to the repository root.
pub const DESCRIPTION_PATH: &str = "guest-kernel/abi/interface.toml";
pub const KERNEL_RUST_PATH: &str = "guest-kernel/abi/src/interface.rs";
pub const USERLIB_RUST_PATH: &str = "services/userlib/src/interface.rs";
pub const MARKDOWN_PATH: &str = "docs/interface.md";

pub const REGENERATE_COMMAND: &str = "cargo run -p holdfast-interface-gen";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{DESCRIPTION_PATH}: {0}")]
    Description(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rustfmt failed on the generated {path}: {message}")]
    Rustfmt { path: &'static str, message: String },
}

pub struct GeneratedFile {
    /// Relative to the repository root.
    pub path: &'static str,
    pub contents: String,
}

/// The repository this crate was built from.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The line that reports `path` as stale.
pub fn stale_line(path: &str) -> String {
    format!("stale: {path}; run `{REGENERATE_COMMAND}`")
}

/// Every generated file, from the description under `root`.
pub fn generate(root: &Path) -> Result<Vec<GeneratedFile>, Error> {
    let description_path = root.join(DESCRIPTION_PATH);
    let text = std::fs::read_to_string(&description_path).map_err(|source| Error::Io {
        path: description_path,
        source,
    })?;
    let description = Description::parse(&text).map_err(Error::Description)?;
    let rust_header = header("//");
    Ok(vec![
        GeneratedFile {
            path: KERNEL_RUST_PATH,
            contents: rustfmt(
                KERNEL_RUST_PATH,
                kernel_rust::generate(&description, &rust_header),
            )?,
        },
        GeneratedFile {
            path: USERLIB_RUST_PATH,
            contents: rustfmt(
                USERLIB_RUST_PATH,
                userlib_rust::generate(&description, &rust_header),
            )?,
        },
        GeneratedFile {
            path: MARKDOWN_PATH,
            contents: markdown::generate(&description, &header_markdown()),
        },
    ])
}

/// The generated files whose checked-in copy under `root` differs (or is missing).
pub fn stale_files(root: &Path) -> Result<Vec<GeneratedFile>, Error> {
    Ok(generate(root)?
        .into_iter()
        .filter(|file| {
            std::fs::read_to_string(root.join(file.path))
                .ok()
                .as_deref()
                != Some(file.contents.as_str())
        })
        .collect())
}

fn header(comment: &str) -> String {
    format!(
        "{comment} Generated from {DESCRIPTION_PATH} by holdfast-interface-gen; do not edit.\n\
         {comment} Change the description and regenerate: `{REGENERATE_COMMAND}`.\n"
    )
}

fn header_markdown() -> String {
    format!(
        "<!-- Generated from {DESCRIPTION_PATH} by holdfast-interface-gen; do not edit.\n     \
         Change the description and regenerate: `{REGENERATE_COMMAND}`. -->\n"
    )
}

/// Formats generated Rust as `cargo fmt` would, so that the checked-in files pass
/// `cargo fmt --check` without the generators laying out every line themselves. rustfmt
/// comes with the pinned toolchain (rust-toolchain.toml).
fn rustfmt(path: &'static str, source: String) -> Result<String, Error> {
    let failed = |message: String| Error::Rustfmt { path, message };
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| failed(format!("cannot run rustfmt: {error}")))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Written from another thread so that a large output cannot block rustfmt while we
    // are still writing its input.
    let writer = std::thread::spawn(move || stdin.write_all(source.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|error| failed(error.to_string()))?;
    writer
        .join()
        .expect("the writer thread does not panic")
        .map_err(|error| failed(error.to_string()))?;
    if !output.status.success() {
        return Err(failed(String::from_utf8_lossy(&output.stderr).into_owned()));
    }
    String::from_utf8(output.stdout).map_err(|error| failed(error.to_string()))
}
