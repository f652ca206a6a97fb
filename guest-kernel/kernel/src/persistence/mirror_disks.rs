//! The store's mirrors as the kernel sees them (DESIGN.md, "Mirroring"): which of its disks
//! the store is opened on, the one-line mirror status at boot and again whenever it changes,
//! the bad copies repaired from the good one, and online resilvering of a blank or stale
//! mirror in bounded steps. The mirroring itself — verified reads, fallback, repair, the
//! copy — is `holdfast_store::mirror`; this module decides which disks go in and says what
//! happens to them.
//!
//! Mirror `i` is the `i`-th disk the store is opened on, in PCI order (the order of
//! `holdfast run --disk`).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use holdfast_store::format::resilver_record::ResilverRecord;
use holdfast_store::format::superblock::Superblock;
use holdfast_store::format::zeroed_block;
use holdfast_store::{BlockDevice, Check, DeviceError, Geometry, MirrorState, MirrorStatus, Store};
use spin::Mutex;

use crate::arch::timer;
use crate::drivers::Block;
use crate::println;

/// Blocks copied to a resilvering mirror per step (256 KiB, the bound of a checkpoint step).
const RESILVER_STEP_BLOCKS: u64 = 64;

/// What a disk holds, judged from its two superblock slots (blocks 0 and 1).
enum Content {
    /// A valid superblock in a slot: a member of the store with this id and geometry.
    Store(Geometry),
    /// The superblock magic and format version, but no valid superblock (torn or damaged
    /// slots): a member of a store that the store resilvers as it does a blank disk.
    DamagedStore,
    /// A resilver record in a slot: a mirror of this store whose copy was cut short. Kept
    /// beside the store (which copies it again); alone, the store refuses it.
    Incomplete(Geometry),
    /// Both blocks all zeros: a blank disk, a replacement.
    Blank,
    /// Anything else — another file system, a test disk, a store of another format.
    Foreign,
    Unreadable(DeviceError),
}

fn content(disk: &mut Block) -> Content {
    let mut slots = [zeroed_block(), zeroed_block()];
    for (slot, block) in slots.iter_mut().enumerate() {
        if let Err(error) = BlockDevice::read(disk, slot as u64, &mut block[..]) {
            return Content::Unreadable(error);
        }
    }
    if let Some(record) =
        slots.iter().enumerate().find_map(|(slot, block)| ResilverRecord::decode(block, slot as u64).ok())
    {
        return Content::Incomplete(record.geometry);
    }
    let decoded: Vec<Result<Superblock, Check>> = slots
        .iter()
        .enumerate()
        .map(|(slot, block)| Superblock::decode(block, slot as u64))
        .collect();
    if let Some(superblock) = decoded.iter().flatten().max_by_key(|superblock| superblock.generation) {
        return Content::Store(superblock.geometry);
    }
    if decoded
        .iter()
        .any(|result| !matches!(result, Err(Check::Magic | Check::FormatVersion)))
    {
        return Content::DamagedStore;
    }
    if slots.iter().all(|block| block.iter().all(|&byte| byte == 0)) {
        return Content::Blank;
    }
    Content::Foreign
}

/// The disks the store is opened on, in order: every disk of the store the first of them
/// holds, a damaged member, and a blank disk when another holds the store (it is resilvered
/// from it). A foreign disk, one holding another store and an unreadable one are refused,
/// each with a line, and nothing is written to them. `Err` says why no disk is used.
pub fn select(disks: Vec<Block>) -> Result<Vec<Block>, String> {
    if disks.is_empty() {
        return Err(String::from("no disk"));
    }
    let disk_count = disks.len();
    let mut judged: Vec<(Block, Content)> = disks
        .into_iter()
        .map(|mut disk| {
            let content = content(&mut disk);
            (disk, content)
        })
        .collect();
    let store = judged.iter().find_map(|(_, content)| match content {
        Content::Store(geometry) => Some(*geometry),
        _ => None,
    });
    let mut kept = Vec::new();
    let mut blank = 0;
    for (index, (disk, content)) in judged.drain(..).enumerate() {
        match content {
            Content::Store(geometry) if Some(geometry) == store => kept.push(disk),
            Content::Store(geometry) => println!(
                "holdfast: store: disk {index} holds another store (id {:#018x}, {} nodes, {} pages); refused, nothing written to it",
                geometry.store_id, geometry.node_count, geometry.page_count
            ),
            Content::DamagedStore => kept.push(disk),
            // Alone, or beside its store: the store copies it again or refuses it, saying why.
            Content::Incomplete(geometry) if store.is_none_or(|store| store == geometry) => kept.push(disk),
            Content::Incomplete(geometry) => println!(
                "holdfast: store: disk {index} is a part-copied mirror of another store (id {:#018x}); refused, nothing written to it",
                geometry.store_id
            ),
            Content::Blank if store.is_some() => kept.push(disk),
            Content::Blank => blank += 1,
            Content::Foreign => println!(
                "holdfast: store: disk {index} is neither blank nor a Holdfast store; refused, nothing written to it"
            ),
            Content::Unreadable(error) => {
                println!("holdfast: store: disk {index}: reading its superblocks failed ({error:?}); not used")
            }
        }
    }
    if !kept.is_empty() {
        return Ok(kept);
    }
    Err(String::from(if disk_count > 1 {
        "no disk holds a Holdfast store (left untouched)"
    } else if blank == 1 {
        "the disk is blank, not a Holdfast store (left untouched)"
    } else {
        "the disk is not a Holdfast store (left untouched)"
    }))
}

/// The mirror status in words, without progress (so that it changes only when a mirror's
/// state does): `mirrored on 2 disks`, `DEGRADED: 1 of 2 mirrors (mirror 1 missing)`.
pub fn describe(status: &MirrorStatus) -> String {
    let expected = status.mirrors_expected.max(status.mirrors.len());
    if !status.degraded {
        return if expected == 1 {
            String::from("on 1 disk, not mirrored")
        } else {
            format!("mirrored on {expected} disks")
        };
    }
    let healthy = status.mirrors.iter().filter(|state| **state == MirrorState::Healthy).count();
    let problems: Vec<String> = (0..expected)
        .filter_map(|index| match status.mirrors.get(index) {
            None => Some(format!("mirror {index} missing")),
            Some(MirrorState::Healthy) => None,
            Some(MirrorState::Resilvering { .. }) => Some(format!("mirror {index} being resilvered")),
            Some(MirrorState::Failed(error)) => Some(format!("mirror {index} failed: {error:?}")),
        })
        .collect();
    format!("DEGRADED: {healthy} of {expected} mirrors ({})", problems.join(", "))
}

/// What has been said about the mirrors.
struct Watch {
    /// The status when it was last put in words (while a mirror is resilvered, its progress
    /// changes at every step).
    last_status: MirrorStatus,
    /// The status in words, as last printed.
    status: String,
    repaired_blocks: u64,
    /// The mirror being resilvered and the tick its copy started.
    resilvering: Option<(usize, u64)>,
    /// Resilvering stopped on an error and is not tried again this run.
    resilver_stopped: bool,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// Prints the mirror status of the store just opened (one line), and starts watching it.
pub fn opened(store: &Store<Block>) {
    let last_status = store.mirror_status();
    let status = describe(&last_status);
    println!("holdfast: store: {status}");
    // A torn tail copied, a split brain's discarded history, a truncation of the log.
    for note in store.recovery_notes() {
        println!("holdfast: store: {note}");
    }
    *WATCH.lock() = Some(Watch {
        last_status,
        status,
        // Repairs made by recovery and the restart are reported at the first step.
        repaired_blocks: 0,
        resilvering: None,
        resilver_stopped: false,
    });
}

/// One step of mirror work, from the checkpoint step: copies up to
/// [`RESILVER_STEP_BLOCKS`] blocks to a mirror being resilvered, and prints when a copy
/// starts and ends, when bad copies were repaired from the good mirror, and the status
/// whenever it changed (a device error dropped a mirror, a copy completed). Returns whether
/// it copied anything. A failed copy stops resilvering, not checkpoints.
pub fn step(store: &mut Store<Block>) -> bool {
    let mut guard = WATCH.lock();
    let Some(watch) = guard.as_mut() else {
        return false;
    };
    let mut copied = false;
    let target = store
        .mirror_status()
        .mirrors
        .iter()
        .position(|state| matches!(state, MirrorState::Resilvering { .. }));
    if let Some(index) = target
        && !watch.resilver_stopped
    {
        if watch.resilvering.is_none() {
            println!(
                "holdfast: store: resilvering mirror {index} online: {} blocks to copy",
                store.layout().block_count
            );
            watch.resilvering = Some((index, timer::ticks()));
        }
        match store.resilver_step(RESILVER_STEP_BLOCKS) {
            Ok(_) => copied = true,
            Err(error) => {
                println!("holdfast: store: resilvering mirror {index} stopped: {error}");
                watch.resilver_stopped = true;
            }
        }
    }
    if let Some((index, started)) = watch.resilvering {
        match store.mirror_status().mirrors.get(index) {
            Some(MirrorState::Healthy) => {
                let milliseconds = (timer::ticks() - started) * 1000 / timer::TIMER_HZ;
                println!(
                    "holdfast: store: mirror {index} resilvered online: {} blocks in {milliseconds} ms",
                    store.layout().block_count
                );
                watch.resilvering = None;
            }
            Some(MirrorState::Resilvering { .. }) if !watch.resilver_stopped => {}
            // Failed, or stopped: the status line says what became of it.
            _ => watch.resilvering = None,
        }
    }
    let repaired = store.mirror_repaired_blocks_total();
    if repaired > watch.repaired_blocks {
        println!(
            "holdfast: store: repaired {} bad block copies from the good mirror ({repaired} since boot)",
            repaired - watch.repaired_blocks
        );
        watch.repaired_blocks = repaired;
    }
    // Put in words only when it changed: this runs at every checkpoint step, and the words
    // and the counters made each time took 50-65 ms of a 1 GiB checkpoint and its migration
    // under TCG.
    let status = store.mirror_status();
    if status != watch.last_status {
        let words = describe(&status);
        if words != watch.status {
            println!("holdfast: store: {words}");
            watch.status = words;
        }
        watch.last_status = status;
    }
    copied
}
