//! Physical memory as the kernel sees it: the direct map, the kernel heap and page frames.
//!
//! The kernel takes its heap from the largest free RAM region; object pages come from it,
//! and the object cache evicts clean pages when it runs low (see `objects.rs`).
//!
//! The region is managed in page frames, one bit each ([`FRAMES`]): object pages, page
//! tables and device buffers are frames, taken and given back in constant time however
//! many there are (a first-fit list walked past every hole left between frames made a
//! 1 GiB system take minutes to build). Everything else (`Box`, `Vec`) comes from a
//! byte allocator, Talc, that takes spans of frames as it needs them.

use bitmap_allocator::{BitAlloc, BitAlloc1M};
use core::alloc::Layout;
use talc::{OomHandler, Span, Talc, Talck};

/// Physical memory 0..4 GiB is mapped here (boot page tables, PML4 slot 256).
pub const DIRECT_MAP_OFFSET: u64 = 0xFFFF_8000_0000_0000;
/// The kernel image is linked here (PML4 slot 511, -2 GiB).
pub const KERNEL_OFFSET: u64 = 0xFFFF_FFFF_8000_0000;
/// How much of physical memory the boot page tables map.
pub const DIRECT_MAP_BYTES: u64 = 4 << 30;
pub const PAGE_BYTES: usize = 4096;

/// The least heap the kernel boots with.
const HEAP_BYTES_MIN: u64 = 16 << 20;

/// The heap region's page frames: bit `i` is frame `start + i * PAGE_BYTES`, set while
/// free. A million frames: 4 GiB, all the direct map holds.
struct Frames {
    bits: BitAlloc1M,
    /// Kernel virtual address of frame 0.
    start: u64,
    count: usize,
    free: usize,
}

impl Frames {
    /// `pages` contiguous free frames, taken; their address.
    fn take(&mut self, pages: usize) -> Option<*mut u8> {
        let index = if pages == 1 {
            self.bits.alloc()?
        } else {
            self.bits.alloc_contiguous(None, pages, 0)?
        };
        self.free -= pages;
        Some((self.start + (index * PAGE_BYTES) as u64) as *mut u8)
    }

    fn give_back(&mut self, block: *mut u8, pages: usize) {
        let offset = (block as u64).wrapping_sub(self.start);
        let index = (offset / PAGE_BYTES as u64) as usize;
        assert!(
            offset.is_multiple_of(PAGE_BYTES as u64) && index + pages <= self.count,
            "{block:p} ({pages} pages) is not the heap's"
        );
        assert!(self.bits.dealloc_contiguous(index, pages), "{block:p} freed twice");
        self.free += pages;
    }
}

static FRAMES: spin::Mutex<Frames> = spin::Mutex::new(Frames {
    bits: BitAlloc1M::DEFAULT,
    start: 0,
    count: 0,
    free: 0,
});

/// The least the byte allocator takes from the frames at once, so that its spans are few
/// and taken early, before frames are scattered by eviction.
pub const BYTE_SPAN_BYTES_MIN: usize = 4 << 20;

/// The byte allocator's out-of-memory handler: a new span of frames.
struct TakeFrames;

impl OomHandler for TakeFrames {
    fn handle_oom(talc: &mut Talc<Self>, layout: Layout) -> Result<(), ()> {
        // Room for the alignment and Talc's own tags besides the allocation itself.
        let needed = (layout.size() + layout.align() + 256).next_multiple_of(PAGE_BYTES);
        // Once object pages fill the heap, the free frames are scattered and a whole
        // minimum span may not be found in one piece where the allocation alone can be.
        let (base, bytes) = {
            let mut frames = FRAMES.lock();
            let span = needed.max(BYTE_SPAN_BYTES_MIN);
            match frames.take(span / PAGE_BYTES) {
                Some(base) => (base, span),
                None => (frames.take(needed / PAGE_BYTES).ok_or(())?, needed),
            }
        };
        // SAFETY: the frames were free and are now the byte allocator's alone: nothing
        // gives them back to `FRAMES`, and they are heap RAM in the direct map.
        unsafe { talc.claim(Span::from_base_size(base, bytes)) }.map(|_| ())
    }
}

#[global_allocator]
static HEAP: Talck<spin::Mutex<()>, TakeFrames> = Talc::new(TakeFrames).lock();

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
    // The range is usable RAM per the firmware's memory map, overlaps no reservation, is
    // mapped by the direct map, and is handed out only through `FRAMES`.
    let count = (((best.1 - best.0) / page) as usize).min(BitAlloc1M::CAP);
    let mut frames = FRAMES.lock();
    frames.start = physical_to_virtual(best.0);
    frames.count = count;
    frames.free = count;
    frames.bits.insert(0..count);
}

/// Bytes of the heap's free frames: what decides when object pages are evicted (the byte
/// allocator's free room inside its spans cannot hold a page, so it does not count).
pub fn heap_free_bytes() -> usize {
    FRAMES.lock().free * PAGE_BYTES
}

pub fn heap_bytes() -> usize {
    FRAMES.lock().count * PAGE_BYTES
}

/// A zeroed, page-aligned block of `pages` contiguous frames from the heap.
pub fn allocate_pages(pages: usize) -> *mut u8 {
    assert!(pages > 0, "a block of no pages");
    let block = FRAMES.lock().take(pages).expect("kernel heap exhausted");
    // SAFETY: the frames were free, so nothing else refers to them, and they lie in the
    // direct map (`init_heap`).
    unsafe { core::ptr::write_bytes(block, 0, pages * PAGE_BYTES) };
    block
}

/// Returns a block from [`allocate_pages`] to the heap.
///
/// # Safety
///
/// `block` came from `allocate_pages(pages)` with the same `pages`, and nothing (no
/// reference, page table or device) uses it any more.
pub unsafe fn free_pages(block: *mut u8, pages: usize) {
    FRAMES.lock().give_back(block, pages);
}
