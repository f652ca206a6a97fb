//! The two ends joined through a link in memory that can drop messages: whatever is lost,
//! the standby's disk ends up equal to the primary's, and a commit the sender calls
//! satisfied in a synchronous mode is on the standby's durable disk.

use alloc::vec;
use alloc::vec::Vec;

use crate::receiver::{Action, Receiver};
use crate::sender::{CopyStep, Sender};
use crate::wire::{BLOCK_BYTES, MESSAGE_BYTES_MAX, Message, Mode, StandbyState};

const BLOCKS: u64 = 64;

/// A small deterministic generator (xorshift64*), so that a failing seed repeats.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

struct Disk {
    /// What was written; `durable` what a flush made stable.
    written: Vec<[u8; BLOCK_BYTES]>,
    durable: Vec<[u8; BLOCK_BYTES]>,
}

impl Disk {
    fn new() -> Self {
        Self {
            written: vec![[0; BLOCK_BYTES]; BLOCKS as usize],
            durable: vec![[0; BLOCK_BYTES]; BLOCKS as usize],
        }
    }
}

struct Pair {
    sender: Sender,
    receiver: Receiver,
    primary: Disk,
    standby: Disk,
    to_standby: Vec<Vec<u8>>,
    to_primary: Vec<Vec<u8>>,
    now_ms: u64,
    random: Random,
    /// One message in this many is dropped (0: none).
    drop_one_in: u64,
}

impl Pair {
    fn new(mode: Mode, seed: u64) -> Self {
        Self {
            sender: Sender::new(0x5eed, 1, mode, 64 * 1024, 0),
            receiver: Receiver::new(),
            primary: Disk::new(),
            standby: Disk::new(),
            to_standby: Vec::new(),
            to_primary: Vec::new(),
            now_ms: 0,
            random: Random(seed | 1),
            drop_one_in: 0,
        }
    }

    fn lost(&mut self) -> bool {
        self.drop_one_in != 0 && self.random.below(self.drop_one_in) == 0
    }

    fn write(&mut self, block: u64, fill: u8) {
        self.write_run(block, 1, fill);
    }

    /// Writes `count` blocks from `first_block` in one write, each filled with `fill` plus
    /// its index.
    fn write_run(&mut self, first_block: u64, count: u64, fill: u8) {
        let mut data = Vec::new();
        for index in 0..count {
            let block = [fill.wrapping_add(index as u8); BLOCK_BYTES];
            self.primary.written[(first_block + index) as usize] = block;
            data.extend_from_slice(&block);
        }
        for waited_ms in 0.. {
            if self.sender.make_room(self.now_ms) {
                break;
            }
            assert!(waited_ms < 100_000, "a write waited for room for good");
            self.step();
        }
        self.sender.queue_write(first_block, &data, self.now_ms);
    }

    fn flush(&mut self) -> u64 {
        self.primary.durable = self.primary.written.clone();
        self.sender.queue_flush(self.now_ms)
    }

    /// Time passes by a millisecond; every message in flight is delivered (or lost).
    fn step(&mut self) {
        self.now_ms += 1;
        if let Some(CopyStep::Blocks { first_block, count }) = self.sender.copy_step(8) {
            let data: Vec<u8> = (first_block..first_block + count)
                .flat_map(|block| self.primary.written[block as usize])
                .collect();
            self.sender.queue_copy(first_block, &data, self.now_ms);
        } else if self.sender.copy_step(8) == Some(CopyStep::Markers) {
            self.sender.queue_copy(0, &[0xee; 2 * BLOCK_BYTES], self.now_ms);
        }
        let mut frame = [0u8; MESSAGE_BYTES_MAX];
        while let Some(length) = self.sender.next_to_send(&mut frame, self.now_ms) {
            if !self.lost() {
                self.to_standby.push(frame[..length].to_vec());
            }
        }
        for bytes in core::mem::take(&mut self.to_standby) {
            let message = Message::decode(&bytes).expect("the link does not damage messages");
            let mut reply = None;
            match self.receiver.receive(&message, self.now_ms) {
                Action::Write { first_block, data } => {
                    for (index, block) in data.chunks_exact(BLOCK_BYTES).enumerate() {
                        self.standby.written[first_block as usize + index].copy_from_slice(block);
                    }
                }
                Action::Zeros { first_block, blocks } => {
                    for block in first_block..first_block + blocks {
                        self.standby.written[block as usize] = [0; BLOCK_BYTES];
                    }
                }
                Action::Flush { sequence, .. } | Action::CopyEnd { sequence } => {
                    self.standby.durable = self.standby.written.clone();
                    self.receiver.durable_to(sequence);
                    reply = Some(self.receiver.ack(&mut frame));
                }
                Action::CopyBegin { block_count } => assert_eq!(block_count, BLOCKS),
                Action::Hello => reply = Some(self.receiver.hello(&mut frame)),
                Action::Nothing | Action::Promote { .. } => {}
            }
            if self.receiver.ack_due() {
                let length = self.receiver.ack(&mut frame);
                self.to_primary.push(frame[..length].to_vec());
            }
            if let Some(length) = reply
                && !self.lost()
            {
                self.to_primary.push(frame[..length].to_vec());
            }
        }
        if self.now_ms.is_multiple_of(crate::wire::HEARTBEAT_INTERVAL_MS) {
            let length = self.receiver.status().encode_heartbeat(self.receiver.stream(), &mut frame);
            if !self.lost() {
                self.to_primary.push(frame[..length].to_vec());
            }
        }
        for bytes in core::mem::take(&mut self.to_primary) {
            let message = Message::decode(&bytes).unwrap();
            self.sender.receive(&message, BLOCKS, self.now_ms);
        }
    }

    fn hello(&mut self) {
        let mut frame = [0u8; MESSAGE_BYTES_MAX];
        let length = self.receiver.hello(&mut frame);
        self.to_primary.push(frame[..length].to_vec());
    }

    fn run_until(&mut self, done: impl Fn(&Self) -> bool) {
        for _ in 0..100_000 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("the pair never got there");
    }
}

#[test]
fn a_blank_standby_gets_a_full_copy_then_the_stream() {
    let mut pair = Pair::new(Mode::SynchronousDurable, 1);
    // Every third block zero on the primary, the standby's old contents everywhere: the
    // zero runs must overwrite them.
    for block in 2..BLOCKS {
        let fill = if block % 3 == 0 { 0 } else { block as u8 };
        pair.primary.written[block as usize] = [fill; BLOCK_BYTES];
        pair.standby.written[block as usize] = [0x77; BLOCK_BYTES];
    }
    pair.flush();
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    assert_eq!(pair.receiver.state(), StandbyState::Consistent);
    assert!(pair.standby.durable == pair.primary.durable, "the copy is whole");
    pair.write(5, 0xaa);
    let flush = pair.flush();
    assert!(!pair.sender.satisfied(flush, pair.now_ms), "not yet on the standby");
    pair.run_until(|pair| pair.sender.satisfied(flush, pair.now_ms));
    assert_eq!(pair.standby.durable[5], [0xaa; BLOCK_BYTES]);
}

#[test]
fn a_lossy_link_loses_nothing_a_synchronous_commit_was_acknowledged_for() {
    for seed in 1..20 {
        let mut pair = Pair::new(Mode::SynchronousDurable, seed);
        pair.drop_one_in = 7;
        pair.hello();
        pair.run_until(|pair| pair.sender.is_protected());
        for round in 0..30u64 {
            for _ in 0..1 + pair.random.below(6) {
                let block = 2 + pair.random.below(BLOCKS - 2);
                pair.write(block, (round * 7 + block) as u8);
            }
            let flush = pair.flush();
            pair.run_until(|pair| pair.sender.satisfied(flush, pair.now_ms));
            // Acknowledged: the standby's durable disk has every block the primary flushed.
            assert!(pair.standby.durable == pair.primary.durable, "seed {seed} round {round}");
        }
    }
}

#[test]
fn a_standby_that_restarts_empty_is_copied_again() {
    let mut pair = Pair::new(Mode::SynchronousReceived, 3);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    pair.write(9, 1);
    pair.flush();
    // The standby's VM restarts: its memory is gone, its disk keeps what was durable.
    pair.receiver = Receiver::new();
    pair.write(10, 2);
    let flush = pair.flush();
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected() && pair.sender.satisfied(flush, pair.now_ms));
    assert!(pair.standby.durable == pair.primary.durable);
}

#[test]
fn a_synchronous_commit_waits_while_the_link_is_cut() {
    let mut pair = Pair::new(Mode::SynchronousReceived, 4);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    pair.drop_one_in = 1;
    pair.write(3, 3);
    let flush = pair.flush();
    for _ in 0..5_000 {
        pair.step();
        assert!(!pair.sender.satisfied(flush, pair.now_ms), "acknowledged without the standby");
    }
    // The link comes back: the resend delivers it.
    pair.drop_one_in = 0;
    pair.run_until(|pair| pair.sender.satisfied(flush, pair.now_ms));
}

#[test]
fn asynchronous_commits_go_on_without_an_answering_standby() {
    let mut pair = Pair::new(Mode::Asynchronous, 5);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    pair.drop_one_in = 1;
    for block in 2..BLOCKS {
        pair.write(block, 4);
    }
    let flush = pair.flush();
    assert!(!pair.sender.satisfied(flush, pair.now_ms), "64 KiB behind, over the bound");
    pair.now_ms += crate::sender::HEARD_WITHIN_MS;
    assert!(pair.sender.satisfied(flush, pair.now_ms), "a silent standby is not waited for");
    assert!(pair.sender.status(0, 0, pair.now_ms).lag_bytes > 0, "and the lag says so");
}

#[test]
fn a_copy_larger_than_the_retained_bound_flushes_as_it_goes() {
    // Far more than RETAINED_BYTES_MAX of stream with no flush of the store's: the
    // stream's own flushes let the retained part go, so writes never wait for good.
    let mut pair = Pair::new(Mode::SynchronousDurable, 6);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    let blocks = 2 * crate::sender::RETAINED_BYTES_MAX / BLOCK_BYTES as u64;
    for index in 0..blocks {
        pair.write(2 + index % (BLOCKS - 2), index as u8);
    }
    let flush = pair.flush();
    pair.run_until(|pair| pair.sender.satisfied(flush, pair.now_ms));
    assert!(pair.standby.durable == pair.primary.durable);
}

#[test]
fn a_primary_that_hears_of_a_later_term_acknowledges_nothing_more() {
    let mut pair = Pair::new(Mode::Asynchronous, 7);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    let mut frame = [0u8; MESSAGE_BYTES_MAX];
    let newer = crate::wire::Status {
        role: crate::wire::Role::Primary,
        term: 2,
        ..pair.receiver.status()
    };
    let length = newer.encode_heartbeat(0x1234, &mut frame);
    pair.sender.receive(&Message::decode(&frame[..length]).unwrap(), BLOCKS, pair.now_ms);
    pair.write(4, 4);
    let flush = pair.flush();
    for _ in 0..2_000 {
        pair.step();
        assert!(!pair.sender.satisfied(flush, pair.now_ms), "a fenced primary acknowledged a commit");
    }
    assert_eq!(pair.sender.superseded_by(), Some(2));
}

#[test]
fn runs_of_blocks_travel_together_and_arrive_whole_over_a_lossy_link() {
    let mut frame = [0u8; MESSAGE_BYTES_MAX];
    let mut pair = Pair::new(Mode::SynchronousDurable, 8);
    pair.hello();
    pair.run_until(|pair| pair.sender.is_protected());
    // 20 consecutive blocks: one message of 16 and one of 4, then the flush.
    pair.write_run(10, 20, 0x40);
    pair.flush();
    let mut sent = Vec::new();
    while let Some(length) = pair.sender.next_to_send(&mut frame, pair.now_ms) {
        let message = Message::decode(&frame[..length]).unwrap();
        sent.push((message.kind, message.argument, message.payload.len() / BLOCK_BYTES));
    }
    use crate::wire::Kind;
    assert_eq!(sent, [(Kind::Blocks, 10, 16), (Kind::Blocks, 26, 4), (Kind::Flush, 0, 0)]);
    for seed in 1..10 {
        let mut pair = Pair::new(Mode::SynchronousDurable, seed);
        pair.drop_one_in = 5;
        pair.hello();
        pair.run_until(|pair| pair.sender.copy_step(8).is_some());
        // A run written while the copy is under way, over the superblocks, which the copy
        // leaves to its end and sends as they are then.
        pair.write_run(0, 6, 0x10);
        for round in 0..20u64 {
            let count = 1 + pair.random.below(40);
            let first = 2 + pair.random.below(BLOCKS - 1 - count);
            pair.write_run(first, count, round as u8);
            let flush = pair.flush();
            pair.run_until(|pair| pair.sender.is_protected() && pair.sender.satisfied(flush, pair.now_ms));
            assert!(pair.standby.durable == pair.primary.durable, "seed {seed} round {round}");
        }
    }
}

#[test]
fn a_sync_received_flush_asks_for_its_receipt_and_the_receipt_alone_satisfies_it() {
    for mode in [Mode::SynchronousReceived, Mode::SynchronousDurable, Mode::Asynchronous] {
        let mut pair = Pair::new(mode, 8);
        pair.hello();
        pair.run_until(|pair| pair.sender.is_protected());
        pair.write(4, 4);
        let flush = pair.flush();
        let mut frame = [0u8; MESSAGE_BYTES_MAX];
        let mut asked = None;
        while let Some(length) = pair.sender.next_to_send(&mut frame, pair.now_ms) {
            let message = Message::decode(&frame[..length]).unwrap();
            if let Action::Flush { sequence, ack_on_receipt } = pair.receiver.receive(&message, pair.now_ms) {
                assert_eq!(sequence, flush);
                asked = Some(ack_on_receipt);
            }
        }
        assert_eq!(asked, Some(mode == Mode::SynchronousReceived), "{mode:?}");
        // The acknowledgement a standby sends before its disks have flushed.
        let length = pair.receiver.ack(&mut frame);
        pair.sender.receive(&Message::decode(&frame[..length]).unwrap(), BLOCKS, pair.now_ms);
        if mode != Mode::Asynchronous {
            assert_eq!(pair.sender.satisfied(flush, pair.now_ms), mode == Mode::SynchronousReceived, "{mode:?}");
        }
    }
}
