//! The single-level store in the kernel: periodic system-wide checkpoints and the restart
//! from the newest one (EROS 3.5, KeyKOS "checkpoint"). The store itself — its disk format,
//! log, recovery and mirrors — is the portable `holdfast-store` crate; this layer decides
//! what goes into each checkpoint and when. It sits above the process table (whose state it
//! writes into the root nodes) and below the invocation path (whose journal commits and
//! writes to pages it serves).
//!
//! - [`open`]: the store on the boot's disks, handed to the kernel ([`attach`]);
//! - [`restore`]: the restart from the newest checkpoint, objects read back when used;
//! - [`checkpoint`]: when a checkpoint is due and its snapshot, stabilization and commit,
//!   in steps ([`step`]), with the copy on write of pages not yet stored;
//! - [`journal`]: journal commits, written in groups;
//! - [`eviction`]: clean pages and nodes evicted when memory runs short;
//! - [`scrub`]: when the home blocks are scrubbed;
//! - [`mirror_disks`]: which disks are the store's mirrors, their status and resilvering;
//! - [`metrics`]: the `checkpoint status` words and the counters in Prometheus text;
//! - [`failure`]: failed checkpoint work retried, counted and shown, a lost store stopping
//!   the system.

use alloc::collections::BTreeMap;
use holdfast_objects::ObjectId;
use holdfast_objects::directory::DIRECTORY_BYTES;
use holdfast_objects::image::NODE_IMAGE_BYTES;
use holdfast_store::{NODE_SIZE, Store};
use spin::Mutex;

use crate::drivers::Block;
use crate::memory::PAGE_BYTES;
use crate::objects::Objects;

pub mod checkpoint;
pub mod eviction;
pub mod failure;
pub mod journal;
pub mod metrics;
pub mod mirror_disks;
pub mod open;
pub mod restore;
pub mod scrub;

pub use checkpoint::*;
pub use eviction::room_for_process;
pub use failure::inject_failure;
pub use journal::*;
pub use metrics::*;
pub use open::*;
pub use restore::*;

use checkpoint::Stabilization;
use journal::SubmittedCommit;
use metrics::KernelCounters;

const _: () = assert!(NODE_IMAGE_BYTES == NODE_SIZE && DIRECTORY_BYTES == PAGE_BYTES);

/// The checkpoint directory's first page: object ids start at 1. Its other pages have ids
/// of their own, set aside when the directory grows ([`Persistence::directory_pages`]).
const DIRECTORY_PAGE: ObjectId = ObjectId(0);

pub struct Persistence {
    store: Store<Block>,
    interval_ms: u64,
    interval_ticks: u64,
    next_snapshot_tick: u64,
    /// Until when no new checkpoint is begun after a failure ([`Persistence::retry_pending`]).
    retry_tick: u64,
    stabilization: Option<Stabilization>,
    /// The pace of the migration under way, set at its checkpoint's commit or the store's open
    /// ([`checkpoint`]).
    migration_pace: Option<holdfast_store::Pace>,
    /// Each journal commit not yet acknowledged, by ticket: when it was made (TSC, for its
    /// latency) and its pages.
    journal_submitted: BTreeMap<u64, SubmittedCommit>,
    /// The newest ticket that commits each page, while that commit is not acknowledged: the
    /// page may be clean once it is ([`holdfast_objects::ObjectCache::page_journal_durable`]).
    journal_newest_ticket: BTreeMap<ObjectId, u64>,
    /// Journal groups durable here whose flush the pair's standby does not have yet, as
    /// (newest ticket, stream position), oldest first: acknowledged when it has.
    journal_awaiting_standby: alloc::collections::VecDeque<(u64, u64)>,
    kernel_counters: KernelCounters,
    /// The scrub under way: one after every boot, a group of home blocks per step.
    scrub: Option<holdfast_store::ScrubCursor>,
    /// Timer ticks with processes running since the last scrub step.
    ticks_since_scrub: u32,
    /// The directory's pages after page 0, in chain order: set aside once, used again by
    /// every checkpoint, more set aside as the processes grow.
    directory_pages: alloc::vec::Vec<ObjectId>,
    /// Checkpoints failed since the last commit: nothing since that commit is persisted
    /// (but the journal's commits) while this is not zero. `checkpoint status` says it.
    failures_since_commit: u64,
    /// Called with the newest durable journal ticket after a group is written: the
    /// invocation path wakes the committers waiting for it (registered by [`attach`]).
    on_journal_durable: fn(&mut Objects, u64),
}

static PERSISTENCE: Mutex<Option<Persistence>> = Mutex::new(None);

/// The store, unless there is none: what the checkpoint and journal capabilities act on.
fn with_store<T>(with: impl FnOnce(&mut Persistence) -> T) -> Option<T> {
    PERSISTENCE.lock().as_mut().map(with)
}
