//! The checkpoint directory: what a restart needs besides the nodes and pages themselves —
//! which root nodes are processes (EROS keeps this list in its checkpoint header) and the
//! next unused node and page ids. The kernel stores it as page 0 in every checkpoint (object
//! ids start at 1). The layout is part of the disk format (`docs/disk-format.md`,
//! "Checkpoint directory"); the store checksums the block, and decoding checks every field.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `HFKD` |
//! | 4..8 | directory version (1), little-endian |
//! | 8..16 | next node id |
//! | 16..24 | next page id |
//! | 24..28 | process count |
//! | 28..32 | zero |
//! | 32.. | per process, 48 bytes: root node id (8), name length (1), name (UTF-8, 39) |

use alloc::string::String;
use alloc::vec::Vec;

use crate::ObjectId;

pub const DIRECTORY_BYTES: usize = 4096;
pub const DIRECTORY_MAGIC: [u8; 4] = *b"HFKD";
pub const DIRECTORY_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const ENTRY_BYTES: usize = 48;
pub const PROCESS_NAME_BYTES_MAX: usize = ENTRY_BYTES - 9;
pub const PROCESS_COUNT_MAX: usize = (DIRECTORY_BYTES - HEADER_BYTES) / ENTRY_BYTES;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryProcess {
    pub root: ObjectId,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    pub next_node_id: u64,
    pub next_page_id: u64,
    pub processes: Vec<DirectoryProcess>,
}

/// Why a directory cannot be written or read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectoryError {
    TooManyProcesses { count: usize },
    Magic,
    Version { found: u32 },
    Count { found: u32 },
    Name { index: usize },
    Reserved,
}

impl core::fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooManyProcesses { count } => {
                write!(f, "{count} processes; a checkpoint directory holds at most {PROCESS_COUNT_MAX}")
            }
            Self::Magic => f.write_str("no directory magic (not a Holdfast checkpoint)"),
            Self::Version { found } => {
                write!(f, "directory version {found}; this kernel reads version {DIRECTORY_VERSION}")
            }
            Self::Count { found } => write!(f, "process count {found} beyond {PROCESS_COUNT_MAX}"),
            Self::Name { index } => write!(f, "process {index}: name length or UTF-8"),
            Self::Reserved => f.write_str("reserved bytes are not zero"),
        }
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

impl Directory {
    /// The directory's block. Names longer than [`PROCESS_NAME_BYTES_MAX`] are cut at a
    /// character boundary.
    pub fn encode(&self) -> Result<[u8; DIRECTORY_BYTES], DirectoryError> {
        if self.processes.len() > PROCESS_COUNT_MAX {
            return Err(DirectoryError::TooManyProcesses { count: self.processes.len() });
        }
        let mut block = [0u8; DIRECTORY_BYTES];
        block[0..4].copy_from_slice(&DIRECTORY_MAGIC);
        block[4..8].copy_from_slice(&DIRECTORY_VERSION.to_le_bytes());
        block[8..16].copy_from_slice(&self.next_node_id.to_le_bytes());
        block[16..24].copy_from_slice(&self.next_page_id.to_le_bytes());
        block[24..28].copy_from_slice(&(self.processes.len() as u32).to_le_bytes());
        for (process, entry) in self.processes.iter().zip(block[HEADER_BYTES..].chunks_exact_mut(ENTRY_BYTES)) {
            let mut length = process.name.len().min(PROCESS_NAME_BYTES_MAX);
            while !process.name.is_char_boundary(length) {
                length -= 1;
            }
            entry[0..8].copy_from_slice(&process.root.0.to_le_bytes());
            entry[8] = length as u8;
            entry[9..9 + length].copy_from_slice(&process.name.as_bytes()[..length]);
        }
        Ok(block)
    }

    pub fn decode(block: &[u8; DIRECTORY_BYTES]) -> Result<Self, DirectoryError> {
        if block[0..4] != DIRECTORY_MAGIC {
            return Err(DirectoryError::Magic);
        }
        let version = u32::from_le_bytes(block[4..8].try_into().expect("four bytes"));
        if version != DIRECTORY_VERSION {
            return Err(DirectoryError::Version { found: version });
        }
        let count = u32::from_le_bytes(block[24..28].try_into().expect("four bytes"));
        if count as usize > PROCESS_COUNT_MAX {
            return Err(DirectoryError::Count { found: count });
        }
        if block[28..32] != [0; 4] {
            return Err(DirectoryError::Reserved);
        }
        let entries = block[HEADER_BYTES..].chunks_exact(ENTRY_BYTES);
        let mut processes = Vec::with_capacity(count as usize);
        for (index, entry) in entries.clone().take(count as usize).enumerate() {
            let length = usize::from(entry[8]);
            let name = entry
                .get(9..9 + length)
                .filter(|_| length <= PROCESS_NAME_BYTES_MAX && entry[9 + length..].iter().all(|&byte| byte == 0))
                .and_then(|bytes| core::str::from_utf8(bytes).ok())
                .ok_or(DirectoryError::Name { index })?;
            processes.push(DirectoryProcess { root: ObjectId(word(entry, 0)), name: String::from(name) });
        }
        if entries.skip(count as usize).flatten().any(|&byte| byte != 0) {
            return Err(DirectoryError::Reserved);
        }
        Ok(Self { next_node_id: word(block, 8), next_page_id: word(block, 16), processes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Directory {
        Directory {
            next_node_id: 40,
            next_page_id: 900,
            processes: alloc::vec![
                DirectoryProcess { root: ObjectId(1), name: String::from("counter") },
                DirectoryProcess { root: ObjectId(7), name: String::from("tp1-manager") },
            ],
        }
    }

    #[test]
    fn directories_round_trip() {
        let directory = sample();
        assert_eq!(Directory::decode(&directory.encode().unwrap()), Ok(directory));
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let mut directory = sample();
        directory.processes[0].name = "é".repeat(30);
        let decoded = Directory::decode(&directory.encode().unwrap()).unwrap();
        assert_eq!(decoded.processes[0].name, "é".repeat(19));
    }

    #[test]
    fn bad_directories_are_refused_with_what_is_wrong() {
        let mut directory = sample();
        directory.processes = alloc::vec![directory.processes[0].clone(); PROCESS_COUNT_MAX + 1];
        assert_eq!(directory.encode(), Err(DirectoryError::TooManyProcesses { count: PROCESS_COUNT_MAX + 1 }));

        let block = sample().encode().unwrap();
        let damaged = |at: usize, value: u8| {
            let mut copy = block;
            copy[at] = value;
            Directory::decode(&copy).unwrap_err()
        };
        assert_eq!(damaged(0, b'X'), DirectoryError::Magic);
        assert_eq!(damaged(4, 2), DirectoryError::Version { found: 2 });
        assert_eq!(damaged(24, 200), DirectoryError::Count { found: 200 });
        assert_eq!(damaged(HEADER_BYTES + 8, 40), DirectoryError::Name { index: 0 });
        assert_eq!(damaged(HEADER_BYTES + ENTRY_BYTES + 9, 0xff), DirectoryError::Name { index: 1 });
        assert_eq!(damaged(HEADER_BYTES + 3 * ENTRY_BYTES, 1), DirectoryError::Reserved);
        assert_eq!(Directory::decode(&[0; DIRECTORY_BYTES]), Err(DirectoryError::Magic));
    }
}
