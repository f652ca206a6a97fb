//! The image directory's layout, and the checks made before a VM starts from it.

use std::io::Read;
use std::path::{Path, PathBuf};

use holdfast_boot_image::Image;

pub const KERNEL_FILE: &str = "holdfast-kernel.elf";
pub const INITIAL_IMAGE_FILE: &str = "initial.hfi";
pub const BOOT_DISK_FILE: &str = "holdfast-boot.img";

const ELF_MAGIC: [u8; 4] = *b"\x7fELF";

/// What is wrong with an image directory. The messages are what the user sees.
#[derive(Debug, thiserror::Error)]
pub enum ImageDirError {
    #[error("image directory '{}' not found: run 'holdfast image build' first", path.display())]
    DirectoryMissing { path: PathBuf },
    #[error("'{}' not found: run 'holdfast image build' to make it", path.display())]
    FileMissing { path: PathBuf },
    #[error("'{}' cannot be read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("'{}' is not a Holdfast image: {error}", path.display())]
    NotAnImage {
        path: PathBuf,
        error: holdfast_boot_image::FormatError,
    },
    #[error("'{}' has a bad system table: {error}", path.display())]
    BadSystemTable {
        path: PathBuf,
        error: holdfast_boot_image::SystemTableError,
    },
    #[error("'{}' is not a kernel: it is not an ELF file", path.display())]
    NotAKernel { path: PathBuf },
}

/// A directory made by `holdfast image build`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageDir {
    path: PathBuf,
}

impl ImageDir {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kernel(&self) -> PathBuf {
        self.path.join(KERNEL_FILE)
    }

    pub fn initial_image(&self) -> PathBuf {
        self.path.join(INITIAL_IMAGE_FILE)
    }

    pub fn boot_disk(&self) -> PathBuf {
        self.path.join(BOOT_DISK_FILE)
    }

    /// Checks what a PVH boot needs: an ELF kernel and an initial image that parses (every
    /// checksum included).
    pub fn check_for_pvh_boot(&self) -> Result<(), ImageDirError> {
        self.check_directory()?;
        let kernel = self.kernel();
        let mut magic = [0u8; 4];
        let mut file = open(&kernel)?;
        file.read_exact(&mut magic)
            .map_err(|_| ImageDirError::NotAKernel {
                path: kernel.clone(),
            })?;
        if magic != ELF_MAGIC {
            return Err(ImageDirError::NotAKernel { path: kernel });
        }
        check_initial_image(&self.initial_image())
    }

    /// Checks what a GRUB boot needs: the boot disk.
    pub fn check_for_disk_boot(&self) -> Result<(), ImageDirError> {
        self.check_directory()?;
        open(&self.boot_disk()).map(drop)
    }

    fn check_directory(&self) -> Result<(), ImageDirError> {
        if self.path.is_dir() {
            Ok(())
        } else {
            Err(ImageDirError::DirectoryMissing {
                path: self.path.clone(),
            })
        }
    }
}

/// Parses the file as an initial image, verifying every checksum, and decodes its system
/// table as the kernel will.
pub fn check_initial_image(path: &Path) -> Result<(), ImageDirError> {
    let mut bytes = Vec::new();
    open(path)?
        .read_to_end(&mut bytes)
        .map_err(|source| ImageDirError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
    let image = Image::parse(&bytes).map_err(|error| ImageDirError::NotAnImage {
        path: path.to_owned(),
        error,
    })?;
    match image.system_table() {
        Some(Err(error)) => Err(ImageDirError::BadSystemTable {
            path: path.to_owned(),
            error,
        }),
        _ => Ok(()),
    }
}

fn open(path: &Path) -> Result<std::fs::File, ImageDirError> {
    std::fs::File::open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ImageDirError::FileMissing {
            path: path.to_owned(),
        },
        _ => ImageDirError::Unreadable {
            path: path.to_owned(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directory_says_to_build() {
        let error = ImageDir::new("/nonexistent/image")
            .check_for_pvh_boot()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "image directory '/nonexistent/image' not found: run 'holdfast image build' first"
        );
    }

    #[test]
    fn damaged_system_table_is_named() {
        let mut builder = holdfast_boot_image::ImageBuilder::new();
        builder
            .add(
                holdfast_boot_image::SYSTEM_TABLE_ENTRY_NAME,
                holdfast_boot_image::EntryKind::SystemTable,
                &[0u8; 64],
            )
            .unwrap();
        let path = std::env::temp_dir().join(format!("holdfast-bad-system-{}", std::process::id()));
        std::fs::write(&path, builder.finish()).unwrap();
        let error = check_initial_image(&path).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "'{}' has a bad system table: bad magic (not a system table)",
                path.display()
            )
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn garbage_is_not_an_image() {
        let path =
            std::env::temp_dir().join(format!("holdfast-not-an-image-{}", std::process::id()));
        std::fs::write(&path, [0u8; 100]).unwrap();
        let error = check_initial_image(&path).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "'{}' is not a Holdfast image: bad magic (not a Holdfast image)",
                path.display()
            )
        );
        std::fs::remove_file(path).unwrap();
    }
}
