//! The initial image: the self-test's ring-3 programs, packed by `holdfast-boot-image`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use holdfast_boot_image::{EntryKind, ImageBuilder};

/// The programs of the initial image, in the order the kernel loads and starts them.
/// `ticker` comes first so that it is running while the others fault: the self-test shows
/// that a fault is contained to its process.
pub const INITIAL_PROGRAMS: &[&str] = &[
    "ticker",
    "hello",
    "fault-null",
    "fault-gp",
    "fault-ud",
    "fault-kernel-read",
    "fault-int",
];

#[derive(Debug, thiserror::Error)]
pub enum InitialImageError {
    #[error("the guest build made no program '{name}' (is it a bin of services/selftest?)")]
    ProgramMissing { name: String },
    #[error("cannot read program '{}': {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot add '{name}' to the initial image: {error}")]
    Format {
        name: String,
        error: holdfast_boot_image::BuildError,
    },
}

/// Packs [`INITIAL_PROGRAMS`], found by name in `programs` (program name → ELF file).
pub fn make_initial_image(
    programs: &BTreeMap<String, PathBuf>,
) -> Result<Vec<u8>, InitialImageError> {
    let mut builder = ImageBuilder::new();
    for &name in INITIAL_PROGRAMS {
        let path = programs
            .get(name)
            .ok_or_else(|| InitialImageError::ProgramMissing {
                name: name.to_owned(),
            })?;
        let payload = std::fs::read(path).map_err(|source| InitialImageError::Unreadable {
            path: path.clone(),
            source,
        })?;
        builder
            .add(name, EntryKind::Program, &payload)
            .map_err(|error| InitialImageError::Format {
                name: name.to_owned(),
                error,
            })?;
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_boot_image::Image;

    #[test]
    fn programs_are_packed_in_manifest_order() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-initial-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let mut programs = BTreeMap::new();
        for name in INITIAL_PROGRAMS.iter().rev() {
            let path = directory.join(name);
            std::fs::write(&path, format!("\x7fELF {name}")).unwrap();
            programs.insert((*name).to_owned(), path);
        }
        let bytes = make_initial_image(&programs).unwrap();
        let image = Image::parse(&bytes).unwrap();
        let names: Vec<_> = image.entries().map(|entry| entry.name).collect();
        assert_eq!(names, INITIAL_PROGRAMS);
        assert_eq!(image.find("hello").unwrap().payload, b"\x7fELF hello");
        std::fs::remove_dir_all(directory).unwrap();
    }

    #[test]
    fn a_missing_program_is_named() {
        let error = make_initial_image(&BTreeMap::new()).unwrap_err();
        assert!(error.to_string().contains("no program 'ticker'"), "{error}");
    }
}
