//! The home ranges: reading a group's checksum table (newest valid slot on any mirror, stale
//! or bad copies repaired) and reading a home block verified against it.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::error::{Check, Corruption, Region, StoreError};
use crate::format::home_table::{HomeTable, TableEntry, TablePlace};
use crate::format::log_record::BlockKind;
use crate::format::{Block, as_block, checksum, zeroed_block};
use crate::geometry::HomeRangeLayout;
use crate::store::{BlockKey, Store};

pub(crate) fn table_region(kind: BlockKind) -> Region {
    match kind {
        BlockKind::NodePot => Region::NodeTable,
        BlockKind::Page => Region::PageTable,
    }
}

pub(crate) fn data_region(kind: BlockKind) -> Region {
    match kind {
        BlockKind::NodePot => Region::NodeData,
        BlockKind::Page => Region::PageData,
    }
}

impl<D: BlockDevice> Store<D> {
    pub(crate) fn table_place(&self, kind: BlockKind, group: u64, slot: u8) -> TablePlace {
        TablePlace {
            kind,
            store_id: self.geometry.store_id,
            group,
            slot,
            entry_count: self.range_layout(kind).entries_in_group(group),
        }
    }

    /// A group's current table, from [`Store::table_cache`] or else read
    /// ([`Store::read_table_from_mirrors`]) and cached.
    pub(crate) fn read_table(
        &mut self,
        kind: BlockKind,
        group: u64,
    ) -> Result<HomeTable, StoreError> {
        if let Some(table) = self.table_cache.get(&(kind, group)) {
            return Ok(table.clone());
        }
        let table = self.read_table_from_mirrors(kind, group)?;
        self.cache_table(table.clone());
        Ok(table)
    }

    /// Keeps `table` as its group's current one, making room if the cache is full.
    pub(crate) fn cache_table(&mut self, table: HomeTable) {
        let Some(room_for_one) = self.table_cache_max.checked_sub(1) else {
            return;
        };
        self.trim_table_cache(room_for_one);
        self.table_cache.insert((table.kind, table.group), table);
    }

    /// Keeps at most `tables` home tables from now on ([`crate::TABLE_CACHE_MAX`] at open; 0
    /// keeps none): a small guest's heap holds its pages too.
    pub fn set_table_cache_max(&mut self, tables: usize) {
        self.table_cache_max = tables;
        self.trim_table_cache(tables);
    }

    fn trim_table_cache(&mut self, tables: usize) {
        while self.table_cache.len() > tables {
            self.table_cache.pop_first();
        }
    }

    /// Forgets every cached table, for memory: they are read again when needed.
    pub fn drop_table_cache(&mut self) {
        self.table_cache.clear();
    }

    /// A group's current table: of both slots on every readable mirror, the valid copy with
    /// the highest sequence. A mirror whose copy of a slot is invalid or older than the best
    /// copy of that slot gets the best copy written over it. Not cached: the scrub reads
    /// every table once a pass, and would push the tables in use out of the cache.
    pub(crate) fn read_table_from_mirrors(
        &mut self,
        kind: BlockKind,
        group: u64,
    ) -> Result<HomeTable, StoreError> {
        let range = self.range_layout(kind);
        let first_block = range.table_block(group, 0);
        let mut best: [Option<(HomeTable, Vec<u8>)>; 2] = [None, None];
        let mut copies: Vec<(usize, [Option<u64>; 2])> = Vec::new();
        let mut first_failure = None;
        for index in self.mirrors.readable(first_block, 2) {
            let mut pair = alloc::vec![0u8; 2 * BLOCK_SIZE];
            if let Err(error) = self.mirrors.read_from(index, first_block, &mut pair) {
                first_failure.get_or_insert(StoreError::Device {
                    mirror: index,
                    error,
                });
                continue;
            }
            let mut sequences = [None, None];
            for slot in 0..2u8 {
                let bytes =
                    &pair[usize::from(slot) * BLOCK_SIZE..(usize::from(slot) + 1) * BLOCK_SIZE];
                match HomeTable::decode(as_block(bytes), &self.table_place(kind, group, slot)) {
                    Ok(table) => {
                        sequences[usize::from(slot)] = Some(table.sequence);
                        let best_slot = &mut best[usize::from(slot)];
                        if best_slot
                            .as_ref()
                            .is_none_or(|(current, _)| current.sequence < table.sequence)
                        {
                            *best_slot = Some((table, bytes.to_vec()));
                        }
                    }
                    Err(check) => {
                        first_failure.get_or_insert(StoreError::Corrupt(Corruption {
                            region: table_region(kind),
                            block: first_block + u64::from(slot),
                            check,
                        }));
                    }
                }
            }
            copies.push((index, sequences));
        }
        for (index, sequences) in copies {
            for slot in 0..2usize {
                if let Some((table, bytes)) = &best[slot]
                    && sequences[slot] != Some(table.sequence)
                {
                    let bytes = bytes.clone();
                    self.mirrors
                        .write_to(index, first_block + slot as u64, &bytes)?;
                }
            }
        }
        let [slot_0, slot_1] = best;
        match (slot_0, slot_1) {
            (Some((table_0, _)), Some((table_1, _))) => {
                Ok(if table_1.sequence > table_0.sequence {
                    table_1
                } else {
                    table_0
                })
            }
            (Some((table, _)), None) | (None, Some((table, _))) => Ok(table),
            (None, None) => Err(first_failure.unwrap_or(StoreError::NoMirror)),
        }
    }

    /// A block at home, verified against its table entry. A block never migrated reads as
    /// zeros with version 0 (the device block is not read).
    /// What home block `key`'s group table lists for it.
    pub(crate) fn home_entry(&mut self, (kind, index): BlockKey) -> Result<TableEntry, StoreError> {
        let (group, entry_index) = HomeRangeLayout::group_of(index);
        let table = self.read_table(kind, group)?;
        table.entries.get(entry_index).copied().ok_or(StoreError::ObjectOutOfRange { id: index })
    }

    pub(crate) fn read_home(
        &mut self,
        key: BlockKey,
    ) -> Result<([u64; 4], Box<Block>), StoreError> {
        let (kind, index) = key;
        let entry = self.home_entry(key)?;
        let mut block = zeroed_block();
        if !entry.written {
            return Ok(([0; 4], block));
        }
        let device_block = self.range_layout(kind).data_first_block + index;
        self.mirrors
            .read_verified(device_block, &mut block[..], data_region(kind), |bytes| {
                if checksum(bytes) == entry.checksum {
                    Ok(())
                } else {
                    Err(Check::DataChecksum)
                }
            })?;
        Ok((entry.versions, block))
    }
}
