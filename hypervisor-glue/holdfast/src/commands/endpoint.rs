//! The client endpoint: the TP1 port clients connect to on 127.0.0.1, in front of QEMU's
//! own forward of the guest's port. Each connection is forwarded to the current target,
//! one connection being made at a time (see [`connect`]).
//!
//! `holdfast run --tp1-port` serves its one VM through it. QEMU's forward listens with a
//! backlog of one: in a burst of clients the host kernel drops a handshake's last ACK and
//! the data after it, and answers further SYNs with SYN cookies. A cookie connection is
//! made from the first segment that gets in, and takes its sequence number as the start
//! of the stream: when that was the retransmission of a client's second write, the bytes
//! of its first were acknowledged to the client and never reached the guest (seen in
//! packet captures of tests/net.rs, 1 run in 5). Made one at a time, no connection
//! overflows that backlog.
//!
//! The pair (`holdfast pair up`) switches it to each new primary: the connections to the
//! old one are closed (a client sees its connection end and reconnects, retrying its
//! transactions by id), and new ones go to the new primary. While there is no primary
//! that serves (at the start, and from a promotion until the new primary says it serves),
//! a new connection is held, not refused: it is forwarded as soon as one does. QEMU's port
//! forward accepts a connection even while the guest does not listen, and then closes it,
//! so a client sent there early would only go round its reconnect pause again and again.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long a connection to the primary's port may take before the client's is closed.
const CONNECT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// How often a connection waiting its turn looks at the primary port's accept queue.
const ACCEPT_QUEUE_POLL: Duration = Duration::from_millis(1);
/// How long a client's connection is held while no primary serves, before it is closed.
pub const HOLD_TIME_LIMIT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Inner {
    target: Mutex<Option<SocketAddr>>,
    /// Signalled when the target changes, for the connections held meanwhile.
    target_changed: Condvar,
    hold_time_limit: Duration,
    /// Held while a connection to the primary is being made: one at a time (see
    /// [`connect`]).
    connecting: Mutex<()>,
    /// Open forwarded connections: the primary each goes to and their client and primary
    /// sides, to close on a switch away from that primary.
    connections: Mutex<HashMap<u64, (SocketAddr, TcpStream, TcpStream)>>,
    next_id: AtomicU64,
    forwarded_total: AtomicU64,
}

pub struct Endpoint {
    inner: Arc<Inner>,
    address: SocketAddr,
}

impl Endpoint {
    /// Serves `listener` from a thread of its own, forwarding to no one until
    /// [`Endpoint::switch`] names a primary (a client is held meanwhile, for at most
    /// `hold_time_limit`).
    pub fn start(listener: TcpListener, hold_time_limit: Duration) -> io::Result<Self> {
        let address = listener.local_addr()?;
        let inner = Arc::new(Inner { hold_time_limit, ..Inner::default() });
        let accepting = Arc::clone(&inner);
        thread::Builder::new().name("pair-endpoint".into()).spawn(move || {
            for client in listener.incoming() {
                // A failed accept (the client gave up already) is the client's business.
                let Ok(client) = client else { continue };
                let inner = Arc::clone(&accepting);
                let _ = thread::Builder::new().name("pair-endpoint-conn".into()).spawn(move || forward(&inner, client));
            }
        })?;
        Ok(Self { inner, address })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Forwards new connections to `target` from now on (holds them, for `None`) and closes
    /// every connection to the old one.
    ///
    /// Only those to another primary are closed: a held connection woken here may already
    /// have reached `target` and registered before the closing starts.
    pub fn switch(&self, target: Option<SocketAddr>) {
        *self.inner.target.lock().expect("endpoint target") = target;
        self.inner.target_changed.notify_all();
        let open: Vec<(TcpStream, TcpStream)> = self
            .inner
            .connections
            .lock()
            .expect("endpoint connections")
            .extract_if(|_, (to, _, _)| Some(*to) != target)
            .map(|(_, (_, client, primary))| (client, primary))
            .collect();
        for (client, primary) in open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = primary.shutdown(Shutdown::Both);
        }
    }

    pub fn target(&self) -> Option<SocketAddr> {
        *self.inner.target.lock().expect("endpoint target")
    }

    /// Client connections forwarded since the start.
    pub fn forwarded_total(&self) -> u64 {
        self.inner.forwarded_total.load(Ordering::Relaxed)
    }

    pub fn open_connections(&self) -> usize {
        self.inner.connections.lock().expect("endpoint connections").len()
    }
}

/// Joins `client` to the current primary until either side closes (or a switch closes
/// both).
fn forward(inner: &Inner, client: TcpStream) {
    let waiting = inner.target.lock().expect("endpoint target");
    let (waited, _) = inner
        .target_changed
        .wait_timeout_while(waiting, inner.hold_time_limit, |target| target.is_none())
        .expect("endpoint target");
    let target = *waited;
    drop(waited);
    let Some(target) = target else {
        return;
    };
    let Some(primary) = connect(inner, target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = primary.set_nodelay(true);
    let (Ok(client_copy), Ok(primary_copy), Ok(client_reader), Ok(primary_reader)) =
        (client.try_clone(), primary.try_clone(), client.try_clone(), primary.try_clone())
    else {
        return;
    };
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    {
        let mut connections = inner.connections.lock().expect("endpoint connections");
        // A switch between the connect and here: this connection is to the old primary.
        if *inner.target.lock().expect("endpoint target") != Some(target) {
            return;
        }
        connections.insert(id, (target, client_copy, primary_copy));
    }
    inner.forwarded_total.fetch_add(1, Ordering::Relaxed);
    let upstream = thread::Builder::new()
        .name("pair-endpoint-up".into())
        .spawn(move || copy_then_close(client_reader, primary, true));
    copy_then_close(primary_reader, client, false);
    if let Ok(upstream) = upstream {
        let _ = upstream.join();
    }
    inner.connections.lock().expect("endpoint connections").remove(&id);
}

/// A connection to `target`, made one at a time with the endpoint's others, each once
/// the one before has been accepted.
///
/// QEMU's user-mode network listens on a forwarded port with a backlog of one (libslirp's
/// `listen(s, 1)`) and accepts one connection per turn of its main loop. When the held
/// clients of a failover all connected at once, the host kernel queued two and dropped the
/// SYNs of the rest, which then waited for its one-second SYN retransmit: one client in
/// every 16-client drill was left 1–3 s behind the others. Giving up an attempt after a
/// few milliseconds and making it again does not do: an attempt given up just as its
/// handshake completed leaves the listener a connection that is reset under it.
fn connect(inner: &Inner, target: SocketAddr) -> Option<TcpStream> {
    let _turn = inner.connecting.lock().expect("endpoint connecting");
    let deadline = Instant::now() + CONNECT_TIME_LIMIT;
    // The kernel drops a SYN once the queue holds one more than the backlog: two here.
    while accept_queue_length(target).is_some_and(|queued| queued >= 2) && Instant::now() < deadline {
        thread::sleep(ACCEPT_QUEUE_POLL);
    }
    let left = deadline.saturating_duration_since(Instant::now()).max(ACCEPT_QUEUE_POLL);
    TcpStream::connect_timeout(&target, left).ok()
}

/// Connections to the IPv4 listener at `address` on this host that it has not accepted
/// yet: Linux lists a listening socket's accept queue as its `rx_queue` in
/// `/proc/net/tcp`. None where that cannot be read or holds no such listener.
fn accept_queue_length(address: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(address) = address else {
        return None;
    };
    // Addresses are written as the bytes of the address in host order, in hex.
    let host_order = u32::from_ne_bytes(address.ip().octets());
    let bound = [format!("{host_order:08X}:{:04X}", address.port()), format!("00000000:{:04X}", address.port())];
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, queues) = (fields.get(1)?, fields.get(3)?, fields.get(4)?);
        if *state != "0A" || !bound.iter().any(|bound| bound == local) {
            return None;
        }
        u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
    })
}

/// Copies until `from` ends, then closes both directions of both sides, so that the other
/// copy ends too; except, with `half_close`, an orderly end (the client shut its sending
/// side), which is passed on as a shut of `to`'s sending side only, the other copy going
/// on: a client that sends its last request and shuts its side still gets the replies.
/// Only the client's end is passed on so: the guest's servers close both sides at once,
/// and a connection they closed must not wait for its client to close too (its socket in
/// the guest would be held until then).
fn copy_then_close(mut from: TcpStream, mut to: TcpStream, half_close: bool) {
    if io::copy(&mut from, &mut to).is_ok() && half_close {
        let _ = to.shutdown(Shutdown::Write);
        return;
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server that answers each connection's bytes with `tag` and them, until it closes.
    fn tagged_echo(tag: u8) -> SocketAddr {
        tagged_echo_on(TcpListener::bind("127.0.0.1:0").unwrap(), tag, Duration::ZERO)
    }

    /// [`tagged_echo`] on `listener`, pausing `accept_pause` after each connection it accepts.
    fn tagged_echo_on(listener: TcpListener, tag: u8, accept_pause: Duration) -> SocketAddr {
        let address = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                thread::spawn(move || {
                    let mut buffer = [0u8; 64];
                    while let Ok(length) = stream.read(&mut buffer) {
                        if length == 0 || stream.write_all(&[tag]).and_then(|()| stream.write_all(&buffer[..length])).is_err() {
                            break;
                        }
                    }
                });
                thread::sleep(accept_pause);
            }
        });
        address
    }

    fn ask(stream: &mut TcpStream, byte: u8) -> Vec<u8> {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(&[byte]).unwrap();
        let mut reply = [0u8; 2];
        stream.read_exact(&mut reply).unwrap();
        reply.to_vec()
    }

    #[test]
    fn connections_go_to_the_primary_and_a_switch_closes_those_to_the_old_one() {
        let (a, b) = (tagged_echo(b'A'), tagged_echo(b'B'));
        let endpoint = Endpoint::start(TcpListener::bind("127.0.0.1:0").unwrap(), Duration::from_millis(300)).unwrap();

        // No primary for longer than the hold: closed.
        let mut early = TcpStream::connect(endpoint.address()).unwrap();
        early.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = early.write_all(b"x");
        assert_eq!(early.read(&mut [0u8; 4]).unwrap_or(0), 0);

        // No primary yet, one comes within the hold: the connection waits for it, and what
        // the client sent meanwhile reaches it.
        let mut held = TcpStream::connect(endpoint.address()).unwrap();
        held.write_all(&[9]).unwrap();
        thread::sleep(Duration::from_millis(100));
        endpoint.switch(Some(a));
        held.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = [0u8; 2];
        held.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [b'A', 9]);
        drop(held);
        let mut first = TcpStream::connect(endpoint.address()).unwrap();
        assert_eq!(ask(&mut first, 1), vec![b'A', 1]);
        assert_eq!(ask(&mut first, 2), vec![b'A', 2]);
        assert_eq!(endpoint.open_connections(), 1);

        // Named again, the primary keeps its connections: only those to another are closed.
        endpoint.switch(Some(a));
        assert_eq!(ask(&mut first, 5), vec![b'A', 5]);

        endpoint.switch(Some(b));
        first.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = first.write_all(&[3]);
        assert_eq!(first.read(&mut [0u8; 4]).unwrap_or(0), 0, "a connection to the old primary stays open");

        let mut second = TcpStream::connect(endpoint.address()).unwrap();
        assert_eq!(ask(&mut second, 4), vec![b'B', 4]);
        assert_eq!(endpoint.forwarded_total(), 3);
        drop(second);
    }

    #[test]
    fn a_client_that_shuts_its_side_still_gets_the_replies() {
        // A server that answers once its client has sent everything.
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = server.local_addr().unwrap();
        thread::spawn(move || {
            let (mut stream, _) = server.accept().unwrap();
            let mut request = Vec::new();
            stream.read_to_end(&mut request).unwrap();
            stream.write_all(b"got ").and_then(|()| stream.write_all(&request)).unwrap();
        });
        let endpoint = Endpoint::start(TcpListener::bind("127.0.0.1:0").unwrap(), Duration::from_secs(10)).unwrap();
        endpoint.switch(Some(address));
        let mut client = TcpStream::connect(endpoint.address()).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.write_all(b"the last request").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut reply = Vec::new();
        client.read_to_end(&mut reply).unwrap();
        assert_eq!(reply, b"got the last request");
    }

    #[test]
    fn a_listeners_accept_queue_is_read_from_the_host() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        assert_eq!(accept_queue_length(address), Some(0));
        let _waiting = [TcpStream::connect(address).unwrap(), TcpStream::connect(address).unwrap()];
        assert_eq!(accept_queue_length(address), Some(2));
        drop(listener.accept().unwrap());
        assert_eq!(accept_queue_length(address), Some(1));
    }

    /// The held clients of a failover all connect at once to a primary whose port, like
    /// QEMU's forwarded ones, has a backlog of one and is accepted from slowly: each must
    /// still be answered well before the host's one-second SYN retransmit.
    #[test]
    fn a_burst_of_held_clients_reaches_a_primary_with_a_backlog_of_one() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: the descriptor is the listener's and open; listening again only sets the
        // backlog.
        assert_eq!(unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 1) }, 0);
        let primary = tagged_echo_on(listener, b'P', Duration::from_millis(5));
        let endpoint = Endpoint::start(TcpListener::bind("127.0.0.1:0").unwrap(), Duration::from_secs(10)).unwrap();
        let clients: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(endpoint.address()).unwrap()).collect();
        thread::sleep(Duration::from_millis(100));
        let switched = Instant::now();
        endpoint.switch(Some(primary));
        let answered: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(index, mut client)| thread::spawn(move || (ask(&mut client, index as u8), switched.elapsed())))
            .collect();
        for (index, client) in answered.into_iter().enumerate() {
            let (reply, waited) = client.join().unwrap();
            assert_eq!(reply, vec![b'P', index as u8]);
            assert!(waited < Duration::from_millis(900), "client {index} answered {waited:?} after the switch");
        }
    }
}
