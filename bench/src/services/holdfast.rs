//! The services benchmark's Holdfast guest: the kernel and an initial image of the system
//! `bench/services-manifest.toml` describes (`bench-services`, the space bank, a constructor
//! of `echo-server` and an `echo-server`), made by the image builder and kept apart from
//! `holdfast image build`'s image.

use std::path::Path;

use crate::program_bench::{HoldfastFiles, prepare_image};

/// The ring-3 program that times (a bin of `services/selftest`).
pub const PROGRAM: &str = "bench-services";
/// The benchmark's system, relative to the source tree.
pub const MANIFEST: &str = "bench/services-manifest.toml";

/// Reads the benchmark's manifest, builds the guest crates of `source_dir` (cargo,
/// incrementally) and keeps the initial image at `cache_directory`/bench-services.hfi.
pub fn prepare(source_dir: &Path, cache_directory: &Path) -> anyhow::Result<HoldfastFiles> {
    prepare_image(source_dir, cache_directory, MANIFEST, "bench-services.hfi")
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_boot_image::system_table::Target;
    use holdfast_image_builder::Manifest;

    #[test]
    fn the_manifest_gives_bench_services_a_bank_a_constructor_a_meter_and_echo_server() {
        // Processes 0 to 5 as in the manifest; the constructor (4) yields through the
        // virtual copy keeper (3).
        let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifest = Manifest::load(&source_dir.join(MANIFEST)).unwrap();
        let names: Vec<_> = manifest.processes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "space-bank",
                "echo-server",
                "echo-template",
                "virtual-copy",
                "constructor",
                PROGRAM
            ]
        );
        let program = |index: usize| manifest.processes[index].program.as_str();
        assert_eq!(program(2), "echo-server");
        assert_eq!(program(3), "virtual-copy");
        assert_eq!(program(4), "constructor");
        let bench = &manifest.processes[5];
        let targets: Vec<_> = bench.registers[2..6].iter().map(|c| c.target).collect();
        assert!(
            matches!(
                targets[..],
                [
                    Target::Start {
                        process: 0,
                        badge: 1
                    },
                    Target::Start {
                        process: 4,
                        badge: 0
                    },
                    Target::Meter(_),
                    Target::Start {
                        process: 1,
                        badge: 0
                    },
                ]
            ),
            "{targets:?}"
        );
        // The constructor's template is echo-server's process that never runs.
        assert_eq!(
            manifest.processes[4].registers[2].target,
            Target::Process(2)
        );
    }
}
