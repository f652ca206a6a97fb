//! The kernel's object cache: every page and node in memory (see `holdfast_objects`), with
//! pages held in physical frames that address spaces map directly.
//!
//! Every object is created at boot from the initial image, or known from the store's newest
//! checkpoint at a restart (see `persistence`); ids are handed out in order and never
//! reused. Nodes stay resident. With a store, pages are a cache of it: a page is loaded
//! when first used ([`Objects::ensure_resident`]) and clean pages are evicted when the heap
//! runs low (`persistence::eviction::make_room`); a new page starts on the store, which
//! reads a page never written as zeros. The cache sits below the store's layer: it reaches
//! the store only through the [`StoreAccess`] that layer hands it when it attaches.

use holdfast_objects::{CapType, Capability, Node, ObjectCache, ObjectId, Version};
use spin::Mutex;
use x86_64::PhysAddr;
use x86_64::structures::paging::PhysFrame;

use crate::memory::{self, PAGE_BYTES};

/// A page's data: one zeroed 4 KiB frame from the kernel heap, reached by the direct map.
pub struct Frame(PhysFrame);

impl Frame {
    fn zeroed() -> Self {
        let block = memory::allocate_pages(1);
        Self(PhysFrame::containing_address(PhysAddr::new(
            memory::virtual_to_physical(block as u64),
        )))
    }

    /// A frame for a page read back from the store; its bytes are overwritten.
    pub fn for_stored_page() -> Self {
        Self::zeroed()
    }

    pub fn bytes(&self) -> &[u8; PAGE_BYTES] {
        // SAFETY: as for `bytes_mut`; ring 3 does not run while the kernel does (one CPU,
        // interrupts off in the kernel), so nothing changes the bytes under this borrow.
        unsafe { &*(memory::physical_to_virtual(self.0.start_address().as_u64()) as *const _) }
    }

    pub fn physical(&self) -> PhysFrame {
        self.0
    }

    pub fn bytes_mut(&mut self) -> &mut [u8; PAGE_BYTES] {
        // SAFETY: the frame is a page of the heap owned by this `Frame` and in the direct
        // map, and `&mut self` makes this the only kernel reference to it; ring 3 may write
        // it through its mappings, a race a program has only with itself.
        unsafe { &mut *(memory::physical_to_virtual(self.0.start_address().as_u64()) as *mut _) }
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        let block = memory::physical_to_virtual(self.0.start_address().as_u64()) as *mut u8;
        // SAFETY: the frame came from `allocate_pages(1)` (`zeroed`) and is owned by this
        // `Frame` alone; the object cache drops a frame only once no page table maps it
        // (`make_room` drops every translation before it evicts).
        unsafe { memory::free_pages(block, 1) };
    }
}

pub struct Objects {
    pub cache: ObjectCache<Frame>,
    next_node_id: u64,
    next_page_id: u64,
    /// A store holds the pages: new pages start absent (reading as zeros) and absent ones
    /// are loaded from it.
    store: Option<StoreAccess>,
}

/// How the cache reaches the store that holds its pages (set by `persistence::attach`).
#[derive(Clone, Copy)]
pub struct StoreAccess {
    /// Makes room for pages to be loaded if the heap runs low, keeping the pages named.
    pub make_room: fn(&mut Objects, &[ObjectId]) -> Result<(), alloc::string::String>,
    /// Reads a page's newest committed contents; returns its version.
    pub read_page: fn(ObjectId, &mut [u8; PAGE_BYTES]) -> Result<Version, alloc::string::String>,
}

pub static OBJECTS: Mutex<Objects> = Mutex::new(Objects {
    cache: ObjectCache::new(),
    next_node_id: 1,
    next_page_id: 1,
    store: None,
});

/// Why a page could not be loaded.
#[derive(Debug)]
pub struct LoadError(pub alloc::string::String);

impl Objects {
    /// The next node and page ids to hand out.
    pub fn next_ids(&self) -> (u64, u64) {
        (self.next_node_id, self.next_page_id)
    }

    /// Continues handing out ids where a checkpoint left off.
    pub fn set_next_ids(&mut self, (node, page): (u64, u64)) {
        self.next_node_id = node;
        self.next_page_id = page;
    }

    /// A page id set aside, never a page of the cache: for the checkpoint directory's pages
    /// ([`crate::checkpoint`]), which no program may name.
    pub fn reserve_page_id(&mut self) -> ObjectId {
        let id = ObjectId(self.next_page_id);
        self.next_page_id += 1;
        id
    }

    /// A new empty node; returns a capability of `kind` to it.
    pub fn create_node(&mut self, kind: CapType) -> Capability {
        let id = ObjectId(self.next_node_id);
        self.next_node_id += 1;
        assert!(self.cache.insert_node(id, Version(0), Node::default()));
        self.cache.node_capability(kind, id).expect("just inserted")
    }

    /// A new zeroed page; returns a page capability to it. With a store it starts there
    /// (see the module's comment).
    pub fn create_page(&mut self) -> Capability {
        self.new_page(self.store.is_none())
    }

    /// A new zeroed page with its bytes here (dirty), for a caller about to write it: the
    /// store, which would read it as zeros, is not asked for it. Clean pages are evicted
    /// first if the heap runs low.
    pub fn create_resident_page(&mut self) -> Result<Capability, LoadError> {
        if let Some(store) = self.store {
            (store.make_room)(self, &[]).map_err(LoadError)?;
        }
        Ok(self.new_page(true))
    }

    fn new_page(&mut self, resident: bool) -> Capability {
        let id = ObjectId(self.next_page_id);
        self.next_page_id += 1;
        let inserted = if resident {
            self.cache.insert_page(id, Version(0), Frame::zeroed()).is_ok()
        } else {
            self.cache.insert_absent_page(id, Version(0))
        };
        assert!(inserted, "page ids are handed out once");
        self.cache.page_capability(id).expect("just inserted")
    }

    /// From now on pages live on the store (see the module's comment).
    pub fn set_store_backed(&mut self, store: StoreAccess) {
        self.store = Some(store);
    }

    /// Loads the pages among `ids` that are only on the store. With `make_room`, clean pages
    /// are evicted first if the heap runs low; callers that hold the scheduler pass `false`
    /// and load into the headroom eviction keeps.
    pub fn ensure_resident(&mut self, ids: &[ObjectId], make_room: bool) -> Result<(), LoadError> {
        let absent = |objects: &Self, id: &ObjectId| objects.cache.page_is_resident(*id) == Some(false);
        if !ids.iter().any(|id| absent(self, id)) {
            return Ok(());
        }
        let store = self.store.ok_or_else(|| LoadError("no store".into()))?;
        if make_room {
            (store.make_room)(self, ids).map_err(LoadError)?;
        }
        for &id in ids {
            if absent(self, &id) {
                let mut frame = Frame::for_stored_page();
                let version = (store.read_page)(id, frame.bytes_mut()).map_err(LoadError)?;
                assert!(self.cache.install_frame(id, version, frame).is_ok(), "absent just now");
            }
        }
        Ok(())
    }
}
