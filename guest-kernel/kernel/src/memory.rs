//! Physical memory as the kernel sees it: the direct map, the kernel heap and page frames.
//!
//! The kernel takes its heap from the first large free RAM region above the kernel and
//! the boot modules. Object pages come from it too until the store manages memory as a
//! cache of the disk.

use linked_list_allocator::LockedHeap;

/// Physical memory 0..4 GiB is mapped here (boot page tables, PML4 slot 256).
pub const DIRECT_MAP_OFFSET: u64 = 0xFFFF_8000_0000_0000;
/// The kernel image is linked here (PML4 slot 511, -2 GiB).
pub const KERNEL_OFFSET: u64 = 0xFFFF_FFFF_8000_0000;
/// How much of physical memory the boot page tables map.
pub const DIRECT_MAP_BYTES: u64 = 4 << 30;
pub const PAGE_BYTES: usize = 4096;

/// The heap's size unless the boot command line says otherwise (`holdfast.heap-mib=N`):
/// object pages come from it, so it bounds how much a system can keep resident.
pub const HEAP_BYTES_DEFAULT: u64 = 32 << 20;

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

/// Sets up a heap of `heap_bytes` in the first usable RAM that overlaps no `reserved` range
/// (kernel image, boot information, modules) and is mapped by the direct map.
pub fn init_heap(usable: &[(u64, u64)], reserved: &[(u64, u64)], heap_bytes: u64) {
    let page = PAGE_BYTES as u64;
    let overlaps = |start: u64| {
        reserved.iter().any(|&(reserved_start, reserved_end)| {
            start < reserved_end && reserved_start < start + heap_bytes
        })
    };
    let start = usable
        .iter()
        .flat_map(|&(start, end)| {
            // Candidate starts: the range's start and the end of each reservation inside it.
            let end = end.min(DIRECT_MAP_BYTES);
            core::iter::once(start)
                .chain(reserved.iter().map(|&(_, reserved_end)| reserved_end))
                .map(move |candidate| candidate.max(start).next_multiple_of(page))
                .filter(move |&candidate| candidate + heap_bytes <= end)
        })
        .find(|&candidate| candidate >= 1 << 20 && !overlaps(candidate))
        .expect("no RAM range can hold the kernel heap");
    // SAFETY: the range is usable RAM per the firmware's memory map, overlaps no
    // reservation, is mapped by the direct map, and is handed out only here.
    unsafe {
        HEAP.lock()
            .init(physical_to_virtual(start) as *mut u8, heap_bytes as usize);
    }
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
