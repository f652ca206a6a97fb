//! Reading and writing a process's memory from the kernel, through its space tree: the
//! page tables are only a cache and may not hold the page yet, and a capability on the path
//! may make it read-only.

use alloc::vec::Vec;
use holdfast_abi as abi;
use holdfast_objects::node::process_root;
use holdfast_objects::space::{Walk, walk};
use holdfast_objects::{Capability, ObjectCache};

use crate::memory::{self, PAGE_BYTES};
use crate::objects::Frame;

/// The range is not all mapped (writable, for a write) in the process's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadAddress;

/// Calls `with` on each piece of `[address, address + length)` of `root`'s space as a
/// kernel pointer and length, in order, or fails without calling it for an unmapped part.
fn for_each_piece(
    cache: &ObjectCache<Frame>,
    root: &Capability,
    (address, length): (u64, u64),
    for_writing: bool,
    mut with: impl FnMut(*mut u8, usize),
) -> Result<(), BadAddress> {
    let end = address.checked_add(length).ok_or(BadAddress)?;
    if length > 0 && (address < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END) {
        return Err(BadAddress);
    }
    let space = cache
        .node(root)
        .map_err(|_| BadAddress)?
        .get(process_root::SPACE);
    // Resolve every page first, so that a write fails before changing anything.
    let mut pieces = Vec::new();
    let mut at = address;
    while at < end {
        let Walk::Page { page, writable } = walk(cache, space, at) else {
            return Err(BadAddress);
        };
        if for_writing && !writable {
            return Err(BadAddress);
        }
        if for_writing {
            crate::checkpoint::before_page_write(cache, page.object());
        }
        let frame = cache.page(&page).map_err(|_| BadAddress)?.physical();
        let offset = (at % PAGE_BYTES as u64) as usize;
        let count = (PAGE_BYTES - offset).min((end - at) as usize);
        let base = memory::physical_to_virtual(frame.start_address().as_u64()) as *mut u8;
        // SAFETY: `base` is an object page's frame in the direct map, 4 KiB long, and
        // `offset < 4096`.
        pieces.push((unsafe { base.add(offset) }, count));
        at += count as u64;
    }
    for (pointer, count) in pieces {
        with(pointer, count);
    }
    Ok(())
}

/// A copy of `[address, address + length)` of `root`'s space.
pub fn read(
    cache: &ObjectCache<Frame>,
    root: &Capability,
    address: u64,
    length: u64,
) -> Result<Vec<u8>, BadAddress> {
    let mut bytes = Vec::with_capacity(length as usize);
    for_each_piece(cache, root, (address, length), false, |pointer, count| {
        // SAFETY: `for_each_piece` hands out ranges within object pages in the direct map.
        bytes.extend_from_slice(unsafe { core::slice::from_raw_parts(pointer, count) });
    })?;
    Ok(bytes)
}

/// Writes `bytes` at `address` of `root`'s space; nothing is written unless all of it can be.
pub fn write(
    cache: &ObjectCache<Frame>,
    root: &Capability,
    address: u64,
    bytes: &[u8],
) -> Result<(), BadAddress> {
    let mut rest = bytes;
    for_each_piece(
        cache,
        root,
        (address, bytes.len() as u64),
        true,
        |pointer, count| {
            let (piece, after) = rest.split_at(count);
            // SAFETY: `for_each_piece` hands out ranges within object pages in the direct map,
            // writable by this process; the kernel holds no reference into them.
            unsafe { core::ptr::copy_nonoverlapping(piece.as_ptr(), pointer, count) };
            rest = after;
        },
    )
}
