//! The standby's end: takes the stream in order, one message after the last it took, and
//! tells the kernel what to do with each — write blocks, flush its disks, start or end a
//! copy, become the primary. It asks the primary to
//! resend (a [`Kind::Hello`] with its position) when it sees a gap, and a stream it does
//! not follow is ignored until a full copy of it begins.

use crate::wire::{FLUSH_ACK_ON_RECEIPT, Kind, Message, Mode, Role, StandbyState, Status};

/// A gap is answered with one [`Kind::Hello`] per this interval at most: the primary
/// resends everything after it anyway.
pub const HELLO_INTERVAL_MS: u64 = 50;
/// Received messages acknowledged at least this often (besides at each flush).
pub const ACK_EVERY_MESSAGES: u64 = 128;

/// What the kernel does with a message the receiver took.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<'a> {
    Nothing,
    /// Write these whole blocks, consecutive from `first_block`, to every disk (it may wait
    /// for the next [`Action::Flush`]).
    Write { first_block: u64, data: &'a [u8] },
    /// Write `blocks` zero blocks from `first_block` to every disk.
    Zeros { first_block: u64, blocks: u64 },
    /// Make everything written durable, then call [`Receiver::durable_to`] with `sequence`
    /// and send an acknowledgement; with `ack_on_receipt`, send one before the disks are
    /// waited for, too (the primary waits for receipt only).
    Flush { sequence: u64, ack_on_receipt: bool },
    /// A full copy of a store of `block_count` blocks begins: the disks must hold it.
    CopyBegin { block_count: u64 },
    /// The copy is whole once flushed: flush, then [`Receiver::durable_to`].
    CopyEnd { sequence: u64 },
    /// The supervisor asks this standby to become the primary in `term`.
    Promote { term: u64 },
    /// Send [`Receiver::hello`]: a gap, or a stream this standby does not follow.
    Hello,
}

pub struct Receiver {
    stream: u64,
    received: u64,
    durable: u64,
    state: StandbyState,
    /// The copy's end arrived; whole once durable.
    copy_end: Option<u64>,
    hello_ms: Option<u64>,
    acked_received: u64,
    term: u64,
}

impl Default for Receiver {
    fn default() -> Self {
        Self::new()
    }
}

impl Receiver {
    /// A standby that holds nothing it could start from: it asks for a full copy.
    pub fn new() -> Self {
        Self {
            stream: 0,
            received: 0,
            durable: 0,
            state: StandbyState::Empty,
            copy_end: None,
            hello_ms: None,
            acked_received: 0,
            term: 0,
        }
    }

    pub fn state(&self) -> StandbyState {
        self.state
    }

    /// Takes one message; `now_ms` paces the requests to resend.
    pub fn receive<'a>(&mut self, message: &Message<'a>, now_ms: u64) -> Action<'a> {
        if message.kind == Kind::Promote {
            return Action::Promote { term: message.argument };
        }
        if !message.kind.is_stream() {
            return Action::Nothing;
        }
        if message.kind == Kind::CopyBegin && (message.stream != self.stream || message.sequence > self.received) {
            // A copy may start anywhere ahead (what came before it no longer matters): the
            // standby follows the stream from here.
            self.stream = message.stream;
            self.received = message.sequence;
            self.durable = message.sequence - 1;
            self.state = StandbyState::Copying;
            self.copy_end = None;
            return Action::CopyBegin { block_count: message.argument };
        }
        if message.stream != self.stream || message.sequence != self.received + 1 {
            // Already taken (a resend overlapping what came), or a gap, or another stream.
            let behind = message.stream == self.stream && message.sequence <= self.received;
            return if behind { Action::Nothing } else { self.hello_due(now_ms) };
        }
        self.received = message.sequence;
        match message.kind {
            // Decode checked that the payload is whole blocks.
            Kind::Blocks => Action::Write { first_block: message.argument, data: message.payload },
            Kind::Zeros => Action::Zeros {
                first_block: message.argument,
                blocks: crate::wire::zero_run_blocks(message.payload).unwrap_or(0),
            },
            Kind::Flush => Action::Flush {
                sequence: message.sequence,
                ack_on_receipt: message.argument & FLUSH_ACK_ON_RECEIPT != 0,
            },
            Kind::CopyEnd => {
                self.copy_end = Some(message.sequence);
                Action::CopyEnd { sequence: message.sequence }
            }
            // A copy that begins right after what was taken (handled above).
            _ => Action::Nothing,
        }
    }

    fn hello_due(&mut self, now_ms: u64) -> Action<'static> {
        if self.hello_ms.is_some_and(|sent| now_ms.saturating_sub(sent) < HELLO_INTERVAL_MS) {
            return Action::Nothing;
        }
        self.hello_ms = Some(now_ms);
        Action::Hello
    }

    /// Drops the stream followed: the next hello asks for a full copy.
    fn start_over(&mut self) -> Action<'static> {
        self.stream = 0;
        self.received = 0;
        self.durable = 0;
        self.state = StandbyState::Empty;
        self.copy_end = None;
        self.hello_ms = None;
        Action::Hello
    }

    /// The disks were flushed after everything up to `sequence` was written.
    pub fn durable_to(&mut self, sequence: u64) {
        self.durable = self.durable.max(sequence.min(self.received));
        if self.copy_end.is_some_and(|end| self.durable >= end) {
            self.copy_end = None;
            self.state = StandbyState::Consistent;
        }
    }

    /// The disks could not take the copy (too small, or failing): wait for another.
    pub fn copy_refused(&mut self) {
        self.start_over();
    }

    /// The hello to send: where this standby is, so that the primary resends from there
    /// (or copies everything when it cannot).
    pub fn hello(&self, out: &mut [u8]) -> usize {
        Message::new(Kind::Hello, self.stream, self.received, 0).encode(out)
    }

    /// Whether enough arrived since the last acknowledgement to send one now.
    pub fn ack_due(&self) -> bool {
        self.received >= self.acked_received + ACK_EVERY_MESSAGES
    }

    /// The acknowledgement of what was received and what is durable.
    pub fn ack(&mut self, out: &mut [u8]) -> usize {
        self.acked_received = self.received;
        Message::new(Kind::Ack, self.stream, self.received, self.durable).encode(out)
    }

    pub fn set_term(&mut self, term: u64) {
        self.term = term;
    }

    /// The standby's heartbeat status.
    pub fn status(&self) -> Status {
        Status {
            role: Role::Standby,
            term: self.term,
            checkpoint_generation: 0,
            journal_ticket_next: 0,
            mode: Mode::Asynchronous,
            sequence: self.received,
            received: self.received,
            durable: self.durable,
            lag_bytes: 0,
            lag_ms: 0,
            standby_state: self.state,
            degraded: false,
            standby_heard: false,
            fenced: false,
        }
    }

    pub fn stream(&self) -> u64 {
        self.stream
    }
}
