//! Reading and writing a process's memory from the kernel, through its space tree: the
//! page tables are only a cache and may not hold the page yet, and a capability on the path
//! may make it read-only.

use alloc::vec::Vec;
use holdfast_abi as abi;
use holdfast_objects::node::process_root;
use holdfast_objects::space::{Walk, walk};
use holdfast_objects::{Capability, ObjectCache};

use crate::memory::{self, PAGE_BYTES};
use crate::objects::{Frame, Objects};

/// The range is not all mapped (writable, for a write) in the process's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadAddress;

/// Calls `with` on each piece of `[address, address + length)` of `root`'s space as a
/// kernel pointer and length, in order, or fails without calling it for an unmapped part.
/// Pages only on the store are loaded first (evicting others only with `make_room`).
fn for_each_piece(
    objects: &mut Objects,
    root: &Capability,
    (address, length): (u64, u64),
    for_writing: bool,
    make_room: bool,
    mut with: impl FnMut(*mut u8, usize),
) -> Result<(), BadAddress> {
    let pages = pages_of(&objects.cache, root, (address, length), for_writing)?;
    let ids: Vec<_> = pages.iter().map(|(page, _)| page.object()).collect();
    objects.ensure_resident(&ids, make_room).map_err(|_| BadAddress)?;
    let cache = &objects.cache;
    let mut pieces = Vec::with_capacity(pages.len());
    let mut at = address;
    for (page, count) in pages {
        if for_writing {
            crate::persistence::before_page_write(cache, page.object());
        }
        let frame = cache.page(&page).map_err(|_| BadAddress)?.physical();
        let offset = (at % PAGE_BYTES as u64) as usize;
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

/// The pages under `[address, address + length)` of `root`'s space and how many bytes of
/// the range each holds, or `BadAddress` if a part is not mapped (writable, for a write).
fn pages_of(
    cache: &ObjectCache<Frame>,
    root: &Capability,
    (address, length): (u64, u64),
    for_writing: bool,
) -> Result<Vec<(Capability, usize)>, BadAddress> {
    let end = address.checked_add(length).ok_or(BadAddress)?;
    if length > 0 && (address < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END) {
        return Err(BadAddress);
    }
    let space = cache
        .node(root)
        .map_err(|_| BadAddress)?
        .get(process_root::SPACE);
    // Resolve every page first, so that a write fails before changing anything.
    let mut pages = Vec::new();
    let mut at = address;
    while at < end {
        let Walk::Page { page, writable } = walk(cache, space, at) else {
            return Err(BadAddress);
        };
        if for_writing && !writable {
            return Err(BadAddress);
        }
        let offset = (at % PAGE_BYTES as u64) as usize;
        let count = (PAGE_BYTES - offset).min((end - at) as usize);
        pages.push((page, count));
        at += count as u64;
    }
    Ok(pages)
}

/// A copy of `[address, address + length)` of `root`'s space.
pub fn read(
    objects: &mut Objects,
    root: &Capability,
    address: u64,
    length: u64,
) -> Result<Vec<u8>, BadAddress> {
    let mut bytes = Vec::with_capacity(length as usize);
    for_each_piece(objects, root, (address, length), false, true, |pointer, count| {
        // SAFETY: `for_each_piece` hands out ranges within object pages in the direct map.
        bytes.extend_from_slice(unsafe { core::slice::from_raw_parts(pointer, count) });
    })?;
    Ok(bytes)
}

/// Writes `bytes` at `address` of `root`'s space; nothing is written unless all of it can be.
/// It runs while the scheduler is held (delivering a message), so it loads pages without
/// evicting others (see [`crate::objects::Objects::ensure_resident`]).
pub fn write(
    objects: &mut Objects,
    root: &Capability,
    address: u64,
    bytes: &[u8],
) -> Result<(), BadAddress> {
    let mut rest = bytes;
    for_each_piece(
        objects,
        root,
        (address, bytes.len() as u64),
        true,
        false,
        |pointer, count| {
            let (piece, after) = rest.split_at(count);
            // SAFETY: `for_each_piece` hands out ranges within object pages in the direct map,
            // writable by this process; the kernel holds no reference into them.
            unsafe { core::ptr::copy_nonoverlapping(piece.as_ptr(), pointer, count) };
            rest = after;
        },
    )
}
