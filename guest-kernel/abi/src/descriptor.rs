//! The invocation descriptor: how `rdi` packs what an `invoke` does (unchanged since ABI version 2).
//!
//! | bits    | field |
//! |---------|-------|
//! | 0..=3   | target capability register |
//! | 4..=5   | kind: 0 call, 1 return, 2 send |
//! | 8..=23  | capability registers sent, 4 bits each, first in bits 8..=11 |
//! | 24..=26 | how many are sent (0..=4) |
//! | 32..=47 | capability registers that receive, 4 bits each |
//! | 48..=50 | how many receive (0..=4) |
//! | 52..=55 | the register that receives the resume capability of a call |
//! | 56      | set: a call's resume capability is received (into bits 52..=55) |
//!
//! Every other bit must be zero, so that a later ABI can give them a meaning.

/// What an invocation does besides invoking its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Invoke and wait for the reply, through a fresh resume capability.
    Call = 0,
    /// Invoke (usually a resume capability), then wait for the next message.
    Return = 1,
    /// Invoke and go on without waiting.
    Send = 2,
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

    /// The indices, in order.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.count).map(|position| (self.nibbles >> (4 * position)) as u8 & 0xf)
    }

    fn unpack(nibbles: u64, count: u64) -> Option<Self> {
        // Nibbles beyond the count must be zero, like every unused bit.
        (count <= 4 && nibbles >> (4 * count) == 0).then_some(Self {
            nibbles: nibbles as u16,
            count: count as u8,
        })
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
    pub fn encode(&self) -> u64 {
        u64::from(self.target & 0xf)
            | (self.kind as u64) << 4
            | u64::from(self.send.nibbles) << 8
            | u64::from(self.send.count) << 24
            | u64::from(self.receive.nibbles) << 32
            | u64::from(self.receive.count) << 48
            | self
                .resume
                .map_or(0, |register| u64::from(register & 0xf) << 52 | 1 << 56)
    }

    pub fn decode(word: u64) -> Result<Self, MalformedDescriptor> {
        const DEFINED: u64 =
            0xf | 0x3 << 4 | 0xffff << 8 | 0x7 << 24 | 0xffff << 32 | 0x7 << 48 | 0x1f << 52;
        if word & !DEFINED != 0 {
            return Err(MalformedDescriptor);
        }
        let kind = match (word >> 4) & 0x3 {
            0 => Kind::Call,
            1 => Kind::Return,
            2 => Kind::Send,
            _ => return Err(MalformedDescriptor),
        };
        let field = |shift: u32, mask: u64| (word >> shift) & mask;
        if field(56, 1) == 0 && field(52, 0xf) != 0 {
            return Err(MalformedDescriptor);
        }
        Ok(Self {
            target: field(0, 0xf) as u8,
            kind,
            send: Registers::unpack(field(8, 0xffff), field(24, 0x7)).ok_or(MalformedDescriptor)?,
            receive: Registers::unpack(field(32, 0xffff), field(48, 0x7))
                .ok_or(MalformedDescriptor)?,
            resume: (field(56, 1) == 1).then_some(field(52, 0xf) as u8),
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

    #[test]
    fn register_lists_are_bounded() {
        assert_eq!(Registers::new(&[0, 1, 2, 3, 4]), None);
        assert_eq!(Registers::new(&[16]), None);
        assert!(Registers::new(&[2, 0]).unwrap().iter().eq([2, 0]));
    }
}
