//! Physical memory as the kernel sees it: the direct map, the kernel heap and page frames.
//!
//! The kernel takes its heap from the largest free RAM region; object pages come from it,
//! and the object cache evicts clean pages when it runs low (see `objects.rs`).

use linked_list_allocator::LockedHeap;

/// Physical memory 0..4 GiB is mapped here (boot page tables, PML4 slot 256).
pub const DIRECT_MAP_OFFSET: u64 = 0xFFFF_8000_0000_0000;
/// The kernel image is linked here (PML4 slot 511, -2 GiB).
pub const KERNEL_OFFSET: u64 = 0xFFFF_FFFF_8000_0000;
/// How much of physical memory the boot page tables map.
pub const DIRECT_MAP_BYTES: u64 = 4 << 30;
pub const PAGE_BYTES: usize = 4096;

/// The least heap the kernel boots with.
const HEAP_BYTES_MIN: u64 = 16 << 20;

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Kernel virtual address of a physical address below 4 GiB.
pub fn physical_to_virtual(physical: u64) -> u64 {
    assert!(
        physical < DIRECT_MAP_BYTES,
        "physical address {physical:#x} beyond the direct map"
    );
    physical + DIRECT_MAP_OFFSET
}

/// Physical address of a kernel virtual address (direct map or kernel image).
pub fn virtual_to_physical(virtual_address: u64) -> u64 {
    if virtual_address >= KERNEL_OFFSET {
        virtual_address - KERNEL_OFFSET
    } else {
        assert!(
            (DIRECT_MAP_OFFSET..DIRECT_MAP_OFFSET + DIRECT_MAP_BYTES).contains(&virtual_address),
            "{virtual_address:#x} is not a kernel address"
        );
        virtual_address - DIRECT_MAP_OFFSET
    }
}

/// Sets up the heap in the largest stretch of usable RAM that overlaps no `reserved` range
/// (kernel image, boot information, modules) and is mapped by the direct map: object pages
/// come from the heap, so its size is what the object cache can hold.
pub fn init_heap(usable: &[(u64, u64)], reserved: &[(u64, u64)]) {
    let page = PAGE_BYTES as u64;
    let mut best = (0, 0);
    // No allocation here: the heap does not exist yet. Each stretch starts at a usable
    // range's start or a reservation's end and runs to the next reservation or the end.
    for &(start, end) in usable {
        let (start, end) = (start.max(1 << 20), end.min(DIRECT_MAP_BYTES));
        let starts = core::iter::once(start).chain(reserved.iter().map(|&(_, reserved_end)| reserved_end));
        for from in starts.filter(|&from| from >= start && from < end) {
            let inside = reserved.iter().any(|&(reserved_start, reserved_end)| reserved_start <= from && from < reserved_end);
            if inside {
                continue;
            }
            let to = reserved
                .iter()
                .map(|&(reserved_start, _)| reserved_start)
                .filter(|&reserved_start| reserved_start > from)
                .fold(end, u64::min);
            let (piece_start, piece_end) = (from.next_multiple_of(page), to & !(page - 1));
            if piece_end > piece_start && piece_end - piece_start > best.1 - best.0 {
                best = (piece_start, piece_end);
            }
        }
    }
    assert!(best.1 - best.0 >= HEAP_BYTES_MIN, "no RAM range can hold the kernel heap");
    // SAFETY: the range is usable RAM per the firmware's memory map, overlaps no
    // reservation, is mapped by the direct map, and is handed out only here.
    unsafe {
        HEAP.lock().init(physical_to_virtual(best.0) as *mut u8, (best.1 - best.0) as usize);
    }
}

/// Bytes of the heap not allocated: what decides when object pages are evicted.
pub fn heap_free_bytes() -> usize {
    HEAP.lock().free()
}

pub fn heap_bytes() -> usize {
    HEAP.lock().size()
}

/// A zeroed, page-aligned block of `pages` pages from the heap; never freed by callers that
/// hand it to devices or page tables for the life of the system.
pub fn allocate_pages(pages: usize) -> *mut u8 {
    let layout = core::alloc::Layout::from_size_align(pages * PAGE_BYTES, PAGE_BYTES).unwrap();
    // SAFETY: the layout has a non-zero size.
    let block = unsafe { alloc::alloc::alloc_zeroed(layout) };
    assert!(!block.is_null(), "kernel heap exhausted");
    block
}

/// Returns a block from [`allocate_pages`] to the heap.
///
/// # Safety
///
/// `block` came from `allocate_pages(pages)` with the same `pages`, and nothing (no
/// reference, page table or device) uses it any more.
pub unsafe fn free_pages(block: *mut u8, pages: usize) {
    let layout = core::alloc::Layout::from_size_align(pages * PAGE_BYTES, PAGE_BYTES).unwrap();
    // SAFETY: the caller guarantees `block` was allocated with this layout and is unused.
    unsafe { alloc::alloc::dealloc(block, layout) };
}
