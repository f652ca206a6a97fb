//! Address spaces: trees of nodes with pages as leaves (EROS 4.2), translated lazily into
//! x86-64 page tables that are only a cache.
//!
//! A process's page tables start with an empty user half. A page fault walks the process's
//! space tree from its root capability; if the walk reaches a page, the page is mapped and
//! the process resumes; if not, the fault is the space's keeper's business. Nodes a walk
//! passed through are remembered: a swap into one of them drops every process's user
//! mappings, so that the change is seen at the next access.

use alloc::collections::BTreeSet;
use holdfast_objects::ObjectId;
use spin::Mutex;
use x86_64::structures::paging::{PageTable, PageTableFlags, PhysFrame};
use x86_64::{PhysAddr, VirtAddr};

use crate::memory::{self, PAGE_BYTES};

/// Nodes some translation depends on: swapping a slot of one of them must drop mappings.
static TRANSLATED_NODES: Mutex<BTreeSet<ObjectId>> = Mutex::new(BTreeSet::new());

/// Records the nodes a successful walk passed through.
pub fn remember_translated(visited: BTreeSet<ObjectId>) {
    TRANSLATED_NODES.lock().extend(visited);
}

fn table_at(frame: PhysFrame) -> &'static mut PageTable {
    let address = memory::physical_to_virtual(frame.start_address().as_u64());
    // SAFETY: page-table frames are heap pages owned by one address space; the kernel
    // touches them only with interrupts off, on its single CPU.
    unsafe { &mut *(address as *mut PageTable) }
}

fn new_table_frame() -> PhysFrame {
    let block = memory::allocate_pages(1);
    PhysFrame::containing_address(PhysAddr::new(memory::virtual_to_physical(block as u64)))
}

/// A new set of page tables: the kernel half shared with the boot tables, the user half
/// empty.
pub fn new_page_tables(kernel_root: PhysFrame) -> PhysFrame {
    let root = new_table_frame();
    let (kernel_table, table) = (table_at(kernel_root), table_at(root));
    for index in 256..512 {
        table[index] = kernel_table[index].clone();
    }
    root
}

/// Maps the 4 KiB page at `address` to `frame` for ring 3 in the tables at `root`.
pub fn map_page(root: PhysFrame, address: u64, frame: PhysFrame, writable: bool) {
    let page_address = VirtAddr::new(address & !(PAGE_BYTES as u64 - 1));
    let indices = [
        page_address.p4_index(),
        page_address.p3_index(),
        page_address.p2_index(),
    ];
    let intermediate =
        PageTableFlags::PRESENT | PageTableFlags::WRITABLE | PageTableFlags::USER_ACCESSIBLE;
    let mut table = table_at(root);
    for index in indices {
        let entry = &mut table[index];
        if entry.is_unused() {
            entry.set_frame(new_table_frame(), intermediate);
        }
        table = table_at(entry.frame().expect("a 4 KiB table, never a huge page"));
    }
    let mut flags = PageTableFlags::PRESENT | PageTableFlags::USER_ACCESSIBLE;
    if writable {
        flags |= PageTableFlags::WRITABLE;
    }
    table[page_address.p1_index()].set_frame(frame, flags);
    x86_64::instructions::tlb::flush(page_address);
}
/// Whether a change to `node` may change some translation already cached in page tables.
/// Forgets the node: the caller drops every mapping, after which no translation depends on
/// anything.
pub fn take_translation_dependency(node: ObjectId) -> bool {
    let mut translated = TRANSLATED_NODES.lock();
    if translated.contains(&node) {
        translated.clear();
        true
    } else {
        false
    }
}

/// Drops every user mapping of the tables at `root`, returning their frames to the heap.
/// The caller reloads CR3 (or is about to switch) so that no stale TLB entry survives.
pub fn clear_user_half(root: PhysFrame) {
    fn free_below(frame: PhysFrame, level: u8) {
        if level > 1 {
            for entry in table_at(frame).iter_mut() {
                if let Ok(child) = entry.frame() {
                    free_below(child, level - 1);
                    free_table(child);
                }
                entry.set_unused();
            }
        }
    }
    fn free_table(frame: PhysFrame) {
        let block = memory::physical_to_virtual(frame.start_address().as_u64()) as *mut u8;
        // SAFETY: table frames come from `new_table_frame`, one page each, and the entry
        // that pointed here was cleared: nothing references the table any more.
        unsafe { memory::free_pages(block, 1) };
    }
    let table = table_at(root);
    for index in 0..256 {
        if let Ok(child) = table[index].frame() {
            free_below(child, 3);
            free_table(child);
        }
        table[index].set_unused();
    }
}
