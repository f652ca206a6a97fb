//! The pair (DESIGN.md, "The pair and failover"; the protocol is `holdfast-replication` and
//! `docs/replication.md`): a primary streams every write and flush of its store over the
//! link — a virtio-net device the host supervisor joins to the standby's — and a standby
//! makes the same writes to its own disks until the supervisor promotes it.
//!
//! - [`primary`]: the store's [`holdfast_store::mirror::Replica`], the copy, heartbeats;
//! - [`standby`]: the loop a standby boot runs before it may start as the primary.

pub mod primary;
pub mod standby;

use holdfast_replication::wire::{ETHERTYPE, MESSAGE_BYTES_MAX, Mode};

use crate::arch::{self, timer};
use crate::drivers::Net;
use crate::println;

/// Ethernet header: broadcast destination (the host relays every frame to the other VM),
/// the sender's MAC, [`ETHERTYPE`].
const ETHERNET_HEADER_BYTES: usize = 14;
pub const FRAME_BYTES_MAX: usize = ETHERNET_HEADER_BYTES + MESSAGE_BYTES_MAX;

/// What the boot's `holdfast.pair-*` words ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairOptions {
    pub role: Role,
    pub mode: Mode,
    pub term: u64,
    pub lag_bytes_max: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not in a pair: nothing is streamed (the link, if any, is left alone).
    Single,
    Primary,
    Standby,
}

impl PairOptions {
    /// The words `holdfast.pair-role=primary|standby`, `holdfast.pair-mode=MODE`,
    /// `holdfast.pair-term=N`, `holdfast.pair-lag-bytes-max=N`; a bad value is ignored
    /// with a line saying so.
    pub fn parse(command_line: &str) -> Self {
        let mut options = Self {
            role: Role::Single,
            mode: Mode::SynchronousDurable,
            term: 1,
            lag_bytes_max: 1 << 20,
        };
        for word in command_line.split_ascii_whitespace() {
            match word.split_once('=') {
                Some(("holdfast.pair-role", "primary")) => options.role = Role::Primary,
                Some(("holdfast.pair-role", "standby")) => options.role = Role::Standby,
                Some(("holdfast.pair-mode", name)) => match Mode::from_name(name) {
                    Some(mode) => options.mode = mode,
                    None => println!("holdfast: ignoring {word}: not sync-durable, sync-received or async"),
                },
                Some(("holdfast.pair-term", value)) => match value.parse() {
                    Ok(term) => options.term = term,
                    Err(_) => println!("holdfast: ignoring {word}: not a number"),
                },
                Some(("holdfast.pair-lag-bytes-max", value)) => match value.parse() {
                    Ok(bytes) => options.lag_bytes_max = bytes,
                    Err(_) => println!("holdfast: ignoring {word}: not a number of bytes"),
                },
                Some(("holdfast.pair-role", _)) => println!("holdfast: ignoring {word}: not primary or standby"),
                _ => {}
            }
        }
        options
    }
}

/// Milliseconds from the TSC: the link's waits happen with interrupts off (in a flush on
/// the timer's path), where the tick count stands still.
fn now_ms() -> u64 {
    timer::tsc_to_microseconds(arch::read_tsc()) / 1000
}

/// A zeroed frame buffer, made on the heap: at 64 KiB it is too large to build on the
/// kernel stack first, as `Box::new` of an array may.
fn frame_buffer() -> alloc::boxed::Box<[u8; FRAME_BYTES_MAX]> {
    alloc::vec![0u8; FRAME_BYTES_MAX].into_boxed_slice().try_into().expect("FRAME_BYTES_MAX bytes")
}

/// Sends one message (already encoded after the Ethernet header in `frame`); returns
/// whether the link took it. A link that cannot (every buffer in flight: the host is not
/// reading) loses it; the protocol sends stream messages again and heartbeats every
/// interval.
fn send(link: &mut Net, frame: &mut [u8; FRAME_BYTES_MAX], message_bytes: usize) -> bool {
    frame[..6].fill(0xff);
    frame[6..12].copy_from_slice(&link.mac_address());
    frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    link.send(&frame[..ETHERNET_HEADER_BYTES + message_bytes]).is_ok()
}

/// The message in a received frame, if it is one of the link's.
fn message_of(frame: &[u8]) -> Option<&[u8]> {
    if frame.len() < ETHERNET_HEADER_BYTES || frame[12..14] != ETHERTYPE.to_be_bytes() {
        return None;
    }
    Some(&frame[ETHERNET_HEADER_BYTES..])
}
