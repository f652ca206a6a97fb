//! The primary's end of the link: the store's replica (every write and flush it makes goes
//! in the stream; a flush returns once the mode is met), and the step that moves the
//! stream, drives a full copy and sends the heartbeat.

use alloc::boxed::Box;
use alloc::vec;
use holdfast_replication::sender::{CopyStep, Sender};
use holdfast_replication::wire::{HEARTBEAT_INTERVAL_MS, Message};
use holdfast_store::format::resilver_record::ResilverRecord;
use holdfast_store::format::zeroed_block;
use holdfast_store::mirror::Replica;
use holdfast_store::{BLOCK_SIZE, Store};
use spin::Mutex;

use super::{ETHERNET_HEADER_BYTES, FRAME_BYTES_MAX, PairOptions, message_of, now_ms, send};
use crate::drivers::{Block, Net};
use crate::println;

/// Blocks read and queued for a full copy per step (256 KiB, as a resilvering step).
const COPY_STEP_BLOCKS: u64 = 64;

struct Primary {
    sender: Sender,
    link: Net,
    frame: Box<[u8; FRAME_BYTES_MAX]>,
    block_count: u64,
    heartbeat_ms: u64,
    /// The store's figures for the heartbeat, as of the last step.
    checkpoint_generation: u64,
    journal_ticket_next: u64,
    /// The stream's sequence of the store's newest flush.
    last_flush: u64,
    /// What the console was last told: the standby in step, the pair degraded.
    said_protected: bool,
    said_degraded: bool,
    said_fenced: bool,
}

static PRIMARY: Mutex<Option<Primary>> = Mutex::new(None);

/// Starts streaming `store` over `link`: from now on every write and flush of the store
/// goes to the standby too. The standby gets a full copy when it says hello.
pub fn install(link: Net, options: &PairOptions, store: &mut Store<Block>) {
    let stream = random_stream();
    let now = now_ms();
    *PRIMARY.lock() = Some(Primary {
        sender: Sender::new(stream, options.term, options.mode, options.lag_bytes_max, now),
        link,
        frame: super::frame_buffer(),
        block_count: store.layout().block_count,
        heartbeat_ms: 0,
        checkpoint_generation: store.checkpoint_generation(),
        journal_ticket_next: store.journal_ticket_next(),
        last_flush: 0,
        said_protected: false,
        said_degraded: false,
        said_fenced: false,
    });
    store.set_replica(Box::new(StoreReplica));
    println!(
        "holdfast: pair: primary in term {}, {} replication (stream {stream:#018x}); the standby gets a full copy when it answers",
        options.term,
        options.mode.name()
    );
}

/// A stream id no earlier boot used (RDRAND; the TSC where there is none), never 0.
fn random_stream() -> u64 {
    let random = x86_64::instructions::random::RdRand::new().and_then(|rdrand| rdrand.get_u64());
    random.unwrap_or_else(crate::arch::read_tsc) | 1
}

struct StoreReplica;

impl Replica for StoreReplica {
    fn write(&mut self, first_block: u64, data: &[u8]) {
        let mut guard = PRIMARY.lock();
        let primary = guard.as_mut().expect("the replica is installed with the primary");
        // Past the retained bound a write waits for the standby's acknowledgements (or is
        // let go, when the standby is not answering and nothing waits for it).
        while !primary.sender.make_room(now_ms()) {
            primary.pump();
        }
        primary.sender.queue_write(first_block, data, now_ms());
        primary.pump();
    }

    fn flush(&mut self) {
        let mut guard = PRIMARY.lock();
        let primary = guard.as_mut().expect("the replica is installed with the primary");
        primary.last_flush = primary.sender.queue_flush(now_ms());
        primary.pump();
    }
}

impl Primary {
    /// Takes what arrived, sends what the window allows, and the heartbeat when due.
    fn pump(&mut self) {
        let block_count = self.block_count;
        loop {
            let now = now_ms();
            let sender = &mut self.sender;
            let taken = self.link.poll(|frame| {
                if let Some(bytes) = message_of(frame)
                    && let Ok(message) = Message::decode(bytes)
                {
                    sender.receive(&message, block_count, now);
                }
            });
            if !matches!(taken, Ok(Some(()))) {
                break;
            }
        }
        let now = now_ms();
        while let Some(length) = self.sender.next_to_send(&mut self.frame[ETHERNET_HEADER_BYTES..], now) {
            if !send(&mut self.link, &mut self.frame, length) {
                break;
            }
        }
        if now >= self.heartbeat_ms + HEARTBEAT_INTERVAL_MS {
            self.heartbeat_ms = now;
            let status = self.sender.status(self.checkpoint_generation, self.journal_ticket_next, now);
            let length = status.encode_heartbeat(self.sender.stream(), &mut self.frame[ETHERNET_HEADER_BYTES..]);
            send(&mut self.link, &mut self.frame, length);
            self.report();
        }
    }

    /// A line whenever the standby comes into step, the pair degrades or this primary
    /// learns it was fenced: never silently.
    fn report(&mut self) {
        if let Some(term) = self.sender.superseded_by()
            && !self.said_fenced
        {
            self.said_fenced = true;
            println!("holdfast: pair: FENCED: a primary serves in term {term}; this one acknowledges no commit from now on");
        }
        let protected = self.sender.is_protected();
        if protected != self.said_protected {
            self.said_protected = protected;
            if protected {
                println!("holdfast: pair: the standby is in step; {} commits wait for it", self.sender.mode().name());
            } else if !self.sender.is_degraded() {
                println!("holdfast: pair: the standby is out of step; it gets a full copy when it answers");
            }
        }
        let degraded = self.sender.is_degraded();
        if degraded != self.said_degraded {
            self.said_degraded = degraded;
            if degraded {
                println!("holdfast: pair: DEGRADED: the supervisor says the standby is gone; commits no longer wait for it");
            }
        }
    }
}

/// Where the stream stands after the store's newest flush, if this VM is a pair's primary:
/// a journal commit that flush made durable here is acknowledged once
/// [`flush_arrived`] says so.
pub fn last_flush() -> Option<u64> {
    PRIMARY.lock().as_ref().map(|primary| primary.last_flush)
}

/// Whether the standby has the flush at `position` as the mode asks (received, durable, or
/// within the lag bound; at once while no standby is in step, or after `Degrade`), after
/// taking what arrived on the link.
pub fn flush_arrived(position: u64) -> bool {
    let mut guard = PRIMARY.lock();
    let Some(primary) = guard.as_mut() else {
        return true;
    };
    primary.pump();
    primary.sender.satisfied(position, now_ms())
}

/// One step of the pair's work from the checkpoint step: the next part of a full copy, the
/// stream moved on, the heartbeat. Returns whether it copied anything.
pub fn step(store: &mut Store<Block>) -> bool {
    let mut guard = PRIMARY.lock();
    let Some(primary) = guard.as_mut() else {
        return false;
    };
    primary.checkpoint_generation = store.checkpoint_generation();
    primary.journal_ticket_next = store.journal_ticket_next();
    let mut copied = false;
    if let Some(step) = primary.sender.copy_step(COPY_STEP_BLOCKS)
        && primary.sender.make_room(now_ms())
    {
        match step {
            CopyStep::Markers => {
                // The standby's superblock slots say "copy under way" until the copy ends:
                // alone, its disks are refused rather than opened half-copied.
                let record = ResilverRecord {
                    geometry: store.geometry(),
                    source_generation: store.checkpoint_generation(),
                };
                let mut data = vec![0u8; 2 * BLOCK_SIZE];
                for slot in 0..2u64 {
                    let mut block = zeroed_block();
                    record.encode(&mut block, slot);
                    data[slot as usize * BLOCK_SIZE..][..BLOCK_SIZE].copy_from_slice(&block[..]);
                }
                primary.sender.queue_copy(0, &data, now_ms());
                println!("holdfast: pair: full copy to the standby: {} blocks", primary.block_count);
            }
            CopyStep::Blocks { first_block, count } => {
                let mut data = vec![0u8; count as usize * BLOCK_SIZE];
                match store.read_device_blocks(first_block, &mut data) {
                    Ok(()) => primary.sender.queue_copy(first_block, &data, now_ms()),
                    Err(error) => println!("holdfast: pair: full copy: reading blocks from {first_block}: {error}; tried again"),
                }
            }
        }
        copied = true;
    }
    primary.pump();
    copied
}

/// The primary's replication figures for the counters reply, if this VM is a pair's
/// primary: lag in bytes and seconds, whether the standby is in step and the pair
/// degraded, the term, and stream messages sent again.
pub fn metrics() -> Option<[(&'static str, f64); 6]> {
    let guard = PRIMARY.lock();
    let primary = guard.as_ref()?;
    let now = now_ms();
    let status = primary.sender.status(primary.checkpoint_generation, primary.journal_ticket_next, now);
    Some([
        ("holdfast_replication_lag_bytes", status.lag_bytes as f64),
        ("holdfast_replication_lag_seconds", status.lag_ms as f64 / 1000.0),
        ("holdfast_replication_standby_in_step", f64::from(u8::from(primary.sender.is_protected()))),
        ("holdfast_replication_degraded", f64::from(u8::from(status.degraded))),
        ("holdfast_replication_term", status.term as f64),
        ("holdfast_replication_resent_messages_total", primary.sender.resent_total() as f64),
    ])
}
