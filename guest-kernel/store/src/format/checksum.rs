//! The store's checksum: XXH64 (seed 0) folded to 32 bits, over every record and data block.
//!
//! Every page a checkpoint writes is checksummed, and under emulation (QEMU's TCG) that was
//! stabilization's largest cost: table-driven CRC32C does a table load per byte or two, each
//! a software TLB lookup, about 12 µs a page. XXH64 does one 8-byte load, two multiplies and
//! a rotate per 8 bytes, with no tables, and still detects random damage (a torn, lost or
//! misdirected write, bit rot) with probability 1 − 2⁻³² at 32 bits — the checksum RocksDB
//! also keeps at 32 bits of a 64-bit hash. The hash is the `xxhash-rust` crate's XXH64; the
//! published test vectors below pin the on-disk format to it.

/// The 32-bit checksum the format stores: XXH64's two halves xor-ed together.
pub fn checksum(bytes: &[u8]) -> u32 {
    let hash = xxh64(bytes);
    (hash ^ (hash >> 32)) as u32
}

fn xxh64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, 0)
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
