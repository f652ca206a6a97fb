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
    let space = objects.cache.node(root).map_err(|_| BadAddress)?.get(process_root::SPACE);
    let pages = pages_of(&objects.cache, space, (address, length), (for_writing, true))?;
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

/// The pages under `[address, address + length)` of `space` and how many bytes of the range
/// each holds, or `BadAddress` if a part is not mapped (writable, for a write). A process's
/// space is read only in the user half; any other space wherever it holds pages.
fn pages_of(
    cache: &ObjectCache<Frame>,
    space: Capability,
    (address, length): (u64, u64),
    (for_writing, process_space): (bool, bool),
) -> Result<Vec<(Capability, usize)>, BadAddress> {
    let end = address.checked_add(length).ok_or(BadAddress)?;
    if process_space && length > 0 && (address < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END) {
        return Err(BadAddress);
    }
    // Resolve every page first, so that a write fails before changing anything. Through the
    // direct map: no page table of any process gets a translation (no translators).
    let mut pages = Vec::new();
    let mut at = address;
    while at < end {
        let Walk::Page { page, writable, .. } = walk(cache, space, at, for_writing, 0) else {
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

/// Why a journal `write` wrote nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardedWriteError {
    /// A piece or the guard is not mapped (writable, for a piece) in the space, the guard is
    /// not 8-byte aligned, or the pieces touch more pages than one commit holds.
    BadAddress,
    /// The guard word does not hold the value expected.
    Changed,
    /// No store, or the journal's queue has no room for the commit.
    Unavailable,
}

/// The journal's `write` (services.rs): if the word at `guard.0` of `space` holds `guard.1`,
/// writes each `(address, bytes)` piece into `space` and returns the page capabilities
/// written, once each, for the commit; otherwise writes nothing. Runs under the object cache
/// lock, which no checkpoint step can take meanwhile: the check, the writes and the commit
/// that follows are one step as far as any checkpoint can see.
pub fn guarded_write(
    objects: &mut Objects,
    space: Capability,
    guard: (u64, u64),
    pieces: &[(u64, &[u8])],
) -> Result<Vec<Capability>, GuardedWriteError> {
    let (guard_address, guard_expected) = guard;
    if guard_address % 8 != 0 {
        return Err(GuardedWriteError::BadAddress);
    }
    let bad = |_| GuardedWriteError::BadAddress;
    let guard_page = pages_of(&objects.cache, space, (guard_address, 8), (false, false)).map_err(bad)?[0].0;
    let mut pieces_pages = Vec::with_capacity(pieces.len());
    let mut pages: Vec<Capability> = Vec::new();
    for &(address, bytes) in pieces {
        let found = pages_of(&objects.cache, space, (address, bytes.len() as u64), (true, false)).map_err(bad)?;
        for (page, _) in &found {
            if !pages.iter().any(|known| known.object() == page.object()) {
                pages.push(*page);
            }
        }
        pieces_pages.push(found);
    }
    if pages.len() > abi::JOURNAL_WRITE_PAGES_MAX {
        return Err(GuardedWriteError::BadAddress);
    }
    let mut ids: Vec<_> = pages.iter().map(Capability::object).collect();
    ids.push(guard_page.object());
    objects.ensure_resident(&ids, true).map_err(|_| GuardedWriteError::BadAddress)?;

    let cache = &objects.cache;
    let guard_frame = cache.page(&guard_page).map_err(|_| GuardedWriteError::BadAddress)?;
    let guard_offset = (guard_address % PAGE_BYTES as u64) as usize;
    let guard_bytes: [u8; 8] = guard_frame.bytes()[guard_offset..guard_offset + 8].try_into().expect("8 bytes");
    if u64::from_le_bytes(guard_bytes) != guard_expected {
        return Err(GuardedWriteError::Changed);
    }
    // Asked before anything is written: under the object cache lock nothing can queue a
    // commit between this and the commit that follows.
    if !crate::persistence::journal_would_take(pages.len()) {
        return Err(GuardedWriteError::Unavailable);
    }
    // The commit that follows copies these pages whole: once it is durable, they need not
    // be in the next checkpoint.
    for page in &pages {
        crate::persistence::before_journaled_page_write(cache, page.object());
    }
    for (&(address, bytes), found) in pieces.iter().zip(&pieces_pages) {
        let mut at = address;
        let mut rest = bytes;
        for &(page, count) in found {
            let frame = cache.page(&page).map_err(|_| GuardedWriteError::BadAddress)?.physical();
            let offset = (at % PAGE_BYTES as u64) as usize;
            let (piece, after) = rest.split_at(count);
            let base = memory::physical_to_virtual(frame.start_address().as_u64()) as *mut u8;
            // SAFETY: `base` is a resident object page's frame in the direct map, writable
            // through `space` (`pages_of` checked), and `offset + count <= 4096`; the kernel
            // holds no other reference into it while it holds the object cache.
            unsafe { core::ptr::copy_nonoverlapping(piece.as_ptr(), base.add(offset), count) };
            at += count as u64;
            rest = after;
        }
    }
    Ok(pages)
}
