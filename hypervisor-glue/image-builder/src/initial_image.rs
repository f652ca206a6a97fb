//! The initial image: the programs a manifest names, each checked as the kernel's loader
//! will check it, and the system table that says which processes run them and what each
//! holds, packed by `holdfast-boot-image`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use holdfast_boot_image::system_table::{self, Meter, Node, Page, Process, System};
use holdfast_boot_image::{EntryKind, ImageBuilder, SYSTEM_TABLE_ENTRY_NAME};

use crate::manifest::{Manifest, ManifestError};
use crate::program_elf::{check_program_elf, strip_program_elf};

#[derive(Debug, thiserror::Error)]
pub enum InitialImageError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
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
    #[error("cannot encode the system table: {0}")]
    SystemTable(system_table::EncodeError),
}

/// Packs the programs of `manifest`'s processes, found by name in `programs` (binary name
/// → ELF file), each once, in the order processes first name them; then the system table.
/// Today's kernel starts the programs in image order, so the manifest's process order is
/// the start order.
pub fn make_initial_image(
    manifest: &Manifest,
    programs: &BTreeMap<String, PathBuf>,
) -> Result<Vec<u8>, InitialImageError> {
    let mut builder = ImageBuilder::new();
    let mut packed_programs: Vec<&str> = Vec::new();
    let mut processes = Vec::with_capacity(manifest.processes.len());
    for process in &manifest.processes {
        let entry = format!("process '{}'", process.name);
        let program_index = match packed_programs
            .iter()
            .position(|&packed| packed == process.program)
        {
            Some(index) => index,
            None => {
                let path = programs.get(&process.program).ok_or_else(|| {
                    let built: Vec<_> = programs.keys().map(String::as_str).collect();
                    manifest.error(
                        entry.clone(),
                        format!(
                            "no program '{}' in the guest build (it has {})",
                            process.program,
                            built.join(", ")
                        ),
                    )
                })?;
                let payload =
                    std::fs::read(path).map_err(|source| InitialImageError::Unreadable {
                        path: path.clone(),
                        source,
                    })?;
                let payload = check_program_elf(&payload)
                    .and_then(|()| strip_program_elf(&payload))
                    .map_err(|problem| {
                        manifest.error(
                            format!("{entry} program '{}'", process.program),
                            format!("'{}': {problem}", path.display()),
                        )
                    })?;
                builder
                    .add(&process.program, EntryKind::Program, &payload)
                    .map_err(|error| InitialImageError::Format {
                        name: process.program.clone(),
                        error,
                    })?;
                packed_programs.push(&process.program);
                packed_programs.len() - 1
            }
        };
        processes.push(Process {
            name: &process.name,
            program: program_index as u32,
            keeper: process.keeper,
            meter: process.meter,
            registers: process.registers,
            template: process.template,
        });
    }
    let system = System {
        program_count: packed_programs.len() as u32,
        processes,
        nodes: manifest.nodes.iter().map(|&slots| Node { slots }).collect(),
        pages: manifest
            .pages
            .iter()
            .map(|page| Page {
                contents: &page.contents,
                fill: page.fill,
            })
            .collect(),
        meters: manifest
            .meters
            .iter()
            .map(|meter| Meter { microseconds: meter.microseconds, parent: meter.parent })
            .collect(),
    };
    let table = system_table::encode(&system).map_err(InitialImageError::SystemTable)?;
    builder
        .add(SYSTEM_TABLE_ENTRY_NAME, EntryKind::SystemTable, &table)
        .map_err(|error| InitialImageError::Format {
            name: SYSTEM_TABLE_ENTRY_NAME.to_owned(),
            error,
        })?;
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::program_elf::test_program_elf;
    use holdfast_boot_image::Image;
    use holdfast_boot_image::system_table::{Capability, Target};

    const FILE: &str = "services/manifest.toml";

    /// A folder of program files, named by the test, removed when dropped.
    struct ProgramFolder {
        path: PathBuf,
        programs: BTreeMap<String, PathBuf>,
    }

    impl ProgramFolder {
        fn new(test_name: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "holdfast-initial-{test_name}-{}",
                std::process::id()
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self {
                path,
                programs: BTreeMap::new(),
            }
        }

        fn add(&mut self, name: &str, bytes: &[u8]) {
            let file = self.path.join(name);
            std::fs::write(&file, bytes).unwrap();
            self.programs.insert(name.to_owned(), file);
        }
    }

    impl Drop for ProgramFolder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }

    fn good_program() -> Vec<u8> {
        test_program_elf(elf::abi::EM_X86_64, Some(holdfast_abi::ABI_VERSION))
    }

    fn manifest(text: &str) -> Manifest {
        Manifest::parse(text, Path::new(FILE), Path::new(".")).unwrap()
    }

    #[test]
    fn programs_are_packed_once_in_process_order_beside_the_system_table() {
        let mut folder = ProgramFolder::new("order");
        for name in ["hello", "ticker", "unused"] {
            folder.add(name, &good_program());
        }
        let manifest = manifest(
            r#"
            [[process]]
            name = "first"
            program = "ticker"
            registers = { 0 = { console = {} } }
            [[process]]
            name = "second"
            program = "hello"
            [[process]]
            name = "third"
            program = "ticker"
            registers = { 1 = { own-process = {} } }
            "#,
        );
        let bytes = make_initial_image(&manifest, &folder.programs).unwrap();
        let image = Image::parse(&bytes).unwrap();
        let programs: Vec<_> = image.programs().map(|entry| entry.name).collect();
        assert_eq!(programs, ["ticker", "hello"]);
        let table = image.system_table().unwrap().unwrap();
        let processes: Vec<_> = table
            .processes()
            .map(|process| (process.name, process.program))
            .collect();
        assert_eq!(processes, [("first", 0), ("second", 1), ("third", 0)]);
        let third = table.processes().nth(2).unwrap();
        assert_eq!(third.registers[1], Capability::new(Target::Process(2)));
    }

    #[test]
    fn unknown_program_is_named_with_what_the_build_has() {
        let mut folder = ProgramFolder::new("unknown");
        folder.add("hello", &good_program());
        folder.add("ticker", &good_program());
        let manifest = manifest("[[process]]\nname = \"echo\"\nprogram = \"echo\"\n");
        let error = make_initial_image(&manifest, &folder.programs).unwrap_err();
        assert_eq!(
            error.to_string(),
            "services/manifest.toml: process 'echo': no program 'echo' in the guest build (it has hello, ticker)"
        );
    }

    #[test]
    fn malformed_program_is_named_with_its_file() {
        let mut folder = ProgramFolder::new("malformed");
        folder.add("hello", b"#!/bin/sh\necho hello\n");
        let manifest = manifest("[[process]]\nname = \"greeter\"\nprogram = \"hello\"\n");
        let error = make_initial_image(&manifest, &folder.programs).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "services/manifest.toml: process 'greeter' program 'hello': '{}': not an ELF file",
                folder.programs["hello"].display()
            )
        );
    }

    #[test]
    fn program_without_abi_note_is_refused() {
        let mut folder = ProgramFolder::new("no-note");
        folder.add("hello", &test_program_elf(elf::abi::EM_X86_64, None));
        let manifest = manifest("[[process]]\nname = \"greeter\"\nprogram = \"hello\"\n");
        let error = make_initial_image(&manifest, &folder.programs).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "services/manifest.toml: process 'greeter' program 'hello': '{}': no Holdfast ABI note (not built with holdfast-userlib)",
                folder.programs["hello"].display()
            )
        );
    }
}
