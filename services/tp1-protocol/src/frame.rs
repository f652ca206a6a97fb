//! Frames: a little-endian `u32` length, then that many bytes of body.
//!
//! [`FrameDecoder`] is fed whatever the socket delivered, in pieces of any size, and yields
//! each complete body in turn. It checks the length as soon as the four prefix bytes are in,
//! before it buffers any body, so an oversized frame costs nothing but its prefix; after a bad
//! length it stays failed (the connection must be closed: the stream has no way to find the
//! next frame). Its buffer is fixed (`BODY_BYTES_MAX`), so a connection's memory is bounded.

use crate::{
    LENGTH_PREFIX_BYTES, REPLY_BODY_BYTES_MAX, REPLY_HEADER_BYTES, REQUEST_BODY_BYTES_MAX,
    REQUEST_BODY_BYTES_MIN,
};

/// A frame the decoder refuses. The service answers it with a `bad_length` reply whose
/// request id is 0 (no body was read, so there is none) and then closes the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix is outside the decoder's range.
    BadLength {
        /// The length the prefix announced.
        length_bytes: u32,
    },
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::BadLength { length_bytes } => {
                write!(formatter, "frame length {length_bytes} is out of range")
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Gathering the length prefix (`prefix_filled` of 4 bytes so far).
    Prefix,
    /// Gathering `body_length` bytes of body.
    Body,
    /// The last call returned a whole body; the next call starts a new frame.
    Yielded,
    /// A bad length was seen; nothing more is read.
    Failed(FrameError),
}

/// A streaming frame decoder with room for bodies up to `BODY_BYTES_MAX` bytes.
///
/// ```
/// # use holdfast_tp1_protocol::{RequestFrameDecoder, FrameDecoder};
/// let mut decoder = RequestFrameDecoder::for_requests();
/// let mut received: &[u8] = &[24, 0, 0, 0, 1, 2, 3];
/// // Only 3 of the 24 body bytes are in: nothing yet, all input consumed.
/// assert_eq!(decoder.decode(&mut received), Ok(None));
/// assert!(received.is_empty());
/// ```
pub struct FrameDecoder<const BODY_BYTES_MAX: usize> {
    body_bytes_min: u32,
    state: State,
    prefix: [u8; LENGTH_PREFIX_BYTES],
    prefix_filled: usize,
    body_length: usize,
    body_filled: usize,
    body: [u8; BODY_BYTES_MAX],
}

/// The service's decoder: request bodies of 24..=1024 bytes.
pub type RequestFrameDecoder = FrameDecoder<{ REQUEST_BODY_BYTES_MAX as usize }>;
/// A client's decoder: reply bodies of 12..=65,536 bytes (64 KiB inline: box it).
pub type ReplyFrameDecoder = FrameDecoder<{ REPLY_BODY_BYTES_MAX as usize }>;

impl RequestFrameDecoder {
    /// A decoder for request frames.
    pub const fn for_requests() -> Self {
        FrameDecoder::new(REQUEST_BODY_BYTES_MIN)
    }
}

impl ReplyFrameDecoder {
    /// A decoder for reply frames.
    pub const fn for_replies() -> Self {
        FrameDecoder::new(REPLY_HEADER_BYTES as u32)
    }
}

impl<const BODY_BYTES_MAX: usize> FrameDecoder<BODY_BYTES_MAX> {
    /// A decoder accepting bodies of `body_bytes_min..=BODY_BYTES_MAX` bytes.
    pub const fn new(body_bytes_min: u32) -> Self {
        FrameDecoder {
            body_bytes_min,
            state: State::Prefix,
            prefix: [0; LENGTH_PREFIX_BYTES],
            prefix_filled: 0,
            body_length: 0,
            body_filled: 0,
            body: [0; BODY_BYTES_MAX],
        }
    }

    /// Takes bytes from the front of `input` (advancing it past them) until one frame is
    /// complete, and returns its body; `Ok(None)` when `input` ran out first (everything in it
    /// is kept for the next call). Bytes after a complete frame stay in `input`: call again
    /// until it is empty or `Ok(None)` comes back.
    ///
    /// A body is only valid until the next call. After an error every call returns the same
    /// error and consumes nothing.
    pub fn decode<'decoder>(
        &'decoder mut self,
        input: &mut &[u8],
    ) -> Result<Option<&'decoder [u8]>, FrameError> {
        if let State::Failed(error) = self.state {
            return Err(error);
        }
        if self.state == State::Yielded {
            self.state = State::Prefix;
            self.prefix_filled = 0;
            self.body_filled = 0;
        }
        if self.state == State::Prefix {
            let taken = take(&mut self.prefix[self.prefix_filled..], input);
            self.prefix_filled += taken;
            if self.prefix_filled < LENGTH_PREFIX_BYTES {
                return Ok(None);
            }
            let length_bytes = u32::from_le_bytes(self.prefix);
            let in_range = length_bytes >= self.body_bytes_min
                && usize::try_from(length_bytes).is_ok_and(|length| length <= BODY_BYTES_MAX);
            if !in_range {
                let error = FrameError::BadLength { length_bytes };
                self.state = State::Failed(error);
                return Err(error);
            }
            // In range, so it fits a usize (checked just above).
            self.body_length = length_bytes as usize;
            self.state = State::Body;
        }
        let taken = take(&mut self.body[self.body_filled..self.body_length], input);
        self.body_filled += taken;
        if self.body_filled < self.body_length {
            return Ok(None);
        }
        self.state = State::Yielded;
        Ok(Some(&self.body[..self.body_length]))
    }

    /// True when part of a frame is buffered: a service that limits how long a frame may
    /// take to arrive (against slowloris clients) times it from when this became true.
    pub fn is_partway(&self) -> bool {
        match self.state {
            State::Prefix => self.prefix_filled > 0,
            State::Body => true,
            State::Yielded | State::Failed(_) => false,
        }
    }

    /// True after a bad length: the connection is to be closed.
    pub fn has_failed(&self) -> bool {
        matches!(self.state, State::Failed(_))
    }
}

/// Copies as much of `input` as fits into `destination`, advances `input` past it and
/// returns how many bytes that was.
fn take(destination: &mut [u8], input: &mut &[u8]) -> usize {
    let count = destination.len().min(input.len());
    let (head, rest) = input.split_at(count);
    destination[..count].copy_from_slice(head);
    *input = rest;
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{boxed::Box, vec};

    fn frame(body: &[u8]) -> ([u8; 4], &[u8]) {
        ((body.len() as u32).to_le_bytes(), body)
    }

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let first = [7u8; 24];
        let second = [9u8; 40];
        let mut stream = [0u8; 4 + 24 + 4 + 40];
        let (prefix, body) = frame(&first);
        stream[..4].copy_from_slice(&prefix);
        stream[4..28].copy_from_slice(body);
        let (prefix, body) = frame(&second);
        stream[28..32].copy_from_slice(&prefix);
        stream[32..].copy_from_slice(body);
        for piece_bytes in 1..=stream.len() {
            let mut decoder = RequestFrameDecoder::for_requests();
            let mut seen = 0;
            for piece in stream.chunks(piece_bytes) {
                let mut input = piece;
                while let Some(body) = decoder.decode(&mut input).unwrap() {
                    match seen {
                        0 => assert_eq!(body, &first[..]),
                        1 => assert_eq!(body, &second[..]),
                        _ => panic!("a third frame from two"),
                    }
                    seen += 1;
                }
                assert!(input.is_empty());
            }
            assert_eq!(seen, 2, "pieces of {piece_bytes} bytes");
            assert!(!decoder.is_partway());
        }
    }

    #[test]
    fn lengths_out_of_range_fail_before_any_body_is_read_and_stay_failed() {
        for length_bytes in [0u32, 1, 23, 1025, 65_536, u32::MAX] {
            let mut decoder = RequestFrameDecoder::for_requests();
            let mut stream = [0u8; 8];
            stream[..4].copy_from_slice(&length_bytes.to_le_bytes());
            let mut input = &stream[..];
            let error = FrameError::BadLength { length_bytes };
            assert_eq!(decoder.decode(&mut input), Err(error));
            assert_eq!(input.len(), 4, "the body is not read");
            assert_eq!(decoder.decode(&mut input), Err(error));
            assert!(decoder.has_failed());
        }
        for length_bytes in [24u32, 1024] {
            let mut decoder = RequestFrameDecoder::for_requests();
            let prefix = length_bytes.to_le_bytes();
            assert_eq!(decoder.decode(&mut &prefix[..]), Ok(None));
            assert!(decoder.is_partway());
        }
    }

    #[test]
    fn reply_decoder_takes_long_replies() {
        let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
        let body = vec![1u8; 3216];
        let mut stream = (body.len() as u32).to_le_bytes().to_vec();
        stream.extend_from_slice(&body);
        let mut input = &stream[..];
        assert_eq!(decoder.decode(&mut input), Ok(Some(&body[..])));
        let too_long = (65_537u32).to_le_bytes();
        assert!(decoder.decode(&mut &too_long[..]).is_err());
    }
}
