//! The standby: before its store is opened, the boot runs this loop, which takes the
//! primary's stream and makes the same writes and flushes to every disk, acknowledges
//! what it received and what is durable, and heartbeats. The supervisor's promote ends the
//! loop — only once the disks hold a whole copy — and the boot goes on to open the store
//! and restart from it as the primary.

use alloc::sync::Arc;
use alloc::vec::Vec;
use holdfast_replication::receiver::{Action, Receiver};
use holdfast_replication::wire::{HEARTBEAT_INTERVAL_MS, Message, StandbyState};
use holdfast_store::{BLOCK_SIZE, BlockDevice};

use super::{ETHERNET_HEADER_BYTES, PairOptions, message_of, now_ms, send};
use crate::drivers::{Block, Net};
use crate::println;

static ZERO_BLOCK: [u8; BLOCK_SIZE] = [0; BLOCK_SIZE];

/// Consecutive blocks gathered into one disk write at most.
const RUN_BLOCKS_MAX: usize = 64;

struct Disks {
    disks: Vec<Block>,
    /// A run of consecutive blocks not yet written, from `run_first`.
    run: Vec<u8>,
    run_first: u64,
    failed: bool,
}

impl Disks {
    /// Gathers whole blocks from `first_block` into the run, which never passes
    /// [`RUN_BLOCKS_MAX`] (a message of several blocks may end a run and begin the next).
    fn write(&mut self, first_block: u64, data: &[u8]) {
        for (index, block) in data.chunks_exact(BLOCK_SIZE).enumerate() {
            let block_number = first_block + index as u64;
            let run_blocks = (self.run.len() / BLOCK_SIZE) as u64;
            if !self.run.is_empty() && (block_number != self.run_first + run_blocks || run_blocks as usize >= RUN_BLOCKS_MAX) {
                self.write_run();
            }
            if self.run.is_empty() {
                self.run_first = block_number;
            }
            self.run.extend_from_slice(block);
        }
    }

    /// Hands the gathered run to every disk at once: they write it side by side, and the
    /// next flush waits for it.
    fn write_run(&mut self) {
        if self.run.is_empty() {
            return;
        }
        let first = self.run_first;
        let run = Arc::new(core::mem::replace(&mut self.run, Vec::with_capacity(RUN_BLOCKS_MAX * BLOCK_SIZE)));
        self.each_disk("writing", |disk| BlockDevice::write_owned(disk, first, Arc::clone(&run)));
    }

    /// Every disk's flush under way before the first is waited for, as the primary's
    /// mirrors flush.
    fn flush(&mut self) {
        self.write_run();
        self.each_disk("flushing", BlockDevice::flush_submit);
        self.each_disk("flushing", BlockDevice::flush);
    }

    /// Does `request` on every disk. A disk that fails is dropped while another carries on
    /// (it no longer holds the copy; the store resilvers it once it is a mirror again); the
    /// last one failing leaves this standby with no whole copy, and it says so.
    fn each_disk(&mut self, doing: &str, mut request: impl FnMut(&mut Block) -> Result<(), holdfast_store::DeviceError>) {
        let mut index = 0;
        while index < self.disks.len() {
            match request(&mut self.disks[index]) {
                Ok(()) => index += 1,
                Err(error) if self.disks.len() > 1 => {
                    println!("holdfast: pair: standby disk {index}: {doing} failed ({error:?}); going on with the other");
                    self.disks.remove(index);
                }
                Err(error) => {
                    if !self.failed {
                        println!("holdfast: pair: standby disk {index}: {doing} failed ({error:?}); this standby holds no whole copy now");
                    }
                    self.failed = true;
                    index += 1;
                }
            }
        }
    }

    fn hold(&self, block_count: u64) -> bool {
        self.disks.iter().all(|disk| disk.block_count() >= block_count)
    }
}

/// What the loop sends after taking a message.
enum Reply {
    Nothing,
    Hello,
    Ack,
    /// Make the stream durable to `sequence`, then acknowledge it; with `ack_on_receipt`,
    /// acknowledge it as received as soon as the disks' writes are under way, too.
    Flush { sequence: u64, ack_on_receipt: bool },
    Promote(u64),
}

/// Runs the standby until the supervisor promotes it; returns the disks, which then hold
/// a whole copy of the primary's store, the link, and the new term.
pub fn run(disks: Vec<Block>, mut link: Net, options: &PairOptions) -> (Vec<Block>, Net, u64) {
    println!(
        "holdfast: pair: standby in term {} on {} disks: waiting for the primary's stream",
        options.term,
        disks.len()
    );
    let mut receiver = Receiver::new();
    receiver.set_term(options.term);
    let mut disks = Disks {
        disks,
        run: Vec::with_capacity(RUN_BLOCKS_MAX * BLOCK_SIZE),
        run_first: 0,
        failed: false,
    };
    let mut frame = super::frame_buffer();
    let length = receiver.hello(&mut frame[ETHERNET_HEADER_BYTES..]);
    send(&mut link, &mut frame, length);
    let mut heartbeat_ms = 0;
    loop {
        let now = now_ms();
        let taken = link.poll(|bytes| take(bytes, &mut receiver, &mut disks, now));
        let took_one = matches!(taken, Ok(Some(_)));
        let reply = taken.ok().flatten().unwrap_or(Reply::Nothing);
        match reply {
            Reply::Nothing => {}
            Reply::Hello => {
                let length = receiver.hello(&mut frame[ETHERNET_HEADER_BYTES..]);
                send(&mut link, &mut frame, length);
            }
            Reply::Ack => {
                let length = receiver.ack(&mut frame[ETHERNET_HEADER_BYTES..]);
                send(&mut link, &mut frame, length);
            }
            Reply::Flush { sequence, ack_on_receipt } => {
                if ack_on_receipt {
                    // The primary waits for receipt only: told while the disks work.
                    disks.write_run();
                    let length = receiver.ack(&mut frame[ETHERNET_HEADER_BYTES..]);
                    send(&mut link, &mut frame, length);
                }
                disks.flush();
                receiver.durable_to(sequence);
                let length = receiver.ack(&mut frame[ETHERNET_HEADER_BYTES..]);
                send(&mut link, &mut frame, length);
            }
            Reply::Promote(term) => {
                if receiver.state() == StandbyState::Consistent && !disks.failed {
                    disks.flush();
                    println!("holdfast: pair: promoted to primary in term {term}: starting from the copied store");
                    return (disks.disks, link, term);
                }
                println!(
                    "holdfast: pair: promotion to term {term} refused: this standby holds no whole copy ({:?})",
                    receiver.state()
                );
            }
        }
        if receiver.ack_due() {
            let length = receiver.ack(&mut frame[ETHERNET_HEADER_BYTES..]);
            send(&mut link, &mut frame, length);
        }
        if now >= heartbeat_ms + HEARTBEAT_INTERVAL_MS {
            heartbeat_ms = now;
            let mut status = receiver.status();
            if disks.failed {
                // No disk holds the copy: the supervisor must not count on this standby.
                status.standby_state = StandbyState::Empty;
            }
            let length = status.encode_heartbeat(receiver.stream(), &mut frame[ETHERNET_HEADER_BYTES..]);
            send(&mut link, &mut frame, length);
        }
        if !took_one {
            // Nothing waiting: halt until a frame (its interrupt) or the next tick. Checked
            // with interrupts off, so that a frame arriving in between still wakes the halt.
            x86_64::instructions::interrupts::disable();
            if link.has_frame() {
                x86_64::instructions::interrupts::enable();
            } else {
                x86_64::instructions::interrupts::enable_and_hlt();
            }
        }
    }
}

/// Takes one received frame: the write, flush or copy it asks for is done here.
fn take(bytes: &[u8], receiver: &mut Receiver, disks: &mut Disks, now: u64) -> Reply {
    let Some(message) = message_of(bytes).and_then(|bytes| Message::decode(bytes).ok()) else {
        return Reply::Nothing;
    };
    match receiver.receive(&message, now) {
        Action::Nothing => Reply::Nothing,
        Action::Write { first_block, data } => {
            disks.write(first_block, data);
            Reply::Nothing
        }
        Action::Zeros { first_block, blocks } => {
            for block in first_block..first_block + blocks {
                disks.write(block, &ZERO_BLOCK);
            }
            Reply::Nothing
        }
        Action::Flush { sequence, ack_on_receipt } => Reply::Flush { sequence, ack_on_receipt },
        Action::CopyBegin { block_count } => {
            // What the last stream left unwritten no longer matters: the copy rewrites all.
            disks.run.clear();
            if !disks.hold(block_count) {
                println!("holdfast: pair: the primary's store has {block_count} blocks, more than this standby's disks hold; copy refused");
                receiver.copy_refused();
                return Reply::Nothing;
            }
            disks.failed = false;
            println!("holdfast: pair: full copy from the primary begins: {block_count} blocks");
            Reply::Ack
        }
        Action::CopyEnd { sequence } => {
            disks.flush();
            receiver.durable_to(sequence);
            if !disks.failed {
                println!("holdfast: pair: full copy complete: this standby can take over");
            }
            Reply::Ack
        }
        Action::Promote { term } => Reply::Promote(term),
        Action::Hello => Reply::Hello,
    }
}
