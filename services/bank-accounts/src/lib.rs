//! The space bank's accounts (KeyKOS's space bank; `services/space-bank` serves them).
//!
//! Banks form a tree under the prime bank, each with a limit in pages and one in nodes. A
//! purchase from a bank counts against it and every bank above it, so a bank can never
//! hand out more than any ancestor allows. Each object sold is recorded with the bank that
//! sold it, so that selling it back is checked, and destroying a bank finds everything it
//! and the banks below it sold. The ids of destroyed objects are kept and used again
//! before the kernel is asked for new ones, so that churn does not use up the store.
//!
//! Each bank's records are linked in a list of its own, so that destroying a bank costs
//! what it and the banks below it hold, not a scan of the whole table (which took a
//! constructor's process cycle 2 ms under TCG for the 30 objects it held).
//!
//! Everything here is fixed-size arrays (the bank's memory is its process's pages, which
//! the checkpoints keep): [`BANKS_MAX`] banks, [`OBJECTS_MAX`] objects held at once.
//! Reaching either is a refusal ([`Refusal`]), never a failure of the bank.
#![no_std]

#[cfg(test)]
mod tests;

/// Banks that can exist at once, the prime bank included.
pub const BANKS_MAX: usize = 256;
/// Objects that can be held from all banks at once: the record table is twice this, so
/// that a lookup stays short (3 MiB of records). The TP1 service's database at scale 10 is
/// 31,800 objects.
pub const OBJECTS_MAX: usize = 65_536;
const TABLE_SLOTS: usize = 2 * OBJECTS_MAX;
/// Destroyed ids kept for reuse, of each kind; beyond this an id is simply not used again.
pub const FREE_IDS_MAX: usize = 4096;

/// The prime bank, root of the tree; it cannot be destroyed.
pub const PRIME: u32 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Page,
    Node,
}

impl Kind {
    /// The kernel range's word for the kind (`range.rescind`, `range.reissue`).
    pub fn range_word(self) -> u64 {
        match self {
            Self::Page => 0,
            Self::Node => 1,
        }
    }

    pub fn from_range_word(word: u64) -> Option<Self> {
        match word {
            0 => Some(Self::Page),
            1 => Some(Self::Node),
            _ => None,
        }
    }
}

/// Why a request is refused. The bank answers each with its own reply code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The bank, or a bank above it, has sold as many objects of the kind as its limit.
    LimitReached,
    /// The object was not sold by this bank (or is the bank's own forwarder).
    NotOwned,
    /// The badge names no live bank: it was destroyed (or never was).
    NoSuchBank,
    /// [`BANKS_MAX`] banks exist.
    TooManyBanks,
    /// [`OBJECTS_MAX`] objects are held.
    TooManyObjects,
    /// The prime bank cannot be destroyed.
    Prime,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bank {
    pub live: bool,
    /// Moved on when the bank is destroyed, so that a badge of the old bank names nothing
    /// even once its slot holds a new one.
    pub generation: u32,
    pub parent: u32,
    pub page_limit: u64,
    pub node_limit: u64,
    /// Objects held, sold by this bank or any below it.
    pub pages: u64,
    pub nodes: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Record {
    /// `id << 1 | kind`, 0 for an empty slot, [`GONE`] for a removed one (a lookup goes on
    /// past it).
    key: u64,
    owner: u32,
    /// The node that forwards to the bank `owner` (its capability is an indirector of it):
    /// destroyed with the bank, never sold back.
    forwarder: bool,
    /// The owner's list of records: the slots before and after this one, each plus one (0:
    /// none), so that an empty table is all zero bytes.
    previous: u32,
    next: u32,
}

const GONE: u64 = u64::MAX;

fn key(kind: Kind, id: u64) -> u64 {
    id << 1 | kind.range_word()
}

/// A record slot as a list link, and back ([`Record::next`]).
fn link(slot: usize) -> u32 {
    slot as u32 + 1
}

fn linked(link: u32) -> Option<usize> {
    link.checked_sub(1).map(|slot| slot as usize)
}

struct FreeIds {
    ids: [u64; FREE_IDS_MAX],
    count: usize,
}

impl FreeIds {
    fn push(&mut self, id: u64) {
        if self.count < FREE_IDS_MAX {
            self.ids[self.count] = id;
            self.count += 1;
        }
    }

    fn pop(&mut self) -> Option<u64> {
        self.count = self.count.checked_sub(1)?;
        Some(self.ids[self.count])
    }
}

pub struct Accounts {
    banks: [Bank; BANKS_MAX],
    records: [Record; TABLE_SLOTS],
    /// Each bank's first record ([`link`]).
    first_records: [u32; BANKS_MAX],
    held: usize,
    free_pages: FreeIds,
    free_nodes: FreeIds,
}

impl Accounts {
    /// No banks at all, every byte zero (so that a bank's accounts are a `.bss` static,
    /// not a copy in its program file); [`Self::open_prime`] opens the prime bank.
    pub const fn empty() -> Self {
        Self {
            banks: [Bank { live: false, generation: 0, parent: 0, page_limit: 0, node_limit: 0, pages: 0, nodes: 0 }; BANKS_MAX],
            records: [Record { key: 0, owner: 0, forwarder: false, previous: 0, next: 0 }; TABLE_SLOTS],
            first_records: [0; BANKS_MAX],
            held: 0,
            free_pages: FreeIds { ids: [0; FREE_IDS_MAX], count: 0 },
            free_nodes: FreeIds { ids: [0; FREE_IDS_MAX], count: 0 },
        }
    }

    /// Opens the prime bank, with limits `page_limit` and `node_limit`, if it is not open.
    pub fn open_prime(&mut self, page_limit: u64, node_limit: u64) {
        let prime = &mut self.banks[PRIME as usize];
        if !prime.live {
            *prime = Bank { live: true, generation: 0, parent: PRIME, page_limit, node_limit, pages: 0, nodes: 0 };
        }
    }

    /// The badge of bank `index`'s capabilities: its generation and index.
    pub fn badge(&self, index: u32) -> u64 {
        u64::from(self.banks[index as usize].generation) << 32 | u64::from(index)
    }

    /// The live bank a badge names.
    pub fn bank_of(&self, badge: u64) -> Result<u32, Refusal> {
        let index = badge as u32;
        let bank = self.banks.get(index as usize).ok_or(Refusal::NoSuchBank)?;
        if !bank.live || u64::from(bank.generation) != badge >> 32 {
            return Err(Refusal::NoSuchBank);
        }
        Ok(index)
    }

    pub fn bank(&self, index: u32) -> &Bank {
        &self.banks[index as usize]
    }

    /// Opens a bank below `parent` with its own limits (which its ancestors' limits bound
    /// anyway); returns its index.
    pub fn open(&mut self, parent: u32, page_limit: u64, node_limit: u64) -> Result<u32, Refusal> {
        let free = self.banks.iter().position(|bank| !bank.live).ok_or(Refusal::TooManyBanks)?;
        let generation = self.banks[free].generation;
        self.banks[free] = Bank { live: true, generation, parent, page_limit, node_limit, pages: 0, nodes: 0 };
        Ok(free as u32)
    }

    /// Sets the limits of bank `child`, which must be a live bank directly below `parent`
    /// (only its parent's holder may change them: the holder of a bank cannot raise its own
    /// limits). A limit below what the bank holds already is kept: it sells nothing more of
    /// that kind until it holds less.
    pub fn set_limits(&mut self, parent: u32, child: u32, page_limit: u64, node_limit: u64) -> Result<(), Refusal> {
        let bank = self.banks.get_mut(child as usize).ok_or(Refusal::NoSuchBank)?;
        if !bank.live {
            return Err(Refusal::NoSuchBank);
        }
        if child == PRIME || bank.parent != parent {
            return Err(Refusal::NotOwned);
        }
        bank.page_limit = page_limit;
        bank.node_limit = node_limit;
        Ok(())
    }

    /// The bank whose capability is an indirector of node `id` (its forwarder), if any.
    pub fn bank_forwarded_by(&self, id: u64) -> Option<u32> {
        match self.owner(Kind::Node, id) {
            Some((owner, true)) => Some(owner),
            _ => None,
        }
    }

    /// The banks from `index` up to the prime bank.
    fn chain(&self, index: u32) -> impl Iterator<Item = u32> + '_ {
        let mut next = Some(index);
        core::iter::from_fn(move || {
            let at = next?;
            next = (at != PRIME).then(|| self.banks[at as usize].parent);
            Some(at)
        })
    }

    /// Whether bank `index` may sell one more object of `kind`: no bank from it up is at its
    /// limit and the record table has room.
    pub fn may_sell(&self, index: u32, kind: Kind) -> Result<(), Refusal> {
        if self.held >= OBJECTS_MAX {
            return Err(Refusal::TooManyObjects);
        }
        let full = |bank: &Bank| match kind {
            Kind::Page => bank.pages >= bank.page_limit,
            Kind::Node => bank.nodes >= bank.node_limit,
        };
        if self.chain(index).any(|at| full(&self.banks[at as usize])) {
            return Err(Refusal::LimitReached);
        }
        Ok(())
    }

    /// Counts an object up or down at bank `index` and every bank above it: [`Self::chain`]'s
    /// walk, done in place because the chain borrows the banks this changes.
    fn count(&mut self, index: u32, kind: Kind, up: bool) {
        let mut at = index;
        loop {
            let bank = &mut self.banks[at as usize];
            let counter = match kind {
                Kind::Page => &mut bank.pages,
                Kind::Node => &mut bank.nodes,
            };
            *counter = if up { *counter + 1 } else { counter.saturating_sub(1) };
            if at == PRIME {
                return;
            }
            at = bank.parent;
        }
    }

    /// A destroyed id of `kind` to use again, if one is kept.
    pub fn reusable_id(&mut self, kind: Kind) -> Option<u64> {
        match kind {
            Kind::Page => self.free_pages.pop(),
            Kind::Node => self.free_nodes.pop(),
        }
    }

    /// Records object `id`, just made or reissued, as sold by bank `index` (checked with
    /// [`Self::may_sell`] first), counting it against the bank and every one above it.
    pub fn record_sale(&mut self, index: u32, kind: Kind, id: u64, forwarder: bool) {
        let wanted = key(kind, id);
        let mut slot = Self::home(wanted);
        // `may_sell` keeps at most half the slots full, so an empty one is always found.
        while self.records[slot].key != 0 && self.records[slot].key != GONE {
            slot = (slot + 1) % TABLE_SLOTS;
        }
        let next = self.first_records[index as usize];
        if let Some(first) = linked(next) {
            self.records[first].previous = link(slot);
        }
        self.records[slot] = Record { key: wanted, owner: index, forwarder, previous: 0, next };
        self.first_records[index as usize] = link(slot);
        self.held += 1;
        self.count(index, kind, true);
    }

    fn home(key: u64) -> usize {
        // Fibonacci hashing: ids come in runs, which this spreads.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % TABLE_SLOTS
    }

    fn find(&self, kind: Kind, id: u64) -> Option<usize> {
        let wanted = key(kind, id);
        let mut slot = Self::home(wanted);
        for _ in 0..TABLE_SLOTS {
            match self.records[slot].key {
                0 => return None,
                found if found == wanted => return Some(slot),
                _ => slot = (slot + 1) % TABLE_SLOTS,
            }
        }
        None
    }

    /// Which bank sold object `id`, and whether it is a bank's forwarder.
    pub fn owner(&self, kind: Kind, id: u64) -> Option<(u32, bool)> {
        self.find(kind, id).map(|slot| (self.records[slot].owner, self.records[slot].forwarder))
    }

    /// Takes object `id` off the accounts (the caller has destroyed it): it no longer counts
    /// against its bank, and its id is kept for reuse.
    pub fn forget(&mut self, kind: Kind, id: u64) {
        let Some(slot) = self.find(kind, id) else {
            return;
        };
        let Record { owner, previous, next, .. } = self.records[slot];
        match linked(previous) {
            Some(before) => self.records[before].next = next,
            None => self.first_records[owner as usize] = next,
        }
        if let Some(after) = linked(next) {
            self.records[after].previous = previous;
        }
        self.records[slot] = Record { key: GONE, ..Record::default() };
        self.clear_gone_run(slot);
        self.held -= 1;
        self.count(owner, kind, false);
        match kind {
            Kind::Page => self.free_pages.push(id),
            Kind::Node => self.free_nodes.push(id),
        }
    }

    /// Empties the run of removed records ending at `slot` if an empty slot follows it: no
    /// lookup needs to go on past them then. Without this, churn left the table all removed
    /// records, and every lookup of an id not held scanned all of it.
    fn clear_gone_run(&mut self, slot: usize) {
        if self.records[(slot + 1) % TABLE_SLOTS].key != 0 {
            return;
        }
        let mut at = slot;
        while self.records[at].key == GONE {
            self.records[at].key = 0;
            at = (at + TABLE_SLOTS - 1) % TABLE_SLOTS;
        }
    }

    /// Bank `index` sells object `id` back: refused unless it sold it (and it is not the
    /// bank's forwarder). The caller destroys the object and then calls [`Self::forget`].
    pub fn check_return(&self, index: u32, kind: Kind, id: u64) -> Result<(), Refusal> {
        match self.owner(kind, id) {
            Some((owner, false)) if owner == index => Ok(()),
            _ => Err(Refusal::NotOwned),
        }
    }

    /// Destroys bank `index` and every bank below it: `destroy` is called with each object
    /// any of them sold (their forwarders too, which voids every capability to the banks),
    /// and then the banks are gone. Returns how many objects were destroyed.
    pub fn destroy(&mut self, index: u32, mut destroy: impl FnMut(Kind, u64)) -> Result<usize, Refusal> {
        if index == PRIME {
            return Err(Refusal::Prime);
        }
        let mut doomed = [false; BANKS_MAX];
        for (at, flag) in doomed.iter_mut().enumerate() {
            *flag = self.banks[at].live && self.chain(at as u32).any(|above| above == index);
        }
        let mut destroyed = 0;
        for bank in (0..BANKS_MAX).filter(|&at| doomed[at]) {
            while let Some(slot) = linked(self.first_records[bank]) {
                let record = self.records[slot];
                let kind = if record.key & 1 == 0 { Kind::Page } else { Kind::Node };
                let id = record.key >> 1;
                destroy(kind, id);
                self.forget(kind, id);
                destroyed += 1;
            }
        }
        for (at, &flag) in doomed.iter().enumerate() {
            if flag {
                let bank = &mut self.banks[at];
                bank.live = false;
                bank.generation = bank.generation.wrapping_add(1);
            }
        }
        Ok(destroyed)
    }
}
