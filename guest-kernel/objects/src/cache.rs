//! The object cache: every page and node the kernel has in memory, by id, with its version.
//!
//! Every use of a capability goes through [`ObjectCache::check`] or one of the accessors
//! built on it, so a capability whose version is behind its object's is void everywhere at
//! once — that is revocation, and it costs one comparison.
//!
//! With a store behind it, the cache holds only part of the objects. A page's entry (its
//! version) is always here and its bytes are loaded by the kernel before use. A node is
//! loaded whole, version and slots, by any lookup that finds it absent, through the loader
//! the kernel installs ([`ObjectCache::set_node_loader`]): a node is reached from many
//! paths (invocations, space walks, keepers), and each of them sees it as if it had always
//! been here. Clean objects are evicted when memory runs short.

use core::cell::{Cell, OnceCell, RefCell};

use crate::capability::ObjectKind;
use crate::image::NODE_IMAGE_BYTES;
use crate::table::{LoadableTable, ObjectTable};
use crate::{CapType, Capability, Node, ObjectId, Slot, Version};

/// The capability is void: its type is void, its object is gone, or its version is stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Void;

struct NodeEntry {
    version: Version,
    /// The version resume capabilities to this node's process must carry: moved on each
    /// time one of them is used, so that a resume capability works at most once.
    resume_version: Version,
    node: Node,
    /// The page-table entries that may depend on the node's slots.
    translation: Translation,
    /// Changed since the last snapshot (or never stored); listed in `dirty_nodes`.
    dirty: bool,
}

struct PageEntry<F> {
    /// Empty until known: a page on the store whose version a restart has not read yet is
    /// given it by the first lookup, through the page-version loader
    /// ([`ObjectCache::set_page_version_loader`]).
    version: OnceCell<Version>,
    /// `None` while the page is only on the store (never loaded, or evicted): capabilities
    /// to it check as usual (its version known or read), but its bytes must be loaded
    /// before use ([`ObjectCache::install_frame`]).
    frame: Option<F>,
    /// The dirty epoch in which the page was last changed or mapped writable, or
    /// [`CLEAN`] once the store holds it as it is. Dirty in the current epoch: the next
    /// snapshot takes it. Dirty in the one before: the snapshot being stabilized holds it
    /// and it is not stored yet. A cell: the kernel writes pages through shared borrows of
    /// the cache (ring 3 writes them without the kernel at all once mapped).
    dirty_epoch: Cell<u64>,
    /// Every change in the current dirty epoch came through journal commits
    /// ([`ObjectCache::mark_page_journaled`]): once the newest is durable, the store holds
    /// the page as it is ([`ObjectCache::page_journal_durable`]).
    journaled: Cell<bool>,
    /// The page-table entries that may map the page (its slot bit 0).
    translation: Translation,
}

/// Which page-table entries may depend on a node or a page: what a change to it, or its
/// destruction, must drop.
#[derive(Default)]
struct Translation {
    /// The translation epoch in which a space walk last passed the object: if it is the
    /// current one, some page-table entry may depend on it.
    epoch: Cell<u64>,
    /// Which slots (bit i: slot i) those translations read; meaningful in that epoch only.
    /// A change to any other slot (a process's capability register, say, in a root node
    /// whose space slot a fault read) leaves every translation as it is. A page's only
    /// slot is bit 0: mapped.
    slots: Cell<u32>,
    /// Whose page tables hold those translations: in that epoch only, and of those only
    /// the ones whose tables were not dropped since `at`.
    translators: Cell<Translators>,
    /// The translation clock when a walk last passed the object (see
    /// [`ObjectCache::live_translators`]).
    at: Cell<u64>,
}

/// A set of processes whose page tables may hold a translation: bit `i % 64` for the
/// process in slot `i` of the kernel's process table. Processes whose slots share a bit
/// share it, which only makes a change drop more tables than it must.
pub type Translators = u64;

/// A page's dirty epoch once the store holds it as it is.
const CLEAN: u64 = 0;

impl<F> PageEntry<F> {
    /// A clean page: new ones are marked dirty by their maker.
    fn new(version: OnceCell<Version>, frame: Option<F>) -> Self {
        Self { version, frame, dirty_epoch: Cell::new(CLEAN), journaled: Cell::new(false), translation: Translation::default() }
    }
}

/// A node as the store holds it: what the node loader returns.
pub struct StoredNode {
    pub version: Version,
    pub resume_version: Version,
    pub node: Node,
}

/// Reads node `id`'s newest committed state from the store; `None` if it cannot (the
/// loader says why: the node's capabilities then act as void, its bad data never used).
pub type NodeLoader = fn(ObjectId) -> Option<StoredNode>;

/// Reads page `id`'s newest committed version from the store; `None` if it cannot (the
/// loader says why: the page's capabilities then act as void).
pub type PageVersionLoader = fn(ObjectId) -> Option<Version>;

/// A node as a snapshot takes it: its versions and its image, ready for the store.
pub struct NodeSnapshot {
    pub id: ObjectId,
    pub version: Version,
    pub image: alloc::boxed::Box<[u8; NODE_IMAGE_BYTES]>,
}

/// Pages hold frames of type `F` (in the kernel a physical frame, on the host a buffer).
pub struct ObjectCache<F> {
    nodes: LoadableTable<NodeEntry>,
    pages: ObjectTable<PageEntry<F>>,
    /// Loads absent nodes (see the module's comment); `None` without a store, when every
    /// node is here.
    node_loader: Option<NodeLoader>,
    /// Reads the versions of pages known to be on the store (see [`PageEntry::version`]).
    page_version_loader: Option<PageVersionLoader>,
    /// Moved on whenever every translation is dropped, which forgets at once which nodes
    /// translations depended on.
    translation_epoch: u64,
    /// Moved on whenever some processes' page tables are dropped
    /// ([`Self::forget_translations_of`]).
    translation_clock: u64,
    /// For each bit of [`Translators`]: the translation clock when its processes' tables
    /// were last dropped. A mark made before then is not theirs any more.
    translators_dropped_at: [u64; Translators::BITS as usize],
    /// Moved on by each snapshot, so that taking the dirty pages is a swap of lists and
    /// no page entry is visited (the snapshot's pause must not grow with memory).
    dirty_epoch: u64,
    /// The pages made dirty in the current epoch: what the next snapshot takes. A page the
    /// journal made clean again ([`Self::page_journal_durable`]) stays listed, and is listed
    /// again if it is dirtied again: [`Self::settle_snapshot_pages`] sorts that out.
    dirty_pages: RefCell<alloc::vec::Vec<ObjectId>>,
    /// How many pages are dirty in the current epoch.
    dirty_page_count: Cell<usize>,
    /// The dirty nodes, each once.
    dirty_nodes: alloc::vec::Vec<ObjectId>,
}

impl<F> Default for ObjectCache<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F> ObjectCache<F> {
    pub const fn new() -> Self {
        Self {
            nodes: LoadableTable::new(),
            pages: ObjectTable::new(),
            node_loader: None,
            page_version_loader: None,
            translation_epoch: 1,
            translation_clock: 1,
            translators_dropped_at: [0; Translators::BITS as usize],
            // Epochs start at 2, so that the one before the first is not `CLEAN`.
            dirty_epoch: 2,
            dirty_pages: RefCell::new(alloc::vec::Vec::new()),
            dirty_page_count: Cell::new(0),
            dirty_nodes: alloc::vec::Vec::new(),
        }
    }

    /// Absent nodes are loaded by `loader` from now on.
    pub fn set_node_loader(&mut self, loader: NodeLoader) {
        self.node_loader = Some(loader);
    }

    /// Nodes `1..count` are on the store: each is loaded when first used.
    pub fn know_stored_nodes(&mut self, count: u64) {
        self.nodes.know_up_to(count);
    }

    /// Versions of pages on the store are read by `loader` from now on.
    pub fn set_page_version_loader(&mut self, loader: PageVersionLoader) {
        self.page_version_loader = Some(loader);
    }

    /// Pages `1..count` are on the store, absent, their versions read when first needed.
    pub fn know_stored_pages(&mut self, count: u64) {
        self.pages.fill_absent(ObjectId(1), ObjectId(count), || PageEntry::new(OnceCell::new(), None));
    }

    /// Page `id`'s entry and version, the version read from the store first if unknown.
    #[inline]
    fn page_entry(&self, id: ObjectId) -> Option<(&PageEntry<F>, Version)> {
        let entry = self.pages.get(&id)?;
        let version = match entry.version.get() {
            Some(&version) => version,
            None => {
                let version = (self.page_version_loader?)(id)?;
                *entry.version.get_or_init(|| version)
            }
        };
        Some((entry, version))
    }

    /// Node `id`'s entry, loaded first if it is on the store only.
    #[inline]
    fn node_entry(&self, id: ObjectId) -> Option<&NodeEntry> {
        self.nodes.get_or_load(&id, || Self::load_node(self.node_loader, id))
    }

    /// [`Self::node_entry`] for a change, in one lookup.
    #[inline]
    fn node_entry_mut(&mut self, id: ObjectId) -> Option<&mut NodeEntry> {
        Self::node_entry_in(&mut self.nodes, self.node_loader, id)
    }

    /// [`Self::node_entry_mut`] borrowing only the table, so that the caller may mark the
    /// entry dirty in the same breath.
    #[inline]
    fn node_entry_in(
        nodes: &mut LoadableTable<NodeEntry>,
        loader: Option<NodeLoader>,
        id: ObjectId,
    ) -> Option<&mut NodeEntry> {
        nodes.get_or_load_mut(&id, || Self::load_node(loader, id))
    }

    fn load_node(loader: Option<NodeLoader>, id: ObjectId) -> Option<NodeEntry> {
        // Node 0 does not exist: ids start at 1.
        let loader = loader.filter(|_| id.0 != 0)?;
        let StoredNode { version, resume_version, node } = loader(id)?;
        Some(NodeEntry {
            version,
            resume_version,
            node,
            translation: Translation::default(),
            dirty: false,
        })
    }

    /// Adds a new node `id` with `version` (dirty: the store has never seen it); returns
    /// `false` (and changes nothing) if it is already here.
    pub fn insert_node(&mut self, id: ObjectId, version: Version, node: Node) -> bool {
        self.insert_node_entry(id, version, Version::default(), node, true)
    }

    /// Adds node `id` as the store holds it (clean).
    pub fn insert_stored_node(&mut self, id: ObjectId, version: Version, resume_version: Version, node: Node) -> bool {
        self.insert_node_entry(id, version, resume_version, node, false)
    }

    fn insert_node_entry(&mut self, id: ObjectId, version: Version, resume_version: Version, node: Node, dirty: bool) -> bool {
        // A known id is taken even while its node is on the store only.
        if self.nodes.get(&id).is_some() || (self.node_loader.is_some() && id.0 < self.nodes.known()) {
            return false;
        }
        let entry = NodeEntry {
            version,
            resume_version,
            node,
            translation: Translation::default(),
            dirty,
        };
        self.nodes.insert(id, entry);
        if dirty {
            self.dirty_nodes.push(id);
        }
        true
    }

    /// Adds a new page `id` with `version` (dirty); returns the frame back if the page is
    /// already here.
    pub fn insert_page(&mut self, id: ObjectId, version: Version, frame: F) -> Result<(), F> {
        self.insert_page_entry(id, version, frame, true)
    }

    /// Adds page `id` as the store holds it (clean).
    pub fn insert_stored_page(&mut self, id: ObjectId, version: Version, frame: F) -> Result<(), F> {
        self.insert_page_entry(id, version, frame, false)
    }

    fn insert_page_entry(&mut self, id: ObjectId, version: Version, frame: F, dirty: bool) -> Result<(), F> {
        if self.pages.contains_key(&id) {
            return Err(frame);
        }
        self.pages.insert(id, PageEntry::new(OnceCell::from(version), Some(frame)));
        if dirty {
            self.mark_page_dirty(id);
        }
        Ok(())
    }

    /// Adds page `id` as on the store only, its bytes not loaded; returns `false` (and
    /// changes nothing) if it is already here.
    pub fn insert_absent_page(&mut self, id: ObjectId, version: Version) -> bool {
        if self.pages.contains_key(&id) {
            return false;
        }
        self.pages.insert(id, PageEntry::new(OnceCell::from(version), None));
        true
    }

    /// Whether page `id` is here with its bytes (`None` if the page is not known at all).
    pub fn page_is_resident(&self, id: ObjectId) -> Option<bool> {
        self.pages.get(&id).map(|entry| entry.frame.is_some())
    }

    /// Gives absent page `id` its bytes and `version`, read back from the store together;
    /// returns the frame back if the page is unknown or already resident.
    pub fn install_frame(&mut self, id: ObjectId, version: Version, frame: F) -> Result<(), F> {
        match self.pages.get_mut(&id) {
            Some(entry) if entry.frame.is_none() => {
                entry.frame = Some(frame);
                // A page's version changes only while it is resident (rescinding marks it
                // dirty), so a known one is the store's.
                let _ = entry.version.set(version);
                Ok(())
            }
            _ => Err(frame),
        }
    }

    /// Takes the frame of page `id` away if the page is resident and clean (the store holds
    /// its bytes); the caller makes sure nothing maps the frame any more.
    pub fn evict(&mut self, id: ObjectId) -> Option<F> {
        let entry = self.pages.get_mut(&id)?;
        if entry.dirty_epoch.get() != CLEAN {
            return None;
        }
        entry.frame.take()
    }

    /// Up to `count` resident clean pages, candidates for eviction, none of them in `keep`.
    pub fn eviction_candidates(&self, count: usize, keep: &[ObjectId]) -> alloc::vec::Vec<ObjectId> {
        self.pages
            .iter()
            .filter(|(id, entry)| entry.frame.is_some() && entry.dirty_epoch.get() == CLEAN && !keep.contains(id))
            .map(|(id, _)| id)
            .take(count)
            .collect()
    }

    /// Evicts up to `count` loaded clean nodes, none of them in `keep`, if a loader can load
    /// them again; returns how many. The caller drops every translation first (the nodes'
    /// records of which translations read them go with them).
    pub fn evict_nodes(&mut self, count: usize, keep: &[ObjectId]) -> usize {
        if self.node_loader.is_none() {
            return 0;
        }
        let victims: alloc::vec::Vec<ObjectId> = self
            .nodes
            .iter()
            .filter(|(id, entry)| !entry.dirty && !keep.contains(id))
            .map(|(id, _)| id)
            .take(count)
            .collect();
        for id in &victims {
            self.nodes.unload(id);
        }
        victims.len()
    }

    /// Page `id` may change without the kernel seeing it (it is mapped writable) or the
    /// kernel wrote it through a shared borrow: the next snapshot must take it. If the
    /// snapshot being stabilized holds it unstored ([`Self::page_in_snapshot`]), the caller
    /// copies it first.
    pub fn mark_page_dirty(&self, id: ObjectId) {
        if let Some(entry) = self.pages.get(&id) {
            entry.journaled.set(false);
            self.mark_entry_dirty(id, entry);
        }
    }

    /// The kernel is about to write page `id` for a journal commit that copies the page
    /// whole once written: unless something else dirtied it in this epoch, the commit's
    /// copy will be all the next snapshot needs of it ([`Self::page_journal_durable`]).
    pub fn mark_page_journaled(&self, id: ObjectId) {
        if let Some(entry) = self.pages.get(&id)
            && self.mark_entry_dirty(id, entry)
        {
            entry.journaled.set(true);
        }
    }

    /// Marks a resident page dirty in the current epoch; returns whether it was not yet.
    fn mark_entry_dirty(&self, id: ObjectId, entry: &PageEntry<F>) -> bool {
        let newly = entry.frame.is_some() && entry.dirty_epoch.replace(self.dirty_epoch) != self.dirty_epoch;
        if newly {
            self.dirty_pages.borrow_mut().push(id);
            self.dirty_page_count.set(self.dirty_page_count.get() + 1);
        }
        newly
    }

    /// The newest journal commit of page `id` is durable, and was made after the page's
    /// last change: if only journal commits changed it in this epoch (nothing wrote it
    /// otherwise or mapped it writable), the store holds it as it is, so it is clean and
    /// the next snapshot leaves it out. A TP1 service changes its database only through
    /// the journal: its pages then cost one disk write, not a second one in the checkpoint.
    pub fn page_journal_durable(&self, id: ObjectId) {
        if let Some(entry) = self.pages.get(&id)
            && entry.journaled.get()
            && entry.dirty_epoch.get() == self.dirty_epoch
        {
            entry.journaled.set(false);
            entry.dirty_epoch.set(CLEAN);
            self.dirty_page_count.set(self.dirty_page_count.get() - 1);
        }
    }

    /// Whether the snapshot being stabilized holds page `id` and has not stored it yet: its
    /// frame still holds the snapshot's contents, which a write must preserve first.
    pub fn page_in_snapshot(&self, id: ObjectId) -> bool {
        self.pages.get(&id).is_some_and(|entry| entry.dirty_epoch.get() == self.dirty_epoch - 1)
    }

    /// The snapshot's copy of page `id` is stored: the page is clean unless written since.
    pub fn page_stored(&self, id: ObjectId) {
        if let Some(entry) = self.pages.get(&id)
            && entry.dirty_epoch.get() == self.dirty_epoch - 1
        {
            entry.dirty_epoch.set(CLEAN);
        }
    }

    /// How many pages are dirty.
    pub fn dirty_page_count(&self) -> usize {
        self.dirty_page_count.get()
    }

    /// The nodes the next snapshot takes.
    pub fn dirty_node_ids(&self) -> &[ObjectId] {
        &self.dirty_nodes
    }

    /// The snapshot's nodes: every dirty node's image, after which all nodes are clean.
    pub fn take_dirty_nodes(&mut self) -> alloc::vec::Vec<NodeSnapshot> {
        let dirty = core::mem::take(&mut self.dirty_nodes);
        dirty
            .into_iter()
            .map(|id| {
                let entry = self.nodes.get_mut(&id).expect("a dirty node is never evicted");
                entry.dirty = false;
                NodeSnapshot { id, version: entry.version, image: alloc::boxed::Box::new(entry.node.encode(entry.resume_version)) }
            })
            .collect()
    }

    /// The snapshot's pages: every dirty page's id, after which no page is dirty in the new
    /// epoch. Each stays dirty for eviction, and in the snapshot
    /// ([`Self::page_in_snapshot`]), until [`Self::page_stored`]. The caller keeps its
    /// contents as they are now (copy on write) until stored, and must make sure that
    /// nothing writes them unseen (drop writable mappings). Constant time: no entry is
    /// visited. So the list may also hold pages the journal made clean, and a page twice,
    /// until [`Self::settle_snapshot_pages`].
    pub fn take_dirty_pages(&mut self) -> alloc::vec::Vec<ObjectId> {
        self.dirty_epoch += 1;
        self.dirty_page_count.set(0);
        core::mem::take(self.dirty_pages.get_mut())
    }

    /// Sorts the snapshot's pages by id and leaves each once, only those the snapshot holds:
    /// unstored ([`Self::page_in_snapshot`]), or written since and `copied` first by the
    /// caller. Outside the snapshot's pause, since it visits every entry.
    pub fn settle_snapshot_pages(&self, pages: &mut alloc::vec::Vec<ObjectId>, copied: impl Fn(ObjectId) -> bool) {
        pages.sort_unstable();
        pages.dedup();
        pages.retain(|&id| self.page_in_snapshot(id) || copied(id));
    }

    /// A snapshot was abandoned (its checkpoint failed and is taken again later): its
    /// `nodes` and `pages` are dirty again, so that the next snapshot holds them, whether or
    /// not they were stored meanwhile. Every one of them is still here: dirty objects are
    /// never evicted, nor stored ones before their checkpoint ends.
    pub fn snapshot_abandoned(&mut self, nodes: &[ObjectId], pages: &[ObjectId]) {
        for &id in nodes {
            self.mark_node_dirty(id);
        }
        for &id in pages {
            self.mark_page_dirty(id);
        }
    }

    /// Page `id`'s version, if the page is here.
    pub fn page_version(&self, id: ObjectId) -> Option<Version> {
        self.page_entry(id).map(|(_, version)| version)
    }

    /// Page `id`'s frame, whatever its version (for storing it).
    pub fn page_frame(&self, id: ObjectId) -> Option<&F> {
        self.pages.get(&id).and_then(|entry| entry.frame.as_ref())
    }

    /// How many nodes are loaded, how many pages are known and how many are resident.
    pub fn object_counts(&self) -> (usize, usize, usize) {
        let resident = self.pages.values().filter(|entry| entry.frame.is_some()).count();
        (self.nodes.loaded(), self.pages.len(), resident)
    }

    /// The current capability of `kind` to node `id`, as its owner would mint it.
    pub fn node_capability(&self, kind: CapType, id: ObjectId) -> Option<Capability> {
        let entry = self.node_entry(id)?;
        let version = if kind == CapType::Resume {
            entry.resume_version
        } else {
            entry.version
        };
        Some(Capability::new(kind, id, version))
    }

    pub fn page_capability(&self, id: ObjectId) -> Option<Capability> {
        let (_, version) = self.page_entry(id)?;
        Some(Capability::new(CapType::Page, id, version))
    }

    /// `Ok` if `capability` is live: not void, and if it names an object, that object is
    /// here at the capability's version.
    ///
    /// Most capabilities invoked name nodes (processes, start capabilities): that case is
    /// inline, one bit test before the lookup, the others a call.
    #[inline(always)]
    pub fn check(&self, capability: &Capability) -> Result<(), Void> {
        if capability.kind().names_node() {
            let entry = self.node_entry(capability.object()).ok_or(Void)?;
            return Self::node_entry_matches(entry, capability);
        }
        self.check_other(capability)
    }

    /// [`Self::check`] for a capability that names no node: a page, or no object.
    fn check_other(&self, capability: &Capability) -> Result<(), Void> {
        match capability.kind().object_kind() {
            _ if capability.is_void() => Err(Void),
            None => Ok(()),
            Some(ObjectKind::Page) => {
                let (_, version) = self.page_entry(capability.object()).ok_or(Void)?;
                (version == capability.version()).then_some(()).ok_or(Void)
            }
            // `check` took every kind that names a node (`CapType::names_node`).
            Some(ObjectKind::Node) => Err(Void),
        }
    }

    /// `capability` itself if live, else the void capability: what a program sees when it
    /// fetches or identifies a revoked capability.
    pub fn live_or_void(&self, capability: Capability) -> Capability {
        if self.check(&capability).is_ok() {
            capability
        } else {
            Capability::VOID
        }
    }

    /// The node a live node-backed capability names (node, space, process, start, meter,
    /// indirector); the caller checks the rights its method needs.
    pub fn node(&self, capability: &Capability) -> Result<&Node, Void> {
        self.node_and_resume(capability).map(|(node, _)| node)
    }

    /// [`Self::node`], with the current resume capability to the node: the invocation path
    /// reads the invoker's capability registers and, for a call, makes its resume
    /// capability from the one lookup of its root node.
    pub fn node_and_resume(&self, capability: &Capability) -> Result<(&Node, Capability), Void> {
        let entry = self.node_entry(capability.object()).ok_or(Void)?;
        Self::node_entry_matches(entry, capability)?;
        let resume = Capability::new(CapType::Resume, capability.object(), entry.resume_version);
        Ok((&entry.node, resume))
    }

    /// [`Self::node`] for a space walk: also records that a translation in the page tables
    /// of `translators` depends on the node's `slot`, so that changing it must drop them.
    pub fn node_for_translation(&self, capability: &Capability, slot: Slot, translators: Translators) -> Result<&Node, Void> {
        let entry = self.node_entry(capability.object()).ok_or(Void)?;
        Self::node_entry_matches(entry, capability)?;
        self.mark(&entry.translation, 1 << slot.index(), translators);
        Ok(&entry.node)
    }

    /// Records that a translation in the page tables of `translators` now depends on the
    /// slots of node `id` in `slots` (bit i: slot i; see [`Self::node_for_translation`]).
    pub fn mark_translated(&self, id: ObjectId, slots: u32, translators: Translators) {
        if let Some(entry) = self.node_entry(id) {
            self.mark(&entry.translation, slots, translators);
        }
    }

    /// Records that a translation in the page tables of `translators` now maps page `id`
    /// (see [`Self::is_page_translated`]).
    pub fn mark_page_translated(&self, id: ObjectId, translators: Translators) {
        if let Some(entry) = self.pages.get(&id) {
            self.mark(&entry.translation, 1, translators);
        }
    }

    fn mark(&self, translation: &Translation, slots: u32, translators: Translators) {
        // Marks of another epoch, or of processes whose tables were all dropped since, are
        // nobody's: without this the slots read before a drop would count again with the
        // first new mark (a program that maps a page in each slot of a node in turn, and
        // sells them all back, dropped its tables at each new one).
        let forgotten = translation.epoch.replace(self.translation_epoch) != self.translation_epoch
            || self.live_translators(translation) == 0;
        if forgotten {
            translation.slots.set(0);
            translation.translators.set(0);
        }
        translation.slots.set(translation.slots.get() | slots);
        translation.translators.set(translation.translators.get() | translators);
        translation.at.set(self.translation_clock);
    }

    /// Of the processes marked on `translation`, those whose tables have not been dropped
    /// since. An object marked later by another process keeps the earlier ones too, which
    /// only makes a change drop more tables than it must; it never leaves out a process
    /// that holds a translation, since that one's mark is no later than `at`.
    fn live_translators(&self, translation: &Translation) -> Translators {
        let translated_at = translation.at.get();
        let (mut live, mut rest) = (0, translation.translators.get());
        while rest != 0 {
            let bit = rest.trailing_zeros();
            rest &= rest - 1;
            if translated_at > self.translators_dropped_at[bit as usize] {
                live |= 1 << bit;
            }
        }
        live
    }

    /// Whose page tables may hold a translation that read any of `slots` (bit i: slot i)
    /// of `translation`'s object.
    fn translators_reading(&self, translation: &Translation, slots: u32) -> Translators {
        if Self::translated_slots(translation, self.translation_epoch) & slots != 0 {
            self.live_translators(translation)
        } else {
            0
        }
    }

    /// The page tables of `translators` were dropped: their marks on objects no longer
    /// count, while everyone else's stay.
    pub fn forget_translations_of(&mut self, translators: Translators) {
        for bit in (0..Translators::BITS).filter(|&bit| translators >> bit & 1 != 0) {
            self.translators_dropped_at[bit as usize] = self.translation_clock;
        }
        self.translation_clock += 1;
    }

    /// Whether a translation made since translations were last forgotten read `slot` of
    /// node `id`: changing that slot must drop them.
    pub fn is_translated(&self, id: ObjectId, slot: Slot) -> bool {
        self.nodes.get(&id).is_some_and(|entry| {
            Self::translated_slots(&entry.translation, self.translation_epoch) & (1 << slot.index()) != 0
        })
    }

    /// Whose page tables may hold a translation that read `slot` of node `id`: those a
    /// change to the slot must drop.
    pub fn slot_translators(&self, id: ObjectId, slot: Slot) -> Translators {
        self.nodes.get(&id).map_or(0, |entry| self.translators_reading(&entry.translation, 1 << slot.index()))
    }

    /// Whether a translation made since translations were last forgotten read any slot of
    /// node `id`: destroying the node must drop them.
    pub fn is_node_translated(&self, id: ObjectId) -> bool {
        self.nodes.get(&id).is_some_and(|entry| Self::translated_slots(&entry.translation, self.translation_epoch) != 0)
    }

    /// Whose page tables may hold a translation that read any slot of node `id`: those
    /// destroying the node must drop.
    pub fn node_translators(&self, id: ObjectId) -> Translators {
        self.nodes.get(&id).map_or(0, |entry| self.translators_reading(&entry.translation, u32::MAX))
    }

    /// The slots of `translation`'s object that translations made in `epoch` read (bit i:
    /// slot i); none if its marks are from an earlier epoch. A mask rather than a branch (a
    /// translation block fewer under TCG): [`Self::node_mut_translated`] is on the
    /// invocation path.
    fn translated_slots(translation: &Translation, epoch: u64) -> u32 {
        let current = u32::from(translation.epoch.get() == epoch);
        translation.slots.get() & current.wrapping_neg()
    }

    /// Whether a translation made since translations were last forgotten maps page `id`:
    /// destroying the page must drop them, or its process could still reach what becomes
    /// another object's bytes.
    pub fn is_page_translated(&self, id: ObjectId) -> bool {
        self.pages.get(&id).is_some_and(|entry| Self::translated_slots(&entry.translation, self.translation_epoch) != 0)
    }

    /// Whose page tables may map page `id`: those destroying the page must drop.
    pub fn page_translators(&self, id: ObjectId) -> Translators {
        self.pages.get(&id).map_or(0, |entry| self.translators_reading(&entry.translation, u32::MAX))
    }

    /// Moves on each time every translation is dropped: a fault that walked before a move
    /// must walk again, since its marks were forgotten with the rest.
    pub fn translation_epoch(&self) -> u64 {
        self.translation_epoch
    }

    /// Every translation was dropped: no node has one depending on it any more.
    pub fn forget_translations(&mut self) {
        self.translation_epoch += 1;
    }

    /// The node a live node-backed capability names, for a change: marked dirty. After the
    /// load (if any) one mutable lookup serves the check, the mark and the access; this is
    /// on the invocation path, where each lookup is a few translation blocks under TCG.
    pub fn node_mut(&mut self, capability: &Capability) -> Result<&mut Node, Void> {
        self.node_mut_translated(capability).map(|(node, _)| node)
    }

    /// [`Self::node_mut`], with the slots of the node that translations made since they were
    /// last forgotten read (bit i: slot i; see [`Self::is_translated`]): a caller that
    /// changes several slots learns from the same lookup which changes drop translations.
    #[inline(always)] // on the IPC fast path; few callers
    pub fn node_mut_translated(&mut self, capability: &Capability) -> Result<(&mut Node, u32), Void> {
        let id = capability.object();
        let entry = Self::node_entry_in(&mut self.nodes, self.node_loader, id).ok_or(Void)?;
        Self::node_entry_matches(entry, capability)?;
        Self::note_node_dirty(&mut self.dirty_nodes, entry, id);
        let translated = Self::translated_slots(&entry.translation, self.translation_epoch);
        Ok((&mut entry.node, translated))
    }

    /// `Ok` if `capability` is a live node-backed capability (node, space, process, start,
    /// meter, indirector, resume) to `entry`: one lookup serves both the check and the
    /// access, on the invocation path.
    ///
    /// Written without early returns: every invocation passes here at least once, and under
    /// TCG each branch ends a translation block; the compiler makes the kind test a bit
    /// test and the version choice a conditional move.
    fn node_entry_matches(entry: &NodeEntry, capability: &Capability) -> Result<(), Void> {
        let kind = capability.kind();
        let version = if kind == CapType::Resume {
            entry.resume_version
        } else {
            entry.version
        };
        let names_node = kind.names_node();
        if names_node & (version == capability.version()) {
            Ok(())
        } else {
            Err(Void)
        }
    }

    /// The frame of a live page capability's page; `Err` too while the page is absent (the
    /// kernel loads it first, see [`Self::page_is_resident`]).
    pub fn page(&self, capability: &Capability) -> Result<&F, Void> {
        let (entry, version) = self.page_entry(capability.object()).ok_or(Void)?;
        Self::page_matches(version, capability)?;
        entry.frame.as_ref().ok_or(Void)
    }

    pub fn page_mut(&mut self, capability: &Capability) -> Result<&mut F, Void> {
        let id = capability.object();
        let (_, version) = self.page_entry(id).ok_or(Void)?;
        Self::page_matches(version, capability)?;
        self.mark_page_dirty(id);
        self.pages.get_mut(&id).and_then(|entry| entry.frame.as_mut()).ok_or(Void)
    }

    fn page_matches(version: Version, capability: &Capability) -> Result<(), Void> {
        let live = capability.kind() == CapType::Page && version == capability.version();
        live.then_some(()).ok_or(Void)
    }

    /// What a program fetching `slot` through `node_capability` receives: the slot's
    /// capability, weakened if the path is weak, void if revoked. A read-only space weakens
    /// too: it maps its pages read-only, and what is fetched through it must not write
    /// them either (a virtual copy shares its original so, services/virtual-copy).
    pub fn fetch(&self, node_capability: &Capability, slot: Slot) -> Result<Capability, Void> {
        let fetched = self.live_or_void(self.node(node_capability)?.get(slot));
        let read_only_space =
            node_capability.kind() == CapType::Space && !node_capability.may_write();
        Ok(if read_only_space || node_capability.rights().contains(crate::Rights::WEAK) {
            fetched.weakened()
        } else {
            fetched
        })
    }

    /// Voids every capability to node `id` (resume capabilities included) by moving its
    /// version on. Returns `false` if the node is not here.
    pub fn rescind_node(&mut self, id: ObjectId) -> bool {
        let Some(entry) = self.node_entry_mut(id) else {
            return false;
        };
        entry.version = entry.version.next();
        entry.resume_version = entry.resume_version.next();
        self.mark_node_dirty(id);
        true
    }

    fn mark_node_dirty(&mut self, id: ObjectId) {
        if let Some(entry) = self.nodes.get_mut(&id) {
            Self::note_node_dirty(&mut self.dirty_nodes, entry, id);
        }
    }

    /// Marks node `id`'s `entry` dirty, listing it in `dirty_nodes` if it was clean; for
    /// callers that hold the entry already (one lookup fewer).
    #[inline]
    fn note_node_dirty(dirty_nodes: &mut alloc::vec::Vec<ObjectId>, entry: &mut NodeEntry, id: ObjectId) {
        if !core::mem::replace(&mut entry.dirty, true) {
            dirty_nodes.push(id);
        }
    }

    /// Voids every capability to page `id`. Like a write, this changes what a snapshot being
    /// stabilized must store: the kernel preserves the page first (see
    /// [`Self::page_in_snapshot`]).
    pub fn rescind_page(&mut self, id: ObjectId) -> bool {
        let Some((_, version)) = self.page_entry(id) else {
            return false;
        };
        let Some(entry) = self.pages.get_mut(&id) else {
            return false;
        };
        entry.version = OnceCell::from(version.next());
        self.mark_page_dirty(id);
        true
    }

    /// Uses up a resume capability: `Ok` once for a live one, after which it and every copy
    /// of it are void.
    ///
    /// Every call's reply passes here: after the load (if any) one mutable lookup serves the
    /// check, the change and the dirty mark (each lookup is a few translation blocks under
    /// TCG).
    #[inline(always)] // two callers, one the IPC fast path
    pub fn consume_resume(&mut self, resume: &Capability) -> Result<(), Void> {
        if resume.kind() != CapType::Resume {
            return Err(Void);
        }
        let id = resume.object();
        let entry = Self::node_entry_in(&mut self.nodes, self.node_loader, id).ok_or(Void)?;
        if entry.resume_version != resume.version() {
            return Err(Void);
        }
        entry.resume_version = entry.resume_version.next();
        Self::note_node_dirty(&mut self.dirty_nodes, entry, id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rights;

    type Cache = ObjectCache<[u8; 8]>;

    fn cache_with_node_and_page() -> (Cache, Capability, Capability) {
        let mut cache = Cache::default();
        assert!(cache.insert_node(ObjectId(1), Version(4), Node::default()));
        cache.insert_page(ObjectId(1), Version(9), [0; 8]).unwrap();
        let node = cache.node_capability(CapType::Node, ObjectId(1)).unwrap();
        let page = cache.page_capability(ObjectId(1)).unwrap();
        (cache, node, page)
    }

    fn slot(index: u64) -> Slot {
        Slot::new(index).unwrap()
    }

    #[test]
    fn objects_cannot_be_inserted_twice() {
        let (mut cache, _, _) = cache_with_node_and_page();
        assert!(!cache.insert_node(ObjectId(1), Version(0), Node::default()));
        assert_eq!(
            cache.insert_page(ObjectId(1), Version(0), [1; 8]),
            Err([1; 8])
        );
    }

    #[test]
    fn rescinding_voids_every_copy_and_only_that_object() {
        let (mut cache, node, page) = cache_with_node_and_page();
        let read_only_copy = node.restricted(Rights::READ_ONLY).with_badge(3);
        cache.node_mut(&node).unwrap().swap(slot(0), page);
        assert!(cache.rescind_node(ObjectId(1)));
        assert_eq!(cache.check(&node), Err(Void));
        assert_eq!(cache.check(&read_only_copy), Err(Void));
        assert_eq!(cache.node(&node).err(), Some(Void));
        assert_eq!(cache.check(&page), Ok(()), "the page has its own version");
        let fresh = cache.node_capability(CapType::Node, ObjectId(1)).unwrap();
        assert_eq!(cache.fetch(&fresh, slot(0)), Ok(page));
    }

    #[test]
    fn what_a_read_only_space_holds_is_fetched_read_only() {
        let (mut cache, node, page) = cache_with_node_and_page();
        cache.node_mut(&node).unwrap().swap(slot(0), page);
        let space = Capability::space(node.object(), node.version(), 1, false).unwrap();
        assert_eq!(cache.fetch(&space, slot(0)), Ok(page), "a writable space gives the page as it is");
        let fetched = cache.fetch(&space.restricted(Rights::READ_ONLY), slot(0)).unwrap();
        assert_eq!(fetched.object(), page.object());
        assert!(!fetched.may_write(), "a read-only space gave a writable page: {fetched:?}");
    }

    #[test]
    fn node_mut_translated_tells_the_slots_translations_read_until_forgotten() {
        let (mut cache, node, _) = cache_with_node_and_page();
        assert_eq!(cache.node_mut_translated(&node).map(|(_, slots)| slots), Ok(0));
        cache.node_for_translation(&node, slot(3), 1 << 2).unwrap();
        cache.node_for_translation(&node, slot(5), 1 << 7).unwrap();
        let (_, slots) = cache.node_mut_translated(&node).unwrap();
        assert_eq!(slots, 1 << 3 | 1 << 5);
        assert_eq!(
            [3, 4, 5].map(|index| cache.is_translated(ObjectId(1), slot(index))),
            [true, false, true],
            "the same answer as is_translated"
        );
        assert_eq!(
            [3, 4, 5].map(|index| cache.slot_translators(ObjectId(1), slot(index))),
            [1 << 2 | 1 << 7, 0, 1 << 2 | 1 << 7],
            "each translated slot names every process that translated through the node"
        );
        assert_eq!(cache.node_translators(ObjectId(1)), 1 << 2 | 1 << 7);
        // Process 2's tables dropped: its mark no longer counts, process 7's does; a mark
        // made after the drop counts again.
        cache.forget_translations_of(1 << 2);
        assert_eq!(cache.slot_translators(ObjectId(1), slot(3)), 1 << 7);
        cache.node_for_translation(&node, slot(4), 1 << 2).unwrap();
        assert_eq!(cache.slot_translators(ObjectId(1), slot(3)), 1 << 2 | 1 << 7);
        // Once every process that marked it has dropped its tables, the slots they read
        // count no more either: a new mark starts afresh.
        cache.forget_translations_of(1 << 2 | 1 << 7);
        cache.node_for_translation(&node, slot(6), 1 << 2).unwrap();
        assert_eq!([3, 4, 6].map(|index| cache.slot_translators(ObjectId(1), slot(index))), [0, 0, 1 << 2]);
        cache.forget_translations();
        assert_eq!(cache.node_mut_translated(&node).map(|(_, slots)| slots), Ok(0));
        assert_eq!(cache.node_translators(ObjectId(1)), 0, "forgotten with the translations");
        let stale = node.restricted(Rights::READ_ONLY);
        assert!(cache.rescind_node(ObjectId(1)));
        assert_eq!(cache.node_mut_translated(&stale).err(), Some(Void));
    }

    #[test]
    fn a_revoked_capability_is_fetched_as_void() {
        let (mut cache, node, page) = cache_with_node_and_page();
        cache.node_mut(&node).unwrap().swap(slot(2), page);
        assert!(cache.rescind_page(ObjectId(1)));
        assert_eq!(cache.fetch(&node, slot(2)), Ok(Capability::VOID));
        assert_eq!(cache.page(&page).err(), Some(Void));
    }

    #[test]
    fn a_weak_path_weakens_what_it_fetches() {
        let (mut cache, node, page) = cache_with_node_and_page();
        let start = cache.node_capability(CapType::Start, ObjectId(1)).unwrap();
        let node_mut = cache.node_mut(&node).unwrap();
        node_mut.swap(slot(0), page);
        node_mut.swap(slot(1), start);
        let weak = node.weakened();
        let fetched_page = cache.fetch(&weak, slot(0)).unwrap();
        assert!(!fetched_page.may_write());
        assert!(fetched_page.rights().contains(Rights::WEAK));
        assert_eq!(cache.fetch(&weak, slot(1)), Ok(Capability::VOID));
        assert_eq!(
            cache.fetch(&node, slot(1)),
            Ok(start),
            "a strong path fetches as is"
        );
    }

    #[test]
    fn an_abandoned_snapshot_is_dirty_again_whether_stored_or_not() {
        let (mut cache, _, _) = cache_with_node_and_page();
        cache.insert_page(ObjectId(2), Version(0), [0; 8]).unwrap();
        let nodes: alloc::vec::Vec<ObjectId> = cache.take_dirty_nodes().iter().map(|node| node.id).collect();
        let pages = cache.take_dirty_pages();
        cache.page_stored(ObjectId(1));
        assert_eq!((cache.dirty_page_count(), cache.take_dirty_nodes().len()), (0, 0));
        cache.snapshot_abandoned(&nodes, &pages);
        assert_eq!(cache.take_dirty_nodes().len(), 1);
        let mut again = cache.take_dirty_pages();
        again.sort();
        assert_eq!(again, [ObjectId(1), ObjectId(2)]);
    }

    #[test]
    fn snapshots_take_what_changed_since_the_last_one() {
        let (mut cache, node, page) = cache_with_node_and_page();
        assert_eq!(cache.take_dirty_nodes().len(), 1, "new objects are dirty");
        assert_eq!(cache.take_dirty_pages(), [ObjectId(1)]);
        assert!(cache.page_in_snapshot(ObjectId(1)), "taken, not yet stored");
        cache.page_stored(ObjectId(1));
        assert!(!cache.page_in_snapshot(ObjectId(1)));
        assert!(cache.take_dirty_nodes().is_empty() && cache.take_dirty_pages().is_empty());

        cache.node_mut(&node).unwrap().swap(slot(3), page);
        cache.mark_page_dirty(ObjectId(1));
        let nodes = cache.take_dirty_nodes();
        assert_eq!((nodes.len(), nodes[0].id, nodes[0].version), (1, ObjectId(1), Version(4)));
        let (decoded, resume_version) = Node::decode(&nodes[0].image).unwrap();
        assert_eq!((decoded.get(slot(3)), resume_version), (page, Version(0)));
        assert_eq!(cache.dirty_page_count(), 1);
        assert_eq!(cache.take_dirty_pages().len(), 1);
        assert_eq!(cache.dirty_page_count(), 0);
        cache.mark_page_dirty(ObjectId(1));
        assert!(!cache.page_in_snapshot(ObjectId(1)), "written since: the snapshot's copy is the caller's");
        cache.page_stored(ObjectId(1));
        assert_eq!(cache.dirty_page_count(), 1, "still dirty for the next snapshot");

        let resume = cache.node_capability(CapType::Resume, ObjectId(1)).unwrap();
        cache.consume_resume(&resume).unwrap();
        assert!(cache.rescind_page(ObjectId(1)));
        let nodes = cache.take_dirty_nodes();
        assert_eq!(Node::decode(&nodes[0].image).unwrap().1, Version(1), "the resume version is kept");
        assert_eq!((cache.take_dirty_pages(), cache.page_version(ObjectId(1))), (alloc::vec![ObjectId(1)], Some(Version(10))));

        let mut restored = Cache::default();
        assert!(restored.insert_stored_node(ObjectId(1), Version(4), Version(1), decoded));
        restored.insert_stored_page(ObjectId(1), Version(10), [0; 8]).unwrap();
        assert!(restored.take_dirty_nodes().is_empty() && restored.take_dirty_pages().is_empty());
        assert_eq!(restored.consume_resume(&resume), Err(Void), "a used resume stays used");
    }

    #[test]
    fn a_page_changed_only_by_durable_journal_commits_is_left_out_of_the_next_snapshot() {
        let (mut cache, _, _) = cache_with_node_and_page();
        for id in 2..=4 {
            cache.insert_page(ObjectId(id), Version(0), [0; 8]).unwrap();
        }
        cache.take_dirty_pages();
        for id in 1..=4 {
            cache.page_stored(ObjectId(id));
        }
        // Page 2 only journaled; 3 journaled, then written otherwise; 4 written otherwise,
        // then journaled; 1 journaled twice, the first commit durable before the second.
        for id in [1, 2, 3] {
            cache.mark_page_journaled(ObjectId(id));
        }
        cache.mark_page_dirty(ObjectId(3));
        cache.mark_page_dirty(ObjectId(4));
        cache.mark_page_journaled(ObjectId(4));
        cache.mark_page_journaled(ObjectId(1));
        assert_eq!(cache.dirty_page_count(), 4);
        for id in [2, 3, 4] {
            cache.page_journal_durable(ObjectId(id));
        }
        assert_eq!(cache.dirty_page_count(), 3, "only page 2 is clean");
        assert_eq!(cache.eviction_candidates(8, &[]), [ObjectId(2)], "and may be evicted: the store holds it");
        cache.page_journal_durable(ObjectId(1));
        assert_eq!(cache.dirty_page_count(), 2);
        cache.page_journal_durable(ObjectId(1));
        assert_eq!(cache.dirty_page_count(), 2, "counted clean once");

        // Journaled again after it was made clean: listed twice, taken once.
        cache.mark_page_journaled(ObjectId(2));
        let mut pages = cache.take_dirty_pages();
        assert_eq!(cache.dirty_page_count(), 0);
        // Page 4 written since the snapshot, its snapshot contents copied by the caller.
        cache.mark_page_dirty(ObjectId(4));
        let mut settled = pages.clone();
        cache.settle_snapshot_pages(&mut settled, |id| id == ObjectId(4));
        assert_eq!(settled, [ObjectId(2), ObjectId(3), ObjectId(4)]);
        cache.settle_snapshot_pages(&mut pages, |_| false);
        assert_eq!(pages, [ObjectId(2), ObjectId(3)]);

        // A durable commit of a page in the snapshot does not take it out: the snapshot
        // stores it, and a commit made after the snapshot cleans only the new epoch's dirt.
        cache.page_journal_durable(ObjectId(2));
        assert!(cache.page_in_snapshot(ObjectId(2)));
        cache.mark_page_journaled(ObjectId(3));
        cache.page_journal_durable(ObjectId(3));
        assert!(!cache.page_in_snapshot(ObjectId(3)));
        assert_eq!(cache.dirty_page_count(), 1, "page 4, written since the snapshot");
        cache.page_stored(ObjectId(3));
        assert_eq!(cache.evict(ObjectId(3)), Some([0; 8]));
    }

    #[test]
    fn absent_pages_check_as_usual_and_are_loaded_and_evicted_clean() {
        let mut cache = Cache::default();
        assert!(cache.insert_absent_page(ObjectId(5), Version(2)));
        let page = cache.page_capability(ObjectId(5)).unwrap();
        assert_eq!(cache.check(&page), Ok(()), "an absent page's capability is live");
        assert_eq!(cache.page_is_resident(ObjectId(5)), Some(false));
        assert_eq!(cache.page(&page).err(), Some(Void), "its bytes are not here");
        assert_eq!(cache.page_mut(&page).err(), Some(Void));
        assert_eq!(cache.eviction_candidates(8, &[]), []);
        cache.install_frame(ObjectId(5), Version(2), [1; 8]).unwrap();
        assert_eq!(cache.install_frame(ObjectId(5), Version(2), [2; 8]), Err([2; 8]), "installed once");
        assert_eq!(cache.page(&page), Ok(&[1; 8]));
        assert_eq!(cache.eviction_candidates(8, &[ObjectId(5)]), [], "kept");
        assert_eq!(cache.eviction_candidates(8, &[]), [ObjectId(5)]);
        cache.page_mut(&page).unwrap()[0] = 9;
        assert_eq!(cache.evict(ObjectId(5)), None, "a dirty page stays until stored");
        assert_eq!(cache.take_dirty_pages(), [ObjectId(5)]);
        assert_eq!(cache.evict(ObjectId(5)), None, "in the snapshot until stored");
        cache.page_stored(ObjectId(5));
        assert_eq!(cache.evict(ObjectId(5)), Some([9, 1, 1, 1, 1, 1, 1, 1]));
        assert_eq!(cache.object_counts(), (0, 1, 0));
        assert_eq!(cache.check(&page), Ok(()), "evicted, still live");
    }

    /// The page versions of the loading test: page `id` has version `2 id`; page 13 cannot be
    /// read.
    fn load_test_page_version(id: ObjectId) -> Option<Version> {
        (id.0 != 13).then_some(Version(2 * id.0))
    }

    #[test]
    fn stored_pages_learn_their_versions_when_first_named() {
        let mut cache = Cache::default();
        cache.set_page_version_loader(load_test_page_version);
        cache.know_stored_pages(20);
        assert_eq!(cache.object_counts(), (0, 19, 0), "known, none resident");
        let page = Capability::new(CapType::Page, ObjectId(4), Version(8));
        assert_eq!(cache.check(&page), Ok(()));
        assert_eq!(cache.check(&Capability::new(CapType::Page, ObjectId(5), Version(8))), Err(Void), "stale");
        assert_eq!(cache.page_capability(ObjectId(6)), Some(Capability::new(CapType::Page, ObjectId(6), Version(12))));
        assert_eq!(cache.page_capability(ObjectId(13)), None, "unreadable");
        assert_eq!(cache.page_capability(ObjectId(20)), None, "beyond the stored pages");
        assert_eq!(cache.page(&page).err(), Some(Void), "absent until loaded");
        // Loading a page gives its version too: none is read.
        cache.install_frame(ObjectId(7), Version(3), [7; 8]).unwrap();
        assert_eq!(cache.page_version(ObjectId(7)), Some(Version(3)));
        assert!(cache.rescind_page(ObjectId(7)));
        assert_eq!(cache.page_version(ObjectId(7)), Some(Version(4)));
    }

    /// Loads by `load_test_node`.
    static TEST_NODES_LOADED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

    /// The store of the loading test: node `id` has version `id`, resume version 1 and its
    /// id in slot 0; node 13 cannot be read.
    fn load_test_node(id: ObjectId) -> Option<StoredNode> {
        let mut node = Node::default();
        node.swap(slot(0), Capability::number([id.0, 0]));
        let stored = (id.0 != 13).then_some(StoredNode { version: Version(id.0), resume_version: Version(1), node });
        if stored.is_some() {
            TEST_NODES_LOADED.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
        stored
    }

    #[test]
    fn absent_nodes_load_on_any_use_and_clean_ones_are_evicted() {
        let mut cache = Cache::default();
        cache.set_node_loader(load_test_node);
        cache.know_stored_nodes(20);
        let node = Capability::new(CapType::Node, ObjectId(7), Version(7));
        assert_eq!(cache.object_counts().0, 0, "nothing loaded yet");
        assert_eq!(cache.check(&node), Ok(()), "checking loads");
        assert_eq!(cache.fetch(&node, slot(0)), Ok(Capability::number([7, 0])));
        let stale = Capability::new(CapType::Node, ObjectId(8), Version(3));
        assert_eq!(cache.check(&stale), Err(Void), "the stored version counts");
        let resume = Capability::new(CapType::Resume, ObjectId(9), Version(1));
        assert_eq!(cache.consume_resume(&resume), Ok(()), "a mutation loads too");
        assert_eq!(TEST_NODES_LOADED.load(core::sync::atomic::Ordering::Relaxed), 3);
        let unreadable = Capability::new(CapType::Node, ObjectId(13), Version(13));
        assert_eq!(cache.check(&unreadable), Err(Void), "an unreadable node is void");
        let unknown = Capability::new(CapType::Node, ObjectId(20), Version(20));
        assert_eq!(cache.check(&unknown), Err(Void), "beyond the stored nodes");
        assert!(!cache.insert_node(ObjectId(5), Version(0), Node::default()), "a stored id is taken");
        assert!(cache.insert_node(ObjectId(20), Version(0), Node::default()));

        // Node 9 is dirty (its resume version moved), node 20 new: both stay.
        assert_eq!(cache.evict_nodes(100, &[ObjectId(8)]), 1, "only node 7: 8 is kept");
        assert_eq!(cache.object_counts().0, 3);
        assert_eq!(cache.take_dirty_nodes().len(), 2);
        assert_eq!(cache.evict_nodes(100, &[]), 3);
        assert_eq!(cache.check(&node), Ok(()), "loaded again");
        assert_eq!(TEST_NODES_LOADED.load(core::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn a_resume_capability_works_once() {
        let (mut cache, node, _) = cache_with_node_and_page();
        let resume = cache.node_capability(CapType::Resume, ObjectId(1)).unwrap();
        let copy = resume;
        assert_eq!(cache.consume_resume(&resume), Ok(()));
        assert_eq!(cache.consume_resume(&copy), Err(Void));
        assert_eq!(cache.check(&node), Ok(()), "the process itself lives on");
        let next = cache.node_capability(CapType::Resume, ObjectId(1)).unwrap();
        assert_eq!(cache.consume_resume(&next), Ok(()));
    }

    #[test]
    fn node_and_resume_gives_the_current_resume_capability_of_a_live_node() {
        let (mut cache, node, page) = cache_with_node_and_page();
        let (_, resume) = cache.node_and_resume(&node).unwrap();
        assert_eq!(Some(resume), cache.node_capability(CapType::Resume, ObjectId(1)));
        assert_eq!(cache.consume_resume(&resume), Ok(()));
        let (_, next) = cache.node_and_resume(&node).unwrap();
        assert_ne!(next, resume, "a used resume capability is never handed out again");
        assert_eq!(cache.node_and_resume(&page).err(), Some(Void));
        assert!(cache.rescind_node(ObjectId(1)));
        assert_eq!(cache.node_and_resume(&node).err(), Some(Void), "revoked");
    }

    #[test]
    fn accessors_refuse_the_wrong_type_and_kernel_services_need_no_object() {
        let (cache, node, page) = cache_with_node_and_page();
        assert_eq!(cache.page(&node).err(), Some(Void));
        assert_eq!(cache.node(&page).err(), Some(Void));
        assert_eq!(cache.check(&Capability::VOID), Err(Void));
        let console = Capability::new(CapType::Console, ObjectId(0), Version(0));
        assert_eq!(cache.check(&console), Ok(()));
        let missing = Capability::new(CapType::Node, ObjectId(77), Version(0));
        assert_eq!(cache.check(&missing), Err(Void));
    }
}
