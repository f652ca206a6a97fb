//! The link's messages, byte for byte (`docs/replication.md` is the reader's version).
//!
//! Every message rides alone in one Ethernet frame of EtherType [`ETHERTYPE`] (jumbo: up to
//! 14 + [`MESSAGE_BYTES_MAX`] bytes): a 48-byte header, then at most [`PAYLOAD_BYTES_MAX`]
//! bytes of payload. All integers are
//! little-endian. The checksum (XXH64, seed 0) covers the header with its checksum field
//! zeroed and the payload, so a message damaged anywhere, cut short or padded is refused
//! whole; a message of another version is refused by its version field before anything in
//! it is believed.

use core::fmt;

use xxhash_rust::xxh64::Xxh64;

/// IEEE 802 "local experimental 2": the link carries nothing but this protocol.
pub const ETHERTYPE: u16 = 0x88b6;
pub const MAGIC: [u8; 4] = *b"HFRL";
/// Bumped on any change to a header field or a payload layout.
pub const VERSION: u16 = 2;
pub const HEADER_BYTES: usize = 48;
pub const BLOCK_BYTES: usize = 4096;
/// Consecutive blocks travel together, up to this many in one message: the link is a
/// point-to-point wire through the host, which carries frames of any length (QEMU's
/// stream netdev up to 68 KiB), and every frame costs the sender a notification, the host
/// a trip through the supervisor's relay and the standby an interrupt. A journal commit's
/// record, a checkpoint's run and a migration step's home run go in a few messages, not
/// one per block.
pub const BLOCKS_PER_MESSAGE_MAX: usize = 16;
pub const PAYLOAD_BYTES_MAX: usize = BLOCKS_PER_MESSAGE_MAX * BLOCK_BYTES;
pub const MESSAGE_BYTES_MAX: usize = HEADER_BYTES + PAYLOAD_BYTES_MAX;

/// A [`Kind::Flush`]'s `argument` bit asking the standby to acknowledge its receipt at
/// once, before its disks flush: the primary waits for receipt only (`sync-received`), and
/// would otherwise wait for the flush it does not need.
pub const FLUSH_ACK_ON_RECEIPT: u64 = 1;

/// What a message is. The stream's own messages (from the primary, numbered by
/// `sequence`) are [`Kind::Blocks`], [`Kind::Flush`], [`Kind::CopyBegin`] and
/// [`Kind::CopyEnd`]; the rest are not numbered and never resent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Primary → standby. `argument`: the first device block; payload: 1 to
    /// [`BLOCKS_PER_MESSAGE_MAX`] whole blocks, consecutive from it.
    Blocks = 1,
    /// Primary → standby. Everything before it in the stream is being made durable on the
    /// primary (its disks flush meanwhile); the standby makes it durable on its disks too
    /// and says so in its next [`Kind::Ack`]. `argument`: [`FLUSH_ACK_ON_RECEIPT`] or 0.
    Flush = 2,
    /// Primary → standby: a full copy starts. `argument`: the store's size in blocks. The
    /// standby marks its disks incomplete until the matching [`Kind::CopyEnd`].
    CopyBegin = 3,
    /// Primary → standby: the copy is whole; the standby's store is the primary's from here.
    CopyEnd = 4,
    /// Either VM → the other and the supervisor on the way: payload [`Status`].
    Heartbeat = 5,
    /// Standby → primary: `sequence` received (in memory), `argument` durable (on its
    /// disks), both of `stream`.
    Ack = 6,
    /// Standby → primary: resend `stream` after `sequence`, or start a full copy when that
    /// is no longer possible. Sent when the standby starts, and when it sees a gap.
    Hello = 7,
    /// Supervisor → standby: become the primary. `argument`: the pair's new term.
    Promote = 8,
    /// Supervisor → primary: replicate in mode `argument` ([`Mode`]), an asynchronous lag
    /// bound of `sequence` bytes.
    SetMode = 9,
    /// Supervisor → primary: the standby is gone (its VM died, the supervisor sees it);
    /// stop waiting for it until it is back in step, and say so.
    Degrade = 10,
    /// Primary → standby, in a full copy: `argument` the first block of a run of all-zero
    /// blocks; payload: the run's length in blocks (u64, at least 1). A store is mostly
    /// zeros when new; a copy sends them in one message.
    Zeros = 11,
}

/// The longest run one [`Kind::Zeros`] message may name (4 GiB of blocks).
pub const ZERO_RUN_BLOCKS_MAX: u64 = 1 << 20;

impl Kind {
    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Self::Blocks,
            2 => Self::Flush,
            3 => Self::CopyBegin,
            4 => Self::CopyEnd,
            5 => Self::Heartbeat,
            6 => Self::Ack,
            7 => Self::Hello,
            8 => Self::Promote,
            9 => Self::SetMode,
            10 => Self::Degrade,
            11 => Self::Zeros,
            _ => return None,
        })
    }

    /// Whether the message is part of the numbered stream.
    pub fn is_stream(self) -> bool {
        matches!(self, Self::Blocks | Self::Flush | Self::CopyBegin | Self::CopyEnd | Self::Zeros)
    }
}

/// When the primary acknowledges a commit (a flush of its store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// At once, the standby at most [`crate::sender::Sender`]'s lag bound behind.
    Asynchronous = 0,
    /// Once the standby has received everything up to it (in its memory).
    SynchronousReceived = 1,
    /// Once the standby has it on its disks too.
    SynchronousDurable = 2,
}

impl Mode {
    pub fn from_u64(value: u64) -> Option<Self> {
        Some(match value {
            0 => Self::Asynchronous,
            1 => Self::SynchronousReceived,
            2 => Self::SynchronousDurable,
            _ => return None,
        })
    }

    /// The name the CLI and the boot option use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Asynchronous => "async",
            Self::SynchronousReceived => "sync-received",
            Self::SynchronousDurable => "sync-durable",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Asynchronous, Self::SynchronousReceived, Self::SynchronousDurable]
            .into_iter()
            .find(|mode| mode.name() == name)
    }
}

/// One message, decoded. `payload` borrows the frame it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub kind: Kind,
    pub part: u8,
    pub stream: u64,
    pub sequence: u64,
    pub argument: u64,
    pub payload: &'a [u8],
}

/// Why a message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    Short,
    Magic,
    Version(u16),
    Kind(u8),
    Length,
    Checksum,
    /// A block message whose payload is not whole blocks (or none), or whose reserved
    /// `part` byte is not 0; a zero run of no blocks or too many.
    Part,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short => write!(f, "shorter than a header"),
            Self::Magic => write!(f, "not a replication message (magic)"),
            Self::Version(version) => write!(f, "replication protocol version {version}, not {VERSION}"),
            Self::Kind(kind) => write!(f, "unknown message kind {kind}"),
            Self::Length => write!(f, "payload length disagrees with the frame"),
            Self::Checksum => write!(f, "checksum mismatch"),
            Self::Part => write!(f, "blocks or zero run out of shape"),
        }
    }
}

fn checksum(header: &[u8; HEADER_BYTES], payload: &[u8]) -> u64 {
    let mut hasher = Xxh64::new(0);
    hasher.update(&header[..40]);
    hasher.update(payload);
    hasher.digest()
}

impl<'a> Message<'a> {
    pub fn new(kind: Kind, stream: u64, sequence: u64, argument: u64) -> Self {
        Self {
            kind,
            part: 0,
            stream,
            sequence,
            argument,
            payload: &[],
        }
    }

    /// Writes the message into `out` (at least [`HEADER_BYTES`] + its payload) and returns
    /// its length.
    pub fn encode(&self, out: &mut [u8]) -> usize {
        assert!(self.payload.len() <= PAYLOAD_BYTES_MAX, "replication payload too long");
        let mut header = [0u8; HEADER_BYTES];
        header[0..4].copy_from_slice(&MAGIC);
        header[4..6].copy_from_slice(&VERSION.to_le_bytes());
        header[6] = self.kind as u8;
        header[7] = self.part;
        header[8..16].copy_from_slice(&self.stream.to_le_bytes());
        header[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        header[24..32].copy_from_slice(&self.argument.to_le_bytes());
        header[32..36].copy_from_slice(&(self.payload.len() as u32).to_le_bytes());
        let sum = checksum(&header, self.payload);
        header[40..48].copy_from_slice(&sum.to_le_bytes());
        out[..HEADER_BYTES].copy_from_slice(&header);
        out[HEADER_BYTES..HEADER_BYTES + self.payload.len()].copy_from_slice(self.payload);
        HEADER_BYTES + self.payload.len()
    }

    /// Reads a message from `bytes`, which may carry padding after it (Ethernet pads short
    /// frames to 60 bytes).
    pub fn decode(bytes: &'a [u8]) -> Result<Self, WireError> {
        let header: &[u8; HEADER_BYTES] = bytes
            .get(..HEADER_BYTES)
            .and_then(|header| header.try_into().ok())
            .ok_or(WireError::Short)?;
        if header[0..4] != MAGIC {
            return Err(WireError::Magic);
        }
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let length = u32::from_le_bytes(header[32..36].try_into().expect("4 bytes")) as usize;
        if length > PAYLOAD_BYTES_MAX || HEADER_BYTES + length > bytes.len() || header[36..40] != [0; 4] {
            return Err(WireError::Length);
        }
        let payload = &bytes[HEADER_BYTES..HEADER_BYTES + length];
        let mut zeroed = *header;
        zeroed[40..48].fill(0);
        if checksum(&zeroed, payload) != u64::from_le_bytes(header[40..48].try_into().expect("8 bytes")) {
            return Err(WireError::Checksum);
        }
        let kind = Kind::from_u8(header[6]).ok_or(WireError::Kind(header[6]))?;
        let part = header[7];
        if kind == Kind::Blocks && (part != 0 || length == 0 || !length.is_multiple_of(BLOCK_BYTES)) {
            return Err(WireError::Part);
        }
        if kind == Kind::Zeros && zero_run_blocks(payload).is_none() {
            return Err(WireError::Part);
        }
        let word = |offset: usize| u64::from_le_bytes(header[offset..offset + 8].try_into().expect("8 bytes"));
        Ok(Self {
            kind,
            part,
            stream: word(8),
            sequence: word(16),
            argument: word(24),
            payload,
        })
    }
}

/// The run length a [`Kind::Zeros`] payload names, if it is a valid one.
pub fn zero_run_blocks(payload: &[u8]) -> Option<u64> {
    let blocks = u64::from_le_bytes(payload.try_into().ok()?);
    (1..=ZERO_RUN_BLOCKS_MAX).contains(&blocks).then_some(blocks)
}

/// Who sends a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Primary = 1,
    Standby = 2,
}

/// The standby's store, as the standby sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StandbyState {
    /// Holds no copy it could start from (blank, or a copy cut short): waits for a full copy.
    Empty = 0,
    /// A full copy is under way.
    Copying = 1,
    /// Holds a whole copy, brought up to `durable` of `stream`: it can be promoted.
    Consistent = 2,
}

/// The heartbeat's payload: what each VM says of itself every
/// [`HEARTBEAT_INTERVAL_MS`], and what `holdfast pair status` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub role: Role,
    /// The pair's term this VM serves in (promotions so far).
    pub term: u64,
    /// The store's newest committed checkpoint (the primary's; 0 on a standby).
    pub checkpoint_generation: u64,
    /// The journal's next ticket (the primary's; 0 on a standby).
    pub journal_ticket_next: u64,
    pub mode: Mode,
    /// Primary: the newest sequence put in the stream. Standby: the newest received.
    pub sequence: u64,
    /// Primary: the newest sequence the standby acknowledged as received / durable.
    /// Standby: its own received / durable.
    pub received: u64,
    pub durable: u64,
    /// Primary: stream bytes the standby has not made durable, and how old the oldest is.
    pub lag_bytes: u64,
    pub lag_ms: u64,
    /// Standby: its store. Primary: what it last heard of the standby's.
    pub standby_state: StandbyState,
    /// Primary: synchronous commits go on without the standby (the supervisor said it is gone).
    pub degraded: bool,
    /// Primary: the standby answered within the last second.
    pub standby_heard: bool,
    /// Primary: a primary of a later term spoke; this one was fenced and acknowledges
    /// nothing more.
    pub fenced: bool,
}

pub const HEARTBEAT_INTERVAL_MS: u64 = 50;
const STATUS_BYTES: usize = 80;

impl Status {
    pub fn encode(&self, out: &mut [u8; STATUS_BYTES]) {
        out.fill(0);
        out[0] = self.role as u8;
        out[1] = self.mode as u8;
        out[2] = self.standby_state as u8;
        out[3] = u8::from(self.degraded) | (u8::from(self.standby_heard) << 1) | (u8::from(self.fenced) << 2);
        let words = [
            self.term,
            self.checkpoint_generation,
            self.journal_ticket_next,
            self.sequence,
            self.received,
            self.durable,
            self.lag_bytes,
            self.lag_ms,
        ];
        for (index, word) in words.iter().enumerate() {
            out[8 + index * 8..16 + index * 8].copy_from_slice(&word.to_le_bytes());
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != STATUS_BYTES {
            return None;
        }
        let word = |index: usize| u64::from_le_bytes(bytes[8 + index * 8..16 + index * 8].try_into().expect("8 bytes"));
        Some(Self {
            role: match bytes[0] {
                1 => Role::Primary,
                2 => Role::Standby,
                _ => return None,
            },
            mode: Mode::from_u64(bytes[1] as u64)?,
            standby_state: match bytes[2] {
                0 => StandbyState::Empty,
                1 => StandbyState::Copying,
                2 => StandbyState::Consistent,
                _ => return None,
            },
            degraded: bytes[3] & 1 != 0,
            standby_heard: bytes[3] & 2 != 0,
            fenced: bytes[3] & 4 != 0,
            term: word(0),
            checkpoint_generation: word(1),
            journal_ticket_next: word(2),
            sequence: word(3),
            received: word(4),
            durable: word(5),
            lag_bytes: word(6),
            lag_ms: word(7),
        })
    }

    /// A heartbeat message carrying this status, encoded into `out`; returns its length.
    pub fn encode_heartbeat(&self, stream: u64, out: &mut [u8]) -> usize {
        let mut payload = [0u8; STATUS_BYTES];
        self.encode(&mut payload);
        Message {
            payload: &payload,
            ..Message::new(Kind::Heartbeat, stream, 0, 0)
        }
        .encode(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_decodes_to_what_was_encoded() {
        let payload = [7u8; PAYLOAD_BYTES_MAX];
        let message = Message {
            part: 0,
            payload: &payload,
            ..Message::new(Kind::Blocks, 0xfeed, 42, 1234)
        };
        let mut out = [0u8; MESSAGE_BYTES_MAX + 20];
        let length = message.encode(&mut out);
        assert_eq!(length, HEADER_BYTES + PAYLOAD_BYTES_MAX);
        // Trailing padding (as Ethernet adds) is ignored.
        assert_eq!(Message::decode(&out[..length + 20]), Ok(message));
    }

    #[test]
    fn damage_anywhere_is_refused() {
        let mut out = [0u8; MESSAGE_BYTES_MAX];
        let length = Message::new(Kind::Ack, 1, 2, 3).encode(&mut out);
        for index in 0..length {
            let mut damaged = out;
            damaged[index] ^= 0x10;
            assert!(Message::decode(&damaged[..length]).is_err(), "byte {index}");
        }
        assert_eq!(Message::decode(&out[..HEADER_BYTES - 1]), Err(WireError::Short));
    }

    #[test]
    fn another_version_is_named() {
        let mut out = [0u8; MESSAGE_BYTES_MAX];
        let length = Message::new(Kind::Flush, 1, 2, 0).encode(&mut out);
        out[4] = 9;
        assert_eq!(Message::decode(&out[..length]), Err(WireError::Version(9)));
    }

    #[test]
    fn a_blocks_payload_must_be_whole_blocks() {
        let mut out = [0u8; MESSAGE_BYTES_MAX];
        for bytes in [0, 100, BLOCK_BYTES + 1] {
            let payload = alloc::vec![0u8; bytes];
            let length = Message {
                payload: &payload,
                ..Message::new(Kind::Blocks, 1, 1, 0)
            }
            .encode(&mut out);
            assert_eq!(Message::decode(&out[..length]), Err(WireError::Part), "{bytes} bytes");
        }
        let length = Message {
            payload: &[0u8; 3 * BLOCK_BYTES],
            ..Message::new(Kind::Blocks, 1, 1, 0)
        }
        .encode(&mut out);
        assert_eq!(Message::decode(&out[..length]).map(|message| message.payload.len()), Ok(3 * BLOCK_BYTES));
    }

    #[test]
    fn a_payload_past_the_longest_is_refused() {
        let mut out = alloc::vec![0u8; MESSAGE_BYTES_MAX + BLOCK_BYTES];
        let length = Message::new(Kind::Flush, 1, 2, 0).encode(&mut out);
        // A length field naming one block more than a message may carry, the bytes there.
        out[32..36].copy_from_slice(&((PAYLOAD_BYTES_MAX + BLOCK_BYTES) as u32).to_le_bytes());
        assert_eq!(Message::decode(&out[..length + PAYLOAD_BYTES_MAX + BLOCK_BYTES]), Err(WireError::Length));
    }

    #[test]
    fn a_status_survives_a_heartbeat() {
        let status = Status {
            role: Role::Primary,
            term: 3,
            checkpoint_generation: 17,
            journal_ticket_next: 99,
            mode: Mode::SynchronousDurable,
            sequence: 1000,
            received: 990,
            durable: 980,
            lag_bytes: 20 * 1024,
            lag_ms: 12,
            standby_state: StandbyState::Consistent,
            degraded: false,
            standby_heard: true,
            fenced: false,
        };
        let mut out = [0u8; MESSAGE_BYTES_MAX];
        let length = status.encode_heartbeat(5, &mut out);
        let message = Message::decode(&out[..length]).unwrap();
        assert_eq!(message.kind, Kind::Heartbeat);
        assert_eq!(Status::decode(message.payload), Some(status));
        assert_eq!(Mode::from_name("sync-received"), Some(Mode::SynchronousReceived));
    }
}
