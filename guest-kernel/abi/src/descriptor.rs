//! The invocation descriptor: how `rdi` packs what an `invoke` does. Its layout is
//! described once, in `interface.toml` (`docs/interface.md` has the table and worked
//! examples); the shifts and masks here are the generated
//! [`descriptor_field`](crate::interface::descriptor_field) constants,
//! and the const assertions below check what this decoder's arithmetic takes for granted.

use crate::interface::{descriptor_field as field, invocation_kind};

/// Set: the invoke receives a call's resume capability.
pub const RECEIVES_RESUME: u64 = field::RECEIVES_RESUME_MASK << field::RECEIVES_RESUME_SHIFT;
/// How many capability registers receive.
pub const RECEIVE_COUNT: u64 = field::RECEIVE_COUNT_MASK << field::RECEIVE_COUNT_SHIFT;

// Register indices are nibbles and a list holds four (`Registers` packs them in a u16); a
// count field holds 0..=7, of which `decode` refuses 5..=7 by adding 3 and shifting by 3;
// the kinds index a table of four.
const _: () = {
    assert!(field::TARGET_MASK == 0xf && field::RESUME_REGISTER_MASK == 0xf);
    assert!(field::SEND_REGISTERS_MASK == 0xffff && field::RECEIVE_REGISTERS_MASK == 0xffff);
    assert!(field::SEND_COUNT_MASK == 0x7 && field::RECEIVE_COUNT_MASK == 0x7);
    assert!(field::RECEIVES_RESUME_MASK == 1 && field::KIND_MASK == 0x3);
    assert!(
        invocation_kind::CALL == 0 && invocation_kind::RETURN == 1 && invocation_kind::SEND == 2
    );
};

/// What an invocation does besides invoking its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Invoke and wait for the reply, through a fresh resume capability.
    Call = invocation_kind::CALL as isize,
    /// Invoke (usually a resume capability), then wait for the next message.
    Return = invocation_kind::RETURN as isize,
    /// Invoke and go on without waiting.
    Send = invocation_kind::SEND as isize,
}

/// Up to four capability register indices, packed as in the descriptor (a nibble each):
/// the kernel decodes a descriptor on every invocation and mostly finds no registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Registers {
    nibbles: u16,
    count: u8,
}

impl Registers {
    pub const NONE: Self = Self {
        nibbles: 0,
        count: 0,
    };

    /// `None` if there are more than four or an index is not a capability register.
    #[inline]
    pub fn new(indices: &[u8]) -> Option<Self> {
        if indices.len() > 4 || indices.iter().any(|&index| index > 15) {
            return None;
        }
        let nibbles = indices.iter().enumerate().fold(0u16, |packed, (position, &index)| {
            packed | u16::from(index) << (4 * position)
        });
        Some(Self {
            nibbles,
            count: indices.len() as u8,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// The indices, in order.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.count).map(|position| (self.nibbles >> (4 * position)) as u8 & 0xf)
    }

}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub target: u8,
    pub kind: Kind,
    pub send: Registers,
    pub receive: Registers,
    /// Where the resume capability of a call received lands; `None`: it is dropped.
    pub resume: Option<u8>,
}

/// `rdi` had a bit set that this ABI does not define, or a count above four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MalformedDescriptor;

impl Descriptor {
    #[inline]
    pub fn encode(&self) -> u64 {
        (u64::from(self.target) & field::TARGET_MASK) << field::TARGET_SHIFT
            | (self.kind as u64) << field::KIND_SHIFT
            | u64::from(self.send.nibbles) << field::SEND_REGISTERS_SHIFT
            | u64::from(self.send.count) << field::SEND_COUNT_SHIFT
            | u64::from(self.receive.nibbles) << field::RECEIVE_REGISTERS_SHIFT
            | u64::from(self.receive.count) << field::RECEIVE_COUNT_SHIFT
            | self.resume.map_or(0, |register| {
                (u64::from(register) & field::RESUME_REGISTER_MASK) << field::RESUME_REGISTER_SHIFT
                    | RECEIVES_RESUME
            })
    }

    /// Every check is computed without a branch and tested once: the kernel decodes a
    /// descriptor (twice for IPC) on every invocation, and under TCG each branch ends a
    /// translation block.
    pub fn decode(word: u64) -> Result<Self, MalformedDescriptor> {
        let get = |shift: u32, mask: u64| (word >> shift) & mask;
        let kind = get(field::KIND_SHIFT, field::KIND_MASK);
        let send_nibbles = get(field::SEND_REGISTERS_SHIFT, field::SEND_REGISTERS_MASK);
        let send_count = get(field::SEND_COUNT_SHIFT, field::SEND_COUNT_MASK);
        let receive_nibbles = get(field::RECEIVE_REGISTERS_SHIFT, field::RECEIVE_REGISTERS_MASK);
        let receive_count = get(field::RECEIVE_COUNT_SHIFT, field::RECEIVE_COUNT_MASK);
        let resume_register = get(field::RESUME_REGISTER_SHIFT, field::RESUME_REGISTER_MASK);
        let has_resume = get(field::RECEIVES_RESUME_SHIFT, field::RECEIVES_RESUME_MASK);
        // Nibbles beyond a count must be zero, like every unused bit; a count above four
        // shifts every nibble out, so it is refused by its own test. Each test is a word
        // that is nonzero when it fails, ORed into one: comparisons joined with `|` are
        // compiled into a branch each.
        let malformed = (word & !field::DEFINED_BITS)
            | (kind + 1) >> 2 // kind 3
            | (send_count + 3) >> 3 // 5..=7
            | (receive_count + 3) >> 3
            | send_nibbles >> (4 * send_count)
            | receive_nibbles >> (4 * receive_count)
            | resume_register & (has_resume ^ 1).wrapping_neg();
        if malformed != 0 {
            return Err(MalformedDescriptor);
        }
        Ok(Self {
            target: get(field::TARGET_SHIFT, field::TARGET_MASK) as u8,
            // A table rather than a `match`: no branch (kind 3 was refused above).
            kind: [Kind::Call, Kind::Return, Kind::Send, Kind::Send][kind as usize & 3],
            send: Registers {
                nibbles: send_nibbles as u16,
                count: send_count as u8,
            },
            receive: Registers {
                nibbles: receive_nibbles as u16,
                count: receive_count as u8,
            },
            resume: (has_resume == 1).then_some(resume_register as u8),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Descriptor {
        Descriptor {
            target: 9,
            kind: Kind::Return,
            send: Registers::new(&[1, 15, 3]).unwrap(),
            receive: Registers::new(&[4, 5, 6, 7]).unwrap(),
            resume: Some(12),
        }
    }

    #[test]
    fn descriptors_round_trip() {
        let descriptor = sample();
        assert_eq!(Descriptor::decode(descriptor.encode()), Ok(descriptor));
        let plain = Descriptor {
            target: 0,
            kind: Kind::Call,
            send: Registers::NONE,
            receive: Registers::NONE,
            resume: None,
        };
        assert_eq!(plain.encode(), 0);
        assert_eq!(Descriptor::decode(0), Ok(plain));
    }

    #[test]
    fn the_receive_masks_cover_their_fields() {
        let word = sample().encode();
        assert_eq!((word & RECEIVE_COUNT) >> 48, 4);
        assert_ne!(word & RECEIVES_RESUME, 0);
        let none = Descriptor { receive: Registers::NONE, resume: None, ..sample() }.encode();
        assert_eq!(none & (RECEIVE_COUNT | RECEIVES_RESUME), 0);
    }

    #[test]
    fn undefined_bits_kinds_and_counts_are_refused() {
        let word = sample().encode();
        for bit in [6, 7, 27, 31, 51, 57, 63] {
            assert_eq!(
                Descriptor::decode(word | 1 << bit),
                Err(MalformedDescriptor),
                "bit {bit}"
            );
        }
        assert_eq!(
            Descriptor::decode(3 << 4),
            Err(MalformedDescriptor),
            "kind 3"
        );
        assert_eq!(
            Descriptor::decode(5 << 24),
            Err(MalformedDescriptor),
            "5 sent"
        );
        // One register counted, a second nibble set.
        assert_eq!(
            Descriptor::decode(1 << 24 | 0x20 << 8),
            Err(MalformedDescriptor)
        );
    }

    /// The decoder as first written, field by field: the branch-free one must agree.
    fn decode_reference(word: u64) -> Option<Descriptor> {
        const DEFINED: u64 =
            0xf | 0x3 << 4 | 0xffff << 8 | 0x7 << 24 | 0xffff << 32 | 0x7 << 48 | 0x1f << 52;
        let field = |shift: u32, mask: u64| (word >> shift) & mask;
        let registers = |nibbles: u64, count: u64| {
            (count <= 4 && nibbles >> (4 * count) == 0).then_some(Registers {
                nibbles: nibbles as u16,
                count: count as u8,
            })
        };
        if word & !DEFINED != 0 || (field(56, 1) == 0 && field(52, 0xf) != 0) {
            return None;
        }
        Some(Descriptor {
            target: field(0, 0xf) as u8,
            kind: [Some(Kind::Call), Some(Kind::Return), Some(Kind::Send), None]
                [field(4, 3) as usize]?,
            send: registers(field(8, 0xffff), field(24, 0x7))?,
            receive: registers(field(32, 0xffff), field(48, 0x7))?,
            resume: (field(56, 1) == 1).then_some(field(52, 0xf) as u8),
        })
    }

    #[test]
    fn the_decoder_agrees_with_the_field_by_field_one() {
        const DEFINED: u64 =
            0xf | 0x3 << 4 | 0xffff << 8 | 0x7 << 24 | 0xffff << 32 | 0x7 << 48 | 0x1f << 52;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut decoded = 0;
        for round in 0..200_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Mostly defined bits, with short register lists, so that many words decode.
            let mut word = state & DEFINED;
            if round % 2 == 0 {
                word &= !(0xfff0 << 8 | 0xfff0 << 32);
            }
            if round % 17 == 0 {
                word |= 1 << (state >> 58);
            }
            let result = Descriptor::decode(word).ok();
            assert_eq!(result, decode_reference(word), "{word:#x}");
            if let Some(descriptor) = result {
                assert_eq!(descriptor.encode(), word);
                decoded += 1;
            }
        }
        assert!(decoded > 10_000, "only {decoded} words decoded");
    }

    #[test]
    fn register_lists_are_bounded() {
        assert_eq!(Registers::new(&[0, 1, 2, 3, 4]), None);
        assert_eq!(Registers::new(&[16]), None);
        assert!(Registers::new(&[2, 0]).unwrap().iter().eq([2, 0]));
    }
}
