//! The primary's end: every write and flush of its store put in the stream, in order, kept
//! until the standby has it on its disks, sent within a window and sent again from the
//! standby's position when acknowledgements stop coming (go-back-N: the link is a byte
//! stream joined by the host, so loss means a cut or a deliberate drop, not noise). A
//! standby that cannot resume gets a full copy, live writes going on beside it.

use alloc::boxed::Box;
use alloc::collections::VecDeque;

use crate::wire::{BLOCK_BYTES, BLOCKS_PER_MESSAGE_MAX, FLUSH_ACK_ON_RECEIPT, Kind, Message, Mode, StandbyState, Status};

/// Stream messages sent and not yet acknowledged as received, at most.
pub const WINDOW_MESSAGES: u64 = 512;
/// Stream bytes kept for the standby (sent or not, not yet durable there), at most: a
/// writer waits ([`Sender::has_room`]) beyond it.
pub const RETAINED_BYTES_MAX: u64 = 32 << 20;
/// With messages unacknowledged and no acknowledgement for this long, sending starts again
/// after the last one acknowledged.
pub const RESEND_AFTER_MS: u64 = 200;
/// The standby counts as heard while it answered within this.
pub const HEARD_WITHIN_MS: u64 = 1000;
/// Superblock slots: copied last in a full copy, after resilver records marked them.
const SUPERBLOCK_BLOCKS: u64 = 2;
/// Blocks (4 MiB) after which the stream gets a flush of its own even if the store
/// made none (a full copy makes none): the standby then makes them durable and the primary
/// lets them go, so the retained stream never fills up with data only a flush would free.
const FLUSH_EVERY_BLOCKS: u64 = 1024;

struct Entry {
    kind: Kind,
    argument: u64,
    /// A [`Kind::Blocks`] message's blocks.
    payload: Option<Box<[u8]>>,
    /// A [`Kind::Zeros`] run's length in blocks.
    zero_run_blocks: u64,
    queued_ms: u64,
}

/// Where a full copy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyPhase {
    /// The resilver records go to blocks 0 and 1 first.
    Markers,
    /// Then every block from 2 up; `next` is the next to queue.
    Body { next: u64 },
    /// Then the superblocks as they are now.
    Superblocks,
}

#[derive(Clone, Copy, Debug)]
struct Copy {
    block_count: u64,
    phase: CopyPhase,
}

/// What the kernel must read (or make) for the copy next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyStep {
    /// Resilver records for blocks 0 and 1 (the store's format names a half-copied mirror).
    Markers,
    /// Blocks to read from the store and hand to [`Sender::queue_copy`].
    Blocks { first_block: u64, count: u64 },
}

pub struct Sender {
    stream: u64,
    term: u64,
    mode: Mode,
    lag_bytes_max: u64,
    /// Sequence of `ring[0]`; the ring holds every message not yet durable on the standby.
    ring_first: u64,
    ring: VecDeque<Entry>,
    /// Blocks in the ring.
    retained_blocks: u64,
    blocks_since_flush: u64,
    send_next: u64,
    received: u64,
    durable: u64,
    /// When acknowledgements last advanced (or sending last started over).
    progress_ms: u64,
    heard_ms: Option<u64>,
    copy: Option<Copy>,
    /// The stream's sequence of the copy's end: the standby is in step once it is durable.
    copy_end: Option<u64>,
    standby_state: StandbyState,
    /// The standby has been whole and in step in this stream: commits wait for it.
    protected: bool,
    /// A standby follows this stream (a copy began, or it resumed): what it lacks is kept.
    followed: bool,
    degraded: bool,
    /// Stream messages sent again after a cut, since boot.
    resent_total: u64,
    /// A primary of a later term spoke: this one was fenced and acknowledges nothing more.
    superseded_by: Option<u64>,
}

impl Sender {
    /// A new stream (`stream` chosen at random per boot, never 0).
    pub fn new(stream: u64, term: u64, mode: Mode, lag_bytes_max: u64, now_ms: u64) -> Self {
        assert_ne!(stream, 0, "stream 0 means none");
        Self {
            stream,
            term,
            mode,
            lag_bytes_max,
            ring_first: 1,
            ring: VecDeque::new(),
            retained_blocks: 0,
            blocks_since_flush: 0,
            send_next: 1,
            received: 0,
            durable: 0,
            progress_ms: now_ms,
            heard_ms: None,
            copy: None,
            copy_end: None,
            standby_state: StandbyState::Empty,
            protected: false,
            followed: false,
            degraded: false,
            resent_total: 0,
            superseded_by: None,
        }
    }

    pub fn stream(&self) -> u64 {
        self.stream
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The next sequence to be put in the stream.
    fn next_sequence(&self) -> u64 {
        self.ring_first + self.ring.len() as u64
    }

    fn push(&mut self, kind: Kind, argument: u64, payload: Option<Box<[u8]>>, now_ms: u64) -> u64 {
        let sequence = self.next_sequence();
        if !self.followed {
            // No standby follows the stream: the one that comes gets a full copy, so
            // nothing is kept for it; the sequence still moves on.
            self.ring_first += 1;
            self.received = self.ring_first - 1;
            self.durable = self.ring_first - 1;
            self.send_next = self.ring_first;
            return sequence;
        }
        self.retained_blocks += blocks_in(&payload);
        self.ring.push_back(Entry {
            kind,
            argument,
            payload,
            zero_run_blocks: 0,
            queued_ms: now_ms,
        });
        sequence
    }

    /// Puts whole blocks consecutive from `first_block` in the stream, as few messages as
    /// [`BLOCKS_PER_MESSAGE_MAX`] allows.
    fn push_blocks(&mut self, first_block: u64, data: &[u8], now_ms: u64) {
        if !self.followed {
            return;
        }
        for (index, chunk) in data.chunks(BLOCKS_PER_MESSAGE_MAX * BLOCK_BYTES).enumerate() {
            if self.blocks_since_flush >= FLUSH_EVERY_BLOCKS {
                self.queue_flush(now_ms);
            }
            self.blocks_since_flush += (chunk.len() / BLOCK_BYTES) as u64;
            let block = first_block + (index * BLOCKS_PER_MESSAGE_MAX) as u64;
            self.push(Kind::Blocks, block, Some(chunk.into()), now_ms);
        }
    }

    fn push_zeros(&mut self, first_block: u64, blocks: u64, now_ms: u64) {
        let sequence = self.push(Kind::Zeros, first_block, None, now_ms);
        if let Some(entry) = sequence
            .checked_sub(self.ring_first)
            .and_then(|index| self.ring.get_mut(index as usize))
        {
            entry.zero_run_blocks = blocks;
        }
    }

    /// Whether a writer may queue more now. With [`RETAINED_BYTES_MAX`] retained it waits
    /// for acknowledgements while the standby is answering, or is in step in a synchronous
    /// mode (only the supervisor's [`Kind::Degrade`] lets the primary go on without it
    /// then). Otherwise the stream is given up: the standby will need a full copy, and the
    /// heartbeat says it is not in step.
    pub fn make_room(&mut self, now_ms: u64) -> bool {
        if self.lag_bytes() < RETAINED_BYTES_MAX {
            return true;
        }
        let synchronous = self.protected && !self.degraded && self.mode != Mode::Asynchronous;
        if synchronous || self.heard(now_ms) {
            return false;
        }
        self.give_up();
        true
    }

    /// Forgets everything retained: the standby, if it comes back, starts over with a copy.
    fn give_up(&mut self) {
        self.ring_first = self.next_sequence();
        self.ring.clear();
        self.retained_blocks = 0;
        self.received = self.ring_first - 1;
        self.durable = self.ring_first - 1;
        self.send_next = self.ring_first;
        self.copy = None;
        self.copy_end = None;
        self.protected = false;
        self.followed = false;
        self.standby_state = StandbyState::Empty;
    }

    fn heard(&self, now_ms: u64) -> bool {
        self.heard_ms.is_some_and(|heard| now_ms.saturating_sub(heard) < HEARD_WITHIN_MS)
    }

    /// Puts a write of the store in the stream: whole blocks from `first_block`. While a
    /// full copy has not reached them, the superblocks are left out (the copy sends them
    /// last, as they are then).
    pub fn queue_write(&mut self, first_block: u64, data: &[u8], now_ms: u64) {
        assert!(data.len().is_multiple_of(BLOCK_BYTES), "replicated writes are whole blocks");
        let copying_markers_or_body = matches!(
            self.copy,
            Some(Copy {
                phase: CopyPhase::Markers | CopyPhase::Body { .. },
                ..
            })
        );
        let skipped = if copying_markers_or_body {
            SUPERBLOCK_BLOCKS.saturating_sub(first_block).min((data.len() / BLOCK_BYTES) as u64)
        } else {
            0
        };
        self.push_blocks(first_block + skipped, &data[skipped as usize * BLOCK_BYTES..], now_ms);
    }

    /// Puts a flush in the stream and returns its sequence: a commit that flushed waits
    /// until [`Sender::satisfied`] says the mode is met for it.
    pub fn queue_flush(&mut self, now_ms: u64) -> u64 {
        self.blocks_since_flush = 0;
        let argument = if self.mode == Mode::SynchronousReceived { FLUSH_ACK_ON_RECEIPT } else { 0 };
        self.push(Kind::Flush, argument, None, now_ms)
    }

    /// Whether the commit whose flush is `sequence` may be acknowledged: in a synchronous
    /// mode once the standby has received it (or has it durable), asynchronously once the
    /// lag is within its bound. A standby that has never been in step in this stream (its
    /// first copy is under way) cannot be promoted, so nothing waits for it yet; nor after
    /// the supervisor said it is gone ([`Kind::Degrade`]). Asynchronously, a standby that
    /// stopped answering is not waited for.
    pub fn satisfied(&self, sequence: u64, now_ms: u64) -> bool {
        if self.superseded_by.is_some() {
            return false;
        }
        if !self.protected || self.degraded {
            return true;
        }
        match self.mode {
            Mode::Asynchronous => self.lag_bytes() <= self.lag_bytes_max || !self.heard(now_ms),
            Mode::SynchronousReceived => self.received >= sequence,
            Mode::SynchronousDurable => self.durable >= sequence,
        }
    }

    /// Stream bytes not yet durable on the standby (the ring holds exactly those).
    pub fn lag_bytes(&self) -> u64 {
        self.retained_blocks * BLOCK_BYTES as u64
    }

    /// How long the oldest message not durable on the standby has waited.
    pub fn lag_ms(&self, now_ms: u64) -> u64 {
        self.ring.front().map_or(0, |entry| now_ms.saturating_sub(entry.queued_ms))
    }

    /// The next step of a full copy, if one is under way and has more to queue.
    pub fn copy_step(&self, blocks_max: u64) -> Option<CopyStep> {
        let copy = self.copy?;
        Some(match copy.phase {
            CopyPhase::Markers => CopyStep::Markers,
            CopyPhase::Body { next } => CopyStep::Blocks {
                first_block: next,
                count: blocks_max.min(copy.block_count - next),
            },
            CopyPhase::Superblocks => CopyStep::Blocks {
                first_block: 0,
                count: SUPERBLOCK_BLOCKS,
            },
        })
    }

    /// Queues what [`Sender::copy_step`] asked for: the resilver records (two blocks, for
    /// [`CopyStep::Markers`]) or the blocks read. After the superblocks, the copy's end.
    pub fn queue_copy(&mut self, first_block: u64, data: &[u8], now_ms: u64) {
        let Some(mut copy) = self.copy else {
            return;
        };
        // Runs of zero blocks (most of a new store) go as one message each, the blocks
        // between them together.
        let mut index = 0;
        let blocks = data.len() / BLOCK_BYTES;
        let is_zero = |index: usize| {
            copy.phase != CopyPhase::Markers && data[index * BLOCK_BYTES..][..BLOCK_BYTES].iter().all(|&byte| byte == 0)
        };
        while index < blocks {
            let zero = is_zero(index);
            let end = (index + 1..blocks).find(|&next| is_zero(next) != zero).unwrap_or(blocks);
            let block_number = first_block + index as u64;
            if zero {
                self.push_zeros(block_number, (end - index) as u64, now_ms);
            } else {
                self.push_blocks(block_number, &data[index * BLOCK_BYTES..end * BLOCK_BYTES], now_ms);
            }
            index = end;
        }
        let blocks = (data.len() / BLOCK_BYTES) as u64;
        copy.phase = match copy.phase {
            CopyPhase::Markers => CopyPhase::Body { next: SUPERBLOCK_BLOCKS },
            CopyPhase::Body { next } if next + blocks >= copy.block_count => CopyPhase::Superblocks,
            CopyPhase::Body { next } => CopyPhase::Body { next: next + blocks },
            CopyPhase::Superblocks => {
                self.copy = None;
                self.copy_end = Some(self.push(Kind::CopyEnd, 0, None, now_ms));
                return;
            }
        };
        self.copy = Some(copy);
    }

    /// Starts a full copy of a store of `block_count` blocks (the standby asked for a
    /// stream it cannot resume, or holds none).
    fn start_copy(&mut self, block_count: u64, now_ms: u64) {
        self.protected = false;
        self.followed = true;
        self.copy_end = None;
        self.copy = Some(Copy {
            block_count,
            phase: CopyPhase::Markers,
        });
        let begin = self.push(Kind::CopyBegin, block_count, None, now_ms);
        // Nothing before the copy matters to the standby: it starts reading there.
        self.send_next = begin;
        self.received = begin - 1;
    }

    /// Takes a message from the standby or the supervisor. `block_count` is the store's
    /// size, for a full copy.
    pub fn receive(&mut self, message: &Message<'_>, block_count: u64, now_ms: u64) {
        match message.kind {
            Kind::Ack if message.stream == self.stream => {
                self.acknowledged(message.sequence, message.argument, now_ms);
            }
            Kind::Hello => self.hello(message.stream, message.sequence, block_count, now_ms),
            Kind::Heartbeat => {
                if let Some(status) = Status::decode(message.payload)
                    && status.role == crate::wire::Role::Primary
                    && status.term > self.term
                {
                    self.superseded_by = Some(status.term);
                } else if let Some(status) = Status::decode(message.payload)
                    && status.role == crate::wire::Role::Standby
                {
                    if message.stream == self.stream {
                        self.acknowledged(status.received, status.durable, now_ms);
                    } else {
                        // A standby that follows another stream (or none) says so in every
                        // heartbeat: a hello that was lost (sent before this primary
                        // listened) costs no more than a heartbeat interval.
                        self.hello(message.stream, status.received, block_count, now_ms);
                    }
                    if !self.protected {
                        self.standby_state = status.standby_state;
                    }
                }
            }
            Kind::SetMode => {
                if let Some(mode) = Mode::from_u64(message.argument) {
                    self.mode = mode;
                    self.lag_bytes_max = message.sequence;
                }
            }
            // The standby is gone: what was kept for it is let go (it comes back to a full
            // copy), and the heartbeat says the pair is degraded until it is in step again.
            Kind::Degrade if self.protected => {
                self.give_up();
                self.degraded = true;
            }
            _ => {}
        }
    }

    /// The standby holds `stream` up to `position`: resume from there if this primary still
    /// has what follows, else copy everything.
    fn hello(&mut self, stream: u64, position: u64, block_count: u64, now_ms: u64) {
        self.heard_ms = Some(now_ms);
        let resumable = stream == self.stream && position + 1 >= self.ring_first;
        if resumable {
            self.followed = true;
            self.received = position.min(self.next_sequence() - 1);
            self.send_next = self.received + 1;
            self.progress_ms = now_ms;
        } else if (self.copy.is_none() && self.copy_end.is_none()) || stream == self.stream {
            // A hello from another stream while a copy is under way was sent before the
            // copy's beginning reached the standby; if that was lost, the resend timer sends
            // it again.
            self.start_copy(block_count, now_ms);
        }
    }

    /// The standby has received up to `received` and made durable up to `durable` (an
    /// acknowledgement, or its heartbeat, which says the same every interval so that a lost
    /// acknowledgement costs no more than that).
    fn acknowledged(&mut self, received: u64, durable: u64, now_ms: u64) {
        self.heard_ms = Some(now_ms);
        let newest = self.next_sequence() - 1;
        let received = received.min(newest);
        let durable = durable.min(received);
        if received > self.received || durable > self.durable {
            self.progress_ms = now_ms;
        }
        self.received = self.received.max(received);
        self.durable = self.durable.max(durable);
        self.send_next = self.send_next.max(self.received + 1);
        while self.ring_first <= self.durable {
            if let Some(entry) = self.ring.pop_front() {
                self.retained_blocks -= blocks_in(&entry.payload);
            }
            self.ring_first += 1;
        }
        if self.copy_end.is_some_and(|end| self.durable >= end) {
            self.copy_end = None;
            self.protected = true;
            self.degraded = false;
            self.standby_state = StandbyState::Consistent;
        }
    }

    /// Encodes into `frame` the next stream message to send, if the window allows one:
    /// starting over after the last acknowledged one when acknowledgements stopped for
    /// [`RESEND_AFTER_MS`]. Returns its length. Call until `None`, sending each.
    pub fn next_to_send(&mut self, frame: &mut [u8], now_ms: u64) -> Option<usize> {
        let newest = self.next_sequence() - 1;
        if self.send_next > self.received + 1 && now_ms.saturating_sub(self.progress_ms) >= RESEND_AFTER_MS {
            self.resent_total += self.send_next - (self.received + 1);
            self.send_next = (self.received + 1).max(self.ring_first);
            self.progress_ms = now_ms;
        }
        if self.send_next > newest || self.send_next > self.received + WINDOW_MESSAGES {
            return None;
        }
        let sequence = self.send_next.max(self.ring_first);
        let entry = &self.ring[(sequence - self.ring_first) as usize];
        let zero_run_blocks = entry.zero_run_blocks.to_le_bytes();
        let payload: &[u8] = match (&entry.payload, entry.kind) {
            (Some(payload), _) => &payload[..],
            (None, Kind::Zeros) => &zero_run_blocks,
            (None, _) => &[],
        };
        let length = Message {
            payload,
            ..Message::new(entry.kind, self.stream, sequence, entry.argument)
        }
        .encode(frame);
        self.send_next = sequence + 1;
        Some(length)
    }

    /// This primary's heartbeat status; the store's figures come from the caller.
    pub fn status(&self, checkpoint_generation: u64, journal_ticket_next: u64, now_ms: u64) -> Status {
        Status {
            role: crate::wire::Role::Primary,
            term: self.term,
            checkpoint_generation,
            journal_ticket_next,
            mode: self.mode,
            sequence: self.next_sequence() - 1,
            received: self.received,
            durable: self.durable,
            lag_bytes: self.lag_bytes(),
            lag_ms: self.lag_ms(now_ms),
            standby_state: self.standby_state,
            degraded: self.degraded,
            standby_heard: self.heard(now_ms),
            fenced: self.superseded_by.is_some(),
        }
    }

    /// The term of a later primary this one heard of, if it did: it was fenced.
    pub fn superseded_by(&self) -> Option<u64> {
        self.superseded_by
    }

    pub fn resent_total(&self) -> u64 {
        self.resent_total
    }

    pub fn is_protected(&self) -> bool {
        self.protected
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded
    }
}

fn blocks_in(payload: &Option<Box<[u8]>>) -> u64 {
    payload.as_ref().map_or(0, |blocks| (blocks.len() / BLOCK_BYTES) as u64)
}
