//! The audit log: every grant, refusal, revocation, compartment made and policy set, one
//! fixed-size record each, appended in order.
//!
//! The log is a run of pages: a header (64 bytes: [`MAGIC`], then the record count, the
//! word the journal's guarded write checks, so that an append is made once whatever
//! restart comes), then the records, [`RECORD_BYTES`] each, record i at
//! [`record_offset`]`(i)`. A record carries its format version, its own position (so that a
//! record written or read at the wrong place is caught) and a CRC-32C of the rest: a record
//! that fails any check is an [`AuditError`], never a panic and never a line printed as if
//! it were good.
//!
//! Record layout (little-endian): 0 version u16; 2 event u8; 3 the capability's type code
//! u8; 4 the refusal code u16 (0 if none); 6 from, 7 to (compartment numbers, 0xff none);
//! 8 sequence u64 (the record's position); 16 the boot it was written in u64; 24 the from
//! compartment's name, 40 the to compartment's (16 bytes each, zero-padded); 56 detail u32
//! (the compartment's generation for `created` and `revoked`, the kinds for `policy`);
//! 60 CRC-32C of bytes 0..60.

use crate::{Name, NAME_BYTES_MAX};

pub const VERSION: u16 = 1;
pub const RECORD_BYTES: usize = 64;
pub const HEADER_BYTES: usize = 64;
/// The header's first word once anything is written; a log never written is all zero.
pub const MAGIC: u64 = u64::from_le_bytes(*b"KSAUDIT1");
/// The count's place in the header: the guard of every append.
pub const COUNT_OFFSET: usize = 8;
/// No compartment (the `to` of a revocation).
pub const NONE: u8 = 0xff;

const CHECKSUM: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// Where record `sequence` starts in the log.
pub const fn record_offset(sequence: u64) -> u64 {
    HEADER_BYTES as u64 + sequence * RECORD_BYTES as u64
}

/// How many records a log of `log_bytes` holds.
pub const fn capacity(log_bytes: usize) -> u64 {
    (log_bytes.saturating_sub(HEADER_BYTES) / RECORD_BYTES) as u64
}

/// Whether a log of `log_bytes` holding `count` records has room for one of `event`. The
/// last [`crate::COMPARTMENTS_MAX`] records are kept for revocations: every live compartment
/// can always be revoked, with its record, however full the log (the others are refused
/// first, and a grant that cannot be logged is not made).
pub fn has_room(event: Event, count: u64, log_bytes: usize) -> bool {
    let reserved = if event == Event::Revoked { 0 } else { crate::COMPARTMENTS_MAX as u64 };
    count.saturating_add(reserved) < capacity(log_bytes)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Created = 1,
    Granted = 2,
    Refused = 3,
    Revoked = 4,
    Policy = 5,
}

impl Event {
    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Created,
            2 => Self::Granted,
            3 => Self::Refused,
            4 => Self::Revoked,
            5 => Self::Policy,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Granted => "granted",
            Self::Refused => "refused",
            Self::Revoked => "revoked",
            Self::Policy => "policy",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditError {
    /// The header's first word is neither 0 nor [`MAGIC`], or its count exceeds the log.
    BadHeader,
    /// A record of a format this code does not read.
    BadVersion(u16),
    /// The record's checksum does not match its bytes.
    BadChecksum,
    BadEvent(u8),
    /// The record says it is another position's.
    Misplaced { expected: u64, found: u64 },
    BadName,
}

impl AuditError {
    pub fn description(self) -> &'static str {
        match self {
            Self::BadHeader => "the audit log's header is corrupt",
            Self::BadVersion(_) => "an audit record has a version this monitor does not read",
            Self::BadChecksum => "an audit record's checksum does not match (corrupt record)",
            Self::BadEvent(_) => "an audit record has an unknown event",
            Self::Misplaced { .. } => "an audit record is at another record's position",
            Self::BadName => "an audit record holds a malformed compartment name",
        }
    }
}

/// The record count a header holds.
pub fn decode_header(header: &[u8], log_bytes: usize) -> Result<u64, AuditError> {
    let word = |at: usize| header.get(at..at + 8).map(|bytes| u64::from_le_bytes(bytes.try_into().expect("8 bytes")));
    let (magic, count) = (word(0).ok_or(AuditError::BadHeader)?, word(COUNT_OFFSET).ok_or(AuditError::BadHeader)?);
    match magic {
        0 if count == 0 => Ok(0),
        MAGIC if count <= capacity(log_bytes) => Ok(count),
        _ => Err(AuditError::BadHeader),
    }
}

/// A header holding `count` records.
pub fn encode_header(count: u64) -> [u8; 16] {
    let mut header = [0; 16];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..].copy_from_slice(&count.to_le_bytes());
    header
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub event: Event,
    pub type_code: u8,
    pub code: u16,
    pub from: u8,
    pub to: u8,
    pub sequence: u64,
    pub boot: u64,
    pub from_name: Name,
    pub to_name: Name,
    pub detail: u32,
}

fn name_from(padded: &[u8]) -> Result<Name, AuditError> {
    let length = padded.iter().position(|&byte| byte == 0).unwrap_or(NAME_BYTES_MAX);
    if padded[length..].iter().any(|&byte| byte != 0) {
        return Err(AuditError::BadName);
    }
    if length == 0 {
        return Ok(Name::EMPTY);
    }
    Name::parse(&padded[..length]).map_err(|_| AuditError::BadName)
}

impl Record {
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut bytes = [0; RECORD_BYTES];
        bytes[0..2].copy_from_slice(&VERSION.to_le_bytes());
        bytes[2] = self.event as u8;
        bytes[3] = self.type_code;
        bytes[4..6].copy_from_slice(&self.code.to_le_bytes());
        bytes[6] = self.from;
        bytes[7] = self.to;
        bytes[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.boot.to_le_bytes());
        bytes[24..40].copy_from_slice(&self.from_name.padded());
        bytes[40..56].copy_from_slice(&self.to_name.padded());
        bytes[56..60].copy_from_slice(&self.detail.to_le_bytes());
        let checksum = CHECKSUM.checksum(&bytes[..60]);
        bytes[60..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The record at position `sequence`, checked.
    pub fn decode(bytes: &[u8; RECORD_BYTES], sequence: u64) -> Result<Self, AuditError> {
        let checksum = u32::from_le_bytes(bytes[60..].try_into().expect("4 bytes"));
        if CHECKSUM.checksum(&bytes[..60]) != checksum {
            return Err(AuditError::BadChecksum);
        }
        let version = u16::from_le_bytes([bytes[0], bytes[1]]);
        if version != VERSION {
            return Err(AuditError::BadVersion(version));
        }
        let found = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        if found != sequence {
            return Err(AuditError::Misplaced { expected: sequence, found });
        }
        Ok(Self {
            event: Event::from_code(bytes[2]).ok_or(AuditError::BadEvent(bytes[2]))?,
            type_code: bytes[3],
            code: u16::from_le_bytes([bytes[4], bytes[5]]),
            from: bytes[6],
            to: bytes[7],
            sequence,
            boot: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
            from_name: name_from(&bytes[24..40])?,
            to_name: name_from(&bytes[40..56])?,
            detail: u32::from_le_bytes(bytes[56..60].try_into().expect("4 bytes")),
        })
    }

    /// Whether the record is about compartment `name` (as either side).
    pub fn involves(&self, name: &Name) -> bool {
        self.from_name == *name || (self.to != NONE && self.to_name == *name)
    }

    /// The record as one line (without its newline), in pieces: `<sequence> boot <b>
    /// created A generation 1`, `granted A -> B page`, `refused A -> B node code 401`,
    /// `revoked A generation 1`, `policy A -> B kinds page,start`.
    pub fn render(&self, out: &mut dyn FnMut(&[u8])) {
        let mut digits = [0u8; 20];
        out(decimal(self.sequence, &mut digits));
        out(b" boot ");
        out(decimal(self.boot, &mut digits));
        out(b" ");
        out(self.event.name().as_bytes());
        out(b" ");
        out(self.from_name.as_bytes());
        if self.to != NONE {
            out(b" -> ");
            out(self.to_name.as_bytes());
        }
        match self.event {
            Event::Created | Event::Revoked => {
                out(b" generation ");
                out(decimal(u64::from(self.detail), &mut digits));
            }
            Event::Granted => {
                out(b" ");
                out(kind_name(u64::from(self.type_code)).as_bytes());
            }
            Event::Refused => {
                out(b" ");
                out(kind_name(u64::from(self.type_code)).as_bytes());
                out(b" code ");
                out(decimal(u64::from(self.code), &mut digits));
            }
            Event::Policy => {
                out(b" kinds ");
                let mut first = true;
                for code in (0..32).filter(|code| self.detail >> code & 1 != 0) {
                    if !first {
                        out(b",");
                    }
                    first = false;
                    out(kind_name(code).as_bytes());
                }
                if first {
                    out(b"none");
                }
            }
        }
    }
}

/// The kernel's name of a type code (`other` for a code it does not have).
pub fn kind_name(type_code: u64) -> &'static str {
    holdfast_abi::interface::Type::from_code(type_code).map_or("other", holdfast_abi::interface::Type::name)
}

/// The kind a name means (the kernel's type names), for the policy's text form.
pub fn kind_from_name(name: &[u8]) -> Option<u64> {
    (0..32).find(|&code| holdfast_abi::interface::Type::from_code(code).is_some_and(|kind| kind.name().as_bytes() == name))
}

fn decimal(value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            return &digits[start..];
        }
    }
}
