//! The object cache's tables: objects by id, with the lookups of the invocation path cheap.
//!
//! Object ids are handed out in order and never reused (the kernel numbers objects as it
//! makes them, the store keeps the numbering), so a table is a vector indexed by id: a
//! lookup is a bounds check and a load, where a hash map under TCG is some 80 instructions
//! and an invocation makes several. A table holds an entry per id up to the highest one it
//! has seen: a few bytes for each object ever made.
//!
//! - [`ObjectTable`] holds its entries in place (pages: a version and a frame handle).
//! - [`LoadableTable`] holds each entry in its own allocation, filled on first use through
//!   a shared borrow and emptied again to free memory (nodes: their images are read from the
//!   store when used and evicted when clean; see [`crate::cache`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::OnceCell;

use crate::ObjectId;

/// Objects of type `V` by id, held in place.
pub struct ObjectTable<V> {
    slots: Vec<Option<V>>,
    len: usize,
}

impl<V> Default for ObjectTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

/// The vector index of `id`; `None` for an id no table could hold (beyond the address
/// space), which is then simply not here.
fn index(id: ObjectId) -> Option<usize> {
    usize::try_from(id.0).ok()
}

impl<V> ObjectTable<V> {
    pub const fn new() -> Self {
        Self { slots: Vec::new(), len: 0 }
    }

    pub fn contains_key(&self, id: &ObjectId) -> bool {
        self.get(id).is_some()
    }

    #[inline]
    pub fn get(&self, id: &ObjectId) -> Option<&V> {
        self.slots.get(index(*id)?)?.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, id: &ObjectId) -> Option<&mut V> {
        self.slots.get_mut(index(*id)?)?.as_mut()
    }

    /// Adds or replaces `id`'s value; returns the value replaced.
    pub fn insert(&mut self, id: ObjectId, value: V) -> Option<V> {
        let index = index(id).expect("ids are handed out in order from 0");
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        let old = self.slots[index].replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Gives every id in `first..end` without a value one made by `make`: in bulk, as a
    /// restart learns of every page at once.
    pub fn fill_absent(&mut self, first: ObjectId, end: ObjectId, mut make: impl FnMut() -> V) {
        let (first, end) = (index(first).expect("ids fit"), index(end).expect("ids fit"));
        for slot in self.slots.iter_mut().take(end).skip(first).filter(|slot| slot.is_none()) {
            *slot = Some(make());
            self.len += 1;
        }
        if end > self.slots.len() {
            let start = self.slots.len().max(first);
            self.slots.resize_with(start, || None);
            self.slots.resize_with(end, || Some(make()));
            self.len += end - start;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every object, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (ObjectId, &V)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| Some((ObjectId(index as u64), slot.as_ref()?)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten()
    }
}

/// Objects of type `V` by id, each in its own allocation, which may be absent while the
/// object is known (on the store): [`Self::get_or_load`] fills it through a shared borrow,
/// so that every lookup on every path can load what it finds absent, and
/// [`Self::unload`] empties it again. Filling never moves another entry, so references
/// handed out earlier stay valid.
pub struct LoadableTable<V> {
    slots: Vec<OnceCell<Box<V>>>,
}

impl<V> Default for LoadableTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> LoadableTable<V> {
    pub const fn new() -> Self {
        Self { slots: Vec::new() }
    }

    /// How many ids the table knows of (`0..known()`), loaded or not.
    pub fn known(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Knows of ids `0..count` from now on: those not loaded are absent until
    /// [`Self::get_or_load`] loads them.
    pub fn know_up_to(&mut self, count: u64) {
        let count = usize::try_from(count).expect("ids fit the address space");
        if count > self.slots.len() {
            self.slots.resize_with(count, OnceCell::new);
        }
    }

    /// `id`'s entry if it is loaded.
    #[inline]
    pub fn get(&self, id: &ObjectId) -> Option<&V> {
        self.slots.get(index(*id)?)?.get().map(|entry| &**entry)
    }

    /// `id`'s entry, loaded by `load` first if `id` is known but absent; `None` if `id` is
    /// not known or `load` finds nothing.
    #[inline]
    pub fn get_or_load(&self, id: &ObjectId, load: impl FnOnce() -> Option<V>) -> Option<&V> {
        let cell = self.slots.get(index(*id)?)?;
        if let Some(entry) = cell.get() {
            return Some(entry);
        }
        // Loaded outside `get_or_init`, whose closure must not reach the cell: should `load`
        // fill it meanwhile, that entry stays and this one is dropped.
        let entry = load()?;
        Some(&**cell.get_or_init(|| Box::new(entry)))
    }

    #[inline]
    pub fn get_mut(&mut self, id: &ObjectId) -> Option<&mut V> {
        self.slots.get_mut(index(*id)?)?.get_mut().map(|entry| &mut **entry)
    }

    /// [`Self::get_or_load`] for a change: one lookup of the slot, which the invocation path
    /// makes for every message delivered.
    #[inline]
    pub fn get_or_load_mut(&mut self, id: &ObjectId, load: impl FnOnce() -> Option<V>) -> Option<&mut V> {
        let cell = self.slots.get_mut(index(*id)?)?;
        if cell.get().is_none() {
            let _ = cell.set(Box::new(load()?));
        }
        cell.get_mut().map(|entry| &mut **entry)
    }

    /// Adds or replaces `id`'s entry; the table knows of every id up to `id` from now on.
    pub fn insert(&mut self, id: ObjectId, value: V) {
        let index = index(id).expect("ids are handed out in order from 0");
        self.know_up_to(index as u64 + 1);
        self.slots[index] = OnceCell::from(Box::new(value));
    }

    /// Empties `id`'s entry (the id stays known) and returns what it held.
    pub fn unload(&mut self, id: &ObjectId) -> Option<Box<V>> {
        self.slots.get_mut(index(*id)?)?.take()
    }

    /// How many entries are loaded.
    pub fn loaded(&self) -> usize {
        self.slots.iter().filter(|slot| slot.get().is_some()).count()
    }

    /// Every loaded entry, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (ObjectId, &V)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| Some((ObjectId(index as u64), &**slot.get()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn fill_absent_fills_only_the_gaps_in_its_range() {
        let mut table = ObjectTable::new();
        table.insert(ObjectId(2), 20);
        table.fill_absent(ObjectId(1), ObjectId(5), || 7);
        let filled: Vec<_> = table.iter().map(|(id, value)| (id.0, *value)).collect();
        assert_eq!(filled, [(1, 7), (2, 20), (3, 7), (4, 7)]);
        assert_eq!(table.len(), 4);
        table.fill_absent(ObjectId(6), ObjectId(8), || 9);
        assert_eq!(table.get(&ObjectId(5)), None, "below the range and past the table");
        assert_eq!(table.get(&ObjectId(7)), Some(&9));
        assert_eq!(table.get(&ObjectId(8)), None);
        assert_eq!(table.len(), 6);
    }

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let mut table = ObjectTable::new();
        for id in 0..1000 {
            assert_eq!(table.insert(ObjectId(id * 7), id), None);
        }
        for id in 0..1000 {
            assert_eq!(table.get(&ObjectId(id * 7)), Some(&id));
            assert_eq!(table.get(&ObjectId(id * 7 + 1)), None);
        }
        assert_eq!(table.get(&ObjectId(u64::MAX)), None, "far beyond the table");
        assert_eq!(table.len(), 1000);
        assert_eq!(table.insert(ObjectId(14), 99), Some(2));
        assert_eq!(table.get(&ObjectId(14)), Some(&99));
        *table.get_mut(&ObjectId(21)).unwrap() += 1;
        assert_eq!(table.get(&ObjectId(21)), Some(&4));
        assert_eq!(table.iter().next(), Some((ObjectId(0), &0)));
    }

    #[test]
    fn a_loadable_table_loads_known_ids_once_and_unloads_them() {
        let mut table = LoadableTable::new();
        table.insert(ObjectId(1), 'a');
        table.know_up_to(4);
        let loads = Cell::new(0);
        let load = |value| {
            loads.set(loads.get() + 1);
            Some(value)
        };
        assert_eq!(table.get(&ObjectId(3)), None, "known, not loaded");
        assert_eq!(table.get_or_load(&ObjectId(3), || load('c')), Some(&'c'));
        assert_eq!(table.get_or_load(&ObjectId(3), || load('x')), Some(&'c'), "loaded once");
        assert_eq!(table.get_or_load(&ObjectId(1), || load('x')), Some(&'a'));
        assert_eq!(table.get_or_load(&ObjectId(4), || load('x')), None, "not known");
        assert_eq!(table.get_or_load(&ObjectId(2), || None), None, "nothing found");
        assert_eq!(loads.get(), 1);
        assert_eq!(table.loaded(), 2);
        assert_eq!(table.unload(&ObjectId(3)).as_deref(), Some(&'c'));
        assert_eq!((table.get(&ObjectId(3)), table.known()), (None, 4));
        *table.get_mut(&ObjectId(1)).unwrap() = 'b';
        assert_eq!(table.iter().collect::<Vec<_>>(), [(ObjectId(1), &'b')]);
    }
}
