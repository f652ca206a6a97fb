//! The TP1 wire protocol, version 1: what a client on the host and the ring-3 TP1 service say
//! to each other over TCP. `docs/tp1-protocol.md` describes it for people; this crate is the
//! one implementation both sides use, so that they cannot drift apart.
//!
//! - [`frame`]: length-prefixed frames and a streaming [`FrameDecoder`] that takes bytes as
//!   they arrive and yields whole frames, refusing a bad length before buffering anything.
//! - [`request`]: [`Request::decode`] (the service) and [`Request::encode`] (clients).
//! - [`reply`]: reply encoders (the service) and [`Reply::decode`] with typed payload
//!   readers (clients).
//! - [`history`]: the 50-byte [`HistoryRecord`].
//! - [`token`]: the 128-bit sparse capability and its constant-time comparison.
//!
//! `no_std`, no allocation, no `unsafe`: every decoder checks lengths before it reads and
//! returns a typed error for bad input; none of them panics on any input.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod frame;
pub mod history;
pub mod reply;
pub mod request;
pub mod token;

mod bytes;

pub use frame::{FrameDecoder, FrameError, ReplyFrameDecoder, RequestFrameDecoder};
pub use history::HistoryRecord;
pub use reply::{
    BranchSums, HistoryReply, Reply, ReplyEncodeError, ReplyError, ReplyPayload, SummaryReply,
    SummaryTotals, TransactionResult,
};
pub use request::{
    FLAG_ADMIN_TOKEN, FLAG_LOAD_REPLACE, Opcode, Operation, Request, RequestError, Transaction,
    TransactionId,
};
pub use token::{Token, token_index_constant_time, tokens_equal_constant_time};

/// The protocol version carried in every request and reply body.
pub const VERSION: u8 = 1;

/// Bytes of the little-endian `u32` length that starts every frame.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// The smallest request body length a frame may announce. Shorter lengths are refused
/// with `bad_length` before the body is read (the connection is then closed). Note that
/// the request header alone is [`REQUEST_HEADER_BYTES`] (28): a body of 24..=27 bytes is
/// framed but refused by [`Request::decode`] with `bad_length`, its request id intact.
pub const REQUEST_BODY_BYTES_MIN: u32 = 24;
/// The largest request body length a frame may announce.
pub const REQUEST_BODY_BYTES_MAX: u32 = 1024;
/// The largest reply body length (a reply to `history` is 3,216 bytes at most, to
/// `summary` 376; the limit leaves room to grow without a new version).
pub const REPLY_BODY_BYTES_MAX: u32 = 64 * 1024;
/// version, opcode, flags, request id, token.
pub const REQUEST_HEADER_BYTES: usize = 1 + 1 + 2 + 8 + 16;
/// version, status, flags, request id.
pub const REPLY_HEADER_BYTES: usize = 1 + 1 + 2 + 8;
/// The largest request frame, length prefix included.
pub const REQUEST_FRAME_BYTES_MAX: usize = LENGTH_PREFIX_BYTES + REQUEST_BODY_BYTES_MAX as usize;
/// The largest reply frame, length prefix included.
pub const REPLY_FRAME_BYTES_MAX: usize = LENGTH_PREFIX_BYTES + REPLY_BODY_BYTES_MAX as usize;

/// TPC-B's shape: per scale unit one branch, ten tellers and 100,000 accounts.
pub const TELLERS_PER_BRANCH: u32 = 10;
/// See [`TELLERS_PER_BRANCH`].
pub const ACCOUNTS_PER_BRANCH: u32 = 100_000;
/// The largest scale `load` accepts (1,000,000 accounts).
pub const SCALE_MAX: u32 = 10;
/// TPC-B's delta range, inclusive at both ends: `transaction` refuses a larger magnitude with
/// `bad_argument`, which also keeps every balance far from `i64` overflow (2^63 / 10^6 is
/// about 9 * 10^12 transactions).
pub const DELTA_MAGNITUDE_MAX: i64 = 999_999;
/// The most history records one `history` request may ask for.
pub const HISTORY_COUNT_MAX: u32 = 64;

/// A reply's status. Every status but [`Status::Ok`] has an empty payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// The request's version is not [`VERSION`].
    BadVersion = 1,
    /// The opcode is not one of [`Opcode`]'s.
    BadOpcode = 2,
    /// The frame's length is out of range, or the body's length is not its opcode's.
    BadLength = 3,
    /// The token is not a valid one, or not an admin token where one is needed.
    BadToken = 4,
    /// A field is out of range: an id beyond the loaded scale, a delta beyond
    /// [`DELTA_MAGNITUDE_MAX`], a scale beyond 1..=[`SCALE_MAX`], a count beyond
    /// [`HISTORY_COUNT_MAX`], a flag bit that the opcode does not define.
    BadArgument = 5,
    /// No data is loaded yet.
    NotLoaded = 6,
    /// A load is running, or data exists and `load` did not set [`request::FLAG_LOAD_REPLACE`].
    Busy = 7,
    /// The service failed (its journal refused a commit, ...); the request may be retried.
    Internal = 8,
    /// A `load` the service's storage cannot hold: its space bank refused the pages the
    /// scale needs. Nothing was loaded; a smaller scale may fit.
    NoSpace = 9,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 10] = [
        Status::Ok,
        Status::BadVersion,
        Status::BadOpcode,
        Status::BadLength,
        Status::BadToken,
        Status::BadArgument,
        Status::NotLoaded,
        Status::Busy,
        Status::Internal,
        Status::NoSpace,
    ];

    /// The status with this code, if there is one.
    pub fn from_code(code: u8) -> Option<Status> {
        Status::ALL.get(usize::from(code)).copied()
    }

    /// The code on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The name used in docs and metrics labels (`holdfast_tp1_errors_total{code="bad_token"}`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::BadVersion => "bad_version",
            Status::BadOpcode => "bad_opcode",
            Status::BadLength => "bad_length",
            Status::BadToken => "bad_token",
            Status::BadArgument => "bad_argument",
            Status::NotLoaded => "not_loaded",
            Status::Busy => "busy",
            Status::Internal => "internal",
            Status::NoSpace => "no_space",
        }
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// An output buffer too small for what was to be encoded into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the encoding needs.
    pub needed_bytes: usize,
}

impl core::fmt::Display for BufferTooSmall {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            formatter,
            "output buffer too small: {} bytes needed",
            self.needed_bytes
        )
    }
}

/// The branch an account belongs to (TPC-B: account `a` is in branch `a / 100,000`).
pub fn branch_of_account(account: u32) -> u32 {
    account / ACCOUNTS_PER_BRANCH
}

/// Whether `account` exists at `scale` (`balance` answers `bad_argument` otherwise).
pub fn account_exists(account: u32, scale: u32) -> bool {
    u64::from(account) < u64::from(scale) * u64::from(ACCOUNTS_PER_BRANCH)
}

/// The branch a teller belongs to (teller `t` is in branch `t / 10`).
pub fn branch_of_teller(teller: u32) -> u32 {
    teller / TELLERS_PER_BRANCH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_round_trip_and_unknown_codes_are_refused() {
        for (code, status) in Status::ALL.iter().enumerate() {
            assert_eq!(usize::from(status.code()), code);
            assert_eq!(Status::from_code(status.code()), Some(*status));
        }
        for code in Status::ALL.len() as u8..=255 {
            assert_eq!(Status::from_code(code), None);
        }
    }

    #[test]
    fn ownership_follows_tpc_b() {
        assert_eq!(branch_of_account(99_999), 0);
        assert_eq!(branch_of_account(100_000), 1);
        assert_eq!(branch_of_teller(9), 0);
        assert_eq!(branch_of_teller(10), 1);
    }
}
