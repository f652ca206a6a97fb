//! The micro-benchmark's Holdfast guest: the kernel and an initial image holding only the
//! `bench-micro` program, kept apart from `holdfast image build`'s image (whose program
//! list is the self-test's).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use holdfast_boot_image::{EntryKind, ImageBuilder};
use holdfast_image_builder::guest_build;

use crate::linux_peer;

/// The ring-3 program (a bin of `services/selftest`).
pub const PROGRAM: &str = "bench-micro";

/// What the Holdfast guest boots from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldfastFiles {
    pub kernel: PathBuf,
    pub initial_image: PathBuf,
}

/// An initial image of the one program.
pub fn initial_image(program: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut builder = ImageBuilder::new();
    builder
        .add(PROGRAM, EntryKind::Program, program)
        .map_err(|error| anyhow!("cannot add {PROGRAM} to the initial image: {error}"))?;
    Ok(builder.finish())
}

/// Builds the guest crates of `source_dir` (cargo, incrementally: its progress goes to
/// stderr) and keeps the initial image at `cache_directory`/bench-micro.hfi.
pub fn prepare(source_dir: &Path, cache_directory: &Path) -> anyhow::Result<HoldfastFiles> {
    let artifacts = guest_build::build_guest_crates(source_dir)?;
    let program_path = artifacts.programs.get(PROGRAM).with_context(|| {
        format!("the guest build made no program '{PROGRAM}' (a bin of services/selftest)")
    })?;
    let program = std::fs::read(program_path)
        .with_context(|| format!("cannot read {}", program_path.display()))?;
    let image = initial_image(&program)?;
    Ok(HoldfastFiles {
        kernel: artifacts.kernel,
        initial_image: linux_peer::write_cached(cache_directory, "bench-micro.hfi", &image)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_boot_image::Image;

    #[test]
    fn the_image_holds_the_program_alone() {
        let bytes = initial_image(b"\x7fELF bench").unwrap();
        let image = Image::parse(&bytes).unwrap();
        let entries: Vec<_> = image
            .entries()
            .map(|entry| (entry.name, entry.kind, entry.payload))
            .collect();
        assert_eq!(
            entries,
            [(PROGRAM, EntryKind::Program, b"\x7fELF bench".as_slice())]
        );
    }
}
