//! Replies: `u8 version | u8 status | u16 flags (0) | u64 request_id | payload`.
//!
//! The service encodes one with [`Reply::encode`]; a client decodes the body with
//! [`Reply::decode`] and reads the payload with the accessor for the opcode it sent
//! (a client knows what it asked; the reply does not repeat the opcode). Every status but
//! `ok` has an empty payload.

use crate::bytes::{Reader, Writer};
use crate::history::HistoryRecord;
use crate::{
    HISTORY_COUNT_MAX, LENGTH_PREFIX_BYTES, REPLY_BODY_BYTES_MAX, REPLY_HEADER_BYTES, SCALE_MAX,
    Status, VERSION,
};

/// What an applied (or retried) transaction returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransactionResult {
    /// The account's balance just after this transaction's delta.
    pub account_balance: i64,
    /// Where the transaction's record is in history (from 0).
    pub history_index: u64,
}

/// `summary`'s totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SummaryTotals {
    /// Records in history.
    pub history_count: u64,
    pub accounts_total: i64,
    pub tellers_total: i64,
    pub branches_total: i64,
    /// Σ delta over history.
    pub history_total: i64,
}

/// `summary`'s sums for branch `b`. Consistent data has `tellers == branch == history`; and
/// `accounts` equals the deltas of the history records whose *account* is in `b` (15 % of
/// accounts are another branch's), which a checker sums from the records themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BranchSums {
    /// Σ balance of accounts `a` with `a / 100,000 == b`.
    pub accounts: i64,
    /// Σ balance of tellers `t` with `t / 10 == b`.
    pub tellers: i64,
    /// Branch `b`'s balance.
    pub branch: i64,
    /// Σ delta of history records whose `branch` is `b`.
    pub history: i64,
}

impl BranchSums {
    const BYTES: usize = 4 * 8;
}

/// What the service replies, for [`Reply::encode`].
#[derive(Clone, Copy, Debug)]
pub enum ReplyPayload<'a> {
    /// A refusal: this status, empty payload. (With [`Status::Ok`] it is an `ok` with an
    /// empty payload, as for `load`.)
    Error(Status),
    Transaction(TransactionResult),
    Balance {
        balance: i64,
    },
    /// `branches[b]` is branch `b`'s; the scale is `branches.len()` (at most [`SCALE_MAX`]).
    Summary {
        totals: SummaryTotals,
        branches: &'a [BranchSums],
    },
    /// At most [`HISTORY_COUNT_MAX`] records, in history order.
    History {
        records: &'a [HistoryRecord],
    },
    /// `load` finished.
    Loaded,
}

/// Why a reply could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyEncodeError {
    /// The output buffer holds fewer than `needed_bytes`.
    BufferTooSmall { needed_bytes: usize },
    /// More than [`HISTORY_COUNT_MAX`] history records.
    TooManyRecords,
    /// More than [`SCALE_MAX`] branches.
    TooManyBranches,
}

/// Why a reply body could not be read. A client that gets one should close the
/// connection: the peer does not speak this protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// The body is shorter than a reply header.
    TooShort,
    BadVersion(u8),
    UnknownStatus(u8),
    NonZeroFlags(u16),
    /// A refusal came with a payload, or an `ok` with a payload of the wrong length.
    PayloadLength {
        expected_bytes: usize,
        actual_bytes: usize,
    },
    /// The reply is a refusal, so it has no payload to read.
    Refused(Status),
    /// `summary`'s scale is above [`SCALE_MAX`].
    ScaleOutOfRange(u32),
    /// `history`'s count is above [`HISTORY_COUNT_MAX`].
    CountOutOfRange(u32),
    /// A history record's padding is not zero.
    BadHistoryRecord {
        position: u32,
    },
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplyError::TooShort => write!(formatter, "reply shorter than its header"),
            ReplyError::BadVersion(version) => write!(formatter, "reply version {version}"),
            ReplyError::UnknownStatus(code) => write!(formatter, "unknown reply status {code}"),
            ReplyError::NonZeroFlags(flags) => write!(formatter, "reply flags {flags:#06x}"),
            ReplyError::PayloadLength {
                expected_bytes,
                actual_bytes,
            } => write!(
                formatter,
                "reply payload of {actual_bytes} bytes where {expected_bytes} were expected"
            ),
            ReplyError::Refused(status) => write!(formatter, "request refused: {status}"),
            ReplyError::ScaleOutOfRange(scale) => write!(formatter, "summary scale {scale}"),
            ReplyError::CountOutOfRange(count) => write!(formatter, "history count {count}"),
            ReplyError::BadHistoryRecord { position } => {
                write!(formatter, "history record {position} has non-zero padding")
            }
        }
    }
}

/// A decoded reply body; the payload is read by the accessor for the request's opcode.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    pub request_id: u64,
    pub status: Status,
    payload: &'a [u8],
}

const SUMMARY_FIXED_BYTES: usize = 4 + 8 + 4 * 8;
const TRANSACTION_RESULT_BYTES: usize = 8 + 8;

impl<'a> Reply<'a> {
    /// Reads a reply body (a frame without its length prefix): header, and for a refusal
    /// an empty payload.
    pub fn decode(body: &'a [u8]) -> Result<Reply<'a>, ReplyError> {
        let mut reader = Reader::new(body);
        let (Some(version), Some(status_code), Some(flags), Some(request_id)) =
            (reader.u8(), reader.u8(), reader.u16(), reader.u64())
        else {
            return Err(ReplyError::TooShort);
        };
        if version != VERSION {
            return Err(ReplyError::BadVersion(version));
        }
        let status =
            Status::from_code(status_code).ok_or(ReplyError::UnknownStatus(status_code))?;
        if flags != 0 {
            return Err(ReplyError::NonZeroFlags(flags));
        }
        let payload = reader.rest();
        if status != Status::Ok && !payload.is_empty() {
            return Err(ReplyError::PayloadLength {
                expected_bytes: 0,
                actual_bytes: payload.len(),
            });
        }
        Ok(Reply {
            request_id,
            status,
            payload,
        })
    }

    /// The raw payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    fn ok_payload(&self, expected_bytes: usize) -> Result<Reader<'a>, ReplyError> {
        if self.status != Status::Ok {
            return Err(ReplyError::Refused(self.status));
        }
        if self.payload.len() != expected_bytes {
            return Err(ReplyError::PayloadLength {
                expected_bytes,
                actual_bytes: self.payload.len(),
            });
        }
        Ok(Reader::new(self.payload))
    }

    /// The reply to `transaction`.
    pub fn transaction(&self) -> Result<TransactionResult, ReplyError> {
        let mut reader = self.ok_payload(TRANSACTION_RESULT_BYTES)?;
        let short = ReplyError::TooShort;
        Ok(TransactionResult {
            account_balance: reader.i64().ok_or(short)?,
            history_index: reader.u64().ok_or(short)?,
        })
    }

    /// The reply to `balance`.
    pub fn balance(&self) -> Result<i64, ReplyError> {
        self.ok_payload(8)?.i64().ok_or(ReplyError::TooShort)
    }

    /// The reply to `load`.
    pub fn loaded(&self) -> Result<(), ReplyError> {
        self.ok_payload(0).map(|_| ())
    }

    /// The reply to `summary`.
    pub fn summary(&self) -> Result<SummaryReply<'a>, ReplyError> {
        if self.status != Status::Ok {
            return Err(ReplyError::Refused(self.status));
        }
        let mut reader = Reader::new(self.payload);
        let scale = reader.u32().ok_or(ReplyError::TooShort)?;
        if scale > SCALE_MAX {
            return Err(ReplyError::ScaleOutOfRange(scale));
        }
        // scale <= 10, so this cannot overflow.
        let expected_bytes = SUMMARY_FIXED_BYTES + scale as usize * BranchSums::BYTES;
        let mut reader = self.ok_payload(expected_bytes)?;
        let _scale = reader.u32();
        let short = ReplyError::TooShort;
        let totals = SummaryTotals {
            history_count: reader.u64().ok_or(short)?,
            accounts_total: reader.i64().ok_or(short)?,
            tellers_total: reader.i64().ok_or(short)?,
            branches_total: reader.i64().ok_or(short)?,
            history_total: reader.i64().ok_or(short)?,
        };
        Ok(SummaryReply {
            scale,
            totals,
            branches: reader.rest(),
        })
    }

    /// The reply to `history`.
    pub fn history(&self) -> Result<HistoryReply<'a>, ReplyError> {
        if self.status != Status::Ok {
            return Err(ReplyError::Refused(self.status));
        }
        let count = Reader::new(self.payload)
            .u32()
            .ok_or(ReplyError::TooShort)?;
        if count > HISTORY_COUNT_MAX {
            return Err(ReplyError::CountOutOfRange(count));
        }
        // count <= 64, so this cannot overflow.
        let expected_bytes = 4 + count as usize * HistoryRecord::BYTES;
        let reader = self.ok_payload(expected_bytes)?;
        let records = &reader.rest()[4..];
        for (position, record) in records.chunks_exact(HistoryRecord::BYTES).enumerate() {
            if record[HistoryRecord::BYTES - 6..]
                .iter()
                .any(|&byte| byte != 0)
            {
                return Err(ReplyError::BadHistoryRecord {
                    position: position as u32,
                });
            }
        }
        Ok(HistoryReply { records })
    }

    /// Writes the whole reply frame (length prefix and body) at the start of `out`;
    /// returns its length.
    pub fn encode(
        out: &mut [u8],
        request_id: u64,
        payload: &ReplyPayload<'_>,
    ) -> Result<usize, ReplyEncodeError> {
        let payload_bytes = match payload {
            ReplyPayload::Error(_) | ReplyPayload::Loaded => 0,
            ReplyPayload::Transaction(_) => TRANSACTION_RESULT_BYTES,
            ReplyPayload::Balance { .. } => 8,
            ReplyPayload::Summary { branches, .. } => {
                if branches.len() > SCALE_MAX as usize {
                    return Err(ReplyEncodeError::TooManyBranches);
                }
                SUMMARY_FIXED_BYTES + branches.len() * BranchSums::BYTES
            }
            ReplyPayload::History { records } => {
                if records.len() > HISTORY_COUNT_MAX as usize {
                    return Err(ReplyEncodeError::TooManyRecords);
                }
                4 + records.len() * HistoryRecord::BYTES
            }
        };
        let body_bytes = REPLY_HEADER_BYTES + payload_bytes;
        debug_assert!(body_bytes <= REPLY_BODY_BYTES_MAX as usize);
        let frame_bytes = LENGTH_PREFIX_BYTES + body_bytes;
        let Some(out) = out.get_mut(..frame_bytes) else {
            return Err(ReplyEncodeError::BufferTooSmall {
                needed_bytes: frame_bytes,
            });
        };
        let status = match payload {
            ReplyPayload::Error(status) => *status,
            _ => Status::Ok,
        };
        let mut writer = Writer::new(out);
        // At most 3,216 bytes (checked above): it fits a u32.
        writer.u32(body_bytes as u32);
        writer.u8(VERSION);
        writer.u8(status.code());
        writer.u16(0);
        writer.u64(request_id);
        match payload {
            ReplyPayload::Error(_) | ReplyPayload::Loaded => {}
            ReplyPayload::Transaction(result) => {
                writer.i64(result.account_balance);
                writer.u64(result.history_index);
            }
            ReplyPayload::Balance { balance } => writer.i64(*balance),
            ReplyPayload::Summary { totals, branches } => {
                // At most SCALE_MAX (checked above).
                writer.u32(branches.len() as u32);
                writer.u64(totals.history_count);
                writer.i64(totals.accounts_total);
                writer.i64(totals.tellers_total);
                writer.i64(totals.branches_total);
                writer.i64(totals.history_total);
                for sums in *branches {
                    writer.i64(sums.accounts);
                    writer.i64(sums.tellers);
                    writer.i64(sums.branch);
                    writer.i64(sums.history);
                }
            }
            ReplyPayload::History { records } => {
                // At most HISTORY_COUNT_MAX (checked above).
                writer.u32(records.len() as u32);
                for record in *records {
                    writer.bytes(&record.encode());
                }
            }
        }
        debug_assert_eq!(writer.position(), frame_bytes);
        Ok(frame_bytes)
    }
}

/// A decoded `summary` reply.
#[derive(Clone, Copy, Debug)]
pub struct SummaryReply<'a> {
    pub scale: u32,
    pub totals: SummaryTotals,
    branches: &'a [u8],
}

impl SummaryReply<'_> {
    /// Branch `b`'s sums, for `b` in `0..scale`, in order.
    pub fn branches(&self) -> impl Iterator<Item = BranchSums> + '_ {
        self.branches.chunks_exact(BranchSums::BYTES).map(|chunk| {
            let mut reader = Reader::new(chunk);
            // Each chunk is exactly four i64s, so none of these is missing.
            let mut next = || reader.i64().unwrap_or_default();
            BranchSums {
                accounts: next(),
                tellers: next(),
                branch: next(),
                history: next(),
            }
        })
    }
}

/// A decoded `history` reply whose records' padding has been checked.
#[derive(Clone, Copy, Debug)]
pub struct HistoryReply<'a> {
    records: &'a [u8],
}

impl HistoryReply<'_> {
    /// How many records the reply holds.
    pub fn count(&self) -> usize {
        self.records.len() / HistoryRecord::BYTES
    }

    /// The records, in history order.
    pub fn records(&self) -> impl Iterator<Item = HistoryRecord> + '_ {
        self.records
            .chunks_exact(HistoryRecord::BYTES)
            .filter_map(|chunk| HistoryRecord::decode(chunk.try_into().ok()?).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::TransactionId;

    fn encode(request_id: u64, payload: &ReplyPayload<'_>) -> std::vec::Vec<u8> {
        let mut frame = std::vec![0u8; crate::REPLY_FRAME_BYTES_MAX];
        let length = Reply::encode(&mut frame, request_id, payload).unwrap();
        frame.truncate(length);
        let announced = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(announced, length - 4);
        frame
    }

    #[test]
    fn a_transaction_reply_has_the_documented_layout_and_round_trips() {
        let result = TransactionResult {
            account_balance: -5,
            history_index: 77,
        };
        let frame = encode(9, &ReplyPayload::Transaction(result));
        assert_eq!(frame.len(), 4 + 12 + 16);
        assert_eq!(&frame[4..8], &[1, 0, 0, 0]);
        assert_eq!(&frame[8..16], &9u64.to_le_bytes());
        assert_eq!(&frame[16..24], &(-5i64).to_le_bytes());
        assert_eq!(&frame[24..32], &77u64.to_le_bytes());
        let reply = Reply::decode(&frame[4..]).unwrap();
        assert_eq!((reply.request_id, reply.status), (9, Status::Ok));
        assert_eq!(reply.transaction(), Ok(result));
        assert!(matches!(
            reply.balance(),
            Err(ReplyError::PayloadLength { .. })
        ));
    }

    #[test]
    fn refusals_have_no_payload() {
        let frame = encode(3, &ReplyPayload::Error(Status::BadToken));
        assert_eq!(frame.len(), 16);
        let reply = Reply::decode(&frame[4..]).unwrap();
        assert_eq!(reply.status, Status::BadToken);
        assert_eq!(
            reply.transaction(),
            Err(ReplyError::Refused(Status::BadToken))
        );
        let mut with_payload = frame[4..].to_vec();
        with_payload.push(0);
        assert!(matches!(
            Reply::decode(&with_payload),
            Err(ReplyError::PayloadLength { .. })
        ));
        let loaded = encode(4, &ReplyPayload::Loaded);
        assert_eq!(Reply::decode(&loaded[4..]).unwrap().loaded(), Ok(()));
    }

    #[test]
    fn summary_round_trips() {
        let branches = [
            BranchSums {
                accounts: 1,
                tellers: 2,
                branch: 3,
                history: 4,
            },
            BranchSums {
                accounts: -1,
                tellers: -2,
                branch: -3,
                history: -4,
            },
        ];
        let totals = SummaryTotals {
            history_count: 10,
            accounts_total: 11,
            tellers_total: 12,
            branches_total: 13,
            history_total: 14,
        };
        let frame = encode(
            5,
            &ReplyPayload::Summary {
                totals,
                branches: &branches,
            },
        );
        assert_eq!(frame.len(), 4 + 12 + 44 + 64);
        let reply = Reply::decode(&frame[4..]).unwrap();
        let summary = reply.summary().unwrap();
        assert_eq!(summary.scale, 2);
        assert_eq!(summary.totals, totals);
        assert!(summary.branches().eq(branches.iter().copied()));
        let eleven = [BranchSums::default(); 11];
        let mut out = [0u8; 1024];
        assert_eq!(
            Reply::encode(
                &mut out,
                0,
                &ReplyPayload::Summary {
                    totals,
                    branches: &eleven
                }
            ),
            Err(ReplyEncodeError::TooManyBranches)
        );
    }

    #[test]
    fn history_round_trips_and_limits_hold() {
        let records: std::vec::Vec<HistoryRecord> = (0..64)
            .map(|index| HistoryRecord {
                transaction_id: TransactionId([index as u8; 16]),
                branch: 0,
                teller: index,
                account: index * 1000,
                delta: i64::from(index) - 32,
                time_us: 1,
            })
            .collect();
        let frame = encode(6, &ReplyPayload::History { records: &records });
        assert_eq!(frame.len(), 4 + 3216);
        let reply = Reply::decode(&frame[4..]).unwrap();
        let history = reply.history().unwrap();
        assert_eq!(history.count(), 64);
        assert!(history.records().eq(records.iter().copied()));
        let mut too_many = records.clone();
        too_many.push(records[0]);
        let mut out = std::vec![0u8; 8192];
        assert_eq!(
            Reply::encode(&mut out, 0, &ReplyPayload::History { records: &too_many }),
            Err(ReplyEncodeError::TooManyRecords)
        );
        let mut damaged = frame[4..].to_vec();
        let last = damaged.len() - 1;
        damaged[last] = 1;
        assert_eq!(
            Reply::decode(&damaged).unwrap().history().err(),
            Some(ReplyError::BadHistoryRecord { position: 63 })
        );
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        let frame = encode(1, &ReplyPayload::Balance { balance: 8 });
        let body = &frame[4..];
        assert_eq!(Reply::decode(body).unwrap().balance(), Ok(8));
        assert_eq!(Reply::decode(&body[..11]).err(), Some(ReplyError::TooShort));
        let mut bad = body.to_vec();
        bad[0] = 2;
        assert_eq!(Reply::decode(&bad).err(), Some(ReplyError::BadVersion(2)));
        let mut bad = body.to_vec();
        bad[1] = 10;
        assert_eq!(
            Reply::decode(&bad).err(),
            Some(ReplyError::UnknownStatus(10))
        );
        let mut bad = body.to_vec();
        bad[3] = 1;
        assert_eq!(
            Reply::decode(&bad).err(),
            Some(ReplyError::NonZeroFlags(0x100))
        );
    }
}
