//! Typed errors. Every error that comes from disk contents names the block and the check that
//! failed, so that `holdfast store check` can print it on one line; nothing read from a disk
//! can make the store panic.

use core::fmt;

use crate::device::DeviceError;

/// Which kind of record a block was read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    Superblock,
    LogHeader,
    LogData,
    NodeTable,
    NodeData,
    PageTable,
    PageData,
}

/// Which check a block failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Not a Holdfast record of this kind at all (blank or foreign).
    Magic,
    /// A Holdfast record written by another format version.
    FormatVersion,
    /// The record's checksum does not match its contents (torn write, bit rot).
    Checksum,
    /// A data block's checksum does not match the one its header or table lists for it
    /// (lost, torn or misdirected write).
    DataChecksum,
    /// The record belongs to another store.
    StoreId,
    /// The record is valid but was written for another place (misdirected write).
    Position,
    /// The record's sequence number or predecessor link is not the expected one.
    Sequence,
    /// A kind or flag field holds a value this format does not define.
    Kind,
    /// A count or index is out of its range.
    Bounds,
    /// The geometry recorded does not describe a valid layout, or differs between copies.
    Geometry,
    /// A checkpoint's commit record does not match the data records the log holds for it.
    CommitChain,
}

/// A block that failed a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    pub region: Region,
    /// The device block number.
    pub block: u64,
    pub check: Check,
}

/// Why a store operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// A device request failed on this mirror and no other mirror could serve it.
    Device { mirror: usize, error: DeviceError },
    /// Every mirror has failed: the store has no device left.
    NoMirror,
    /// Every copy of a block failed a check; the bad data is not returned.
    Corrupt(Corruption),
    /// A mirror holds a valid store with another id or geometry; it is never overwritten.
    Foreign { mirror: usize },
    /// The geometry asked of `format` is not usable, or a device is too small for it.
    Geometry(&'static str),
    /// The object id is past the end of its home range.
    ObjectOutOfRange { id: u64 },
    /// The log has no room for the records; a checkpoint and its migration free it.
    LogFull {
        needed_blocks: u64,
        free_blocks: u64,
    },
    /// The call does not fit the checkpoint's phase (for example a write with no checkpoint
    /// begun, or a new checkpoint before migration of the last one finished).
    WrongPhase,
    /// A journal commit has more pages than one log record holds.
    CommitTooLarge { pages: usize, pages_max: usize },
    /// The mirror index does not name a slot of the mirror set.
    NoSuchMirror { mirror: usize },
    /// Too many journal pages wait for [`crate::Store::journal_write`].
    JournalQueueFull,
    /// The store was opened with [`crate::Store::open_read_only`]: it writes nothing.
    ReadOnly,
    /// A log record that was durable (a later record says so) is bad on every mirror:
    /// starting from the records before it would lose the ones named. Opened with
    /// [`crate::Recover::Truncate`], the store starts there and records it.
    LogDamaged(LogLoss),
}

/// What a damaged log would lose if the store started from its last intact point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLoss {
    /// The device block of the first record no mirror holds whole.
    pub block: u64,
    /// The records lost: the damaged one up to the newest found after it.
    pub first_sequence: u64,
    pub last_sequence: u64,
    /// Lowest and highest generation the lost records name (checkpoint data and commits:
    /// their checkpoint; journal records: the snapshot their commits follow); the damaged
    /// record's own is known only when its header survived.
    pub generations: (u64, u64),
    /// The newest checkpoint whose commit record is among the lost ones.
    pub checkpoint_committed: Option<u64>,
    /// The journal tickets (commits) of the lost journal records found, lowest and highest.
    pub journal_tickets: Option<(u64, u64)>,
}

impl From<Corruption> for StoreError {
    fn from(corruption: Corruption) -> Self {
        Self::Corrupt(corruption)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Superblock => "superblock",
            Self::LogHeader => "log record header",
            Self::LogData => "log data block",
            Self::NodeTable => "node checksum table",
            Self::NodeData => "node home block",
            Self::PageTable => "page checksum table",
            Self::PageData => "page home block",
        })
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Magic => "magic number (blank or not a Holdfast store)",
            Self::FormatVersion => "format version",
            Self::Checksum => "record checksum",
            Self::DataChecksum => "data checksum listed apart from the block",
            Self::StoreId => "store id",
            Self::Position => "position (misdirected write)",
            Self::Sequence => "sequence number",
            Self::Kind => "kind field",
            Self::Bounds => "count or index bounds",
            Self::Geometry => "geometry",
            Self::CommitChain => "checkpoint commit chain",
        })
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {} ({}) failed the {} check",
            self.block, self.region, self.check
        )
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device { mirror, error } => write!(f, "mirror {mirror}: device error {error:?}"),
            Self::NoMirror => f.write_str("no mirror left: every device has failed"),
            Self::Corrupt(corruption) => write!(f, "every copy is bad: {corruption}"),
            Self::Foreign { mirror } => {
                write!(
                    f,
                    "mirror {mirror} holds another store; it is not overwritten"
                )
            }
            Self::Geometry(why) => write!(f, "geometry: {why}"),
            Self::ObjectOutOfRange { id } => write!(f, "object {id} is past its home range"),
            Self::LogFull {
                needed_blocks,
                free_blocks,
            } => write!(
                f,
                "log full: {needed_blocks} blocks needed, {free_blocks} free; checkpoint and migrate"
            ),
            Self::WrongPhase => f.write_str("not allowed in the checkpoint's current phase"),
            Self::CommitTooLarge { pages, pages_max } => {
                write!(f, "journal commit of {pages} pages; at most {pages_max}")
            }
            Self::NoSuchMirror { mirror } => write!(f, "no mirror slot {mirror}"),
            Self::JournalQueueFull => {
                f.write_str("journal queue full: write the queued commits first")
            }
            Self::ReadOnly => f.write_str("the store was opened read-only"),
            Self::LogDamaged(loss) => write!(
                f,
                "{loss}; refusing to start (`--append holdfast.recover=truncate` starts from the last intact point and loses them)"
            ),
        }
    }
}

impl fmt::Display for LogLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "log record {} (block {}) is bad on every mirror and later records say it was durable: records {}..={} would be lost (generations {}..={}",
            self.first_sequence,
            self.block,
            self.first_sequence,
            self.last_sequence,
            self.generations.0,
            self.generations.1
        )?;
        if let Some(generation) = self.checkpoint_committed {
            write!(f, ", the commit of checkpoint {generation}")?;
        }
        if let Some((first, last)) = self.journal_tickets {
            write!(f, ", journal commits {first}..={last}")?;
        }
        f.write_str(")")
    }
}
