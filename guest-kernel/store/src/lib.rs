//! The Holdfast single-level store (KeyKOS/EROS lineage): where every node and page lives on
//! disk, and how a consistent image of all of them survives any crash.
//!
//! - The **superblock** (two slots, newest valid wins) names the geometry and the start of
//!   the live log.
//! - The **checkpoint log** is circular. A checkpoint writes the snapshot's dirty node pots
//!   (4 nodes per block) and pages in large records, then a commit record; the **journal**
//!   appends whole page commits between checkpoints (group commit) and acknowledges them
//!   only after a flush.
//! - **Migration** then copies the log's live objects to their **home ranges** (found by id
//!   arithmetic, so the store can be much larger than memory) and a superblock write frees
//!   the log.
//! - Every record carries a checksum and a sequence number; data checksums are kept apart
//!   from the data (log headers, home checksum tables), so torn, lost and misdirected writes
//!   are caught. With two **mirrors**, a bad copy is replaced by the good one and repaired.
//!
//! The store is a library generic over [`BlockDevice`] with no threads: the kernel drives
//! checkpoints and migration in steps from its idle loop, and the same code runs in the
//! deterministic simulator `holdfast-store-sim`.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod device;
mod directory;
pub mod error;
pub mod format;
pub mod geometry;
pub mod histogram;
mod home;
pub mod inspect;
pub mod journal;
mod log;
pub mod mirror;
pub mod pace;
pub mod phase;
mod recovery;
mod resilver;
pub mod scrub;
mod store;

pub use device::{BLOCK_SIZE, BlockDevice, DeviceError};
pub use error::{Check, Corruption, LogLoss, Region, StoreError};
pub use format::FORMAT_VERSION;
pub use geometry::{Geometry, Layout, NODE_SIZE, NODES_PER_POT};
pub use histogram::SecondsHistogram;
#[cfg(test)]
mod tests;

pub use inspect::{CheckReport, Finding, Inspection, RecoveryNote, Remedy, StoreCounters};
pub use recovery::Recover;
pub use journal::{JOURNAL_COMMIT_PAGES_MAX, JournalPage, JournalTicket};
pub use mirror::MirrorState;
pub use pace::Pace;
pub use phase::{CheckpointPhase, MigrationProgress, checkpoint_log_blocks_max};
pub use scrub::ScrubCursor;
pub use store::{MirrorStatus, Store, TABLE_CACHE_BYTES_PER_TABLE, TABLE_CACHE_MAX};
