//! The Holdfast initial image (`.hfi`), format version 1.
//!
//! The image travels beside the kernel (a PVH module or a multiboot2 module) and holds the
//! ring-3 programs the kernel starts and the system table ([`system_table`]) that says
//! which processes run them and what capabilities each holds. All integers are
//! little-endian.
//!
//! ```text
//! offset  size  field
//! 0       8     magic "HOLDFAST"
//! 8       4     format version (1)
//! 12      4     entry count (at most ENTRY_COUNT_MAX)
//! 16      8     image length in bytes (the whole file)
//! 24      4     CRC-32C of the header and the entry table, this field taken as zero
//! 28      4     reserved, zero
//! 32      64×n  entry table
//! ...           payloads, each starting on a PAYLOAD_ALIGN boundary
//!
//! entry:  0 name (32 bytes, UTF-8, NUL-padded, non-empty)
//!        32 kind (u32, 1 = ring-3 program as an ELF file, 2 = system table)
//!        36 reserved (u32, zero)
//!        40 payload offset (u64)
//!        48 payload length (u64)
//!        56 CRC-32C of the payload (u32)
//!        60 reserved (u32, zero)
//! ```
//!
//! Each payload's checksum lives in the table, apart from the payload, and the table is
//! covered by the header checksum: a payload written to the wrong place, truncated or
//! bit-rotted is caught, and so is a damaged table.
#![cfg_attr(not(test), no_std)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod system_table;

use core::fmt;

pub use system_table::{SystemTable, SystemTableError};

pub const MAGIC: [u8; 8] = *b"HOLDFAST";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 32;
pub const ENTRY_BYTES: usize = 64;
pub const ENTRY_NAME_BYTES: usize = 32;
pub const ENTRY_COUNT_MAX: u32 = 256;
pub const PAYLOAD_ALIGN: usize = 4096;

/// The table-driven CRC-32C, for CPUs without SSE4.2.
static CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// CRC-32C (Castagnoli), the checksum of every Holdfast record.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut digest = Crc32cDigest::new();
    digest.update(bytes);
    digest.finalize()
}

/// A CRC-32C over bytes given in pieces. With SSE4.2 it uses the `crc32` instruction
/// (8 bytes an instruction); without, the `crc` crate's tables (a table load a byte or
/// two). The kernel checks the whole initial image at boot. Under QEMU's TCG the two were
/// measured alike (a 13.3 MB image: 0.80 s with the instruction, 0.69 s with the tables, on
/// a loaded host: TCG emulates `crc32` a byte at a time); on hardware and under KVM the
/// instruction is the fast one.
pub(crate) enum Crc32cDigest {
    /// The CRC register as the `crc32` instruction keeps it: inverted, not yet finalized.
    Instruction(u32),
    Table(crc::Digest<'static, u32>),
}

impl Crc32cDigest {
    pub(crate) fn new() -> Self {
        if crc32_instruction::available() {
            Self::Instruction(!0)
        } else {
            Self::Table(CRC32C.digest())
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Instruction(register) => *register = crc32_instruction::update(*register, bytes),
            Self::Table(digest) => digest.update(bytes),
        }
    }

    pub(crate) fn finalize(self) -> u32 {
        match self {
            Self::Instruction(register) => !register,
            Self::Table(digest) => digest.finalize(),
        }
    }
}

/// The SSE4.2 `crc32` instruction, which computes CRC-32C (an integer instruction: the
/// soft-float kernel target may use it), chosen at run time after a CPUID check.
#[cfg(target_arch = "x86_64")]
mod crc32_instruction {
    use core::arch::x86_64::{__cpuid, _mm_crc32_u8, _mm_crc32_u64};
    use core::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const ABSENT: u8 = 1;
    const PRESENT: u8 = 2;
    static SSE42: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Whether this CPU has SSE4.2 (CPUID leaf 1, ECX bit 20); asked once.
    pub(crate) fn available() -> bool {
        match SSE42.load(Ordering::Relaxed) {
            PRESENT => true,
            ABSENT => false,
            _ => {
                // Leaf 1 exists on every x86-64 CPU.
                #[allow(unused_unsafe)] // `__cpuid` is a safe function in newer Rust
                // SAFETY: CPUID is available on every x86-64 CPU and only reads.
                let ecx = unsafe { __cpuid(1) }.ecx;
                let present = ecx & (1 << 20) != 0;
                SSE42.store(if present { PRESENT } else { ABSENT }, Ordering::Relaxed);
                present
            }
        }
    }

    /// Feeds `bytes` through the CRC register. Panics without SSE4.2 (callers ask
    /// [`available`] first): the instruction would fault.
    pub(crate) fn update(register: u32, bytes: &[u8]) -> u32 {
        assert!(available(), "the crc32 instruction needs SSE4.2");
        // SAFETY: SSE4.2, the only feature `update_sse42` is compiled for, was just found
        // in CPUID.
        unsafe { update_sse42(register, bytes) }
    }

    #[target_feature(enable = "sse4.2")]
    fn update_sse42(register: u32, bytes: &[u8]) -> u32 {
        let (words, tail) = bytes.as_chunks::<8>();
        let mut register = u64::from(register);
        for word in words {
            register = _mm_crc32_u64(register, u64::from_le_bytes(*word));
        }
        let mut register = register as u32;
        for &byte in tail {
            register = _mm_crc32_u8(register, byte);
        }
        register
    }
}

/// Other architectures use the tables.
#[cfg(not(target_arch = "x86_64"))]
mod crc32_instruction {
    pub(crate) fn available() -> bool {
        false
    }

    pub(crate) fn update(_register: u32, _bytes: &[u8]) -> u32 {
        unreachable!("no crc32 instruction on this architecture")
    }
}

#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A statically linked x86-64 ELF executable to run in ring 3.
    Program = 1,
    /// The objects of the initial system and their capabilities ([`system_table`]); at
    /// most one per image, named [`SYSTEM_TABLE_ENTRY_NAME`].
    SystemTable = 2,
}

/// The name of the system table's entry.
pub const SYSTEM_TABLE_ENTRY_NAME: &str = "system";

/// Why a byte string is not a valid initial image. Each names what check failed and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    TooShort {
        length: usize,
    },
    BadMagic,
    UnsupportedVersion {
        version: u32,
    },
    TooManyEntries {
        count: u32,
    },
    LengthMismatch {
        recorded: u64,
        actual: usize,
    },
    HeaderChecksum {
        recorded: u32,
        computed: u32,
    },
    EntryName {
        index: usize,
    },
    EntryKind {
        index: usize,
        kind: u32,
    },
    EntryOutOfBounds {
        index: usize,
    },
    EntryChecksum {
        index: usize,
        recorded: u32,
        computed: u32,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooShort { length } => {
                write!(f, "{length} bytes is too short for an image header")
            }
            Self::BadMagic => write!(f, "bad magic (not a Holdfast image)"),
            Self::UnsupportedVersion { version } => write!(
                f,
                "image format version {version} is not supported (this build reads {FORMAT_VERSION})"
            ),
            Self::TooManyEntries { count } => {
                write!(
                    f,
                    "{count} entries is more than the limit of {ENTRY_COUNT_MAX}"
                )
            }
            Self::LengthMismatch { recorded, actual } => {
                write!(
                    f,
                    "header says {recorded} bytes but the image has {actual} (truncated?)"
                )
            }
            Self::HeaderChecksum { recorded, computed } => write!(
                f,
                "header checksum mismatch (recorded {recorded:#010x}, computed {computed:#010x})"
            ),
            Self::EntryName { index } => write!(f, "entry {index}: name is empty or not UTF-8"),
            Self::EntryKind { index, kind } => write!(f, "entry {index}: unknown kind {kind}"),
            Self::EntryOutOfBounds { index } => {
                write!(f, "entry {index}: payload lies outside the image")
            }
            Self::EntryChecksum {
                index,
                recorded,
                computed,
            } => write!(
                f,
                "entry {index}: payload checksum mismatch (recorded {recorded:#010x}, computed {computed:#010x})"
            ),
        }
    }
}

/// A checked view of an image. Every entry was verified when the image was parsed.
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    bytes: &'a [u8],
    entry_count: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub name: &'a str,
    pub kind: EntryKind,
    pub payload: &'a [u8],
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn header_checksum(header_and_table: &[u8]) -> u32 {
    let mut digest = Crc32cDigest::new();
    digest.update(&header_and_table[..24]);
    digest.update(&[0; 4]);
    digest.update(&header_and_table[28..]);
    digest.finalize()
}

impl<'a> Image<'a> {
    /// Checks the whole image: header, table and every payload's checksum.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        if bytes.len() < HEADER_BYTES {
            return Err(FormatError::TooShort {
                length: bytes.len(),
            });
        }
        if bytes[..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = read_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion { version });
        }
        let count = read_u32(bytes, 12);
        if count > ENTRY_COUNT_MAX {
            return Err(FormatError::TooManyEntries { count });
        }
        let recorded_length = read_u64(bytes, 16);
        if recorded_length != bytes.len() as u64 {
            return Err(FormatError::LengthMismatch {
                recorded: recorded_length,
                actual: bytes.len(),
            });
        }
        let table_end = HEADER_BYTES + count as usize * ENTRY_BYTES;
        if table_end > bytes.len() {
            return Err(FormatError::TooShort {
                length: bytes.len(),
            });
        }
        let recorded = read_u32(bytes, 24);
        let computed = header_checksum(&bytes[..table_end]);
        if recorded != computed {
            return Err(FormatError::HeaderChecksum { recorded, computed });
        }
        let image = Self {
            bytes,
            entry_count: count as usize,
        };
        for index in 0..image.entry_count {
            image.entry_checked(index)?;
        }
        Ok(image)
    }

    pub fn len(&self) -> usize {
        self.entry_count
    }

    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    pub fn entries(&self) -> impl Iterator<Item = Entry<'a>> + '_ {
        (0..self.entry_count).map(|index| self.entry_checked(index).expect("checked by parse"))
    }

    pub fn find(&self, name: &str) -> Option<Entry<'a>> {
        self.entries().find(|entry| entry.name == name)
    }

    /// The image's programs, in order: a process's program index counts in this sequence.
    pub fn programs(&self) -> impl Iterator<Item = Entry<'a>> + '_ {
        self.entries()
            .filter(|entry| entry.kind == EntryKind::Program)
    }

    /// The image's system table, decoded and checked against the image's programs; `None`
    /// if the image has none.
    pub fn system_table(&self) -> Option<Result<SystemTable<'a>, SystemTableError>> {
        let entry = self
            .entries()
            .find(|entry| entry.kind == EntryKind::SystemTable)?;
        let program_count = self.programs().count();
        Some(SystemTable::decode(entry.payload).and_then(|table| {
            if table.program_count() as usize == program_count {
                Ok(table)
            } else {
                Err(SystemTableError::ProgramCountMismatch {
                    recorded: table.program_count(),
                    actual: program_count,
                })
            }
        }))
    }

    fn entry_checked(&self, index: usize) -> Result<Entry<'a>, FormatError> {
        let bytes = self.bytes;
        let at = HEADER_BYTES + index * ENTRY_BYTES;
        let raw_name = &bytes[at..at + ENTRY_NAME_BYTES];
        let name_length = raw_name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(ENTRY_NAME_BYTES);
        let name = core::str::from_utf8(&raw_name[..name_length])
            .ok()
            .filter(|name| !name.is_empty())
            .ok_or(FormatError::EntryName { index })?;
        let kind = match read_u32(bytes, at + 32) {
            1 => EntryKind::Program,
            2 => EntryKind::SystemTable,
            kind => return Err(FormatError::EntryKind { index, kind }),
        };
        let offset = read_u64(bytes, at + 40);
        let length = read_u64(bytes, at + 48);
        let end = offset
            .checked_add(length)
            .ok_or(FormatError::EntryOutOfBounds { index })?;
        let table_end = (HEADER_BYTES + self.entry_count * ENTRY_BYTES) as u64;
        if offset < table_end || end > bytes.len() as u64 {
            return Err(FormatError::EntryOutOfBounds { index });
        }
        let payload = &bytes[offset as usize..end as usize];
        let recorded = read_u32(bytes, at + 56);
        let computed = crc32c(payload);
        if recorded != computed {
            return Err(FormatError::EntryChecksum {
                index,
                recorded,
                computed,
            });
        }
        Ok(Entry {
            name,
            kind,
            payload,
        })
    }
}

/// Builds an image in memory.
#[cfg(feature = "alloc")]
#[derive(Default)]
pub struct ImageBuilder {
    entries: alloc::vec::Vec<(alloc::string::String, EntryKind, alloc::vec::Vec<u8>)>,
}

/// Why an image could not be built.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    NameLength { name: alloc::string::String },
    DuplicateName { name: alloc::string::String },
    TooManyEntries,
}

#[cfg(feature = "alloc")]
impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NameLength { name } => {
                write!(
                    f,
                    "entry name {name:?} must be 1 to {ENTRY_NAME_BYTES} bytes"
                )
            }
            Self::DuplicateName { name } => write!(f, "entry name {name:?} appears twice"),
            Self::TooManyEntries => write!(f, "more than {ENTRY_COUNT_MAX} entries"),
        }
    }
}

#[cfg(feature = "alloc")]
impl ImageBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, name: &str, kind: EntryKind, payload: &[u8]) -> Result<(), BuildError> {
        if name.is_empty() || name.len() > ENTRY_NAME_BYTES || name.contains('\0') {
            return Err(BuildError::NameLength { name: name.into() });
        }
        if self.entries.iter().any(|(existing, _, _)| existing == name) {
            return Err(BuildError::DuplicateName { name: name.into() });
        }
        if self.entries.len() >= ENTRY_COUNT_MAX as usize {
            return Err(BuildError::TooManyEntries);
        }
        self.entries.push((name.into(), kind, payload.into()));
        Ok(())
    }

    pub fn finish(&self) -> alloc::vec::Vec<u8> {
        let table_end = HEADER_BYTES + self.entries.len() * ENTRY_BYTES;
        let mut bytes = alloc::vec![0u8; table_end];
        for (index, (name, kind, payload)) in self.entries.iter().enumerate() {
            let offset = bytes.len().next_multiple_of(PAYLOAD_ALIGN);
            bytes.resize(offset, 0);
            bytes.extend_from_slice(payload);
            let at = HEADER_BYTES + index * ENTRY_BYTES;
            bytes[at..at + name.len()].copy_from_slice(name.as_bytes());
            bytes[at + 32..at + 36].copy_from_slice(&(*kind as u32).to_le_bytes());
            bytes[at + 40..at + 48].copy_from_slice(&(offset as u64).to_le_bytes());
            bytes[at + 48..at + 56].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            bytes[at + 56..at + 60].copy_from_slice(&crc32c(payload).to_le_bytes());
        }
        let length = bytes.len() as u64;
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&length.to_le_bytes());
        let checksum = header_checksum(&bytes[..table_end]);
        bytes[24..28].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn two_entry_image() -> Vec<u8> {
        let mut builder = ImageBuilder::new();
        builder
            .add("hello", EntryKind::Program, b"\x7fELF hello")
            .unwrap();
        builder
            .add("fault-null", EntryKind::Program, &[7u8; 5000])
            .unwrap();
        builder.finish()
    }

    #[test]
    fn built_image_parses_back() {
        let bytes = two_entry_image();
        let image = Image::parse(&bytes).unwrap();
        assert_eq!(image.len(), 2);
        let hello = image.find("hello").unwrap();
        assert_eq!(hello.payload, b"\x7fELF hello");
        assert_eq!(image.find("fault-null").unwrap().payload.len(), 5000);
        assert!(image.find("absent").is_none());
    }

    #[test]
    fn payloads_are_page_aligned() {
        let bytes = two_entry_image();
        for index in 0..2 {
            let offset = read_u64(&bytes, HEADER_BYTES + index * ENTRY_BYTES + 40) as usize;
            assert_eq!(offset % PAYLOAD_ALIGN, 0);
        }
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let bytes = two_entry_image();
        // Every byte of header, table and payloads is covered by some checksum or check.
        for at in (0..bytes.len()).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            // Padding between payloads is the only uncovered region.
            let in_padding = (HEADER_BYTES + 2 * ENTRY_BYTES..).contains(&at)
                && !(4096..4096 + 10).contains(&at)
                && !(8192..8192 + 5000).contains(&at);
            if !in_padding {
                assert!(
                    Image::parse(&damaged).is_err(),
                    "flip at {at} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn errors_name_the_check() {
        let bytes = two_entry_image();
        assert_eq!(
            Image::parse(&bytes[..10]).unwrap_err(),
            FormatError::TooShort { length: 10 }
        );
        assert_eq!(Image::parse(&[0u8; 64]).unwrap_err(), FormatError::BadMagic);
        let mut wrong_version = bytes.clone();
        wrong_version[8] = 9;
        assert_eq!(
            Image::parse(&wrong_version).unwrap_err(),
            FormatError::UnsupportedVersion { version: 9 }
        );
        let truncated = &bytes[..bytes.len() - 1];
        assert!(matches!(
            Image::parse(truncated),
            Err(FormatError::LengthMismatch { .. })
        ));
        let mut rotted = bytes.clone();
        let last = rotted.len() - 1;
        rotted[last] ^= 1;
        assert!(matches!(
            Image::parse(&rotted),
            Err(FormatError::EntryChecksum { index: 1, .. })
        ));
        assert_eq!(
            FormatError::BadMagic.to_string(),
            "bad magic (not a Holdfast image)"
        );
    }

    #[test]
    fn system_table_is_found_and_checked_against_the_programs() {
        let system = system_table::System {
            program_count: 2,
            ..Default::default()
        };
        let table = system_table::encode(&system).unwrap();
        let mut builder = ImageBuilder::new();
        builder.add("hello", EntryKind::Program, b"one").unwrap();
        builder
            .add(SYSTEM_TABLE_ENTRY_NAME, EntryKind::SystemTable, &table)
            .unwrap();
        builder.add("ticker", EntryKind::Program, b"two").unwrap();
        let bytes = builder.finish();
        let image = Image::parse(&bytes).unwrap();
        let programs: Vec<_> = image.programs().map(|entry| entry.name).collect();
        assert_eq!(programs, ["hello", "ticker"]);
        assert_eq!(image.system_table().unwrap().unwrap().program_count(), 2);

        let mut builder = ImageBuilder::new();
        builder.add("hello", EntryKind::Program, b"one").unwrap();
        builder
            .add(SYSTEM_TABLE_ENTRY_NAME, EntryKind::SystemTable, &table)
            .unwrap();
        let bytes = builder.finish();
        let error = Image::parse(&bytes)
            .unwrap()
            .system_table()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "system table was made for 2 programs but the image has 1"
        );
        assert!(
            Image::parse(&two_entry_image())
                .unwrap()
                .system_table()
                .is_none()
        );
    }

    /// The `crc32` instruction and the tables give the same CRC-32C, for random data of
    /// every length up to 300 bytes and some long ones, starting at every alignment, fed
    /// whole and in two pieces; and both give the published check value.
    #[test]
    fn the_crc32_instruction_and_the_tables_agree() {
        assert!(
            std::is_x86_feature_detected!("sse4.2"),
            "this test needs an x86-64 host with SSE4.2"
        );
        assert!(crc32_instruction::available());
        let instruction = |pieces: &[&[u8]]| {
            let mut register = !0;
            for piece in pieces {
                register = crc32_instruction::update(register, piece);
            }
            !register
        };
        let table = |pieces: &[&[u8]]| {
            let mut digest = CRC32C.digest();
            for piece in pieces {
                digest.update(piece);
            }
            digest.finalize()
        };
        assert_eq!(instruction(&[b"123456789"]), 0xE306_9283);
        assert_eq!(table(&[b"123456789"]), 0xE306_9283);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let buffer: Vec<u8> = (0..70_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let lengths = (0..=300).chain([1021, 4096, 4099, 65_536]);
        for length in lengths {
            for start in 0..8 {
                let bytes = &buffer[start..start + length];
                assert_eq!(
                    instruction(&[bytes]),
                    table(&[bytes]),
                    "length {length} at offset {start}"
                );
                let (head, tail) = bytes.split_at(length / 3);
                assert_eq!(
                    instruction(&[head, tail]),
                    table(&[bytes]),
                    "length {length} at offset {start} in two pieces"
                );
            }
        }
    }

    #[test]
    fn builder_rejects_bad_names() {
        let mut builder = ImageBuilder::new();
        assert!(builder.add("", EntryKind::Program, b"").is_err());
        assert!(
            builder
                .add(&"x".repeat(33), EntryKind::Program, b"")
                .is_err()
        );
        builder.add("a", EntryKind::Program, b"").unwrap();
        assert_eq!(
            builder.add("a", EntryKind::Program, b""),
            Err(BuildError::DuplicateName { name: "a".into() })
        );
    }
}
