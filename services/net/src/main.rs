//! The network service: TCP/IP (smoltcp: Ethernet, ARP, IPv4, ICMP echo, TCP) on the
//! kernel's network device, which only this process holds, and TCP for other processes
//! through capabilities it hands out. The client interface (orders, registers, events,
//! error codes) is `docs/net-service.md`; its constants and client helpers are
//! `holdfast_userlib::net`.
//!
//! One loop, never blocked by a client: each round takes one message (a client's order or
//! the device's notification), answers it at once or keeps the caller's resume capability
//! (a `wait` with no events yet, in a slot of the waiters node), then runs the stack, answers
//! the waits that have events now, arms the device's notification (a frame, or smoltcp's
//! next timer) and waits for the next message. Every queue is bounded: sockets
//! ([`SOCKETS_MAX`]), listeners ([`LISTENERS_MAX`]), and at most one data event per
//! connection waits for its client, so a flood fills only its own TCP window.
//!
//! After a restart from the store this process resumes as it was, but the device and the
//! host's side of every connection are new: a device answer with another `boot` (or the
//! kernel's `restarted` notice) makes it reset every connection (its client sees it
//! closed) and keep its listeners.
//!
//! A connection moves between listeners by `hand_over` (a front end that read a
//! connection's first request hands it to the server that request names, on a private
//! listener: one with no port). The target listener comes as a capability, one of this
//! service's own start capabilities, whose badge `process.start_badge` tells. A private
//! listener can be `shut` (its server revoked): its connections are reset and its
//! capability names nothing, since badges carry the slot's generation.
//!
//! Capability registers: 0 console, 1 own process, 2 network device, 3 clock, 4 the waiters
//! node (slot `i`: the resume capability of listener `i`'s waiting client); made here: 5
//! its notification start capability, 6 a listener capability being handed out, 7 a
//! resume capability being answered; 8 the capability a message carried (void if none);
//! 14 stays void; 15 the current caller's resume.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use holdfast_userlib::{self as user, Invocation};
use smoltcp::iface::{Config, Interface, PollIngressSingleResult, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr, Ipv4Address};
use user::abi::network_notification as notification;
use user::interface::{clock, network_device, node, process};
use user::net::{error, event, order};
use user::syscall::CapReg;

const OWN_PROCESS: CapReg = CapReg::new(1);
const DEVICE: CapReg = CapReg::new(2);
const CLOCK: CapReg = CapReg::new(3);
const WAITERS: CapReg = CapReg::new(4);
const NOTIFY: CapReg = CapReg::new(5);
const MINTED: CapReg = CapReg::new(6);
const ANSWER: CapReg = CapReg::new(7);
const CARRIED: CapReg = CapReg::new(8);
const NOTHING: u8 = 14;
const RESUME: u8 = 15;

/// The guest's address on QEMU's user-mode network, and its gateway.
const ADDRESS: [u8; 4] = [10, 0, 2, 15];
const PREFIX_LENGTH: u8 = 24;
const GATEWAY: [u8; 4] = [10, 0, 2, 2];

/// TCP sockets at most, listening and connected together: past that, a new connection is
/// refused (smoltcp answers its SYN with a reset).
const SOCKETS_MAX: usize = 128;
/// Connections one private listener holds at most: a `hand_over` past it is refused
/// (`TOO_MANY_CONNECTIONS`), so that one tenant's clients cannot hold every socket.
const PRIVATE_CONNECTIONS_MAX: usize = 32;
/// Connections all private listeners hold together at most: the rest of [`SOCKETS_MAX`]
/// stays for the ports' listeners, so that the front end that hands connections over
/// still takes new ones (and refuses those it cannot hand over) however many servers are
/// full.
const PRIVATE_SOCKETS_MAX: usize = SOCKETS_MAX - 32;
/// Listeners at most: one slot of the waiters node each (a node has 32).
const LISTENERS_MAX: usize = 32;
/// Sockets kept listening per listener, so that connections arriving together are taken.
const LISTEN_SPARES: usize = 4;
/// Each socket's receive and send buffers.
const SOCKET_BUFFER_BYTES: usize = 4096;
/// The most bytes of one data event (then the next waits until this one is taken).
const DATA_EVENT_BYTES_MAX: usize = 2048;
/// The smallest `wait` buffer: an event header and a byte.
const WAIT_BUFFER_BYTES_MIN: usize = event::HEADER_BYTES + 1;
/// A connection whose sent data goes unacknowledged this long is dropped (a peer gone).
const TCP_TIMEOUT_SECONDS: u64 = 60;
/// The longest the loop sleeps without a frame: smoltcp's timers ask for less when they
/// need it.
const IDLE_WAKE_MICROSECONDS: u64 = 5_000_000;
/// Frames taken in one round at most: the rest wait for the next (the device's
/// notification fires at once while one is waiting), so that a flood cannot hold the
/// clients' orders up.
const FRAMES_PER_ROUND_MAX: usize = 64;
/// The longest frame: an Ethernet header and a 1500-byte payload.
const FRAME_BYTES_MAX: usize = 1514;
/// Listener `i`'s capability carries badge `LISTENER_BADGE_BASE + i + (g << 8)`, `g` the
/// listener's generation (a shut listener's slot serves the next private listener under
/// the next generation, and the old capability names nothing); badge 0 is the service's
/// own start capability, `notification::RESTART_BADGE` its notifications.
const LISTENER_BADGE_BASE: u64 = 1;
const LISTENER_INDEX_BITS: u32 = 8;
const _: () = assert!(LISTENERS_MAX <= 1 << LISTENER_INDEX_BITS);
// The private-listeners capability's badge names no listener.
const _: () = assert!(user::net::PRIVATE_LISTENERS_BADGE & 0xff >= LISTENER_BADGE_BASE + LISTENERS_MAX as u64);

/// The heap (smoltcp's sockets and buffers, the event queues), in .bss.
const HEAP_BYTES: usize = 2 << 20;
static mut ARENA: [u8; HEAP_BYTES] = [0; HEAP_BYTES];

#[global_allocator]
static ALLOCATOR: talc::Talck<spin::Mutex<()>, talc::ClaimOnOom> = talc::Talc::new(
    // SAFETY: the arena is used by nothing but this allocator, for the program's life.
    unsafe { talc::ClaimOnOom::new(talc::Span::from_array(core::ptr::addr_of_mut!(ARENA))) },
)
.lock();

/// The `boot` of the device's latest answer (every method returns it), written by the
/// frame tokens inside smoltcp's poll.
static DEVICE_BOOT: AtomicU64 = AtomicU64::new(0);
/// Frames the device refused (all its transmit buffers busy, or a bad length): TCP sends
/// them again.
static FRAMES_DROPPED: AtomicU64 = AtomicU64::new(0);

/// The kernel's network device as smoltcp's [`Device`].
struct Frames {
    buffer: [u8; FRAME_BYTES_MAX + 2],
}

struct Received(Vec<u8>);
struct Transmit;

impl phy::RxToken for Received {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for Transmit {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, length: usize, f: F) -> R {
        let mut frame = [0u8; FRAME_BYTES_MAX];
        let length = length.min(FRAME_BYTES_MAX);
        let result = f(&mut frame[..length]);
        match network_device::send(DEVICE, &frame[..length]) {
            Ok(boot) => DEVICE_BOOT.store(boot, Ordering::Relaxed),
            Err(_) => {
                FRAMES_DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

impl Device for Frames {
    type RxToken<'a> = Received;
    type TxToken<'a> = Transmit;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Received, Transmit)> {
        let received = network_device::receive(DEVICE, &mut self.buffer).ok()?;
        DEVICE_BOOT.store(received.boot, Ordering::Relaxed);
        let length = received.frame_length;
        (length > 0).then(|| (Received(self.buffer[..length].to_vec()), Transmit))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Transmit> {
        Some(Transmit)
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut capabilities = DeviceCapabilities::default();
        capabilities.medium = Medium::Ethernet;
        capabilities.max_transmission_unit = FRAME_BYTES_MAX;
        capabilities
    }
}

/// An event waiting for its listener's client.
enum Pending {
    Opened(u32),
    Data(u32, Vec<u8>),
    Closed(u32),
    /// A `send` took fewer bytes than it was given; now there is room again.
    Writable(u32),
    /// The peer sends no more (its FIN, after everything it sent).
    Ended(u32),
}

impl Pending {
    fn connection(&self) -> u32 {
        match self {
            Self::Opened(id) | Self::Data(id, _) | Self::Closed(id) | Self::Writable(id) | Self::Ended(id) => *id,
        }
    }
}

struct Listener {
    /// 0: private, it gets only connections handed over to it.
    port: u16,
    /// Counts the private listeners this slot has held: see [`LISTENER_BADGE_BASE`].
    generation: u32,
    /// False once shut (a private listener only), until a `listen` takes the slot again.
    open: bool,
    events: VecDeque<Pending>,
    /// A client waits: its resume capability is in slot `index` of the waiters node, and
    /// its buffer holds this many bytes.
    waiting: Option<usize>,
}

/// One TCP socket and what it serves.
struct Entry {
    handle: SocketHandle,
    /// The listener it listens or was accepted for; `None`: free.
    listener: Option<usize>,
    /// The connection's id once accepted (0 while listening).
    id: u32,
    /// A data event of this connection waits in its listener's queue: no more is read
    /// until it is taken.
    data_pending: bool,
    /// The client closed it, or its closing was reported: its id is unknown from now on.
    finished: bool,
    /// A `send` took only part of its bytes: a writable event is owed once the send buffer
    /// has room, so that the client, which waits for events only, sends the rest.
    send_blocked: bool,
    /// The peer sends no more: its `ended` event is out (or waits), and goes with it to a
    /// listener it is handed to. The client may still send, and closes it when done.
    ended: bool,
}

impl Entry {
    fn new(handle: SocketHandle) -> Self {
        Self { handle, listener: None, id: 0, data_pending: false, finished: false, send_blocked: false, ended: false }
    }

    /// Nothing served: listening again later.
    fn free(&mut self) {
        *self = Self::new(self.handle);
    }
}

struct Service {
    mac: [u8; 6],
    interface: Interface,
    frames: Frames,
    sockets: SocketSet<'static>,
    entries: Vec<Entry>,
    listeners: Vec<Listener>,
    next_connection: u32,
    /// The device's `boot` this state belongs to.
    boot: u64,
    /// Added to the clock (which starts again at each boot) so that smoltcp's time never
    /// goes back.
    clock_offset_us: u64,
    last_instant_us: u64,
}

/// What the round's message gets back at once.
struct Answer {
    code: u64,
    words: [u64; 4],
    length: usize,
    /// A listener capability (register [`MINTED`]) goes with it.
    listener: bool,
}

impl Answer {
    fn code(code: u64) -> Option<Self> {
        Some(Self { code, words: [0; 4], length: 0, listener: false })
    }
}

/// The buffers of a message, of the answer to it and of an answer to a waiting client, in
/// .bss.
static mut RECEIVED: [u8; 4096] = [0; 4096];
static mut OUT: [u8; 4096] = [0; 4096];
static mut WAITER_OUT: [u8; 4096] = [0; 4096];

/// Asks the gateway for its address (an ARP request, broadcast), so that the network learns
/// ours before anyone connects: QEMU's user-mode network drops a packet for an address it
/// has not resolved (it sends an ARP request instead), so a forwarded connection's first
/// SYN would be lost and sent again only after TCP's retransmission timeout, a second.
fn announce(mac: [u8; 6]) {
    let mut frame = [0u8; 60];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&mac);
    frame[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    // Ethernet, IPv4, 6-byte and 4-byte addresses, a request.
    frame[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    frame[22..28].copy_from_slice(&mac);
    frame[28..32].copy_from_slice(&ADDRESS);
    frame[38..42].copy_from_slice(&GATEWAY);
    if let Ok(boot) = network_device::send(DEVICE, &frame) {
        DEVICE_BOOT.store(boot, Ordering::Relaxed);
    }
}

fn clock_us() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds / 1000)
}

impl Service {
    fn new() -> Self {
        let mac = network_device::mac_address(DEVICE).unwrap_or_else(|_| {
            user::print("net: no network device; stopping\n");
            user::stop(1)
        });
        DEVICE_BOOT.store(mac.boot, Ordering::Relaxed);
        let mac_bytes: [u8; 6] = core::array::from_fn(|index| (mac.mac >> (8 * index)) as u8);
        let mut frames = Frames { buffer: [0; FRAME_BYTES_MAX + 2] };
        let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac_bytes)));
        // smoltcp draws initial sequence numbers and ports from this.
        // SAFETY: rdtsc only reads the time-stamp counter; ring 3 may (CR4.TSD is clear).
        config.random_seed = unsafe { core::arch::x86_64::_rdtsc() } ^ mac.mac;
        let now = Instant::from_micros(clock_us() as i64);
        let mut interface = Interface::new(config, &mut frames, now);
        interface.update_ip_addrs(|addresses| {
            let [a, b, c, d] = ADDRESS;
            addresses
                .push(IpCidr::new(Ipv4Address::new(a, b, c, d).into(), PREFIX_LENGTH))
                .expect("one address fits");
        });
        let [a, b, c, d] = GATEWAY;
        interface
            .routes_mut()
            .add_default_ipv4_route(Ipv4Address::new(a, b, c, d))
            .expect("one route fits");
        user::print("net: 10.0.2.15/24, gateway 10.0.2.2: serving\n");
        announce(mac_bytes);
        Self {
            mac: mac_bytes,
            interface,
            frames,
            sockets: SocketSet::new(Vec::new()),
            entries: Vec::new(),
            listeners: Vec::new(),
            next_connection: 1,
            boot: mac.boot,
            clock_offset_us: 0,
            last_instant_us: 0,
        }
    }

    /// smoltcp's time: the clock, kept from going back across a restart.
    fn now(&mut self) -> Instant {
        let raw = clock_us();
        if raw + self.clock_offset_us < self.last_instant_us {
            self.clock_offset_us = self.last_instant_us - raw + 1;
        }
        self.last_instant_us = raw + self.clock_offset_us;
        Instant::from_micros(self.last_instant_us as i64)
    }

    fn socket(&mut self, handle: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(handle)
    }

    /// The device answered with another `boot`: the system restarted and every connection
    /// is gone. Clients see each closed; listeners stay.
    fn check_restart(&mut self) {
        let boot = DEVICE_BOOT.load(Ordering::Relaxed);
        if boot == self.boot {
            return;
        }
        self.boot = boot;
        for index in 0..self.entries.len() {
            let Entry { handle, listener, id, finished, .. } = self.entries[index];
            if let Some(listener) = listener {
                if id != 0 && !finished {
                    self.listeners[listener].events.push_back(Pending::Closed(id));
                }
                self.socket(handle).abort();
            }
            self.entries[index].free();
        }
        announce(self.mac);
        let mut digits = [0u8; 20];
        user::print_parts(&[
            b"net: the system restarted (boot ",
            user::decimal(boot, &mut digits),
            b"): connections reset, listeners kept\n",
        ]);
    }

    /// Runs the stack: frames in and out, sockets' events into their listeners' queues,
    /// listening sockets replenished.
    fn run_stack(&mut self) {
        let now = self.now();
        // One frame at a time, listening sockets replenished whenever one changed: a burst
        // of connections finds a listening socket for each (up to SOCKETS_MAX) instead of
        // a reset for every SYN past the spares.
        for _ in 0..FRAMES_PER_ROUND_MAX {
            match self.interface.poll_ingress_single(now, &mut self.frames, &mut self.sockets) {
                PollIngressSingleResult::None => break,
                PollIngressSingleResult::PacketProcessed => {}
                PollIngressSingleResult::SocketStateChanged => self.replenish_listening(),
            }
        }
        self.interface.poll_egress(now, &mut self.frames, &mut self.sockets);
        self.check_restart();
        self.collect_events();
        self.replenish_listening();
        // What collecting did (window updates, FINs) goes out now.
        let now = self.now();
        self.interface.poll_egress(now, &mut self.frames, &mut self.sockets);
        self.check_restart();
    }

    fn collect_events(&mut self) {
        for index in 0..self.entries.len() {
            let Entry { handle, listener, id, data_pending, finished, send_blocked, ended } = self.entries[index];
            let Some(listener) = listener else {
                continue;
            };
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            let state = socket.state();
            if id == 0 {
                match state {
                    tcp::State::Listen | tcp::State::SynReceived => continue,
                    // Gone before it was ever seen open: listen again later.
                    tcp::State::Closed | tcp::State::TimeWait => {
                        socket.abort();
                        self.entries[index].listener = None;
                        continue;
                    }
                    _ => {
                        let id = self.next_connection;
                        self.next_connection = self.next_connection.wrapping_add(1).max(1);
                        socket.set_timeout(Some(Duration::from_secs(TCP_TIMEOUT_SECONDS)));
                        self.entries[index].id = id;
                        self.listeners[listener].events.push_back(Pending::Opened(id));
                    }
                }
            }
            let id = self.entries[index].id;
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            if !finished {
                if !data_pending && socket.can_recv() {
                    let mut chunk = [0u8; DATA_EVENT_BYTES_MAX];
                    if let Ok(count @ 1..) = socket.recv_slice(&mut chunk) {
                        self.listeners[listener].events.push_back(Pending::Data(id, chunk[..count].to_vec()));
                        self.entries[index].data_pending = true;
                    }
                }
                // Room again (half the buffer) for a client whose send was cut short.
                if send_blocked && socket.may_send() && socket.send_queue() * 2 <= socket.send_capacity() {
                    self.listeners[listener].events.push_back(Pending::Writable(id));
                    self.entries[index].send_blocked = false;
                }
                // Reset (by the peer, or by the timeout): gone. The peer's FIN alone, once
                // everything it sent was read, only ends its side:
                // the client sends its replies yet (a client that sends its last request
                // and shuts its side gets them), and closes.
                if matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    self.listeners[listener].events.push_back(Pending::Closed(id));
                    self.entries[index].finished = true;
                } else if !ended && !socket.may_recv() && !socket.can_recv() {
                    self.listeners[listener].events.push_back(Pending::Ended(id));
                    self.entries[index].ended = true;
                }
            }
            // Closed on both sides (or reset): the socket is free again.
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            if self.entries[index].finished && matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
                socket.abort();
                self.entries[index].free();
            }
        }
    }

    /// Keeps [`LISTEN_SPARES`] sockets listening on each listener's port, within
    /// [`SOCKETS_MAX`].
    fn replenish_listening(&mut self) {
        for listener in 0..self.listeners.len() {
            let port = self.listeners[listener].port;
            if port == 0 {
                continue;
            }
            // Only sockets still listening: one that took a SYN is taken.
            let mut spares = 0;
            for index in 0..self.entries.len() {
                let Entry { handle, listener: serving, id, .. } = self.entries[index];
                if serving == Some(listener) && id == 0 && self.socket(handle).state() == tcp::State::Listen {
                    spares += 1;
                }
            }
            while spares < LISTEN_SPARES {
                // Not one aborted whose reset has not gone out yet (it still names its peer):
                // `listen` would forget the peer, and the reset with it.
                let sockets = &self.sockets;
                let free = self.entries.iter().position(|entry| {
                    entry.listener.is_none() && sockets.get::<tcp::Socket>(entry.handle).remote_endpoint().is_none()
                });
                let index = match free {
                    Some(index) => index,
                    None if self.entries.len() < SOCKETS_MAX => {
                        let socket = tcp::Socket::new(
                            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER_BYTES]),
                            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER_BYTES]),
                        );
                        let handle = self.sockets.add(socket);
                        self.entries.push(Entry::new(handle));
                        self.entries.len() - 1
                    }
                    None => return,
                };
                let handle = self.entries[index].handle;
                if self.socket(handle).listen(port).is_err() {
                    return;
                }
                self.entries[index].listener = Some(listener);
                spares += 1;
            }
        }
    }

    /// Writes as many of `listener`'s events as fit `capacity` bytes into `out`; returns
    /// the length. A data event longer than the room left is split.
    fn take_events(&mut self, listener: usize, out: &mut [u8], capacity: usize) -> usize {
        let capacity = capacity.min(out.len());
        let mut length = 0;
        while let Some(pending) = self.listeners[listener].events.front_mut() {
            let room = capacity - length;
            if room < WAIT_BUFFER_BYTES_MIN {
                break;
            }
            let (connection, kind, data): (u32, u8, &[u8]) = match pending {
                Pending::Opened(id) => (*id, event::OPENED, &[]),
                Pending::Closed(id) => (*id, event::CLOSED, &[]),
                Pending::Writable(id) => (*id, event::WRITABLE, &[]),
                Pending::Ended(id) => (*id, event::ENDED, &[]),
                Pending::Data(id, data) => (*id, event::DATA, &data[..]),
            };
            let taken = data.len().min(room - event::HEADER_BYTES);
            if kind != event::DATA && room < event::HEADER_BYTES {
                break;
            }
            out[length..length + 4].copy_from_slice(&connection.to_le_bytes());
            out[length + 4] = kind;
            out[length + 5] = 0;
            out[length + 6..length + 8].copy_from_slice(&(taken as u16).to_le_bytes());
            out[length + 8..length + 8 + taken].copy_from_slice(&data[..taken]);
            length += event::HEADER_BYTES + taken;
            if let Pending::Data(_, data) = pending
                && taken < data.len()
            {
                data.drain(..taken);
                break;
            }
            self.listeners[listener].events.pop_front();
            if kind == event::DATA
                && let Some(entry) = self.entries.iter_mut().find(|entry| entry.id == connection && entry.listener == Some(listener))
            {
                entry.data_pending = false;
            }
        }
        length
    }

    /// Answers every waiting client whose listener has events.
    fn answer_waiters(&mut self, out: &mut [u8]) {
        for listener in 0..self.listeners.len() {
            let Some(capacity) = self.listeners[listener].waiting else {
                continue;
            };
            if self.listeners[listener].events.is_empty() {
                continue;
            }
            let length = self.take_events(listener, out, capacity);
            self.listeners[listener].waiting = None;
            // The waiting client's resume capability, out of its slot (void left there).
            if node::swap(WAITERS, listener as u64, CapReg::new(NOTHING), ANSWER).is_ok() {
                let words = [length as u64, 0, 0, 0];
                let _ = Invocation::send(ANSWER.index(), 0, words).with_string(&out[..length]).invoke(&mut []);
            }
        }
    }

    /// Arms the device's notification for smoltcp's next timer, or a while from now.
    fn arm(&mut self) {
        let now = self.now();
        let delay_us = self
            .interface
            .poll_delay(now, &self.sockets)
            .map_or(IDLE_WAKE_MICROSECONDS, |delay| delay.total_micros())
            .min(IDLE_WAKE_MICROSECONDS);
        if let Ok(boot) = network_device::notify(DEVICE, NOTIFY, clock_us() + delay_us) {
            DEVICE_BOOT.store(boot, Ordering::Relaxed);
        }
    }

    fn listen(&mut self, port: u64) -> Option<Answer> {
        let Ok(port) = u16::try_from(port) else {
            return Answer::code(error::BAD_PORT);
        };
        // A listener on the port already: its capability again (a client that lost it). A
        // private listener is new at each `listen`, in a shut one's slot if there is one.
        let index = match self.listeners.iter().position(|listener| listener.open && port != 0 && listener.port == port) {
            Some(index) => index,
            None => match self.listeners.iter().position(|listener| !listener.open) {
                Some(index) => {
                    (self.listeners[index].port, self.listeners[index].open) = (port, true);
                    index
                }
                None if self.listeners.len() < LISTENERS_MAX => {
                    self.listeners.push(Listener { port, generation: 0, open: true, events: VecDeque::new(), waiting: None });
                    self.listeners.len() - 1
                }
                None => return Answer::code(error::TOO_MANY_LISTENERS),
            },
        };
        if process::make_start(OWN_PROCESS, self.badge(index), MINTED).is_err() {
            return Answer::code(error::INTERNAL);
        }
        Some(Answer { code: 0, words: [0; 4], length: 0, listener: true })
    }

    /// The badge of listener `index`'s capability.
    fn badge(&self, index: usize) -> u64 {
        LISTENER_BADGE_BASE + index as u64 + (u64::from(self.listeners[index].generation) << LISTENER_INDEX_BITS)
    }

    /// The open listener a badge names, if any.
    fn listener_of(&self, badge: u64) -> Option<usize> {
        let index = usize::try_from(badge.checked_sub(LISTENER_BADGE_BASE)? & ((1 << LISTENER_INDEX_BITS) - 1)).ok()?;
        let listener = self.listeners.get(index)?;
        (listener.open && self.badge(index) == badge).then_some(index)
    }

    /// Shuts private listener `listener`: its connections are reset, its waiting client
    /// is answered `LISTENER_SHUT`, and its capability names nothing from now on.
    fn shut(&mut self, listener: usize) -> Option<Answer> {
        if self.listeners[listener].port != 0 {
            return Answer::code(error::BAD_ORDER);
        }
        for index in 0..self.entries.len() {
            if self.entries[index].listener == Some(listener) {
                let handle = self.entries[index].handle;
                self.socket(handle).abort();
                self.entries[index].free();
            }
        }
        if self.listeners[listener].waiting.take().is_some()
            && node::swap(WAITERS, listener as u64, CapReg::new(NOTHING), ANSWER).is_ok()
        {
            let _ = Invocation::send(ANSWER.index(), error::LISTENER_SHUT, [0; 4]).invoke(&mut []);
        }
        let shut = &mut self.listeners[listener];
        shut.events.clear();
        shut.open = false;
        shut.generation = shut.generation.wrapping_add(1);
        Answer::code(0)
    }

    /// The connection `id` of `listener`, open and not finished.
    fn connection(&self, listener: usize, id: u64) -> Option<usize> {
        self.entries
            .iter()
            .position(|entry| entry.listener == Some(listener) && u64::from(entry.id) == id && entry.id != 0 && !entry.finished)
    }

    /// A listener's order; `None`: no answer now (the caller waits).
    fn listener_order(&mut self, listener: usize, code: u64, words: [u64; 4], string: &[u8], out: &mut [u8]) -> Option<Answer> {
        match code {
            order::WAIT => {
                if self.listeners[listener].waiting.is_some() {
                    return Answer::code(error::WAIT_PENDING);
                }
                let capacity = match words[0] as usize {
                    0 => user::net::WAIT_BYTES_MAX,
                    capacity => capacity.min(user::net::WAIT_BYTES_MAX),
                };
                if capacity < WAIT_BUFFER_BYTES_MIN {
                    return Answer::code(error::BUFFER_TOO_SMALL);
                }
                if !self.listeners[listener].events.is_empty() {
                    let length = self.take_events(listener, out, capacity);
                    return Some(Answer { code: 0, words: [length as u64, 0, 0, 0], length, listener: false });
                }
                // Kept until events come (`answer_waiters`); the slot held void.
                if node::swap(WAITERS, listener as u64, CapReg::new(RESUME), ANSWER).is_err() {
                    return Answer::code(error::INTERNAL);
                }
                self.listeners[listener].waiting = Some(capacity);
                None
            }
            order::SEND => {
                let Some(index) = self.connection(listener, words[0]) else {
                    return Answer::code(error::UNKNOWN_CONNECTION);
                };
                let handle = self.entries[index].handle;
                let socket = self.socket(handle);
                if !socket.may_send() {
                    return Answer::code(error::UNKNOWN_CONNECTION);
                }
                let accepted = socket.send_slice(string).unwrap_or(0);
                if accepted < string.len() {
                    self.entries[index].send_blocked = true;
                }
                Some(Answer { code: 0, words: [accepted as u64, 0, 0, 0], length: 0, listener: false })
            }
            order::CLOSE => {
                let Some(index) = self.connection(listener, words[0]) else {
                    return Answer::code(error::UNKNOWN_CONNECTION);
                };
                let handle = self.entries[index].handle;
                self.socket(handle).close();
                self.entries[index].finished = true;
                let id = self.entries[index].id;
                // What the peer sent meanwhile is of no use to a client that closed.
                self.listeners[listener].events.retain(|pending| pending.connection() != id);
                self.entries[index].data_pending = false;
                Answer::code(0)
            }
            order::HAND_OVER => self.hand_over(listener, words[0], string),
            order::SHUT => self.shut(listener),
            _ => Answer::code(error::BAD_ORDER),
        }
    }

    /// Moves connection `id` of `listener` to the listener whose capability the message
    /// carried: there it is opened anew, its first data `already_read` and what waited for
    /// `listener`, then whatever comes.
    fn hand_over(&mut self, listener: usize, id: u64, already_read: &[u8]) -> Option<Answer> {
        let target = process::start_badge(OWN_PROCESS, CARRIED).ok().and_then(|badge| self.listener_of(badge));
        // Itself too: its client already knows the connection.
        let Some(target) = target.filter(|&target| target != listener) else {
            return Answer::code(error::NOT_A_LISTENER);
        };
        let Some(index) = self.connection(listener, id) else {
            return Answer::code(error::UNKNOWN_CONNECTION);
        };
        if self.listeners[target].port == 0 {
            let held = |by: &dyn Fn(usize) -> bool| {
                self.entries.iter().filter(|entry| entry.id != 0 && entry.listener.is_some_and(by)).count()
            };
            let target_full = held(&|serving| serving == target) >= PRIVATE_CONNECTIONS_MAX;
            // From a port's listener, the connection's socket becomes a private one.
            let private_full = self.listeners[listener].port != 0
                && held(&|serving| self.listeners[serving].port == 0) >= PRIVATE_SOCKETS_MAX;
            if target_full || private_full {
                return Answer::code(error::TOO_MANY_CONNECTIONS);
            }
        }
        let id = self.entries[index].id;
        // Its events still waiting (no `closed`: the connection would be unknown): data
        // joins what the caller read; `opened` is said anew.
        let mut data = already_read.to_vec();
        let mut writable = false;
        self.listeners[listener].events.retain(|pending| match pending {
            Pending::Data(of, bytes) if *of == id => {
                data.extend_from_slice(bytes);
                false
            }
            Pending::Writable(of) if *of == id => {
                writable = true;
                false
            }
            pending => pending.connection() != id,
        });
        let events = &mut self.listeners[target].events;
        events.push_back(Pending::Opened(id));
        // At most this one data event waits for the connection, as for any other: no more
        // is read from it until the new listener's client takes it.
        let data_pending = !data.is_empty();
        if data_pending {
            events.push_back(Pending::Data(id, data));
        }
        if writable {
            events.push_back(Pending::Writable(id));
        }
        if self.entries[index].ended {
            events.push_back(Pending::Ended(id));
        }
        let entry = &mut self.entries[index];
        entry.listener = Some(target);
        entry.data_pending = data_pending;
        Answer::code(0)
    }
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: these are
    // the only references to the three buffers for the program's life.
    let (received, out, waiter_out) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(RECEIVED),
            &mut *core::ptr::addr_of_mut!(OUT),
            &mut *core::ptr::addr_of_mut!(WAITER_OUT),
        )
    };
    if process::make_start(OWN_PROCESS, notification::RESTART_BADGE, NOTIFY).is_err() {
        user::print("net: cannot make its notification capability; stopping\n");
        return 1;
    }
    let mut service = Service::new();
    let mut answer: Option<Answer> = None;
    loop {
        service.run_stack();
        service.answer_waiters(waiter_out);
        service.arm();
        let message = match answer.take() {
            Some(Answer { code, words, length, listener }) => {
                let reply = Invocation::return_to(RESUME, code, words)
                    .with_string(&out[..length])
                    .receiving(&[CARRIED.index()])
                    .resume_into(RESUME);
                if listener { reply.sending(&[MINTED.index()]) } else { reply }.invoke(received)
            }
            None => Invocation::return_to(NOTHING, 0, [0; 4]).receiving(&[CARRIED.index()]).resume_into(RESUME).invoke(received),
        };
        let string = &received[..message.string_length];
        answer = match message.badge {
            notification::RESTART_BADGE => {
                if message.code == notification::ORDER {
                    DEVICE_BOOT.store(message.words[1], Ordering::Relaxed);
                }
                None
            }
            0 => match message.code {
                order::LISTEN => service.listen(message.words[0]),
                _ => Answer::code(error::BAD_ORDER),
            },
            user::net::PRIVATE_LISTENERS_BADGE => match (message.code, message.words[0]) {
                (order::LISTEN, 0) => service.listen(0),
                (order::LISTEN, _) => Answer::code(error::BAD_PORT),
                _ => Answer::code(error::BAD_ORDER),
            },
            badge => match service.listener_of(badge) {
                Some(listener) => service.listener_order(listener, message.code, message.words, string, out),
                None => Answer::code(error::LISTENER_SHUT),
            },
        };
        // A notification (a send) has no one to answer.
        if message.badge == notification::RESTART_BADGE {
            answer = None;
        }
    }
}

user::entry!(main);
