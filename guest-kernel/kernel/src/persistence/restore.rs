//! The restart: the process table and the ids of the newest checkpoint's objects come back
//! at once; each node, page version and page is read from the store when first used.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use holdfast_objects::cache::StoredNode;
use holdfast_objects::directory::{DirectoryProcess, DirectoryReader};
use holdfast_objects::restart::{self, StoreBounds};
use holdfast_objects::{Node, ObjectId, Version};

use crate::memory::PAGE_BYTES;
use crate::objects::OBJECTS;
use crate::{println, process};
use super::{DIRECTORY_PAGE, PERSISTENCE, with_store};

/// Rebuilds the system of the newest checkpoint: the ids of its nodes and pages (each node
/// loaded when used, each page's version read when the page is first named and its bytes
/// when used), and the process table, whose root nodes are loaded now. Nothing here reads
/// per object, so that a restart takes the same time whatever the store holds.
pub fn restore() -> Result<usize, String> {
    let failed = |what: &str, error: &dyn core::fmt::Display| alloc::format!("{what}: {error}");
    let mut guard = PERSISTENCE.lock();
    let store = &mut guard.as_mut().expect("attached first").store;
    let mut block = Box::new([0u8; PAGE_BYTES]);
    store.read_page(DIRECTORY_PAGE, &mut block).map_err(|error| failed("reading the checkpoint directory", &error))?;
    let mut reader = DirectoryReader::new(&block, store.geometry().page_count)
        .map_err(|error| failed("checkpoint directory", &error))?;
    while let Some(page) = reader.next_page() {
        store.read_page(page, &mut block).map_err(|error| failed("reading the checkpoint directory", &error))?;
        reader.add(&block).map_err(|error| failed("checkpoint directory", &error))?;
    }
    let (directory, directory_pages) = reader.finish().map_err(|error| failed("checkpoint directory", &error))?;
    // Its next ids size the object tables: checked against the store first, as ring-3 input.
    let geometry = store.geometry();
    let bounds = StoreBounds { node_count: geometry.node_count, page_count: geometry.page_count };
    restart::check_directory(&directory, bounds).map_err(|error| error.to_string())?;
    guard.as_mut().expect("attached first").directory_pages = directory_pages;
    let mut objects = OBJECTS.lock();
    objects.cache.know_stored_nodes(directory.next_node_id);
    objects.cache.know_stored_pages(directory.next_page_id);
    objects.set_next_ids((directory.next_node_id, directory.next_page_id));
    drop(guard);
    let processes: Vec<(ObjectId, &'static str)> = directory
        .processes
        .into_iter()
        .map(|DirectoryProcess { root, name }| (root, &*String::leak(name)))
        .collect();
    process::restore(&objects, &processes)?;
    Ok(processes.len())
}

/// The cache's node loader: node `id`'s newest committed version and slots, read from the
/// store. A node that cannot be read or decoded is reported and left absent, so that its
/// capabilities act as void and its bad data is never used.
///
/// Nodes are loaded wherever a lookup finds one absent, which must never be while the
/// store is held: what runs under it (the snapshot, journal and eviction) touches only
/// process root nodes and dirty nodes, which are never evicted.
pub fn load_node(id: ObjectId) -> Option<StoredNode> {
    let mut guard = PERSISTENCE.try_lock().expect("node loaded while the store is held");
    let persistence = guard.as_mut()?;
    let loaded = persistence.store.read_node(id).map_err(|error| error.to_string()).and_then(|(version, image)| {
        let (node, resume_version) = Node::decode(&image).map_err(|error| error.to_string())?;
        Ok(StoredNode { version, resume_version, node })
    });
    match loaded {
        Ok(stored) => {
            persistence.kernel_counters.loaded_nodes_total += 1;
            Some(stored)
        }
        Err(error) => {
            println!("holdfast: node {}: {error}; its capabilities act as void", id.0);
            None
        }
    }
}

/// The cache's page-version loader: page `id`'s newest committed version, from the store's
/// log directory or checksum table. A version that cannot be read is reported; the page's
/// capabilities then act as void. Like [`load_node`], never called with the store held.
pub fn load_page_version(id: ObjectId) -> Option<Version> {
    let mut guard = PERSISTENCE.try_lock().expect("page version read while the store is held");
    match guard.as_mut()?.store.page_version(id) {
        Ok(version) => Some(version),
        Err(error) => {
            println!("holdfast: page {}: {error}; its capabilities act as void", id.0);
            None
        }
    }
}

/// Reads page `id`'s newest committed contents from the store into `bytes`; returns its
/// version.
pub fn read_page(id: ObjectId, bytes: &mut [u8; PAGE_BYTES]) -> Result<Version, String> {
    let result = with_store(|persistence| {
        let started = crate::arch::read_tsc();
        let read = persistence.store.read_page(id, bytes);
        if read.is_ok() {
            // Pages come from the disk on demand: after a restart (or a promotion) the
            // first work of every process waits on these reads.
            let counters = &mut persistence.kernel_counters;
            counters.loaded_pages_total += 1;
            counters.page_load_seconds_total +=
                crate::arch::timer::tsc_to_nanoseconds(crate::arch::read_tsc() - started) as f64 / 1e9;
        }
        read
    });
    match result {
        None => Err("no store".to_string()),
        Some(Err(error)) => Err(alloc::format!("page {}: {error}", id.0)),
        Some(Ok(version)) => Ok(version),
    }
}
