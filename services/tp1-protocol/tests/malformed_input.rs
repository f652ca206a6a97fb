//! Bad input is a typed error, never a panic: random bytes, truncated and oversized frames,
//! and valid requests with one byte changed, through the frame decoder and every body
//! decoder. Deterministic (a fixed-seed xorshift), so a failure reproduces.

use holdfast_tp1_protocol::{
    FrameError, HistoryRecord, Operation, Reply, ReplyFrameDecoder, Request, RequestFrameDecoder,
    Status, Token, Transaction, TransactionId,
};

/// xorshift64*: enough to spread bytes, and no dependency for a test.
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

    fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next() as u8).collect()
    }
}

fn valid_request(random: &mut Random) -> Vec<u8> {
    let operation = match random.below(5) {
        0 => Operation::Transaction(Transaction {
            transaction_id: TransactionId(random.bytes(16).try_into().unwrap()),
            branch: random.below(10) as u32,
            teller: random.below(100) as u32,
            account: random.below(1_000_000) as u32,
            delta: random.below(1_999_999) as i64 - 999_999,
        }),
        1 => Operation::Balance {
            account: random.next() as u32,
        },
        2 => Operation::Summary,
        3 => Operation::History {
            from_index: random.next(),
            count_max: random.below(65) as u32,
        },
        _ => Operation::Load {
            scale: 1 + random.below(10) as u32,
            replace: random.below(2) == 0,
        },
    };
    let request = Request {
        request_id: random.next(),
        token: Token(random.bytes(16).try_into().unwrap()),
        admin_token: random.below(2) == 0,
        operation,
    };
    let mut frame = vec![0u8; request.frame_bytes()];
    request.encode(&mut frame).unwrap();
    frame
}

/// Feeds `stream` to a fresh request decoder in random pieces and decodes each body it
/// yields; returns how many bodies decoded and how many were refused, and whether the
/// framing failed.
fn decode_stream(stream: &[u8], random: &mut Random) -> (usize, usize, bool) {
    let mut decoder = RequestFrameDecoder::for_requests();
    let (mut decoded, mut refused) = (0, 0);
    let mut rest = stream;
    while !rest.is_empty() {
        let piece_bytes = 1 + random.below(rest.len() as u64) as usize;
        let (piece, after) = rest.split_at(piece_bytes);
        rest = after;
        let mut input = piece;
        loop {
            match decoder.decode(&mut input) {
                Ok(Some(body)) => {
                    assert!((24..=1024).contains(&body.len()));
                    match Request::decode(body) {
                        Ok(_) => decoded += 1,
                        Err(error) => {
                            assert_ne!(error.status, Status::Ok);
                            refused += 1;
                        }
                    }
                }
                Ok(None) => break,
                Err(FrameError::BadLength { length_bytes }) => {
                    assert!(!(24..=1024).contains(&length_bytes));
                    return (decoded, refused, true);
                }
            }
        }
    }
    (decoded, refused, false)
}

#[test]
fn random_streams_never_panic_and_bad_lengths_end_the_stream() {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut failed_streams = 0;
    for _ in 0..20_000 {
        let length = random.below(2_100) as usize;
        let stream = random.bytes(length);
        let (_, _, failed) = decode_stream(&stream, &mut random);
        failed_streams += usize::from(failed);
        // A reply decoder on the same bytes: typed errors only.
        let _ = Reply::decode(&stream);
        if let Ok(reply) = Reply::decode(&stream) {
            let _ = (reply.transaction(), reply.balance(), reply.loaded());
            if let Ok(summary) = reply.summary() {
                assert!(summary.branches().count() <= 10);
            }
            if let Ok(history) = reply.history() {
                assert_eq!(history.records().count(), history.count());
            }
        }
    }
    // Random lengths are almost never in 24..=1024 (about 1 in 4 million).
    assert!(
        failed_streams > 15_000,
        "only {failed_streams} streams failed framing"
    );
}

#[test]
fn valid_streams_with_one_byte_changed_decode_or_are_refused() {
    let mut random = Random(7);
    for _ in 0..20_000 {
        let mut stream = Vec::new();
        let mut prefix_positions = Vec::new();
        let frames = 1 + random.below(4) as usize;
        for _ in 0..frames {
            prefix_positions.push(stream.len()..stream.len() + 4);
            stream.extend(valid_request(&mut random));
        }
        let (decoded, refused, failed) = decode_stream(&stream, &mut random);
        assert_eq!((decoded, refused, failed), (frames, 0, false));
        let position = random.below(stream.len() as u64) as usize;
        stream[position] ^= 1 << random.below(8);
        let (decoded, refused, failed) = decode_stream(&stream, &mut random);
        let in_prefix = prefix_positions
            .iter()
            .any(|prefix| prefix.contains(&position));
        if !in_prefix {
            // A changed body byte touches one request: it still decodes (a token or an id
            // changed) or is refused; framing is untouched.
            assert!(!failed);
            assert_eq!(decoded + refused, frames);
            assert!(refused <= 1);
        }
    }
}

#[test]
fn truncated_and_oversized_bodies_are_refused_with_bad_length() {
    let mut random = Random(11);
    for _ in 0..5_000 {
        let frame = valid_request(&mut random);
        let body = &frame[4..];
        for cut in 0..body.len() {
            let error = Request::decode(&body[..cut]).unwrap_err();
            assert_eq!(error.status, Status::BadLength, "cut at {cut}");
        }
        let mut longer = body.to_vec();
        let extra_bytes = 1 + random.below(900) as usize;
        longer.extend(random.bytes(extra_bytes));
        assert_eq!(
            Request::decode(&longer).unwrap_err().status,
            Status::BadLength
        );
    }
}

#[test]
fn random_history_records_decode_or_are_refused() {
    let mut random = Random(13);
    for _ in 0..100_000 {
        let bytes: [u8; HistoryRecord::BYTES] =
            random.bytes(HistoryRecord::BYTES).try_into().unwrap();
        if let Ok(record) = HistoryRecord::decode(&bytes) {
            assert_eq!(record.encode(), bytes);
        }
    }
}

#[test]
fn a_reply_decoder_survives_random_frames() {
    let mut random = Random(17);
    let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
    for _ in 0..2_000 {
        let length = 12 + random.below(4_000) as usize;
        let mut stream = (length as u32).to_le_bytes().to_vec();
        stream.extend(random.bytes(length));
        let mut input = &stream[..];
        let body = decoder.decode(&mut input).unwrap().unwrap();
        assert_eq!(body.len(), length);
        let _ = Reply::decode(body).map(|reply| reply.history().map(|history| history.count()));
    }
}
