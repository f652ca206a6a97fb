//! The store's checksum: XXH64 (seed 0) folded to 32 bits, over every record and data block.
//!
//! Every page a checkpoint writes is checksummed, and under emulation (QEMU's TCG) that was
//! stabilization's largest cost: table-driven CRC32C does a table load per byte or two, each
//! a software TLB lookup, about 12 µs a page. XXH64 does one 8-byte load, two multiplies and
//! a rotate per 8 bytes, with no tables, and still detects random damage (a torn, lost or
//! misdirected write, bit rot) with probability 1 − 2⁻³² at 32 bits — the checksum RocksDB
//! also keeps at 32 bits of a 64-bit hash. The algorithm is the published XXH64
//! (<https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md>); its test vectors are
//! below.

const PRIME_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME_5: u64 = 0x27D4_EB2F_1656_67C5;

/// The 32-bit checksum the format stores: XXH64's two halves xor-ed together.
pub fn checksum(bytes: &[u8]) -> u32 {
    let hash = xxh64(bytes);
    (hash ^ (hash >> 32)) as u32
}

fn round(accumulator: u64, input: u64) -> u64 {
    accumulator
        .wrapping_add(input.wrapping_mul(PRIME_2))
        .rotate_left(31)
        .wrapping_mul(PRIME_1)
}

fn merge_round(hash: u64, accumulator: u64) -> u64 {
    (hash ^ round(0, accumulator))
        .wrapping_mul(PRIME_1)
        .wrapping_add(PRIME_4)
}

fn read_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(*bytes.first_chunk::<8>().expect("8 bytes"))
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(*bytes.first_chunk::<4>().expect("4 bytes"))
}

/// XXH64 with seed 0.
pub fn xxh64(bytes: &[u8]) -> u64 {
    let stripes = bytes.chunks_exact(32);
    let tail = stripes.remainder();
    let mut hash = if bytes.len() >= 32 {
        let mut lanes = [
            PRIME_1.wrapping_add(PRIME_2),
            PRIME_2,
            0,
            0u64.wrapping_sub(PRIME_1),
        ];
        for stripe in stripes {
            lanes[0] = round(lanes[0], read_u64(&stripe[0..]));
            lanes[1] = round(lanes[1], read_u64(&stripe[8..]));
            lanes[2] = round(lanes[2], read_u64(&stripe[16..]));
            lanes[3] = round(lanes[3], read_u64(&stripe[24..]));
        }
        let mut hash = lanes[0]
            .rotate_left(1)
            .wrapping_add(lanes[1].rotate_left(7))
            .wrapping_add(lanes[2].rotate_left(12))
            .wrapping_add(lanes[3].rotate_left(18));
        for lane in lanes {
            hash = merge_round(hash, lane);
        }
        hash
    } else {
        PRIME_5
    };
    hash = hash.wrapping_add(bytes.len() as u64);
    let mut rest = tail;
    while rest.len() >= 8 {
        hash = (hash ^ round(0, read_u64(rest)))
            .rotate_left(27)
            .wrapping_mul(PRIME_1)
            .wrapping_add(PRIME_4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        hash = (hash ^ u64::from(read_u32(rest)).wrapping_mul(PRIME_1))
            .rotate_left(23)
            .wrapping_mul(PRIME_2)
            .wrapping_add(PRIME_3);
        rest = &rest[4..];
    }
    for &byte in rest {
        hash = (hash ^ u64::from(byte).wrapping_mul(PRIME_5))
            .rotate_left(11)
            .wrapping_mul(PRIME_1);
    }
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
