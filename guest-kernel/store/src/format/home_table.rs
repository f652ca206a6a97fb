//! Checksum tables of the home ranges. Each group of up to 84 home data blocks has a table
//! block listing, per data block, its checksum, the table write that put it there and the
//! versions of the objects it holds — apart from the data, so that a lost or misdirected home
//! write shows as a mismatch. Each group has two table slots written alternately (the older
//! one is overwritten), so a torn table write leaves the other slot valid; the newest valid
//! slot on any mirror wins.

use alloc::vec::Vec;

use super::log_record::BlockKind;
use super::{Block, check_envelope, get_u8, get_u32, get_u64, put_u8, put_u32, put_u64, seal};
use crate::error::Check;

pub const HOME_TABLE_MAGIC: u32 = u32::from_le_bytes(*b"HFHT");

const ENTRIES_OFFSET: usize = 48;
const ENTRY_SIZE: usize = 48;
/// Home data blocks one table block covers.
pub const TABLE_ENTRIES_MAX: usize = (super::RECORD_CHECKSUM_OFFSET - ENTRIES_OFFSET) / ENTRY_SIZE;

/// One home data block as its table lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TableEntry {
    /// False until migration first writes the block; until then it reads as zeros with
    /// version 0 and the device block is not read (format does not write home data).
    pub written: bool,
    pub checksum: u32,
    /// The table sequence of the migration that wrote the block.
    pub sequence: u64,
    pub versions: [u64; 4],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HomeTable {
    pub kind: BlockKind,
    pub store_id: u64,
    pub group: u64,
    /// 0 or 1: which of the group's two blocks this is.
    pub slot: u8,
    /// Grows with every table write (boot count in the high 32 bits); the newest valid slot
    /// is the group's table.
    pub sequence: u64,
    pub entries: Vec<TableEntry>,
}

/// Where a table block was read from, which its contents must name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablePlace {
    pub kind: BlockKind,
    pub store_id: u64,
    pub group: u64,
    pub slot: u8,
    /// How many data blocks the group covers.
    pub entry_count: usize,
}

impl HomeTable {
    /// A group's table before anything was migrated into it.
    pub fn empty(place: &TablePlace, sequence: u64) -> Self {
        Self {
            kind: place.kind,
            store_id: place.store_id,
            group: place.group,
            slot: place.slot,
            sequence,
            entries: alloc::vec![TableEntry::default(); place.entry_count],
        }
    }

    pub fn encode(&self, block: &mut Block) {
        block.fill(0);
        put_u32(block, 0, HOME_TABLE_MAGIC);
        put_u8(block, 4, self.kind as u8);
        put_u8(block, 5, self.slot);
        put_u64(block, 8, self.store_id);
        put_u64(block, 16, self.group);
        put_u64(block, 24, self.sequence);
        put_u32(block, 32, self.entries.len() as u32);
        for (index, entry) in self.entries.iter().enumerate() {
            let offset = ENTRIES_OFFSET + index * ENTRY_SIZE;
            put_u32(block, offset, entry.checksum);
            put_u8(block, offset + 4, u8::from(entry.written));
            put_u64(block, offset + 8, entry.sequence);
            for (version_index, version) in entry.versions.iter().enumerate() {
                put_u64(block, offset + 16 + version_index * 8, *version);
            }
        }
        seal(block);
    }

    pub fn decode(block: &Block, place: &TablePlace) -> Result<Self, Check> {
        check_envelope(block, HOME_TABLE_MAGIC, None)?;
        if get_u64(block, 8) != place.store_id {
            return Err(Check::StoreId);
        }
        if get_u8(block, 4) != place.kind as u8
            || get_u64(block, 16) != place.group
            || get_u8(block, 5) != place.slot
        {
            return Err(Check::Position);
        }
        let entry_count = get_u32(block, 32) as usize;
        if entry_count != place.entry_count || entry_count > TABLE_ENTRIES_MAX {
            return Err(Check::Bounds);
        }
        let mut entries = Vec::with_capacity(entry_count);
        for index in 0..entry_count {
            let offset = ENTRIES_OFFSET + index * ENTRY_SIZE;
            let written = match get_u8(block, offset + 4) {
                0 => false,
                1 => true,
                _ => return Err(Check::Kind),
            };
            let mut versions = [0u64; 4];
            for (version_index, version) in versions.iter_mut().enumerate() {
                *version = get_u64(block, offset + 16 + version_index * 8);
            }
            entries.push(TableEntry {
                written,
                checksum: get_u32(block, offset),
                sequence: get_u64(block, offset + 8),
                versions,
            });
        }
        Ok(Self {
            kind: place.kind,
            store_id: place.store_id,
            group: place.group,
            slot: place.slot,
            sequence: get_u64(block, 24),
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::zeroed_block;

    const PLACE: TablePlace = TablePlace {
        kind: BlockKind::Page,
        store_id: 9,
        group: 3,
        slot: 1,
        entry_count: 84,
    };

    fn sample() -> HomeTable {
        let mut table = HomeTable::empty(&PLACE, 77);
        table.entries[5] = TableEntry {
            written: true,
            checksum: 0xabc,
            sequence: 70,
            versions: [2, 0, 0, 0],
        };
        table.entries[83] = TableEntry {
            written: true,
            checksum: 0xdef,
            sequence: 71,
            versions: [9, 8, 7, 6],
        };
        table
    }

    fn encoded(table: &HomeTable) -> alloc::boxed::Box<Block> {
        let mut block = zeroed_block();
        table.encode(&mut block);
        block
    }

    #[test]
    fn round_trip() {
        assert_eq!(TABLE_ENTRIES_MAX, 84);
        assert_eq!(HomeTable::decode(&encoded(&sample()), &PLACE), Ok(sample()));
    }

    #[test]
    fn corruption_is_named() {
        assert_eq!(
            HomeTable::decode(&zeroed_block(), &PLACE),
            Err(Check::Magic)
        );
        let mut torn = encoded(&sample());
        torn[300] ^= 4;
        assert_eq!(HomeTable::decode(&torn, &PLACE), Err(Check::Checksum));
        let other_store = TablePlace {
            store_id: 10,
            ..PLACE
        };
        assert_eq!(
            HomeTable::decode(&encoded(&sample()), &other_store),
            Err(Check::StoreId)
        );
        for misplaced in [
            TablePlace { group: 4, ..PLACE },
            TablePlace { slot: 0, ..PLACE },
            TablePlace {
                kind: BlockKind::NodePot,
                ..PLACE
            },
        ] {
            assert_eq!(
                HomeTable::decode(&encoded(&sample()), &misplaced),
                Err(Check::Position)
            );
        }
        let short = TablePlace {
            entry_count: 80,
            ..PLACE
        };
        assert_eq!(
            HomeTable::decode(&encoded(&sample()), &short),
            Err(Check::Bounds)
        );
        let mut bad_state = encoded(&sample());
        put_u8(&mut bad_state, ENTRIES_OFFSET + 4, 2);
        seal(&mut bad_state);
        assert_eq!(HomeTable::decode(&bad_state, &PLACE), Err(Check::Kind));
    }
}
