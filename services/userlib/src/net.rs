//! The network service's client interface (`services/net`, documented in
//! `docs/net-service.md`): TCP through capabilities. The service's start capability
//! (badge 0) opens listeners; a listener's capability waits for events, sends and closes.
//!
//! The orders, the event layout and the error codes are here once, for the service and its
//! clients alike.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// Orders of the service's start capability (badge 0).
pub mod order {
    /// `listen`: word 0 the TCP port, or 0 for a private listener (no port: it gets only
    /// connections handed over to it); replies with a listener capability (the first
    /// capability received).
    pub const LISTEN: u64 = 1;
    /// `wait` (a listener): replies with events once there are some.
    pub const WAIT: u64 = 2;
    /// `send` (a listener): word 0 a connection, the string the bytes.
    pub const SEND: u64 = 3;
    /// `close` (a listener): word 0 a connection.
    pub const CLOSE: u64 = 4;
    /// `hand_over` (a listener): word 0 a connection, the first capability sent the
    /// listener it moves to, the string bytes that listener gets first (what was read of
    /// it already).
    pub const HAND_OVER: u64 = 5;
    /// `shut` (a private listener): its connections reset, its capability void from now on.
    pub const SHUT: u64 = 6;
}

/// The service's reply codes besides 0 (success). They start at 100, clear of the kernel's
/// object errors (1..=8), which a client may also see (a void capability, say).
pub mod error {
    /// The order is not one this capability takes.
    pub const BAD_ORDER: u64 = 100;
    /// The port is above 65535, or a port was asked through the capability that makes
    /// private listeners only ([`super::PRIVATE_LISTENERS_BADGE`]).
    pub const BAD_PORT: u64 = 101;
    /// Reserved: a second `listen` on a port returns its listener's capability again.
    pub const PORT_IN_USE: u64 = 102;
    /// The service holds as many listeners as it can.
    pub const TOO_MANY_LISTENERS: u64 = 103;
    /// No open connection of this listener has this id (never opened, closed by the
    /// client, or closed or reset by the peer).
    pub const UNKNOWN_CONNECTION: u64 = 104;
    /// A `wait` on this listener is already waiting: one at a time.
    pub const WAIT_PENDING: u64 = 105;
    /// The service could not make the listener's capability or keep the caller's resume
    /// capability (a kernel refusal).
    pub const INTERNAL: u64 = 106;
    /// `wait`'s buffer (word 0) is shorter than an event header and a byte.
    pub const BUFFER_TOO_SMALL: u64 = 107;
    /// `hand_over`'s capability is not another listener of this service.
    pub const NOT_A_LISTENER: u64 = 108;
    /// The listener was shut: its capability names nothing (also the answer to a `wait`
    /// that was waiting on it).
    pub const LISTENER_SHUT: u64 = 109;
    /// `hand_over` to a private listener that holds as many connections as one may, or
    /// when private listeners together hold as many as they may: the connection stays with
    /// the caller.
    pub const TOO_MANY_CONNECTIONS: u64 = 110;
}

/// The badge of the service's start capability that makes private listeners only
/// (`listen` with a port is refused [`error::BAD_PORT`]): for a holder that hands private
/// listeners to servers and must not take a port's connections (the TP1 appliance's admin
/// service). Its low byte is past any listener's index, so it names no listener.
pub const PRIVATE_LISTENERS_BADGE: u64 = 255;

/// The kinds of event a `wait` returns.
pub mod event {
    /// A connection was accepted; no data.
    pub const OPENED: u8 = 1;
    /// Bytes arrived on a connection.
    pub const DATA: u8 = 2;
    /// The connection was reset (also after a restart of the system, for every connection
    /// that was open); its id is unknown from now on.
    pub const CLOSED: u8 = 3;
    /// A `send` on the connection took fewer bytes than it was given, and its send buffer
    /// has room again (half of it): send the rest. No data.
    pub const WRITABLE: u8 = 4;
    /// The peer sends no more (it closed its side, after everything it sent): `send`
    /// still works, and the client `close`s the connection when it has answered. No data.
    pub const ENDED: u8 = 5;
    /// Bytes of an event's header: u32 connection, u8 kind, u8 0, u16 data length.
    pub const HEADER_BYTES: usize = 8;
}

/// The longest string a `wait` returns (the invocation string's limit).
pub const WAIT_BYTES_MAX: usize = crate::abi::INVOCATION_STRING_BYTES_MAX;

/// One event of a `wait`'s reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    pub connection: u32,
    pub kind: u8,
    pub data: &'a [u8],
}

/// The events in a `wait`'s reply, in order; stops at a malformed tail.
pub fn events(reply: &[u8]) -> impl Iterator<Item = Event<'_>> {
    let mut rest = reply;
    core::iter::from_fn(move || {
        let header = rest.get(..event::HEADER_BYTES)?;
        let connection = u32::from_le_bytes(header[..4].try_into().ok()?);
        let kind = header[4];
        let length = usize::from(u16::from_le_bytes([header[6], header[7]]));
        let data = rest.get(event::HEADER_BYTES..event::HEADER_BYTES + length)?;
        rest = &rest[event::HEADER_BYTES + length..];
        Some(Event { connection, kind, data })
    })
}

/// Opens a listener on `port` through the service's start capability `service`; the
/// listener's capability lands in `into`.
pub fn listen(service: CapReg, port: u16, into: CapReg) -> Result<(), Error> {
    invoke(Invocation {
        words: [u64::from(port), 0, 0, 0],
        receive: &[into],
        ..Invocation::call(service, order::LISTEN)
    })
    .check()?;
    Ok(())
}

/// Opens a private listener (no port: it gets only connections handed over to it, by
/// [`hand_over`]) through the service's start capability `service`; its capability lands in
/// `into`.
pub fn listen_private(service: CapReg, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { receive: &[into], ..Invocation::call(service, order::LISTEN) }).check()?;
    Ok(())
}

/// Moves `connection` from `listener` to the listener `to` (a capability of the same
/// service): `to`'s holder gets it as opened, with `already_read` as its first data (what
/// the caller read of it; up to 4096 bytes), then whatever else it sends. The caller's
/// listener knows it no more. A front end reads a connection's first request and hands it
/// to the server it names.
pub fn hand_over(listener: CapReg, connection: u32, to: CapReg, already_read: &[u8]) -> Result<(), Error> {
    invoke(Invocation {
        words: [u64::from(connection), 0, 0, 0],
        send: &[to],
        string: already_read,
        ..Invocation::call(listener, order::HAND_OVER)
    })
    .check()?;
    Ok(())
}

/// Shuts the private listener `listener`: every connection it holds is reset, a `wait` on
/// it is answered [`error::LISTENER_SHUT`], and so is every later order through its
/// capability. (A tenant's server revoked: its connections go with it.)
pub fn shut(listener: CapReg) -> Result<(), Error> {
    invoke(Invocation::call(listener, order::SHUT)).check()?;
    Ok(())
}

/// Waits for events on `listener`; they land in `buffer` (as many as fit). Returns the
/// length of the reply (see [`events`]).
pub fn wait(listener: CapReg, buffer: &mut [u8]) -> Result<usize, Error> {
    let capacity = buffer.len().min(WAIT_BYTES_MAX) as u64;
    let received = invoke(Invocation {
        words: [capacity, 0, 0, 0],
        buffer,
        ..Invocation::call(listener, order::WAIT)
    })
    .check()?;
    Ok(received.string_length)
}

/// Sends `bytes` on `connection`; returns how many the service took (fewer when its send
/// buffer is full: send the rest later).
pub fn send(listener: CapReg, connection: u32, bytes: &[u8]) -> Result<usize, Error> {
    let received = invoke(Invocation {
        words: [u64::from(connection), 0, 0, 0],
        string: bytes,
        ..Invocation::call(listener, order::SEND)
    })
    .check()?;
    Ok(received.words[0] as usize)
}

/// Closes `connection` (a FIN to the peer, once what was sent has gone).
pub fn close(listener: CapReg, connection: u32) -> Result<(), Error> {
    invoke(Invocation {
        words: [u64::from(connection), 0, 0, 0],
        ..Invocation::call(listener, order::CLOSE)
    })
    .check()?;
    Ok(())
}
