//! The micro-benchmark's Holdfast guest: the kernel and an initial image of the system
//! `bench/micro-manifest.toml` describes (`bench-micro` and the servers it times), made by
//! the image builder and kept apart from `holdfast image build`'s image (the self-test's).

use std::path::Path;

pub use crate::program_bench::HoldfastFiles;
use crate::program_bench::prepare_image;

/// The ring-3 program that times (a bin of `services/selftest`).
pub const PROGRAM: &str = "bench-micro";
/// The benchmark's system, relative to the source tree.
pub const MANIFEST: &str = "bench/micro-manifest.toml";

/// Reads the benchmark's manifest, builds the guest crates of `source_dir` (cargo,
/// incrementally: its progress goes to stderr) and keeps the initial image at
/// `cache_directory`/bench-micro.hfi.
pub fn prepare(source_dir: &Path, cache_directory: &Path) -> anyhow::Result<HoldfastFiles> {
    prepare_image(source_dir, cache_directory, MANIFEST, "bench-micro.hfi")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program_bench::initial_image;
    use holdfast_boot_image::system_table::Target;
    use holdfast_boot_image::{EntryKind, Image, SYSTEM_TABLE_ENTRY_NAME};
    use holdfast_image_builder::Manifest;
    use std::collections::BTreeMap;

    fn manifest() -> Manifest {
        let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Manifest::load(&source_dir.join(MANIFEST)).unwrap()
    }

    #[test]
    fn the_manifest_gives_bench_micro_its_servers() {
        let manifest = manifest();
        let names: Vec<_> = manifest.processes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["echo-server", "zero-keeper", "bench-micro"]);
        let bench = &manifest.processes[2];
        let targets: Vec<_> = bench.registers[..6].iter().map(|c| c.target).collect();
        assert_eq!(
            targets,
            [
                Target::Console,
                Target::Process(2),
                Target::Start {
                    process: 0,
                    badge: 0
                },
                Target::Node(1),
                Target::Start {
                    process: 1,
                    badge: 0
                },
                Target::Clock,
            ]
        );
        // zero-keeper's pool: a node of fresh pages, more than bench-micro's 15 faults.
        let Target::Node(pool) = manifest.processes[1].registers[2].target else {
            panic!("zero-keeper has no pool node");
        };
        let pages = manifest.nodes[pool as usize]
            .iter()
            .filter(|slot| matches!(slot.target, Target::Page(_)))
            .count();
        assert!(pages > 15, "{pages}");
    }

    #[test]
    fn the_image_holds_the_programs_and_a_system_table_that_decodes() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-micro-image-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        // The image builder checks each program as the kernel's loader will: a minimal
        // x86-64 executable with this ABI's note stands for each.
        let elf = holdfast_image_builder::program_elf::test_program_elf(
            62, // EM_X86_64
            Some(holdfast_abi::ABI_VERSION),
        );
        let mut programs = BTreeMap::new();
        for name in ["echo-server", "zero-keeper", PROGRAM] {
            let path = directory.join(name);
            std::fs::write(&path, &elf).unwrap();
            programs.insert(name.to_owned(), path);
        }
        let bytes = initial_image(&manifest(), &programs).unwrap();
        std::fs::remove_dir_all(&directory).unwrap();

        let image = Image::parse(&bytes).unwrap();
        let entries: Vec<_> = image
            .entries()
            .map(|entry| (entry.name, entry.kind))
            .collect();
        assert_eq!(
            entries[..3],
            [
                ("echo-server", EntryKind::Program),
                ("zero-keeper", EntryKind::Program),
                (PROGRAM, EntryKind::Program),
            ]
        );
        assert_eq!(entries.len(), 4, "{entries:?}");
        assert_eq!(entries[3].0, SYSTEM_TABLE_ENTRY_NAME);
        let table = image.system_table().expect("a system table").unwrap();
        let names: Vec<_> = table.processes().map(|process| process.name).collect();
        assert_eq!(names, ["echo-server", "zero-keeper", PROGRAM]);
        assert_eq!(table.pages().count(), 32);
    }
}
