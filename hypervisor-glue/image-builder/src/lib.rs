//! Builds a Holdfast appliance image into a directory:
//!
//! | file | what it is |
//! |---|---|
//! | `holdfast-kernel.elf` | the kernel, bootable by PVH (QEMU `-kernel`) or multiboot2 (GRUB) |
//! | `initial.hfi` | the initial image: the system a [`manifest`] describes (its programs and a system table) |
//! | `holdfast-boot.img` | a BIOS-bootable disk: GRUB, `grub.cfg`, the kernel and the initial image |
//!
//! [`build`] does it all from the source tree (running cargo for the guest crates);
//! [`ImageDir`] names the files and checks them before a VM is started from them.

pub mod boot_disk;
pub mod guest_build;
pub mod image_dir;
pub mod initial_image;
pub mod manifest;
pub mod program_elf;

use std::path::{Path, PathBuf};

pub use boot_disk::BootDiskError;
pub use guest_build::{GuestArtifacts, GuestBuildError};
pub use image_dir::{ImageDir, ImageDirError};
pub use initial_image::InitialImageError;
pub use manifest::{DEFAULT_MANIFEST, Manifest, ManifestError};

/// What [`build`] needs.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The root of the Holdfast source tree (the Cargo workspace).
    pub source_dir: PathBuf,
    /// Where the image files go; created if missing.
    pub out_dir: PathBuf,
    /// The manifest of the initial system.
    pub manifest: PathBuf,
    /// The kernel command line fixed in the boot disk's `grub.cfg`.
    pub grub_command_line: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Guest(#[from] GuestBuildError),
    #[error(transparent)]
    InitialImage(#[from] InitialImageError),
    #[error(transparent)]
    BootDisk(#[from] BootDiskError),
    #[error("cannot write '{}': {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl BuildError {
    /// Whether the user's input is at fault (the manifest, or a program it names) rather
    /// than the build machinery.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::Manifest(_) | Self::InitialImage(InitialImageError::Manifest(_))
        )
    }
}

/// Checks the manifest, builds the guest crates and writes the three image files,
/// reporting each step through `progress` (one line each, for a user who waits).
pub fn build(
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<ImageDir, BuildError> {
    // Before the guest build, which takes long: a mistake in the manifest is told at once.
    let manifest = Manifest::load(&options.manifest)?;
    let image_dir = ImageDir::new(&options.out_dir);
    std::fs::create_dir_all(&options.out_dir).map_err(|source| BuildError::Write {
        path: options.out_dir.clone(),
        source,
    })?;

    progress(&format!(
        "building guest crates: {}",
        guest_build::CARGO_COMMAND_TEXT
    ));
    let artifacts = guest_build::build_guest_crates(&options.source_dir)?;

    copy_file(&artifacts.kernel, &image_dir.kernel())?;
    progress(&format!("wrote {}", describe_file(&image_dir.kernel())));

    let image = initial_image::make_initial_image(&manifest, &artifacts.programs)?;
    write_file(&image_dir.initial_image(), &image)?;
    let processes: Vec<_> = manifest
        .processes
        .iter()
        .map(|process| process.name.as_str())
        .collect();
    progress(&format!(
        "wrote {}: processes {} from {}",
        describe_file(&image_dir.initial_image()),
        processes.join(", "),
        options.manifest.display()
    ));

    progress("making the GRUB boot disk: grub-mkrescue");
    boot_disk::make_boot_disk(
        &image_dir.kernel(),
        &image_dir.initial_image(),
        &options.grub_command_line,
        &image_dir.boot_disk(),
    )?;
    progress(&format!("wrote {}", describe_file(&image_dir.boot_disk())));
    Ok(image_dir)
}

fn copy_file(from: &Path, to: &Path) -> Result<(), BuildError> {
    let bytes = std::fs::read(from).map_err(|source| BuildError::Write {
        path: to.to_owned(),
        source,
    })?;
    write_file(to, &bytes)
}

/// Writes `bytes` beside `path` and renames them over it, so a VM started from the previous
/// image (or a second build racing this one) reads one whole file or the other, never a
/// file cut off mid-write: a rename replaces the name, and an open file keeps its old data.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let partial = partial_path(path);
    std::fs::write(&partial, bytes)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|source| BuildError::Write {
            path: path.to_owned(),
            source,
        })
}

/// `dir/.name.partial`: where a file of the image is written before it is renamed into place.
pub(crate) fn partial_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

/// `build/image/initial.hfi (412 KiB)`.
fn describe_file(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(metadata) => format!("{} ({} KiB)", path.display(), metadata.len().div_ceil(1024)),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// A VM started from the previous build holds its kernel open while the next build
    /// writes: it must go on reading the old file whole, and the name must give the new one.
    #[test]
    fn a_rebuilt_file_replaces_the_old_one_without_cutting_it_under_a_reader() {
        let dir = std::env::temp_dir().join(format!("holdfast-write-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("holdfast-kernel.elf");
        write_file(&path, &[1u8; 8192]).unwrap();
        let mut reader = std::fs::File::open(&path).unwrap();

        write_file(&path, &[2u8; 100]).unwrap();
        let mut old = Vec::new();
        reader.read_to_end(&mut old).unwrap();
        assert_eq!(old, vec![1u8; 8192]);
        assert_eq!(std::fs::read(&path).unwrap(), vec![2u8; 100]);
        assert!(!partial_path(&path).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
