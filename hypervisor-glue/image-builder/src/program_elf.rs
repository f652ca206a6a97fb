//! The checks the kernel's loader makes on a ring-3 program, made on the host first, so that
//! a program the kernel would refuse is named at build time instead of failing at boot.

use std::fmt;

use elf::endian::LittleEndian;
use holdfast_abi as abi;

/// What is wrong with a program's ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramElfError {
    NotElf,
    NotSixtyFourBit { class: u8 },
    NotLittleEndian,
    Damaged { reason: String },
    WrongMachine { machine: u16 },
    NotStaticExecutable,
    NoAbiNote,
    AbiVersion { found: u32 },
    WritableAndExecutable { virtual_address: u64 },
}

impl fmt::Display for ProgramElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotElf => write!(f, "not an ELF file"),
            Self::NotSixtyFourBit { class } => {
                write!(f, "ELF class {class}, not 64-bit (2)")
            }
            Self::NotLittleEndian => write!(f, "a big-endian ELF file, not little-endian"),
            Self::Damaged { reason } => write!(f, "a damaged ELF file: {reason}"),
            Self::WrongMachine { machine } => write!(
                f,
                "built for ELF machine {machine}, not x86-64 ({})",
                elf::abi::EM_X86_64
            ),
            Self::NotStaticExecutable => write!(f, "not a statically linked executable"),
            Self::NoAbiNote => write!(f, "no Holdfast ABI note (not built with holdfast-userlib)"),
            Self::WritableAndExecutable { virtual_address } => write!(
                f,
                "the page at {virtual_address:#x} would be writable and executable (W^X: keep .data and .text in pages of their own)"
            ),
            Self::AbiVersion { found } => write!(
                f,
                "built for ABI version {found}, the kernel has version {}",
                abi::ABI_VERSION
            ),
        }
    }
}

/// Checks that `bytes` is a program the kernel will load: a 64-bit little-endian x86-64
/// static executable carrying the Holdfast ABI note of this ABI version.
pub fn check_program_elf(bytes: &[u8]) -> Result<(), ProgramElfError> {
    // The identification bytes are checked by hand so that the message says which is wrong.
    if bytes.get(..4) != Some(&elf::abi::ELFMAGIC[..]) {
        return Err(ProgramElfError::NotElf);
    }
    match bytes.get(elf::abi::EI_CLASS) {
        Some(&class) if class == elf::abi::ELFCLASS64 => {}
        Some(&class) => return Err(ProgramElfError::NotSixtyFourBit { class }),
        None => return Err(ProgramElfError::NotElf),
    }
    if bytes.get(elf::abi::EI_DATA) != Some(&elf::abi::ELFDATA2LSB) {
        return Err(ProgramElfError::NotLittleEndian);
    }
    let file = elf::ElfBytes::<LittleEndian>::minimal_parse(bytes).map_err(|error| {
        ProgramElfError::Damaged {
            reason: error.to_string(),
        }
    })?;
    if file.ehdr.e_machine != elf::abi::EM_X86_64 {
        return Err(ProgramElfError::WrongMachine {
            machine: file.ehdr.e_machine,
        });
    }
    if file.ehdr.e_type != elf::abi::ET_EXEC {
        return Err(ProgramElfError::NotStaticExecutable);
    }
    check_writable_xor_executable(&file)?;
    match abi_version_of(&file) {
        None => Err(ProgramElfError::NoAbiNote),
        Some(abi::ABI_VERSION) => Ok(()),
        Some(found) => Err(ProgramElfError::AbiVersion { found }),
    }
}

/// No page both writable and executable, from one segment or two that share it: the
/// kernel's loader refuses such a program (W^X).
fn check_writable_xor_executable(file: &elf::ElfBytes<LittleEndian>) -> Result<(), ProgramElfError> {
    let page = 4096;
    let mut loads: Vec<(std::ops::Range<u64>, u32)> = Vec::new();
    for segment in file.segments().into_iter().flatten() {
        if segment.p_type != elf::abi::PT_LOAD {
            continue;
        }
        let end = segment.p_vaddr.saturating_add(segment.p_memsz);
        let pages = segment.p_vaddr / page..end.div_ceil(page);
        let flags = loads
            .iter()
            .filter(|(other, _)| other.start < pages.end && pages.start < other.end)
            .fold(segment.p_flags, |flags, (_, other_flags)| flags | other_flags);
        if flags & elf::abi::PF_W != 0 && flags & elf::abi::PF_X != 0 {
            return Err(ProgramElfError::WritableAndExecutable {
                virtual_address: segment.p_vaddr,
            });
        }
        loads.push((pages, segment.p_flags));
    }
    Ok(())
}

/// The program as it goes into the initial image: the bytes up to the end of the last
/// segment or header the loader reads, each at its offset and unchanged, with the section
/// headers and what only they describe (debug information, symbols: most of a release
/// build's file, which keeps `debug = 1`) left out, as `objcopy --strip-sections` does. The
/// kernel loads programs by their program headers alone and checks every byte of the image
/// at boot, so the smaller image boots faster; the unstripped file stays in the guest
/// build's target directory for debugging. `bytes` must have passed [`check_program_elf`].
pub fn strip_program_elf(bytes: &[u8]) -> Result<Vec<u8>, ProgramElfError> {
    let damaged = |reason: &str| ProgramElfError::Damaged {
        reason: reason.to_owned(),
    };
    let file = elf::ElfBytes::<LittleEndian>::minimal_parse(bytes).map_err(|error| {
        ProgramElfError::Damaged {
            reason: error.to_string(),
        }
    })?;
    let header = &file.ehdr;
    let program_headers_end = header
        .e_phoff
        .checked_add(u64::from(header.e_phnum) * u64::from(header.e_phentsize))
        .ok_or_else(|| damaged("program header table past the end of the address space"))?;
    let mut end = program_headers_end.max(u64::from(header.e_ehsize));
    // Empty segments too: a bss segment's offset lies past the data before it, and the
    // kernel's loader (like others) wants every segment's range inside the file.
    for segment in file.segments().into_iter().flatten() {
        let segment_end = segment
            .p_offset
            .checked_add(segment.p_filesz)
            .ok_or_else(|| damaged("segment past the end of the address space"))?;
        end = end.max(segment_end);
    }
    let end = usize::try_from(end)
        .ok()
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| damaged("a segment lies outside the file"))?;
    let mut stripped = bytes[..end].to_vec();
    // No section headers: e_shoff, e_shentsize, e_shnum and e_shstrndx all zero.
    stripped[40..48].fill(0);
    stripped[58..64].fill(0);
    Ok(stripped)
}

/// The version in the program's ABI note, found as the kernel finds it.
fn abi_version_of(file: &elf::ElfBytes<LittleEndian>) -> Option<u32> {
    file.segments()?
        .iter()
        .filter(|segment| segment.p_type == elf::abi::PT_NOTE)
        .filter_map(|segment| file.segment_data_as_notes(&segment).ok())
        .flatten()
        .find_map(|note| match note {
            elf::note::Note::Unknown(any)
                if any.n_type == u64::from(abi::note::TYPE_ABI_VERSION)
                    && any.name == abi::note::NAME =>
            {
                Some(u32::from_le_bytes(any.desc.get(..4)?.try_into().ok()?))
            }
            _ => None,
        })
}

/// A minimal program ELF for tests: a header and one `PT_NOTE` segment holding the ABI
/// note, with the fields the checks look at set from the arguments. Public for the tests
/// of crates that make initial images (`holdfast-bench`).
#[doc(hidden)]
pub fn test_program_elf(machine: u16, abi_version: Option<u32>) -> Vec<u8> {
    const HEADER_BYTES: usize = 64;
    const PROGRAM_HEADER_BYTES: usize = 56;
    let mut note = Vec::new();
    if let Some(version) = abi_version {
        let name = abi::note::NAME;
        note.extend_from_slice(&(name.len() as u32).to_le_bytes());
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&abi::note::TYPE_ABI_VERSION.to_le_bytes());
        note.extend_from_slice(name);
        note.resize(note.len().next_multiple_of(4), 0);
        note.extend_from_slice(&version.to_le_bytes());
    }
    let note_offset = (HEADER_BYTES + PROGRAM_HEADER_BYTES) as u64;
    let mut bytes = vec![0u8; HEADER_BYTES];
    bytes[..4].copy_from_slice(&elf::abi::ELFMAGIC);
    bytes[elf::abi::EI_CLASS] = elf::abi::ELFCLASS64;
    bytes[elf::abi::EI_DATA] = elf::abi::ELFDATA2LSB;
    bytes[elf::abi::EI_VERSION] = 1;
    bytes[16..18].copy_from_slice(&elf::abi::ET_EXEC.to_le_bytes());
    bytes[18..20].copy_from_slice(&machine.to_le_bytes());
    bytes[20..24].copy_from_slice(&1u32.to_le_bytes());
    bytes[32..40].copy_from_slice(&(HEADER_BYTES as u64).to_le_bytes());
    bytes[52..54].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
    bytes[54..56].copy_from_slice(&(PROGRAM_HEADER_BYTES as u16).to_le_bytes());
    bytes[56..58].copy_from_slice(&1u16.to_le_bytes());
    let mut program_header = vec![0u8; PROGRAM_HEADER_BYTES];
    program_header[..4].copy_from_slice(&elf::abi::PT_NOTE.to_le_bytes());
    program_header[8..16].copy_from_slice(&note_offset.to_le_bytes());
    program_header[32..40].copy_from_slice(&(note.len() as u64).to_le_bytes());
    program_header[40..48].copy_from_slice(&(note.len() as u64).to_le_bytes());
    program_header[48..56].copy_from_slice(&4u64.to_le_bytes());
    bytes.extend_from_slice(&program_header);
    bytes.extend_from_slice(&note);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: &[u8]) -> String {
        check_program_elf(bytes).unwrap_err().to_string()
    }

    #[test]
    fn a_program_built_for_this_kernel_passes() {
        check_program_elf(&test_program_elf(
            elf::abi::EM_X86_64,
            Some(abi::ABI_VERSION),
        ))
        .unwrap();
    }

    /// A program with a non-loadable section after its segments, described by a section
    /// header table, as the debug sections of a release build are.
    fn program_with_debug_section() -> (Vec<u8>, usize) {
        let mut bytes = test_program_elf(elf::abi::EM_X86_64, Some(abi::ABI_VERSION));
        let segments_end = bytes.len();
        let debug_offset = segments_end as u64;
        bytes.extend_from_slice(&[0xdb; 3000]);
        let section_headers_offset = bytes.len() as u64;
        bytes.extend_from_slice(&[0; 64]);
        let mut debug = [0u8; 64];
        debug[4..8].copy_from_slice(&elf::abi::SHT_PROGBITS.to_le_bytes());
        debug[24..32].copy_from_slice(&debug_offset.to_le_bytes());
        debug[32..40].copy_from_slice(&3000u64.to_le_bytes());
        bytes.extend_from_slice(&debug);
        bytes[40..48].copy_from_slice(&section_headers_offset.to_le_bytes());
        bytes[58..60].copy_from_slice(&64u16.to_le_bytes());
        bytes[60..62].copy_from_slice(&2u16.to_le_bytes());
        (bytes, segments_end)
    }

    #[test]
    fn stripping_keeps_the_segments_and_drops_the_sections() {
        let (bytes, segments_end) = program_with_debug_section();
        let file = elf::ElfBytes::<LittleEndian>::minimal_parse(&bytes[..]).unwrap();
        assert_eq!(file.section_headers().unwrap().len(), 2);
        check_program_elf(&bytes).unwrap();

        let stripped = strip_program_elf(&bytes).unwrap();
        assert_eq!(stripped.len(), segments_end);
        check_program_elf(&stripped).unwrap();
        let stripped_file = elf::ElfBytes::<LittleEndian>::minimal_parse(&stripped[..]).unwrap();
        assert!(stripped_file.section_headers().is_none());
        let segments: Vec<_> = file.segments().unwrap().iter().collect();
        assert_eq!(
            stripped_file.segments().unwrap().iter().collect::<Vec<_>>(),
            segments
        );
        for segment in segments {
            let range = segment.p_offset as usize..(segment.p_offset + segment.p_filesz) as usize;
            assert_eq!(stripped[range.clone()], bytes[range]);
        }
        // Only the section header fields of the ELF header changed.
        assert_eq!(stripped[..40], bytes[..40]);
        assert_eq!(stripped[48..58], bytes[48..58]);
        assert_eq!(stripped[64..], bytes[64..segments_end]);
    }

    #[test]
    fn stripping_refuses_a_segment_outside_the_file() {
        let mut bytes = test_program_elf(elf::abi::EM_X86_64, Some(abi::ABI_VERSION));
        let file_size_at = 64 + 32;
        bytes[file_size_at..file_size_at + 8].copy_from_slice(&10_000u64.to_le_bytes());
        assert_eq!(
            strip_program_elf(&bytes).unwrap_err().to_string(),
            "a damaged ELF file: a segment lies outside the file"
        );
    }

    #[test]
    fn each_problem_has_its_message() {
        let good = test_program_elf(elf::abi::EM_X86_64, Some(abi::ABI_VERSION));
        assert_eq!(message(b"#!/bin/sh\n"), "not an ELF file");
        let mut thirty_two_bit = good.clone();
        thirty_two_bit[elf::abi::EI_CLASS] = elf::abi::ELFCLASS32;
        assert_eq!(message(&thirty_two_bit), "ELF class 1, not 64-bit (2)");
        let mut big_endian = good.clone();
        big_endian[elf::abi::EI_DATA] = elf::abi::ELFDATA2MSB;
        assert_eq!(
            message(&big_endian),
            "a big-endian ELF file, not little-endian"
        );
        assert!(message(&good[..40]).starts_with("a damaged ELF file: "));
        assert_eq!(
            message(&test_program_elf(
                elf::abi::EM_AARCH64,
                Some(abi::ABI_VERSION)
            )),
            "built for ELF machine 183, not x86-64 (62)"
        );
        let mut shared_object = good.clone();
        shared_object[16..18].copy_from_slice(&elf::abi::ET_DYN.to_le_bytes());
        assert_eq!(
            message(&shared_object),
            "not a statically linked executable"
        );
        // Its one segment made a loadable one, writable and executable, at 0x400000.
        let mut writable_code = good.clone();
        writable_code[64..68].copy_from_slice(&elf::abi::PT_LOAD.to_le_bytes());
        writable_code[68..72].copy_from_slice(&(elf::abi::PF_R | elf::abi::PF_W | elf::abi::PF_X).to_le_bytes());
        writable_code[80..88].copy_from_slice(&0x40_0000u64.to_le_bytes());
        assert_eq!(
            message(&writable_code),
            "the page at 0x400000 would be writable and executable (W^X: keep .data and .text in pages of their own)"
        );
        assert_eq!(
            message(&test_program_elf(elf::abi::EM_X86_64, None)),
            "no Holdfast ABI note (not built with holdfast-userlib)"
        );
        assert_eq!(
            message(&test_program_elf(elf::abi::EM_X86_64, Some(99))),
            format!(
                "built for ABI version 99, the kernel has version {}",
                abi::ABI_VERSION
            )
        );
    }
}
