//! Requests: `u8 version | u8 opcode | u16 flags | u64 request_id | [u8;16] token | payload`.
//!
//! [`Request::decode`] checks, in this order: the body holds a request id (else
//! `bad_length`, id 0), the version (`bad_version`), the opcode (`bad_opcode`), the body's
//! length is exactly the header plus the opcode's payload (`bad_length`), the flags and
//! the payload's ranges that need no data (`bad_argument`). Each refusal carries the
//! request id, so the error reply can be matched. The token is not checked here: the
//! service compares it with [`crate::token_index_constant_time`] after decoding; ids against
//! the loaded scale are checked with [`Transaction::check_range`] and friends.

use crate::bytes::{Reader, Writer};
use crate::token::Token;
use crate::{
    ACCOUNTS_PER_BRANCH, BufferTooSmall, DELTA_MAGNITUDE_MAX, HISTORY_COUNT_MAX,
    LENGTH_PREFIX_BYTES, REQUEST_HEADER_BYTES, SCALE_MAX, Status, TELLERS_PER_BRANCH, VERSION,
};

/// `load` flag: replace data that exists (else `load` is refused with `busy`).
pub const FLAG_LOAD_REPLACE: u16 = 1 << 0;
/// Any opcode: the token is an admin token (checked against the admin tokens instead of
/// the client tokens). `load` needs it.
pub const FLAG_ADMIN_TOKEN: u16 = 1 << 1;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Transaction = 1,
    Balance = 2,
    Summary = 3,
    History = 4,
    Load = 5,
}

impl Opcode {
    /// Every opcode, in code order.
    pub const ALL: [Opcode; 5] = [
        Opcode::Transaction,
        Opcode::Balance,
        Opcode::Summary,
        Opcode::History,
        Opcode::Load,
    ];

    /// The opcode with this code, if there is one.
    pub fn from_code(code: u8) -> Option<Opcode> {
        Opcode::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// Bytes of the request payload that follows the header.
    pub fn payload_bytes(self) -> usize {
        match self {
            Opcode::Transaction => 16 + 4 + 4 + 4 + 8,
            Opcode::Balance => 4,
            Opcode::Summary => 0,
            Opcode::History => 8 + 4,
            Opcode::Load => 4,
        }
    }

    /// The flag bits this opcode defines.
    fn flags_allowed(self) -> u16 {
        match self {
            Opcode::Load => FLAG_LOAD_REPLACE | FLAG_ADMIN_TOKEN,
            _ => FLAG_ADMIN_TOKEN,
        }
    }
}

/// A client-chosen 128-bit transaction id: a retried id returns the first result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransactionId(pub [u8; 16]);

impl core::fmt::Display for TransactionId {
    /// 32 lowercase hexadecimal digits.
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for byte in self.0 {
            write!(formatter, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// TPC-B's one transaction: add `delta` to an account, a teller and a branch, and append
/// a history record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transaction {
    pub transaction_id: TransactionId,
    pub branch: u32,
    pub teller: u32,
    pub account: u32,
    /// Within ±[`DELTA_MAGNITUDE_MAX`] (checked by [`Request::decode`]).
    pub delta: i64,
}

impl Transaction {
    /// `bad_argument` unless the branch, teller and account exist at `scale`. TPC-B lets a
    /// teller of any branch serve any account, so only the ranges are checked.
    pub fn check_range(&self, scale: u32) -> Result<(), Status> {
        let branches = u64::from(scale);
        let in_range = u64::from(self.branch) < branches
            && u64::from(self.teller) < branches * u64::from(TELLERS_PER_BRANCH)
            && u64::from(self.account) < branches * u64::from(ACCOUNTS_PER_BRANCH);
        if in_range {
            Ok(())
        } else {
            Err(Status::BadArgument)
        }
    }
}

/// A request's operation and its decoded payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Transaction(Transaction),
    /// An account's balance (`bad_argument` if the account is beyond the loaded scale).
    Balance {
        account: u32,
    },
    /// Totals and per-branch sums (see [`crate::SummaryReply`]).
    Summary,
    /// Up to `count_max` (at most [`HISTORY_COUNT_MAX`]) history records from `from_index`;
    /// fewer (maybe none) at the end of history.
    History {
        from_index: u64,
        count_max: u32,
    },
    /// Make fresh TPC-B data at `scale` (1..=[`SCALE_MAX`]): balances 0, history empty.
    Load {
        scale: u32,
        replace: bool,
    },
}

impl Operation {
    pub fn opcode(&self) -> Opcode {
        match self {
            Operation::Transaction(_) => Opcode::Transaction,
            Operation::Balance { .. } => Opcode::Balance,
            Operation::Summary => Opcode::Summary,
            Operation::History { .. } => Opcode::History,
            Operation::Load { .. } => Opcode::Load,
        }
    }
}

/// A decoded request.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub request_id: u64,
    pub token: Token,
    /// Flags bit 1: `token` is to be checked against the admin tokens.
    pub admin_token: bool,
    pub operation: Operation,
}

/// A request refused before it was carried out: reply with `status` and `request_id`
/// (0 when the body was too short to hold one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestError {
    pub request_id: u64,
    pub status: Status,
}

impl Request {
    /// Decodes a request body (a frame without its length prefix).
    pub fn decode(body: &[u8]) -> Result<Request, RequestError> {
        let mut reader = Reader::new(body);
        let refuse = |request_id, status| Err(RequestError { request_id, status });
        let (Some(version), Some(opcode_code), Some(flags), Some(request_id)) =
            (reader.u8(), reader.u8(), reader.u16(), reader.u64())
        else {
            return refuse(0, Status::BadLength);
        };
        if version != VERSION {
            return refuse(request_id, Status::BadVersion);
        }
        let Some(opcode) = Opcode::from_code(opcode_code) else {
            return refuse(request_id, Status::BadOpcode);
        };
        if body.len() != REQUEST_HEADER_BYTES + opcode.payload_bytes() {
            return refuse(request_id, Status::BadLength);
        }
        if flags & !opcode.flags_allowed() != 0 {
            return refuse(request_id, Status::BadArgument);
        }
        // The length was checked just above, so every field below is present.
        let Some(token) = reader.array().map(Token) else {
            return refuse(request_id, Status::BadLength);
        };
        let Some(operation) = decode_payload(opcode, flags, &mut reader) else {
            return refuse(request_id, Status::BadLength);
        };
        let in_range = match operation {
            Operation::Transaction(transaction) => {
                (-DELTA_MAGNITUDE_MAX..=DELTA_MAGNITUDE_MAX).contains(&transaction.delta)
            }
            Operation::History { count_max, .. } => count_max <= HISTORY_COUNT_MAX,
            Operation::Load { scale, .. } => (1..=SCALE_MAX).contains(&scale),
            Operation::Balance { .. } | Operation::Summary => true,
        };
        if !in_range {
            return refuse(request_id, Status::BadArgument);
        }
        Ok(Request {
            request_id,
            token,
            admin_token: flags & FLAG_ADMIN_TOKEN != 0,
            operation,
        })
    }

    /// Bytes of this request's frame, length prefix included.
    pub fn frame_bytes(&self) -> usize {
        LENGTH_PREFIX_BYTES + REQUEST_HEADER_BYTES + self.operation.opcode().payload_bytes()
    }

    /// Writes the whole frame (length prefix and body) at the start of `out`; returns its
    /// length. Encodes what it is given: a client may send what the service will refuse.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let frame_bytes = self.frame_bytes();
        let Some(out) = out.get_mut(..frame_bytes) else {
            return Err(BufferTooSmall {
                needed_bytes: frame_bytes,
            });
        };
        let mut flags = 0;
        if self.admin_token {
            flags |= FLAG_ADMIN_TOKEN;
        }
        if let Operation::Load { replace: true, .. } = self.operation {
            flags |= FLAG_LOAD_REPLACE;
        }
        let mut writer = Writer::new(out);
        // At most 1,024 + 4 bytes: it fits a u32.
        writer.u32((frame_bytes - LENGTH_PREFIX_BYTES) as u32);
        writer.u8(VERSION);
        writer.u8(self.operation.opcode().code());
        writer.u16(flags);
        writer.u64(self.request_id);
        writer.bytes(&self.token.0);
        match self.operation {
            Operation::Transaction(transaction) => {
                writer.bytes(&transaction.transaction_id.0);
                writer.u32(transaction.branch);
                writer.u32(transaction.teller);
                writer.u32(transaction.account);
                writer.i64(transaction.delta);
            }
            Operation::Balance { account } => writer.u32(account),
            Operation::Summary => {}
            Operation::History {
                from_index,
                count_max,
            } => {
                writer.u64(from_index);
                writer.u32(count_max);
            }
            Operation::Load { scale, .. } => writer.u32(scale),
        }
        debug_assert_eq!(writer.position(), frame_bytes);
        Ok(frame_bytes)
    }
}

fn decode_payload(opcode: Opcode, flags: u16, reader: &mut Reader<'_>) -> Option<Operation> {
    Some(match opcode {
        Opcode::Transaction => Operation::Transaction(Transaction {
            transaction_id: TransactionId(reader.array()?),
            branch: reader.u32()?,
            teller: reader.u32()?,
            account: reader.u32()?,
            delta: reader.i64()?,
        }),
        Opcode::Balance => Operation::Balance {
            account: reader.u32()?,
        },
        Opcode::Summary => Operation::Summary,
        Opcode::History => Operation::History {
            from_index: reader.u64()?,
            count_max: reader.u32()?,
        },
        Opcode::Load => Operation::Load {
            scale: reader.u32()?,
            replace: flags & FLAG_LOAD_REPLACE != 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transaction_request(delta: i64) -> Request {
        Request {
            request_id: 0x0102_0304_0506_0708,
            token: Token([0x5a; 16]),
            admin_token: false,
            operation: Operation::Transaction(Transaction {
                transaction_id: TransactionId([0xc3; 16]),
                branch: 0,
                teller: 9,
                account: 99_999,
                delta,
            }),
        }
    }

    fn encode(request: &Request) -> ([u8; 128], usize) {
        let mut frame = [0u8; 128];
        let length = request.encode(&mut frame).unwrap();
        (frame, length)
    }

    #[test]
    fn a_transaction_has_the_documented_layout_and_round_trips() {
        let request = transaction_request(-999_999);
        let (frame, length) = encode(&request);
        assert_eq!(length, 4 + 64);
        assert_eq!(&frame[..4], &64u32.to_le_bytes());
        assert_eq!(frame[4], 1, "version");
        assert_eq!(frame[5], 1, "opcode");
        assert_eq!(&frame[6..8], &[0, 0], "flags");
        assert_eq!(&frame[8..16], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&frame[16..32], &[0x5a; 16]);
        assert_eq!(&frame[32..48], &[0xc3; 16]);
        assert_eq!(&frame[48..52], &0u32.to_le_bytes());
        assert_eq!(&frame[52..56], &9u32.to_le_bytes());
        assert_eq!(&frame[56..60], &99_999u32.to_le_bytes());
        assert_eq!(&frame[60..68], &(-999_999i64).to_le_bytes());
        let decoded = Request::decode(&frame[4..length]).unwrap();
        assert_eq!(decoded.request_id, request.request_id);
        assert_eq!(decoded.token.0, request.token.0);
        assert_eq!(decoded.operation, request.operation);
        assert!(!decoded.admin_token);
    }

    #[test]
    fn every_operation_round_trips() {
        let operations = [
            Operation::Balance { account: 7 },
            Operation::Summary,
            Operation::History {
                from_index: u64::MAX,
                count_max: 64,
            },
            Operation::Load {
                scale: 10,
                replace: true,
            },
            Operation::Load {
                scale: 1,
                replace: false,
            },
        ];
        for operation in operations {
            let request = Request {
                request_id: 42,
                token: Token([1; 16]),
                admin_token: true,
                operation,
            };
            let (frame, length) = encode(&request);
            assert_eq!(length, request.frame_bytes());
            let decoded = Request::decode(&frame[4..length]).unwrap();
            assert_eq!(decoded.operation, operation);
            assert!(decoded.admin_token);
        }
    }

    #[test]
    fn each_refusal_has_its_status_and_keeps_the_request_id() {
        let (frame, length) = encode(&transaction_request(5));
        let body = &frame[4..length];
        let refused = |body: &[u8]| Request::decode(body).unwrap_err();
        let with = |index: usize, value: u8| {
            let mut copy = [0u8; 64];
            copy.copy_from_slice(body);
            copy[index] = value;
            copy
        };
        let id = 0x0102_0304_0506_0708;
        let error = |status| RequestError {
            request_id: id,
            status,
        };
        assert_eq!(refused(&with(0, 2)), error(Status::BadVersion));
        assert_eq!(refused(&with(1, 0)), error(Status::BadOpcode));
        assert_eq!(refused(&with(1, 6)), error(Status::BadOpcode));
        assert_eq!(
            refused(&with(2, 1)),
            error(Status::BadArgument),
            "replace on a transaction"
        );
        assert_eq!(refused(&with(3, 0x80)), error(Status::BadArgument));
        assert_eq!(refused(&body[..63]), error(Status::BadLength));
        assert_eq!(refused(&body[..24]), error(Status::BadLength));
        let mut longer = [0u8; 65];
        longer[..64].copy_from_slice(body);
        assert_eq!(refused(&longer), error(Status::BadLength));
        assert_eq!(
            refused(&body[..11]),
            RequestError {
                request_id: 0,
                status: Status::BadLength
            }
        );
        for delta in [1_000_000, -1_000_000, i64::MAX, i64::MIN] {
            let (frame, length) = encode(&transaction_request(delta));
            assert_eq!(refused(&frame[4..length]), error(Status::BadArgument));
        }
    }

    #[test]
    fn out_of_range_payloads_are_bad_arguments() {
        for operation in [
            Operation::History {
                from_index: 0,
                count_max: 65,
            },
            Operation::Load {
                scale: 0,
                replace: false,
            },
            Operation::Load {
                scale: 11,
                replace: false,
            },
        ] {
            let request = Request {
                request_id: 3,
                token: Token([0; 16]),
                admin_token: true,
                operation,
            };
            let (frame, length) = encode(&request);
            assert_eq!(
                Request::decode(&frame[4..length]).unwrap_err(),
                RequestError {
                    request_id: 3,
                    status: Status::BadArgument
                }
            );
        }
    }

    #[test]
    fn ranges_follow_the_scale() {
        let at = |branch, teller, account| Transaction {
            transaction_id: TransactionId([0; 16]),
            branch,
            teller,
            account,
            delta: 0,
        };
        assert_eq!(at(0, 9, 99_999).check_range(1), Ok(()));
        assert_eq!(at(1, 0, 0).check_range(1), Err(Status::BadArgument));
        assert_eq!(at(0, 10, 0).check_range(1), Err(Status::BadArgument));
        assert_eq!(at(0, 0, 100_000).check_range(1), Err(Status::BadArgument));
        assert_eq!(at(9, 99, 999_999).check_range(10), Ok(()));
        assert_eq!(
            at(u32::MAX, 0, 0).check_range(u32::MAX),
            Err(Status::BadArgument)
        );
    }

    #[test]
    fn an_encode_into_a_short_buffer_is_refused() {
        let mut short = [0u8; 67];
        assert_eq!(
            transaction_request(1).encode(&mut short),
            Err(BufferTooSmall { needed_bytes: 68 })
        );
    }

    #[test]
    fn transaction_ids_print_as_hex() {
        use std::string::ToString;
        let mut bytes = [0u8; 16];
        bytes[0] = 0xab;
        bytes[15] = 0x01;
        assert_eq!(
            TransactionId(bytes).to_string(),
            "ab000000000000000000000000000001"
        );
    }
}
