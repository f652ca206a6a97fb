//! The store's checksum: XXH64 (seed 0) folded to 32 bits, over every record and data block.
//!
//! Every page a checkpoint writes is checksummed, and under emulation (QEMU's TCG) that was
//! stabilization's largest cost: table-driven CRC32C does a table load per byte or two, each
//! a software TLB lookup, about 12 µs a page. XXH64 does one 8-byte load, two multiplies and
//! a rotate per 8 bytes, with no tables, and still detects random damage (a torn, lost or
//! misdirected write, bit rot) with probability 1 − 2⁻³² at 32 bits — the checksum RocksDB
//! also keeps at 32 bits of a 64-bit hash. The hash is the `xxhash-rust` crate's XXH64; the
//! published test vectors below pin the on-disk format to it. Whole blocks, what nearly
//! every checksum covers, take a loop of our own that gives the same value (a test compares
//! them): the crate's general loop compiles to three times the instructions a stripe, with
//! bounds checks and spills to the stack, each spill another software TLB lookup under TCG,
//! which made it 6–7 µs a page there against about 1 µs for the block loop.

use super::Block;
use crate::device::BLOCK_SIZE;

/// The 32-bit checksum the format stores: XXH64's two halves xor-ed together.
pub fn checksum(bytes: &[u8]) -> u32 {
    let hash = match <&Block>::try_from(bytes) {
        Ok(block) => block_xxh64(block),
        Err(_) => xxh64(bytes),
    };
    fold(hash)
}

fn fold(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

fn xxh64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, 0)
}

const PRIME_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME_4: u64 = 0x85EB_CA77_C2B2_AE63;
/// XXH64 consumes its input in stripes of four 8-byte lanes.
const STRIPE: usize = 32;
const _: () = assert!(BLOCK_SIZE.is_multiple_of(STRIPE));

fn round(accumulator: u64, input: u64) -> u64 {
    accumulator
        .wrapping_add(input.wrapping_mul(PRIME_2))
        .rotate_left(31)
        .wrapping_mul(PRIME_1)
}

/// XXH64 (seed 0) of a whole block, the same value as the crate's (a test holds them
/// together): a block is whole stripes, so there is no tail, and the fixed length lets the
/// loop run without the bounds checks and spills the crate's general loop has (three times
/// the instructions a stripe, which under TCG made it stabilization's largest cost).
fn block_xxh64(block: &Block) -> u64 {
    let mut lanes = [
        PRIME_1.wrapping_add(PRIME_2),
        PRIME_2,
        0,
        0u64.wrapping_sub(PRIME_1),
    ];
    let (stripes, []) = block.as_chunks::<STRIPE>() else {
        unreachable!("a block is whole stripes")
    };
    for stripe in stripes {
        let (words, []) = stripe.as_chunks::<8>() else {
            unreachable!("a stripe is four words")
        };
        let words = [0, 1, 2, 3].map(|lane| u64::from_le_bytes(words[lane]));
        for (lane, word) in lanes.iter_mut().zip(words) {
            *lane = round(*lane, word);
        }
    }
    let mut hash = lanes[0]
        .rotate_left(1)
        .wrapping_add(lanes[1].rotate_left(7))
        .wrapping_add(lanes[2].rotate_left(12))
        .wrapping_add(lanes[3].rotate_left(18));
    for lane in lanes {
        hash = (hash ^ round(0, lane))
            .wrapping_mul(PRIME_1)
            .wrapping_add(PRIME_4);
    }
    hash = hash.wrapping_add(BLOCK_SIZE as u64);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(PRIME_2);
    hash ^= hash >> 29;
    hash = hash.wrapping_mul(PRIME_3);
    hash ^ (hash >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published XXH64 values (seed 0): the empty input and short ones take the tail path
    /// only; the 39-byte sentence takes the stripe path and every tail step.
    #[test]
    fn xxh64_matches_the_published_test_vectors() {
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition"),
            0xFBCE_A83C_8A37_8BF1
        );
    }

    /// The block path is XXH64: the same value as the crate's general one, for blocks of
    /// every byte value in every position.
    #[test]
    fn the_block_path_matches_the_crate() {
        for seed in 0..64u64 {
            let mut block = [0u8; BLOCK_SIZE];
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for byte in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
            if seed == 0 {
                block = [0; BLOCK_SIZE];
            }
            let expected = fold(xxh64(&block));
            assert_eq!(checksum(&block), expected, "seed {seed}");
        }
    }

    #[test]
    fn a_flipped_bit_or_a_moved_sector_changes_the_checksum() {
        // Bytes that do not repeat with any period a sector swap could hide.
        let block: alloc::vec::Vec<u8> = (0..4096u32)
            .map(|index| (index.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let sum = checksum(&block);
        for bit in [0, 1, 4095 * 8 + 7, 2048 * 8 + 3] {
            let mut damaged = block.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(checksum(&damaged), sum, "bit {bit}");
        }
        // Two 512-byte sectors swapped: the same bytes in another order.
        assert_ne!(block[..512], block[3584..]);
        let mut swapped = block.clone();
        swapped.copy_within(0..512, 3584);
        swapped[..512].copy_from_slice(&block[3584..]);
        assert_ne!(checksum(&swapped), sum);
    }
}
