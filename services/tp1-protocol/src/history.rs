//! The history record as `history` replies carry it: 50 bytes. (The TP1 service keeps
//! its own layout in its pages and converts.)

use crate::bytes::{Reader, Writer};
use crate::request::TransactionId;

/// One applied transaction, in the order the service applied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistoryRecord {
    pub transaction_id: TransactionId,
    pub branch: u32,
    pub teller: u32,
    pub account: u32,
    pub delta: i64,
    /// When the service applied it, in microseconds of its clock (for people; nothing
    /// checks it).
    pub time_us: i64,
}

/// A history record's bad bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryRecordError {
    /// The six padding bytes at the end are not zero: the record is not where it was
    /// expected, or was damaged.
    NonZeroPadding,
}

impl HistoryRecord {
    /// Bytes of an encoded record.
    pub const BYTES: usize = 50;
    const PADDING_BYTES: usize = 6;

    /// The record's 50 bytes: transaction id, branch, teller, account, delta, time, then six
    /// zero bytes.
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut bytes = [0u8; Self::BYTES];
        let mut writer = Writer::new(&mut bytes);
        writer.bytes(&self.transaction_id.0);
        writer.u32(self.branch);
        writer.u32(self.teller);
        writer.u32(self.account);
        writer.i64(self.delta);
        writer.i64(self.time_us);
        writer.bytes(&[0; Self::PADDING_BYTES]);
        debug_assert_eq!(writer.position(), Self::BYTES);
        bytes
    }

    /// Reads a record, refusing one whose padding is not zero.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> Result<HistoryRecord, HistoryRecordError> {
        let mut reader = Reader::new(bytes);
        // The array is long enough for every field, so `record` is always `Some`; the reader
        // checks anyway rather than this code promising it.
        let record = (|| {
            Some(HistoryRecord {
                transaction_id: TransactionId(reader.array()?),
                branch: reader.u32()?,
                teller: reader.u32()?,
                account: reader.u32()?,
                delta: reader.i64()?,
                time_us: reader.i64()?,
            })
        })();
        let padding_is_zero = reader.rest().iter().all(|&byte| byte == 0);
        match record {
            Some(record) if padding_is_zero => Ok(record),
            _ => Err(HistoryRecordError::NonZeroPadding),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_its_layout_is_the_documented_one() {
        let record = HistoryRecord {
            transaction_id: TransactionId([0xa5; 16]),
            branch: 1,
            teller: 12,
            account: 123_456,
            delta: -999_999,
            time_us: 1_700_000_000_000_000,
        };
        let bytes = record.encode();
        assert_eq!(&bytes[..16], &[0xa5; 16]);
        assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
        assert_eq!(&bytes[20..24], &12u32.to_le_bytes());
        assert_eq!(&bytes[24..28], &123_456u32.to_le_bytes());
        assert_eq!(&bytes[28..36], &(-999_999i64).to_le_bytes());
        assert_eq!(&bytes[36..44], &1_700_000_000_000_000i64.to_le_bytes());
        assert_eq!(&bytes[44..], &[0; 6]);
        assert_eq!(HistoryRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn non_zero_padding_is_refused() {
        let mut bytes = HistoryRecord {
            transaction_id: TransactionId([1; 16]),
            branch: 0,
            teller: 0,
            account: 0,
            delta: 1,
            time_us: 0,
        }
        .encode();
        bytes[49] = 1;
        assert_eq!(
            HistoryRecord::decode(&bytes),
            Err(HistoryRecordError::NonZeroPadding)
        );
    }
}
