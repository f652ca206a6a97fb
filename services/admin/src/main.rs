//! The admin service: reads the host's requests from the control channel, one line each,
//! and answers each with the capabilities it holds. Every reply ends with a line that
//! starts `ok` or `error`; lines before it (the counters) are the reply's body.
//!
//! | request | reply |
//! |---|---|
//! | `checkpoint status` | `ok generation <g> interval-ms <ms> log-fill-permille <p> degraded <0/1> failures-since-commit <n>` |
//! | `checkpoint interval <ms>` | `ok interval-ms <ms>` |
//! | `checkpoint now` | `ok` (the commit shows in `checkpoint status`) |
//! | `counters` | `<name> <value>` lines in the Prometheus text format, then `ok` |
//!
//! Capability registers: 0 console, 1 control channel, 2 checkpoint control.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::interface::{checkpoint, control};
use user::syscall::{CapReg, Error};

const CONTROL: CapReg = CapReg::new(1);
const CHECKPOINT: CapReg = CapReg::new(2);
/// The longest request line; longer ones are refused whole.
const LINE_BYTES_MAX: usize = 256;

/// A reply being built: a fixed buffer, as the program has no heap.
struct Reply {
    bytes: [u8; 4096],
    length: usize,
}

impl Reply {
    fn new() -> Self {
        Self { bytes: [0; 4096], length: 0 }
    }

    fn push(&mut self, part: &[u8]) -> &mut Self {
        let taken = part.len().min(self.bytes.len() - self.length);
        self.bytes[self.length..self.length + taken].copy_from_slice(&part[..taken]);
        self.length += taken;
        self
    }

    fn number(&mut self, value: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        self.push(user::decimal(value, &mut digits))
    }

    fn error(&mut self, what: &[u8]) -> &mut Self {
        self.push(b"error ").push(what).push(b"\n")
    }

    fn failed(&mut self, error: Error) -> &mut Self {
        let what = match error {
            Error::Invocation(error) => error.description(),
            Error::Object(error) => error.description(),
            Error::Reply(_) => "unexpected reply",
        };
        self.error(what.as_bytes())
    }
}

fn parse_number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |value, digit| value * 10 + u64::from(digit - b'0')))
}

fn answer(request: &[u8], reply: &mut Reply) {
    let mut words = request.split(|&byte| byte == b' ').filter(|word| !word.is_empty());
    match (words.next(), words.next(), words.next(), words.next()) {
        // `failures-since-commit` above 0: checkpoints are failing (and retried at each
        // interval), so nothing since generation <g> is persisted but journal commits.
        (Some(b"checkpoint"), Some(b"status"), None, None) => match checkpoint::status(CHECKPOINT)
            .and_then(|status| Ok((status, checkpoint::failures(CHECKPOINT)?)))
        {
            Ok((status, failures)) => {
                reply.push(b"ok generation ").number(status.generation);
                reply.push(b" interval-ms ").number(status.milliseconds);
                reply.push(b" log-fill-permille ").number(status.log_fill_permille);
                reply.push(b" degraded ").number(status.degraded);
                reply.push(b" failures-since-commit ").number(failures.since_commit).push(b"\n");
            }
            Err(error) => {
                reply.failed(error);
            }
        },
        (Some(b"checkpoint"), Some(b"interval"), Some(value), None) => match parse_number(value) {
            None => {
                reply.error(b"the interval is not a number of milliseconds");
            }
            Some(milliseconds) => match checkpoint::set_interval(CHECKPOINT, milliseconds) {
                Ok(()) => {
                    reply.push(b"ok interval-ms ").number(milliseconds).push(b"\n");
                }
                Err(Error::Object(user::abi::methods::ObjectError::OutOfRange)) => {
                    reply.error(b"the interval must be 10 to 86400000 milliseconds");
                }
                Err(error) => {
                    reply.failed(error);
                }
            },
        },
        (Some(b"checkpoint"), Some(b"now"), None, None) => match checkpoint::take(CHECKPOINT) {
            Ok(()) => {
                reply.push(b"ok\n");
            }
            Err(error) => {
                reply.failed(error);
            }
        },
        (Some(b"counters"), None, None, None) => {
            let mut text = [0u8; 4096];
            match checkpoint::counters(CHECKPOINT, &mut text) {
                Ok(length) => {
                    // Room for the `ok` line: the counters fit well within the buffer.
                    let length = length.min(text.len() - 3);
                    reply.push(&text[..length]).push(b"ok\n");
                }
                Err(error) => {
                    reply.failed(error);
                }
            }
        }
        _ => {
            reply.error(b"unknown request (checkpoint status | checkpoint interval <ms> | checkpoint now | counters)");
        }
    }
}

fn main() -> u64 {
    let mut line = [0u8; LINE_BYTES_MAX];
    let mut length = 0;
    // A line longer than the buffer: skipped up to its end, then refused.
    let mut overlong = false;
    let mut input = [0u8; 512];
    loop {
        let count = match control::read(CONTROL, input.len() as u64, &mut input) {
            Ok(count) => count,
            Err(_) => {
                user::print("admin: no control channel; stopping\n");
                return 1;
            }
        };
        for &byte in &input[..count] {
            if byte != b'\n' {
                if length < line.len() {
                    line[length] = byte;
                    length += 1;
                } else {
                    overlong = true;
                }
                continue;
            }
            let mut reply = Reply::new();
            if overlong {
                reply.error(b"request longer than 256 bytes");
            } else {
                let request = line[..length].strip_suffix(b"\r").unwrap_or(&line[..length]);
                answer(request, &mut reply);
            }
            let _ = control::write(CONTROL, &reply.bytes[..reply.length]);
            length = 0;
            overlong = false;
        }
    }
}

user::entry!(main);
