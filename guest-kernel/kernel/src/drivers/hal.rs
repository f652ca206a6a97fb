//! How the virtio drivers get DMA memory and reach device memory: the [`Hal`] of the
//! `virtio-drivers` crate for this kernel.
//!
//! The guest has no IOMMU, so a device sees guest-physical addresses. All kernel memory is
//! linearly mapped (the heap through the direct map, the kernel image at -2 GiB), so any
//! kernel buffer is physically contiguous and `share` is a mere address translation: no
//! bounce buffers. Virtqueues come from zeroed, page-aligned heap pages.

use core::ptr::NonNull;
use virtio_drivers::{BufferDirection, Hal, PhysAddr};

use crate::memory;

pub struct KernelHal;

// SAFETY: `dma_alloc` returns fresh, zeroed, page-aligned heap pages that alias nothing
// until `dma_dealloc` returns them; `mmio_phys_to_virt` returns the direct-map address of
// device memory, which no Rust reference covers.
unsafe impl Hal for KernelHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let block = memory::allocate_pages(pages);
        let block = NonNull::new(block).expect("allocate_pages never returns null");
        (memory::virtual_to_physical(block.as_ptr() as u64), block)
    }

    unsafe fn dma_dealloc(_physical: PhysAddr, block: NonNull<u8>, pages: usize) -> i32 {
        // SAFETY: the caller guarantees that `block` and `pages` are what `dma_alloc`
        // returned and were given, and that the device no longer uses the pages.
        unsafe { memory::free_pages(block.as_ptr(), pages) };
        0
    }

    unsafe fn mmio_phys_to_virt(physical: PhysAddr, size: usize) -> NonNull<u8> {
        // `pci::open` refuses devices with BARs above the direct map, so this holds.
        assert!(
            physical + size as u64 <= memory::DIRECT_MAP_BYTES,
            "device memory {physical:#x}+{size:#x} is beyond the direct map"
        );
        NonNull::new(memory::physical_to_virtual(physical) as *mut u8)
            .expect("the direct map does not contain address 0")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        let start = buffer.as_ptr() as *mut u8 as u64;
        let physical = memory::virtual_to_physical(start);
        // Both ends must be in the same linear mapping for the buffer to be contiguous.
        let last = start + buffer.len().max(1) as u64 - 1;
        assert_eq!(
            memory::virtual_to_physical(last) - physical,
            last - start,
            "DMA buffer {start:#x} is not in one linear mapping"
        );
        physical
    }

    unsafe fn unshare(_physical: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {
        // Nothing to undo: `share` only translated the address.
    }
}
