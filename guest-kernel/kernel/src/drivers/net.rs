//! The virtio-net driver: raw Ethernet frames in and out. The ring-3 network service sits
//! on this through the kernel's `network_device` capability (`crate::network`).
//!
//! We use the crate's `VirtIONetRaw` (the buffer-managing `VirtIONet` needs its `alloc`
//! feature) and own the buffers here: a ring of receive buffers always posted to the
//! device, and a few transmit buffers. A received frame raises the device's MSI-X interrupt
//! when [`super::pci::route_queue_interrupt`] could route it ([`Net::use_interrupts`]): the
//! receive queue is virtqueue 0, the only one routed, so transmissions complete silently
//! and are collected at the next send. Waits are bounded by the TSC, never endless: a
//! device whose peer is gone must not hang the kernel.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::pci::PciTransport;

use super::hal::KernelHal;
use crate::arch::{self, timer};

const QUEUE_SIZE: usize = 16;
const RECEIVE_BUFFERS: usize = 8;
/// Frames in flight to the device at most (one descriptor each, beside the receive
/// queue's): a burst of TCP segments leaves without waiting for each.
const TRANSMIT_BUFFERS: usize = 8;
/// How long a send waits for a transmit buffer when all are in flight, before refusing.
const TRANSMIT_WAIT_MICROSECONDS: u64 = 10_000;
/// The longest frame sent: an Ethernet header and a 1500-byte payload.
const FRAME_BYTES_MAX: usize = 1514;
/// On the pair's link ([`super::LINK_MAC_PREFIX`]), a point-to-point wire between two
/// Holdfast VMs through the host, frames carry up to 16 consecutive 4 KiB blocks and their
/// message header (`holdfast_replication::wire`): each frame costs a notification and a
/// trip through the host, so a commit's record goes in one or two rather than one per
/// block. The buffers (16 of about 64 KiB) are the link device's alone.
const LINK_FRAME_BYTES_MAX: usize = 14 + holdfast_replication::wire::MESSAGE_BYTES_MAX;
/// The shortest: an Ethernet header.
const FRAME_BYTES_MIN: usize = 14;
/// Room for the virtio-net header (12 bytes) and the longest frame.
const fn buffer_bytes(frame_bytes_max: usize) -> usize {
    (frame_bytes_max + 12).next_multiple_of(64)
}

/// The self-test's EtherType (IEEE 802 "local experimental 1").
pub const TEST_ETHERTYPE: u16 = 0x88b5;
pub const PING_PREFIX: &[u8] = b"HOLDFAST-NET-PING ";
pub const PONG_PREFIX: &[u8] = b"HOLDFAST-NET-PONG ";
const PONG_WAIT_SECONDS: u64 = 3;
/// The ping is repeated this often until the pong arrives, in case the host's end of the
/// link was not connected yet when the first one left.
const PING_INTERVAL_MILLISECONDS: u64 = 500;

pub struct Net {
    // Declared first so that it drops first: dropping it takes the queues away from the
    // device before the buffers below go back to the heap.
    device: VirtIONetRaw<KernelHal, PciTransport, QUEUE_SIZE>,
    /// Buffers posted to the receive queue, with the token the device will complete them
    /// under. Never touched while posted (the boxes may move, their contents do not).
    receiving: Vec<(u16, Box<[u8]>)>,
    /// The transmit buffers, each with the token of the transmission that still owns it.
    transmit: Vec<(Box<[u8]>, Option<u16>)>,
    frame_bytes_max: usize,
}

/// Why a frame was not sent.
#[derive(Debug)]
pub enum SendError {
    /// Shorter than an Ethernet header or longer than the device's longest frame.
    Length,
    /// Every transmit buffer stayed in flight for [`TRANSMIT_WAIT_MICROSECONDS`].
    Busy,
    /// The device refused the request (a broken queue).
    Device(String),
}

impl Net {
    pub fn new(transport: PciTransport) -> Result<Self, String> {
        let mut device = VirtIONetRaw::new(transport).map_err(|error| format!("{error}"))?;
        device.disable_interrupts();
        let frame_bytes_max = if device.mac_address()[..5] == super::LINK_MAC_PREFIX {
            LINK_FRAME_BYTES_MAX
        } else {
            FRAME_BYTES_MAX
        };
        let buffer_bytes = buffer_bytes(frame_bytes_max);
        let mut net = Self {
            device,
            receiving: Vec::with_capacity(RECEIVE_BUFFERS),
            transmit: (0..TRANSMIT_BUFFERS)
                .map(|_| (vec![0; buffer_bytes].into_boxed_slice(), None))
                .collect(),
            frame_bytes_max,
        };
        for _ in 0..RECEIVE_BUFFERS {
            net.post_receive(vec![0; buffer_bytes].into_boxed_slice())?;
        }
        Ok(net)
    }

    pub fn mac_address(&self) -> [u8; 6] {
        self.device.mac_address()
    }

    fn post_receive(&mut self, mut buffer: Box<[u8]>) -> Result<(), String> {
        // SAFETY: the buffer is kept in `receiving` and not accessed until the device
        // completes it (`poll_receive`); `device` is dropped before `receiving`.
        let token = unsafe { self.device.receive_begin(&mut buffer) }
            .map_err(|error| format!("posting a receive buffer: {error}"))?;
        self.receiving.push((token, buffer));
        Ok(())
    }

    /// Receptions raise the interrupt routed to the receive queue from now on.
    pub fn use_interrupts(&mut self) {
        self.device.enable_interrupts();
    }

    /// Whether a received frame is waiting (for [`Self::poll`]).
    pub fn has_frame(&self) -> bool {
        self.device.poll_receive().is_some()
    }

    /// Collects every finished transmission; returns the index of a free transmit buffer.
    fn transmit_free(&mut self) -> Result<Option<usize>, String> {
        while let Some(token) = self.device.poll_transmit() {
            let index = self
                .transmit
                .iter()
                .position(|&(_, owner)| owner == Some(token))
                .ok_or_else(|| format!("the device completed unknown transmit token {token}"))?;
            let (buffer, owner) = &mut self.transmit[index];
            *owner = None;
            // SAFETY: the same buffer that `transmit_begin` was given under this token.
            unsafe { self.device.transmit_complete(token, buffer) }
                .map_err(|error| format!("completing a transmission: {error}"))?;
        }
        Ok(self.transmit.iter().position(|(_, owner)| owner.is_none()))
    }

    /// Queues one Ethernet frame (without FCS) for transmission, waiting up to
    /// [`TRANSMIT_WAIT_MICROSECONDS`] for a transmit buffer if all are in flight.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), SendError> {
        if !(FRAME_BYTES_MIN..=self.frame_bytes_max).contains(&frame.len()) {
            return Err(SendError::Length);
        }
        let start = arch::read_tsc();
        let wait_ticks = TRANSMIT_WAIT_MICROSECONDS * (timer::tsc_hz() / 1_000_000).max(1);
        let index = loop {
            if let Some(index) = self.transmit_free().map_err(SendError::Device)? {
                break index;
            }
            if arch::read_tsc() - start > wait_ticks {
                return Err(SendError::Busy);
            }
            core::hint::spin_loop();
        };
        let header = self
            .device
            .fill_buffer_header(&mut self.transmit[index].0)
            .map_err(|error| SendError::Device(format!("{error}")))?;
        let (buffer, owner) = &mut self.transmit[index];
        buffer[header..header + frame.len()].copy_from_slice(frame);
        // SAFETY: the buffer is not accessed until `transmit_free` sees the device complete
        // this token; `device` is dropped before the buffers.
        let token = unsafe { self.device.transmit_begin(&buffer[..header + frame.len()]) }
            .map_err(|error| SendError::Device(format!("transmitting: {error}")))?;
        *owner = Some(token);
        Ok(())
    }

    /// Hands the next received frame (if any) to `receive`, then gives its buffer back to
    /// the device.
    pub fn poll<T>(&mut self, receive: impl FnOnce(&[u8]) -> T) -> Result<Option<T>, String> {
        let Some(token) = self.device.poll_receive() else {
            return Ok(None);
        };
        let index = self
            .receiving
            .iter()
            .position(|&(posted, _)| posted == token)
            .ok_or_else(|| format!("the device completed unknown receive token {token}"))?;
        let (_, mut buffer) = self.receiving.swap_remove(index);
        // SAFETY: the same buffer that `receive_begin` was given under this token.
        let (header, length) = unsafe { self.device.receive_complete(token, &mut buffer) }
            .map_err(|error| format!("completing a reception: {error}"))?;
        let buffer_bytes = buffer.len();
        let frame = buffer.get(header..header + length).map(receive);
        self.post_receive(buffer)?;
        frame.map(Some).ok_or_else(|| {
            format!("the device reported a {length}-byte frame in a {buffer_bytes}-byte buffer")
        })
    }

    /// The self-test: returns whether it passed and what to report.
    pub fn self_test(&mut self) -> (bool, String) {
        let mac = self.mac_address();
        let mac_text = format!(
            "mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
        );
        match self.ping_pong(mac) {
            Ok(()) => (true, format!("{mac_text}, sent ping, received pong")),
            Err(error) => (false, format!("{mac_text}, {error}")),
        }
    }

    /// Broadcasts `HOLDFAST-NET-PING <nonce>` and waits for `HOLDFAST-NET-PONG <nonce>`.
    fn ping_pong(&mut self, mac: [u8; 6]) -> Result<(), String> {
        let nonce = arch::read_tsc().to_string();
        let mut ping = Vec::with_capacity(64);
        ping.extend_from_slice(&[0xff; 6]);
        ping.extend_from_slice(&mac);
        ping.extend_from_slice(&TEST_ETHERTYPE.to_be_bytes());
        ping.extend_from_slice(PING_PREFIX);
        ping.extend_from_slice(nonce.as_bytes());

        let ticks_per_ms = timer::tsc_hz() / 1000;
        let start = arch::read_tsc();
        let deadline = start + PONG_WAIT_SECONDS * 1000 * ticks_per_ms;
        let mut next_ping = start;
        let mut pings = 0u32;
        let mut other_frames = 0u32;
        loop {
            let now = arch::read_tsc();
            if now >= deadline {
                break;
            }
            if now >= next_ping && self.transmit_free()?.is_some() {
                self.send(&ping).map_err(|error| format!("sending the ping: {error:?}"))?;
                pings += 1;
                next_ping = now + PING_INTERVAL_MILLISECONDS * ticks_per_ms;
            }
            match self.poll(|frame| is_pong(frame, nonce.as_bytes()))? {
                Some(true) => return Ok(()),
                Some(false) => other_frames += 1,
                None => core::hint::spin_loop(),
            }
        }
        if pings == 0 {
            return Err(String::from(
                "the ping was never transmitted (the device kept it)",
            ));
        }
        Err(format!(
            "sent ping ({pings} times), no pong with nonce {nonce} within {PONG_WAIT_SECONDS} s ({other_frames} other frames received)"
        ))
    }
}

/// Whether `frame` is a test-EtherType frame whose payload is `HOLDFAST-NET-PONG <nonce>`,
/// possibly followed by zero padding up to the Ethernet minimum.
fn is_pong(frame: &[u8], nonce: &[u8]) -> bool {
    let Some(payload) = frame.get(14..) else {
        return false;
    };
    let rest = match payload.strip_prefix(PONG_PREFIX) {
        Some(rest) if frame[12..14] == TEST_ETHERTYPE.to_be_bytes() => rest,
        _ => return false,
    };
    rest.strip_prefix(nonce)
        .is_some_and(|padding| padding.iter().all(|&byte| byte == 0))
}
