//! The Holdfast object model (KeyKOS/EROS): pages, nodes and the capabilities that name
//! them, the checks every invocation makes on a capability, and the object cache the kernel
//! keeps them in.
//!
//! Everything a program can see is a page or a node; the kernel's own state is a cache of
//! them (EROS 3.5.4). This crate is `no_std` and has no unsafe code so that the rules here —
//! which capability is void, what a weak fetch yields, what a read-only capability may do —
//! are tested on the host and are the same in the kernel.
//!
//! - [`capability`]: the capability (type, rights, badge, object, version) and its
//!   transformations (restrict, weaken);
//! - [`node`]: a node's 32 slots and the layout of a process's root node;
//! - [`cache`]: objects by id, with the version check that makes revocation work;
//! - [`table`]: the cache's tables, whose lookups the invocation path makes many of;
//! - [`directory`]: the checkpoint's list of processes and next object ids;
//! - [`image`]: a node's image on the store, checked field by field when read back;
//! - [`restart`]: what a restart reads from the checkpoint (directory, root nodes), checked
//!   as ring-3 input.
#![no_std]

extern crate alloc;

pub mod cache;
pub mod capability;
pub mod directory;
pub mod image;
pub mod node;
pub mod restart;
pub mod space;
pub mod table;

pub use cache::{ObjectCache, Translators, Void};
pub use capability::{CapType, Capability, Rights};
pub use node::{NODE_SLOT_COUNT, Node, Slot};

/// An object's identity on the store: stable for the object's whole life and across
/// restarts. Page and node ids are separate spaces, as on the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub u64);

/// How many times an object id has been (re)allocated or rescinded. A capability carries the
/// version it was made with; once the object's version moves on, the capability is void.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version(pub u64);

impl Version {
    #[must_use]
    pub fn next(self) -> Self {
        // Wrapping would bring void capabilities back to life; at one rescind per
        // nanosecond, 2^64 of them take 580 years.
        Self(self.0.wrapping_add(1))
    }
}
