//! The checkpoint directory: what a restart needs besides the nodes and pages themselves —
//! which root nodes are processes (EROS keeps this list in its checkpoint header) and the
//! next unused node and page ids. It grows with the system: a chain of 4 KiB blocks, each
//! stored as a page of the checkpoint. The first is page 0 (object ids start at 1); the
//! others are pages whose ids the kernel sets aside for the directory, each block naming
//! the next. The layout is part of the disk format (`docs/disk-format.md`, "Checkpoint
//! directory"); every block carries its own checksum, and decoding checks every field and
//! bounds every count before it sizes anything.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `HFKD` |
//! | 4..8 | directory version (2), little-endian |
//! | 8..16 | XXH64 (seed 0) of the block with these eight bytes zero |
//! | 16..20 | the block's index in the chain (0 for page 0) |
//! | 20..24 | processes in this block (at most [`BLOCK_PROCESSES_MAX`]) |
//! | 24..32 | page id of the next block; 0 after the last |
//! | 32..40 | block 0: next node id; other blocks zero |
//! | 40..48 | block 0: next page id; other blocks zero |
//! | 48..56 | block 0: process count; other blocks zero |
//! | 56..64 | block 0: block count; other blocks zero |
//! | 64.. | per process, 48 bytes: root node id (8), name length (1), name (UTF-8, 39); zero after the last |
//!
//! Every block but the last is full, so the block count follows from the process count and
//! a reader knows from block 0 how many blocks to expect.

use alloc::boxed::Box;
use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;

use crate::ObjectId;

pub const DIRECTORY_BYTES: usize = 4096;
pub type DirectoryBlock = [u8; DIRECTORY_BYTES];
pub const DIRECTORY_MAGIC: [u8; 4] = *b"HFKD";
/// Version 2: a chain of checksummed blocks (version 1 was one unchecksummed block of at
/// most 84 processes).
pub const DIRECTORY_VERSION: u32 = 2;
const HEADER_BYTES: usize = 64;
const ENTRY_BYTES: usize = 48;
const CHECKSUM_RANGE: core::ops::Range<usize> = 8..16;
pub const PROCESS_NAME_BYTES_MAX: usize = ENTRY_BYTES - 9;
/// Processes one block holds.
pub const BLOCK_PROCESSES_MAX: usize = (DIRECTORY_BYTES - HEADER_BYTES) / ENTRY_BYTES;

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

/// Why a directory cannot be written or read back. `block` is the block's index in the
/// chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectoryError {
    /// Fewer continuation pages were given than the directory needs.
    TooFewPages { needed: usize, given: usize },
    Magic { block: u32 },
    Version { block: u32, found: u32 },
    Checksum { block: u32 },
    /// The block says it is another one of the chain.
    Index { block: u32, found: u32 },
    /// The process count, block count or a block's entry count disagree or are out of range.
    Count { block: u32 },
    /// A next-page link where none may be, none where one must be, or one that repeats.
    Link { block: u32 },
    Name { block: u32, index: usize },
    Reserved { block: u32 },
}

impl core::fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooFewPages { needed, given } => {
                write!(f, "the directory needs {needed} continuation pages; {given} given")
            }
            Self::Magic { block } => write!(f, "block {block}: no directory magic (not a Holdfast checkpoint)"),
            Self::Version { block, found } => {
                write!(f, "block {block}: directory version {found}; this kernel reads version {DIRECTORY_VERSION}")
            }
            Self::Checksum { block } => write!(f, "block {block}: checksum does not match"),
            Self::Index { block, found } => write!(f, "block {block}: says it is block {found}"),
            Self::Count { block } => write!(f, "block {block}: process or block count out of range"),
            Self::Link { block } => write!(f, "block {block}: bad next-page link"),
            Self::Name { block, index } => write!(f, "block {block}: process {index}: name length or UTF-8"),
            Self::Reserved { block } => write!(f, "block {block}: reserved bytes are not zero"),
        }
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

fn half(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn block_checksum(block: &DirectoryBlock) -> u64 {
    let mut copy = *block;
    copy[CHECKSUM_RANGE].fill(0);
    xxhash_rust::xxh64::xxh64(&copy, 0)
}

/// Blocks a directory of `process_count` processes takes.
pub fn block_count(process_count: usize) -> usize {
    process_count.div_ceil(BLOCK_PROCESSES_MAX).max(1)
}

impl Directory {
    /// The directory's blocks: block 0 (page 0), then one per page of `continuation`, which
    /// must name at least `block_count(processes) - 1` pages (the rest are not used). Names
    /// longer than [`PROCESS_NAME_BYTES_MAX`] are cut at a character boundary.
    pub fn encode(&self, continuation: &[ObjectId]) -> Result<Vec<Box<DirectoryBlock>>, DirectoryError> {
        let blocks = block_count(self.processes.len());
        if continuation.len() < blocks - 1 {
            return Err(DirectoryError::TooFewPages { needed: blocks - 1, given: continuation.len() });
        }
        let mut encoded = Vec::with_capacity(blocks);
        for index in 0..blocks {
            let mut block = Box::new([0u8; DIRECTORY_BYTES]);
            let processes = self.processes.iter().skip(index * BLOCK_PROCESSES_MAX).take(BLOCK_PROCESSES_MAX);
            let next = continuation.get(index).filter(|_| index + 1 < blocks).map_or(0, |page| page.0);
            block[0..4].copy_from_slice(&DIRECTORY_MAGIC);
            block[4..8].copy_from_slice(&DIRECTORY_VERSION.to_le_bytes());
            block[16..20].copy_from_slice(&(index as u32).to_le_bytes());
            block[20..24].copy_from_slice(&(processes.len() as u32).to_le_bytes());
            block[24..32].copy_from_slice(&next.to_le_bytes());
            if index == 0 {
                block[32..40].copy_from_slice(&self.next_node_id.to_le_bytes());
                block[40..48].copy_from_slice(&self.next_page_id.to_le_bytes());
                block[48..56].copy_from_slice(&(self.processes.len() as u64).to_le_bytes());
                block[56..64].copy_from_slice(&(blocks as u64).to_le_bytes());
            }
            for (process, entry) in processes.zip(block[HEADER_BYTES..].chunks_exact_mut(ENTRY_BYTES)) {
                let mut length = process.name.len().min(PROCESS_NAME_BYTES_MAX);
                while !process.name.is_char_boundary(length) {
                    length -= 1;
                }
                entry[0..8].copy_from_slice(&process.root.0.to_le_bytes());
                entry[8] = length as u8;
                entry[9..9 + length].copy_from_slice(&process.name.as_bytes()[..length]);
            }
            let checksum = block_checksum(&block);
            block[CHECKSUM_RANGE].copy_from_slice(&checksum.to_le_bytes());
            encoded.push(block);
        }
        Ok(encoded)
    }
}

/// Reads a directory back block by block: [`DirectoryReader::new`] with block 0, then
/// [`DirectoryReader::add`] with the page [`DirectoryReader::next_page`] names until it
/// names none, then [`DirectoryReader::finish`].
pub struct DirectoryReader {
    directory: Directory,
    process_count: usize,
    block_count: u32,
    blocks_read: u32,
    next_page: Option<ObjectId>,
    /// The continuation pages read so far, in chain order, and as a set (a loop check).
    pages: Vec<ObjectId>,
    seen: BTreeSet<ObjectId>,
}

impl DirectoryReader {
    /// Checks block 0. `page_count` is the store's page id range: the block count is bounded
    /// by it before anything is sized from it.
    pub fn new(block: &DirectoryBlock, page_count: u64) -> Result<Self, DirectoryError> {
        check_header(block, 0)?;
        let process_count = word(block, 48);
        let block_count = word(block, 56);
        if block_count == 0
            || block_count > page_count.max(1)
            || block_count > u64::from(u32::MAX)
            || process_count > block_count * BLOCK_PROCESSES_MAX as u64
            || block_count as usize != block_count_of(process_count)
        {
            return Err(DirectoryError::Count { block: 0 });
        }
        let mut reader = Self {
            directory: Directory { next_node_id: word(block, 32), next_page_id: word(block, 40), processes: Vec::new() },
            process_count: process_count as usize,
            block_count: block_count as u32,
            blocks_read: 0,
            next_page: None,
            pages: Vec::new(),
            seen: BTreeSet::new(),
        };
        reader.take_entries(block, 0)?;
        Ok(reader)
    }

    /// The page that holds the next block, if any is still to be read.
    pub fn next_page(&self) -> Option<ObjectId> {
        self.next_page
    }

    /// Checks and takes the block read from [`Self::next_page`].
    pub fn add(&mut self, block: &DirectoryBlock) -> Result<(), DirectoryError> {
        let index = self.blocks_read;
        let page = self.next_page.ok_or(DirectoryError::Link { block: index })?;
        check_header(block, index)?;
        if block[32..64].iter().any(|&byte| byte != 0) {
            return Err(DirectoryError::Reserved { block: index });
        }
        self.pages.push(page);
        self.seen.insert(page);
        self.take_entries(block, index)
    }

    /// The directory and its continuation pages, once every block is read.
    pub fn finish(self) -> Result<(Directory, Vec<ObjectId>), DirectoryError> {
        if self.next_page.is_some() || self.blocks_read != self.block_count {
            return Err(DirectoryError::Link { block: self.blocks_read });
        }
        Ok((self.directory, self.pages))
    }

    fn take_entries(&mut self, block: &DirectoryBlock, index: u32) -> Result<(), DirectoryError> {
        let last = index + 1 == self.block_count;
        let count = half(block, 20) as usize;
        let expected = if last {
            self.process_count - index as usize * BLOCK_PROCESSES_MAX
        } else {
            BLOCK_PROCESSES_MAX
        };
        if count != expected {
            return Err(DirectoryError::Count { block: index });
        }
        let next = word(block, 24);
        // The next block's page: not page 0, and not one of the chain already (a loop).
        let next_page = match (last, next) {
            (true, 0) => None,
            (false, next) if next != 0 && !self.seen.contains(&ObjectId(next)) => Some(ObjectId(next)),
            _ => return Err(DirectoryError::Link { block: index }),
        };
        let entries = block[HEADER_BYTES..].chunks_exact(ENTRY_BYTES);
        self.directory.processes.reserve(count);
        for (entry_index, entry) in entries.clone().take(count).enumerate() {
            let length = usize::from(entry[8]);
            let name = entry
                .get(9..9 + length)
                .filter(|_| length <= PROCESS_NAME_BYTES_MAX && entry[9 + length..].iter().all(|&byte| byte == 0))
                .and_then(|bytes| core::str::from_utf8(bytes).ok())
                .ok_or(DirectoryError::Name { block: index, index: entry_index })?;
            self.directory.processes.push(DirectoryProcess { root: ObjectId(word(entry, 0)), name: String::from(name) });
        }
        if entries.skip(count).flatten().any(|&byte| byte != 0) {
            return Err(DirectoryError::Reserved { block: index });
        }
        self.blocks_read += 1;
        self.next_page = next_page;
        Ok(())
    }
}

fn block_count_of(process_count: u64) -> usize {
    block_count(usize::try_from(process_count).unwrap_or(usize::MAX))
}

/// Magic, version, checksum and index: whether `block` is block `index` of a directory.
fn check_header(block: &DirectoryBlock, index: u32) -> Result<(), DirectoryError> {
    if block[0..4] != DIRECTORY_MAGIC {
        return Err(DirectoryError::Magic { block: index });
    }
    let version = half(block, 4);
    if version != DIRECTORY_VERSION {
        return Err(DirectoryError::Version { block: index, found: version });
    }
    if word(block, CHECKSUM_RANGE.start) != block_checksum(block) {
        return Err(DirectoryError::Checksum { block: index });
    }
    let found = half(block, 16);
    if found != index {
        return Err(DirectoryError::Index { block: index, found });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn sample(process_count: usize) -> Directory {
        Directory {
            next_node_id: 40_000,
            next_page_id: 900_000,
            processes: (0..process_count)
                .map(|index| DirectoryProcess { root: ObjectId(index as u64 * 3 + 1), name: format!("process-{index}") })
                .collect(),
        }
    }

    fn continuation(count: usize) -> Vec<ObjectId> {
        (0..count as u64).map(|index| ObjectId(1000 + index * 7)).collect()
    }

    /// Reads `blocks` back as the kernel does, each continuation block from the page the
    /// one before names.
    fn read_back(blocks: &[Box<DirectoryBlock>], pages: &[ObjectId]) -> Result<(Directory, Vec<ObjectId>), DirectoryError> {
        let mut reader = DirectoryReader::new(&blocks[0], 1 << 20)?;
        while let Some(page) = reader.next_page() {
            let at = pages.iter().position(|&candidate| candidate == page).expect("a page of the chain");
            reader.add(&blocks[at + 1])?;
        }
        reader.finish()
    }

    fn recheck(block: &mut DirectoryBlock) {
        let checksum = block_checksum(block);
        block[CHECKSUM_RANGE].copy_from_slice(&checksum.to_le_bytes());
    }

    #[test]
    fn directories_of_every_size_round_trip() {
        let pages = continuation(200);
        for count in [0, 1, 83, 84, 85, 168, 169, 10_000] {
            let directory = sample(count);
            let blocks = directory.encode(&pages).unwrap();
            assert_eq!(blocks.len(), block_count(count), "{count} processes");
            let (decoded, used) = read_back(&blocks, &pages).unwrap();
            assert_eq!(decoded, directory, "{count} processes");
            assert_eq!(used, pages[..blocks.len() - 1], "{count} processes");
        }
    }

    #[test]
    fn ten_thousand_processes_take_120_blocks() {
        assert_eq!(BLOCK_PROCESSES_MAX, 84);
        assert_eq!(block_count(10_000), 120);
        assert_eq!(
            sample(10_000).encode(&continuation(118)),
            Err(DirectoryError::TooFewPages { needed: 119, given: 118 })
        );
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let mut directory = sample(2);
        directory.processes[0].name = "é".repeat(30);
        let blocks = directory.encode(&[]).unwrap();
        let (decoded, _) = read_back(&blocks, &[]).unwrap();
        assert_eq!(decoded.processes[0].name, "é".repeat(19));
    }

    #[test]
    fn every_damaged_byte_is_caught_by_the_checksum() {
        let pages = continuation(2);
        let blocks = sample(100).encode(&pages).unwrap();
        for (block_index, at) in [(0, 4), (0, 20), (0, 33), (0, 64), (0, 4095), (1, 25), (1, 200)] {
            let mut damaged = blocks.clone();
            damaged[block_index][at] ^= 0x10;
            let error = read_back(&damaged, &pages).unwrap_err();
            let expected = if at < 8 {
                DirectoryError::Version { block: block_index as u32, found: DIRECTORY_VERSION ^ 0x10 }
            } else {
                DirectoryError::Checksum { block: block_index as u32 }
            };
            assert_eq!(error, expected, "byte {at} of block {block_index}");
        }
    }

    #[test]
    fn wrong_contents_with_valid_checksums_are_refused_with_what_is_wrong() {
        let pages = continuation(2);
        let blocks = sample(100).encode(&pages).unwrap();
        // Changes `block` of the chain at `at` to `value`, seals it again and reads back.
        let changed = |block: usize, at: usize, bytes: &[u8]| {
            let mut copy = blocks.clone();
            copy[block][at..at + bytes.len()].copy_from_slice(bytes);
            recheck(&mut copy[block]);
            read_back(&copy, &pages).unwrap_err()
        };
        assert_eq!(changed(0, 0, b"XFKD"), DirectoryError::Magic { block: 0 });
        assert_eq!(changed(0, 4, &1u32.to_le_bytes()), DirectoryError::Version { block: 0, found: 1 });
        assert_eq!(changed(1, 16, &5u32.to_le_bytes()), DirectoryError::Index { block: 1, found: 5 });
        // A huge process count is refused before it sizes anything.
        assert_eq!(changed(0, 48, &u64::MAX.to_le_bytes()), DirectoryError::Count { block: 0 });
        assert_eq!(changed(0, 56, &(1u64 << 40).to_le_bytes()), DirectoryError::Count { block: 0 });
        assert_eq!(changed(0, 56, &3u64.to_le_bytes()), DirectoryError::Count { block: 0 });
        assert_eq!(changed(0, 20, &80u32.to_le_bytes()), DirectoryError::Count { block: 0 });
        assert_eq!(changed(1, 20, &17u32.to_le_bytes()), DirectoryError::Count { block: 1 });
        // The last block links on; block 0 links to nothing, or to itself.
        assert_eq!(changed(1, 24, &9u64.to_le_bytes()), DirectoryError::Link { block: 1 });
        assert_eq!(changed(0, 24, &0u64.to_le_bytes()), DirectoryError::Link { block: 0 });
        assert_eq!(changed(1, 32, &[1]), DirectoryError::Reserved { block: 1 });
        assert_eq!(changed(0, HEADER_BYTES + 8, &[40]), DirectoryError::Name { block: 0, index: 0 });
        assert_eq!(changed(1, HEADER_BYTES + ENTRY_BYTES + 9, &[0xff]), DirectoryError::Name { block: 1, index: 1 });
        assert_eq!(changed(1, HEADER_BYTES + 16 * ENTRY_BYTES, &[1]), DirectoryError::Reserved { block: 1 });
        assert_eq!(DirectoryReader::new(&[0; DIRECTORY_BYTES], 100).err(), Some(DirectoryError::Magic { block: 0 }));
    }

    #[test]
    fn a_chain_that_loops_or_stops_early_is_refused() {
        let pages = continuation(3);
        let blocks = sample(200).encode(&pages).unwrap();
        // Block 1 names its own page as the next: a loop.
        let mut looped = blocks.clone();
        looped[1][24..32].copy_from_slice(&pages[0].0.to_le_bytes());
        recheck(&mut looped[1]);
        let mut reader = DirectoryReader::new(&looped[0], 1 << 20).unwrap();
        assert_eq!(reader.add(&looped[1]), Err(DirectoryError::Link { block: 1 }));
        // Finishing before the last block.
        let reader = DirectoryReader::new(&blocks[0], 1 << 20).unwrap();
        assert_eq!(reader.finish().err(), Some(DirectoryError::Link { block: 1 }));
        // More blocks than the store has pages.
        assert_eq!(DirectoryReader::new(&blocks[0], 2).err(), Some(DirectoryError::Count { block: 0 }));
    }
}
