//! The object cache's tables: objects by id, with the lookups of the invocation path cheap.
//!
//! Objects live in a slab (a vector whose entries never move to another index while they
//! are here); a hash map from id to index finds any of them, and a small direct-mapped
//! table of recent lookups finds the ones in use without hashing. Under TCG a hash-map
//! lookup is some 80 instructions and an invocation makes several; a hit in the recent
//! table is a dozen. The recent table is only a hint: a hit counts only if the slab entry
//! it points to holds the id asked for, so a stale hint costs a hash lookup, never a wrong
//! object.

use alloc::vec::Vec;
use core::cell::Cell;

use hashbrown::HashMap;
use rustc_hash::FxBuildHasher;

use crate::ObjectId;

/// Entries in the table of recent lookups; an object's entry is its id modulo this, so
/// that objects made one after another (as the kernel numbers them) do not collide.
const RECENT_ENTRIES: usize = 128;

/// Objects of type `V` by id: the subset of a hash map's interface the cache uses.
pub struct ObjectTable<V> {
    slots: Vec<Option<(ObjectId, V)>>,
    /// Where each object is in `slots`.
    index: HashMap<ObjectId, usize, FxBuildHasher>,
    /// Slots emptied by `remove`, to be filled again.
    free: Vec<usize>,
    /// Recent lookups: an id and its slot index plus one (0: empty).
    recent: [Cell<(u64, usize)>; RECENT_ENTRIES],
}

impl<V> Default for ObjectTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> ObjectTable<V> {
    pub const fn new() -> Self {
        Self {
            slots: Vec::new(),
            index: HashMap::with_hasher(FxBuildHasher),
            free: Vec::new(),
            recent: [const { Cell::new((0, 0)) }; RECENT_ENTRIES],
        }
    }

    fn recent_entry(&self, id: ObjectId) -> &Cell<(u64, usize)> {
        &self.recent[id.0 as usize % RECENT_ENTRIES]
    }

    /// The slot index of `id`, if it is here.
    #[inline]
    fn find(&self, id: ObjectId) -> Option<usize> {
        let recent = self.recent_entry(id);
        let (recent_id, index_plus_one) = recent.get();
        if recent_id == id.0
            && let Some(index) = index_plus_one.checked_sub(1)
            && matches!(self.slots.get(index), Some(Some((held, _))) if *held == id)
        {
            return Some(index);
        }
        let index = *self.index.get(&id)?;
        recent.set((id.0, index + 1));
        Some(index)
    }

    pub fn contains_key(&self, id: &ObjectId) -> bool {
        self.find(*id).is_some()
    }

    #[inline]
    pub fn get(&self, id: &ObjectId) -> Option<&V> {
        let index = self.find(*id)?;
        self.slots[index].as_ref().map(|(_, value)| value)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &ObjectId) -> Option<&mut V> {
        let index = self.find(*id)?;
        self.slots[index].as_mut().map(|(_, value)| value)
    }

    /// Adds or replaces `id`'s value; returns the value replaced.
    pub fn insert(&mut self, id: ObjectId, value: V) -> Option<V> {
        if let Some(index) = self.find(id) {
            let (_, old) = self.slots[index].replace((id, value))?;
            return Some(old);
        }
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some((id, value));
                index
            }
            None => {
                self.slots.push(Some((id, value)));
                self.slots.len() - 1
            }
        };
        self.index.insert(id, index);
        None
    }

    pub fn remove(&mut self, id: &ObjectId) -> Option<V> {
        let index = self.index.remove(id)?;
        // The hint would be refused anyway once the slot holds another id; dropping it
        // keeps the table of recent lookups free of dead entries.
        let recent = self.recent_entry(*id);
        if recent.get().0 == id.0 {
            recent.set((0, 0));
        }
        self.free.push(index);
        self.slots[index].take().map(|(_, value)| value)
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every object, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectId, &V)> {
        self.slots
            .iter()
            .filter_map(|slot| slot.as_ref().map(|(id, value)| (id, value)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ObjectId, &mut V)> {
        self.slots
            .iter_mut()
            .filter_map(|slot| slot.as_mut().map(|(id, value)| (&*id, value)))
    }

    pub fn keys(&self) -> impl Iterator<Item = &ObjectId> {
        self.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, value)| value)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.iter_mut().map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let mut table = ObjectTable::new();
        for id in 0..1000 {
            assert_eq!(table.insert(ObjectId(id * 7), id), None);
        }
        for id in 0..1000 {
            assert_eq!(table.get(&ObjectId(id * 7)), Some(&id));
            // Twice: the second lookup is a hit in the recent table.
            assert_eq!(table.get(&ObjectId(id * 7)), Some(&id));
            assert_eq!(table.get(&ObjectId(id * 7 + 1)), None);
        }
        assert_eq!(table.len(), 1000);
        assert_eq!(table.insert(ObjectId(14), 99), Some(2));
        assert_eq!(table.get(&ObjectId(14)), Some(&99));
        *table.get_mut(&ObjectId(21)).unwrap() += 1;
        assert_eq!(table.get(&ObjectId(21)), Some(&4));
    }

    #[test]
    fn a_removed_object_is_gone_even_from_recent_lookups() {
        let mut table = ObjectTable::new();
        table.insert(ObjectId(5), 'a');
        table.insert(ObjectId(5 + RECENT_ENTRIES as u64), 'b');
        assert_eq!(table.get(&ObjectId(5)), Some(&'a'));
        assert_eq!(table.remove(&ObjectId(5)), Some('a'));
        assert_eq!(table.get(&ObjectId(5)), None);
        assert!(!table.contains_key(&ObjectId(5)));
        // The freed slot goes to a new object; the old id still finds nothing.
        table.insert(ObjectId(6), 'c');
        assert_eq!(table.get(&ObjectId(5)), None);
        assert_eq!(table.get(&ObjectId(6)), Some(&'c'));
        assert_eq!(table.get(&ObjectId(5 + RECENT_ENTRIES as u64)), Some(&'b'));
        let mut all: Vec<_> = table.iter().map(|(id, value)| (id.0, *value)).collect();
        all.sort_unstable();
        assert_eq!(all, [(6, 'c'), (5 + RECENT_ENTRIES as u64, 'b')]);
    }

    #[test]
    fn a_stale_hint_is_not_trusted() {
        let mut table = ObjectTable::new();
        table.insert(ObjectId(3), 30);
        assert_eq!(table.get(&ObjectId(3)), Some(&30));
        // Forge a hint pointing id 4 at id 3's slot.
        table.recent_entry(ObjectId(4)).set((4, 1));
        assert_eq!(table.get(&ObjectId(4)), None);
        table.insert(ObjectId(4), 40);
        assert_eq!(table.get(&ObjectId(4)), Some(&40));
    }
}
