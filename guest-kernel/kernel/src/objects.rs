//! The kernel's object cache: every page and node in memory (see `holdfast_objects`), with
//! pages held in physical frames that address spaces map directly.
//!
//! Every object is created at boot from the initial image, or read back from the store's
//! newest checkpoint at a restart (see [`crate::checkpoint`]), and stays resident; ids are
//! handed out in order and never reused.

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

pub struct Objects {
    pub cache: ObjectCache<Frame>,
    next_node_id: u64,
    next_page_id: u64,
}

pub static OBJECTS: Mutex<Objects> = Mutex::new(Objects {
    cache: ObjectCache::new(),
    next_node_id: 1,
    next_page_id: 1,
});

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

    /// A new empty node; returns a capability of `kind` to it.
    pub fn create_node(&mut self, kind: CapType) -> Capability {
        let id = ObjectId(self.next_node_id);
        self.next_node_id += 1;
        assert!(self.cache.insert_node(id, Version(0), Node::default()));
        self.cache.node_capability(kind, id).expect("just inserted")
    }

    /// A new zeroed page; returns a page capability to it.
    pub fn create_page(&mut self) -> Capability {
        let id = ObjectId(self.next_page_id);
        self.next_page_id += 1;
        if self
            .cache
            .insert_page(id, Version(0), Frame::zeroed())
            .is_err()
        {
            unreachable!("page ids are handed out once");
        }
        self.cache.page_capability(id).expect("just inserted")
    }
}
