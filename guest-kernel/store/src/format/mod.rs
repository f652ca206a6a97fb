//! The on-disk records, each with an encoder and a decoder that checks everything it reads.
//! Byte tables for every record are in `docs/disk-format.md`; all integers are little-endian.
//!
//! Decoders return the [`Check`] that failed; the caller knows the block and the region and
//! turns it into a [`crate::Corruption`].

mod checksum;
pub mod home_table;
pub mod log_record;
pub mod superblock;

use crate::device::BLOCK_SIZE;
use crate::error::Check;

/// Bumped whenever a record's layout or the checksum changes; a store of another version is
/// refused, not misread. Version 2: XXH64-based checksums instead of CRC32C. Version 3: log
/// headers say which records were durable when they were written, and the superblock
/// records a truncation of the log.
pub const FORMAT_VERSION: u32 = 3;

/// Generations, sequence numbers, tickets and boot counts read from disk must stay below
/// this: a crafted record near `u64::MAX` would otherwise overflow the next increment. At a
/// billion increments a second the bound is 146 years away.
pub const COUNTER_MAX: u64 = 1 << 62;

/// One device block.
pub type Block = [u8; BLOCK_SIZE];

/// Where a record's own checksum sits: the last four bytes of its block, covering the rest.
pub const RECORD_CHECKSUM_OFFSET: usize = BLOCK_SIZE - 4;

pub use checksum::checksum;

/// Continues a checksum over several pieces (the commit record's chain of header checksums).
pub fn checksum_chain(previous: u32, next: u32) -> u32 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&previous.to_le_bytes());
    bytes[4..].copy_from_slice(&next.to_le_bytes());
    checksum(&bytes)
}

pub(crate) fn put_u8(block: &mut Block, offset: usize, value: u8) {
    block[offset] = value;
}

pub(crate) fn put_u32(block: &mut Block, offset: usize, value: u32) {
    block[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(block: &mut Block, offset: usize, value: u64) {
    block[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn get_u8(block: &Block, offset: usize) -> u8 {
    block[offset]
}

pub(crate) fn get_u32(block: &Block, offset: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&block[offset..offset + 4]);
    u32::from_le_bytes(bytes)
}

pub(crate) fn get_u64(block: &Block, offset: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&block[offset..offset + 8]);
    u64::from_le_bytes(bytes)
}

/// Seals a record: writes the checksum of everything before it into its last four bytes.
pub(crate) fn seal(block: &mut Block) {
    let sum = checksum(&block[..RECORD_CHECKSUM_OFFSET]);
    put_u32(block, RECORD_CHECKSUM_OFFSET, sum);
}

/// The checksum a sealed record carries.
pub fn sealed_checksum(block: &Block) -> u32 {
    get_u32(block, RECORD_CHECKSUM_OFFSET)
}

/// Checks magic, then format version (so that a foreign or future image says so rather than
/// "checksum"), then the record checksum.
pub(crate) fn check_envelope(
    block: &Block,
    magic: u32,
    version_offset: Option<usize>,
) -> Result<(), Check> {
    if get_u32(block, 0) != magic {
        return Err(Check::Magic);
    }
    if let Some(offset) = version_offset
        && get_u32(block, offset) != FORMAT_VERSION
    {
        return Err(Check::FormatVersion);
    }
    if checksum(&block[..RECORD_CHECKSUM_OFFSET]) != sealed_checksum(block) {
        return Err(Check::Checksum);
    }
    Ok(())
}

/// A fresh zeroed block on the heap (blocks are too large for a kernel stack).
pub fn zeroed_block() -> alloc::boxed::Box<Block> {
    alloc::boxed::Box::new([0u8; BLOCK_SIZE])
}

/// Views a whole-block slice as a block.
pub(crate) fn as_block(bytes: &[u8]) -> &Block {
    // The callers slice exactly BLOCK_SIZE bytes; `first_chunk` returns None otherwise and
    // that would be a bug in this crate, not a disk fault.
    bytes.first_chunk::<BLOCK_SIZE>().expect("a whole block")
}
