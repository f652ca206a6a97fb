//! A node's image on the store: 32 slot records of 32 bytes (1024 bytes, the store's node
//! size), each a capability, plus the node's resume version. The layout is part of the disk
//! format (`docs/disk-format.md`, "Node image"); decoding checks every field, so a damaged
//! or foreign image is an error naming the slot, never a capability the kernel would trust.
//!
//! Slot record, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | type code (`CapType`) |
//! | 1 | rights bits |
//! | 2..4 | detail (a space's height and keeper flag; zero otherwise) |
//! | 4..8 | slot 0: low half of the node's resume version; slot 1: high half; else zero |
//! | 8..16 | badge (a number's first word) |
//! | 16..24 | object id (a number's second word) |
//! | 24..32 | version |

use crate::capability::{SPACE_HEIGHT_MAX, SPACE_KEEPER_FLAG};
use crate::{CapType, Capability, NODE_SLOT_COUNT, Node, ObjectId, Rights, Version};

pub const SLOT_RECORD_BYTES: usize = 32;
pub const NODE_IMAGE_BYTES: usize = NODE_SLOT_COUNT * SLOT_RECORD_BYTES;

/// What is wrong with a node image, and in which slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageError {
    pub slot: usize,
    pub what: &'static str,
}

impl core::fmt::Display for ImageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "slot {}: {}", self.slot, self.what)
    }
}

fn word(record: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(record[at..at + 8].try_into().expect("eight bytes"))
}

impl Capability {
    fn encode_into(&self, record: &mut [u8]) {
        record[0] = self.kind() as u8;
        record[1] = self.rights().bits();
        record[2..4].copy_from_slice(&self.detail().to_le_bytes());
        record[8..16].copy_from_slice(&self.badge().to_le_bytes());
        record[16..24].copy_from_slice(&self.object().0.to_le_bytes());
        record[24..32].copy_from_slice(&self.version().0.to_le_bytes());
    }

    fn decode_from(record: &[u8]) -> Result<Self, &'static str> {
        let kind = CapType::from_code(record[0]).ok_or("unknown capability type")?;
        let rights = Rights::from_bits(record[1]).ok_or("unknown rights bits")?;
        let detail = u16::from_le_bytes([record[2], record[3]]);
        let (badge, object, version) = (word(record, 8), word(record, 16), word(record, 24));
        let detail_ok = match kind {
            CapType::Space => {
                detail & !(SPACE_KEEPER_FLAG | 0xf) == 0 && detail & 0xf <= u16::from(SPACE_HEIGHT_MAX)
            }
            _ => detail == 0,
        };
        if !detail_ok {
            return Err("detail bits do not fit the type");
        }
        let capability = match kind {
            CapType::Void if record.iter().any(|&byte| byte != 0) => {
                return Err("a void capability with bits set");
            }
            CapType::Number if rights != Rights::NONE || version != 0 => {
                return Err("a number with rights or a version");
            }
            CapType::Number => Self::number([badge, object]),
            _ => Self::from_parts(kind, rights, detail, badge, ObjectId(object), Version(version)),
        };
        Ok(capability)
    }
}

impl Node {
    /// The node's image, with `resume_version` (see [`crate::ObjectCache`]).
    pub fn encode(&self, resume_version: Version) -> [u8; NODE_IMAGE_BYTES] {
        let mut image = [0u8; NODE_IMAGE_BYTES];
        for (capability, record) in self.slots().iter().zip(image.chunks_exact_mut(SLOT_RECORD_BYTES)) {
            capability.encode_into(record);
        }
        let resume = resume_version.0.to_le_bytes();
        image[4..8].copy_from_slice(&resume[..4]);
        image[SLOT_RECORD_BYTES + 4..SLOT_RECORD_BYTES + 8].copy_from_slice(&resume[4..]);
        image
    }

    /// The node and its resume version from an image made by [`Node::encode`].
    pub fn decode(image: &[u8; NODE_IMAGE_BYTES]) -> Result<(Self, Version), ImageError> {
        let mut resume = [0u8; 8];
        resume[..4].copy_from_slice(&image[4..8]);
        resume[4..].copy_from_slice(&image[SLOT_RECORD_BYTES + 4..SLOT_RECORD_BYTES + 8]);
        let mut node = Self::default();
        for (slot, chunk) in image.chunks_exact(SLOT_RECORD_BYTES).enumerate() {
            let mut record = [0u8; SLOT_RECORD_BYTES];
            record.copy_from_slice(chunk);
            if slot < 2 {
                record[4..8].fill(0);
            } else if record[4..8] != [0; 4] {
                return Err(ImageError { slot, what: "reserved bytes are not zero" });
            }
            let capability = Capability::decode_from(&record).map_err(|what| ImageError { slot, what })?;
            node.swap(crate::Slot::new(slot as u64).expect("below the slot count"), capability);
        }
        Ok((node, Version(u64::from_le_bytes(resume))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Slot;

    fn sample() -> Node {
        let mut node = Node::default();
        let page = Capability::new(CapType::Page, ObjectId(9), Version(3)).restricted(Rights::READ_ONLY);
        let start = Capability::new(CapType::Start, ObjectId(4), Version(1)).with_badge(u64::MAX);
        let space = Capability::space(ObjectId(77), Version(2), 7, true).unwrap();
        node.swap(Slot::constant(0), page);
        node.swap(Slot::constant(1), start);
        node.swap(Slot::constant(2), space);
        node.swap(Slot::constant(31), Capability::number([u64::MAX, 5]));
        node
    }

    #[test]
    fn images_round_trip_with_the_resume_version() {
        let node = sample();
        let image = node.encode(Version(0x1234_5678_9abc_def0));
        assert_eq!(Node::decode(&image), Ok((node, Version(0x1234_5678_9abc_def0))));
        assert_eq!(Node::decode(&Node::default().encode(Version(0))), Ok((Node::default(), Version(0))));
    }

    #[test]
    fn damaged_images_name_the_slot_and_the_check() {
        let image = sample().encode(Version(1));
        let damaged = |at: usize, value: u8| {
            let mut copy = image;
            copy[at] = value;
            Node::decode(&copy).unwrap_err()
        };
        assert_eq!(damaged(2 * 32, 200), ImageError { slot: 2, what: "unknown capability type" });
        assert_eq!(damaged(32 + 1, 0x80), ImageError { slot: 1, what: "unknown rights bits" });
        assert_eq!(damaged(2 * 32 + 2, 8), ImageError { slot: 2, what: "detail bits do not fit the type" });
        assert_eq!(damaged(3 * 32 + 9, 1), ImageError { slot: 3, what: "a void capability with bits set" });
        assert_eq!(damaged(5 * 32 + 6, 1), ImageError { slot: 5, what: "reserved bytes are not zero" });
        assert_eq!(damaged(31 * 32 + 1, 1), ImageError { slot: 31, what: "a number with rights or a version" });
        assert_eq!(damaged(32 + 2, 1), ImageError { slot: 1, what: "detail bits do not fit the type" });
    }
}
