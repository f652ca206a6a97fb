//! A TCP echo server in ring 3, on the network service's capabilities (docs/net-service.md):
//! listens on port 7100 and sends every byte back on the connection it came on. The host's
//! network tests (hypervisor-glue/holdfast/tests/net.rs) connect to it through
//! `holdfast run --tp1-port`.
//!
//! It never blocks on one connection: when the service takes only part of an echo (its
//! send buffer for that connection is full, the peer not reading), it offers the rest a few
//! times, and closes the connection if the peer still does not read, so that a client
//! that floods without reading cannot hold the others up.
//!
//! A connection whose data starts with `upper:` is handed over (`net::hand_over`), with
//! that data, to `tcp-upper` on a private listener made here and sent to it at the start.
//! One whose data starts with `drop:` is handed to a private listener that is then shut,
//! which resets it (as when a tenant's server is revoked). Before serving, it checks that
//! hand-overs to what is no listener, and orders to a shut listener, are refused
//! (`tcp-echo: hand-overs to no listener refused`), among them a hand-over to a capability
//! an earlier message carried (the kernel voids a receive register a message does not
//! fill).
//!
//! Capability registers: 0 console, 2 the network service (badge 0), 5 `tcp-upper`, 8 the
//! network service's capability that makes private listeners only; 3 receives the
//! listener, 4 the private listener, 6 the dropping one, 7 scratch.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, net};
use user::syscall::{CapReg, Error};

const SERVICE: CapReg = CapReg::new(2);
const LISTENER: CapReg = CapReg::new(3);
const PRIVATE: CapReg = CapReg::new(4);
const UPPER: CapReg = CapReg::new(5);
/// A private listener made for each connection that asks to be dropped, and shut.
const DROP: CapReg = CapReg::new(6);
const SCRATCH: CapReg = CapReg::new(7);
/// The network service's capability that makes private listeners only.
const PRIVATE_ONLY: CapReg = CapReg::new(8);
/// What a connection sends first to be handed to `tcp-upper`.
const UPPER_PREFIX: &[u8] = b"upper:";
/// What a connection sends first to be handed to a private listener that is then shut.
const DROP_PREFIX: &[u8] = b"drop:";
const PORT: u16 = 7100;
/// Offers of the rest of an echo before a connection whose peer does not read is closed.
const SEND_ATTEMPTS_MAX: usize = 64;

static mut EVENTS: [u8; net::WAIT_BYTES_MAX] = [0; net::WAIT_BYTES_MAX];

fn report(what: &[u8], error: Error) {
    let code = match error {
        Error::Invocation(error) => error as u64,
        Error::Object(error) => error as u64,
        Error::Reply(code) => code,
    };
    let mut digits = [0u8; 20];
    user::print_parts(&[b"tcp-echo: ", what, b" failed: code ", user::decimal(code, &mut digits), b"\n"]);
}

/// Sends all of `data` on `connection`, or closes it if the peer does not take it.
fn echo(connection: u32, mut data: &[u8]) {
    for _ in 0..SEND_ATTEMPTS_MAX {
        match net::send(LISTENER, connection, data) {
            Ok(sent) => data = &data[sent.min(data.len())..],
            // Closed meanwhile: nothing to echo to.
            Err(_) => return,
        }
        if data.is_empty() {
            return;
        }
    }
    let _ = net::close(LISTENER, connection);
}

/// Hand-overs the service must refuse, target first: to its own start capability (badge 0),
/// to the console, to this listener itself, and to nothing right after a message that
/// carried the private listener (words only, which the kernel's fast path delivers, and
/// with a string, which takes its general path). Returns what went wrong.
fn refusals() -> Result<(), &'static [u8]> {
    let refused = |result: Result<(), Error>| result == Err(Error::Reply(net::error::NOT_A_LISTENER));
    if !refused(net::hand_over(LISTENER, 1, SERVICE, b"")) {
        return Err(b"a hand-over to the service itself");
    }
    if !refused(net::hand_over(LISTENER, 1, CapReg::new(user::CONSOLE), b"")) {
        return Err(b"a hand-over to the console");
    }
    if !refused(net::hand_over(LISTENER, 1, LISTENER, b"")) {
        return Err(b"a hand-over to its own listener");
    }
    // A shut listener's capability names nothing, also once its slot serves another.
    let shut_code = |result: Result<(), Error>| result == Err(Error::Reply(net::error::LISTENER_SHUT));
    if net::listen_private(SERVICE, SCRATCH).and_then(|()| net::shut(SCRATCH)).is_err() {
        return Err(b"a private listener's shut");
    }
    if !shut_code(net::close(SCRATCH, 1)) || !refused(net::hand_over(LISTENER, 1, SCRATCH, b"")) {
        return Err(b"an order to a shut listener");
    }
    if net::listen_private(SERVICE, DROP).is_err() || net::close(DROP, 1) != Err(Error::Reply(net::error::UNKNOWN_CONNECTION)) {
        return Err(b"a private listener in a shut one's slot");
    }
    if !shut_code(net::close(SCRATCH, 1)) {
        return Err(b"an order to a shut listener whose slot serves another");
    }
    if net::shut(LISTENER) != Err(Error::Reply(net::error::BAD_ORDER)) {
        return Err(b"a shut of a port's listener");
    }
    // The capability that makes private listeners only takes no port, not even one that
    // has a listener (whose capability it would hand back).
    if net::listen(PRIVATE_ONLY, PORT, SCRATCH) != Err(Error::Reply(net::error::BAD_PORT))
        || net::listen_private(PRIVATE_ONLY, SCRATCH).and_then(|()| net::shut(SCRATCH)).is_err()
    {
        return Err(b"the private-listeners capability");
    }
    for already_read in [&b""[..], b"x"] {
        // A `close` that carries the private listener, then a hand-over that carries nothing.
        let carried = user::syscall::invoke(user::syscall::Invocation {
            words: [u64::MAX, 0, 0, 0],
            send: &[PRIVATE],
            ..user::syscall::Invocation::call(LISTENER, net::order::CLOSE)
        });
        if carried.code != net::error::UNKNOWN_CONNECTION {
            return Err(b"a close of no connection");
        }
        let handed = user::syscall::invoke(user::syscall::Invocation {
            words: [1, 0, 0, 0],
            string: already_read,
            ..user::syscall::Invocation::call(LISTENER, net::order::HAND_OVER)
        });
        if handed.code != net::error::NOT_A_LISTENER {
            return Err(b"a hand-over to an earlier message's capability");
        }
    }
    Ok(())
}

/// Connections whose first bytes may yet say [`UPPER_PREFIX`] or [`DROP_PREFIX`], with
/// those bytes: a wait's buffer may cut an event anywhere. Room for as many as the network
/// service has sockets.
struct Deciding {
    connections: [(u32, [u8; FIRST_BYTES], usize); DECIDING_MAX],
    /// Connections whose first data was kept because it could not decide yet: the tests
    /// check that their split writes made this happen at least once.
    kept_undecided: u64,
}

const DECIDING_MAX: usize = 128;
const FIRST_BYTES: usize = UPPER_PREFIX.len();

impl Deciding {
    /// A new connection is deciding, if there is room (else it is echoed).
    fn open(&mut self, connection: u32) {
        if let Some(free) = self.connections.iter_mut().find(|(id, ..)| *id == 0) {
            *free = (connection, [0; FIRST_BYTES], 0);
        }
    }

    /// The peer sends no more: its first bytes, if kept, are echoed (they can no longer
    /// say anything else).
    fn end(&mut self, connection: u32) {
        if let Some(entry) = self.connections.iter_mut().find(|(id, ..)| *id == connection) {
            entry.0 = 0;
            echo(connection, &entry.1[..entry.2]);
        }
    }

    fn forget(&mut self, connection: u32) {
        if let Some(entry) = self.connections.iter_mut().find(|(id, ..)| *id == connection) {
            entry.0 = 0;
        }
    }

    /// Data of `connection`: echoed, handed over with what came before it, or kept until
    /// its first bytes decide.
    fn data(&mut self, connection: u32, data: &[u8]) {
        let Some(entry) = self.connections.iter_mut().find(|(id, ..)| *id == connection) else {
            echo(connection, data);
            return;
        };
        let (_, first, length) = entry;
        let taken = data.len().min(FIRST_BYTES - *length);
        first[*length..*length + taken].copy_from_slice(&data[..taken]);
        *length += taken;
        let first = &first[..*length];
        let undecided = |prefix: &[u8]| first.len() < prefix.len() && prefix.starts_with(first);
        if undecided(UPPER_PREFIX) || undecided(DROP_PREFIX) {
            if first.len() == taken {
                self.kept_undecided += 1;
                if self.kept_undecided.is_power_of_two() {
                    let mut digits = [0u8; 20];
                    let count = user::decimal(self.kept_undecided, &mut digits);
                    user::print_parts(&[b"tcp-echo: first bytes kept undecided: ", count, b"\n"]);
                }
            }
            return;
        }
        let mut already_read = [0u8; net::WAIT_BYTES_MAX + FIRST_BYTES];
        let rest = &data[taken..];
        already_read[..first.len()].copy_from_slice(first);
        already_read[first.len()..first.len() + rest.len()].copy_from_slice(rest);
        let already_read = &already_read[..first.len() + rest.len()];
        let upper = first.starts_with(UPPER_PREFIX);
        let drop = first.starts_with(DROP_PREFIX);
        entry.0 = 0;
        if upper {
            if let Err(error) = net::hand_over(LISTENER, connection, PRIVATE, already_read) {
                report(b"a hand-over", error);
            }
        } else if drop {
            // Handed over, then its listener shut: the connection is reset. A new private
            // listener for the next one, in the shut one's slot.
            let dropped = net::hand_over(LISTENER, connection, DROP, already_read)
                .and_then(|()| net::shut(DROP))
                .and_then(|()| net::listen_private(SERVICE, DROP));
            if let Err(error) = dropped {
                report(b"a drop", error);
            }
        } else {
            echo(connection, already_read);
        }
    }
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread: the only reference.
    let events = unsafe { &mut *core::ptr::addr_of_mut!(EVENTS) };
    if let Err(error) = net::listen(SERVICE, PORT, LISTENER) {
        report(b"listen on 7100", error);
        return 1;
    }
    if let Err(error) = net::listen_private(SERVICE, PRIVATE) {
        report(b"a private listener", error);
        return 1;
    }
    if user::syscall::invoke(user::syscall::Invocation { send: &[PRIVATE], ..user::syscall::Invocation::call(UPPER, 0) }).code != 0 {
        user::print("tcp-echo: tcp-upper did not take its listener [FAILED]\n");
        return 1;
    }
    match refusals() {
        Ok(()) => user::print("tcp-echo: hand-overs to no listener refused\n"),
        Err(what) => user::print_parts(&[b"tcp-echo: ", what, b" was not refused [FAILED]\n"]),
    }
    user::print("tcp-echo: listening on 7100\n");
    let mut opened: u64 = 0;
    let mut deciding = Deciding { connections: [(0, [0; FIRST_BYTES], 0); DECIDING_MAX], kept_undecided: 0 };
    loop {
        let length = match net::wait(LISTENER, events) {
            Ok(length) => length,
            Err(error) => {
                report(b"wait", error);
                return 1;
            }
        };
        for event in net::events(&events[..length]) {
            match event.kind {
                net::event::OPENED => {
                    deciding.open(event.connection);
                    opened += 1;
                    // A line now and then: the tests see connections arrive, the console is
                    // not flooded.
                    if opened.is_power_of_two() {
                        let mut digits = [0u8; 20];
                        user::print_parts(&[b"tcp-echo: ", user::decimal(opened, &mut digits), b" connections opened\n"]);
                    }
                }
                net::event::DATA => deciding.data(event.connection, event.data),
                net::event::CLOSED => {
                    deciding.forget(event.connection);
                    let _ = net::close(LISTENER, event.connection);
                }
                // Everything it sent is echoed (first bytes kept undecided too), then closed.
                net::event::ENDED => {
                    deciding.end(event.connection);
                    let _ = net::close(LISTENER, event.connection);
                }
                _ => {}
            }
        }
    }
}

user::entry!(main);
