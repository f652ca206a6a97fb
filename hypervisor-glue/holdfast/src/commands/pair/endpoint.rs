//! The pair's client endpoint: the TP1 port clients connect to on 127.0.0.1. Each
//! connection is forwarded to the current primary's own forwarded port; when the primary
//! changes, the connections to the old one are closed (a client sees its connection end and
//! reconnects, retrying its transactions by id), and new ones go to the new primary.
//!
//! While there is no primary that serves (at the start, and from a promotion until the new
//! primary says it serves), a new connection is held, not refused: it is forwarded as soon
//! as one does. QEMU's port forward accepts a connection even while the guest does not
//! listen, and then closes it, so a client sent there early would only go round its
//! reconnect pause again and again.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// How long a connection to the primary's port may take before the client's is closed.
const CONNECT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// How long a client's connection is held while no primary serves, before it is closed.
pub const HOLD_TIME_LIMIT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Inner {
    target: Mutex<Option<SocketAddr>>,
    /// Signalled when the target changes, for the connections held meanwhile.
    target_changed: Condvar,
    hold_time_limit: Duration,
    /// Open forwarded connections: their client and primary sides, to close on a switch.
    connections: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
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
    pub fn switch(&self, target: Option<SocketAddr>) {
        *self.inner.target.lock().expect("endpoint target") = target;
        self.inner.target_changed.notify_all();
        let open: Vec<(TcpStream, TcpStream)> =
            self.inner.connections.lock().expect("endpoint connections").drain().map(|(_, pair)| pair).collect();
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
    let Ok(primary) = TcpStream::connect_timeout(&target, CONNECT_TIME_LIMIT) else {
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
        connections.insert(id, (client_copy, primary_copy));
    }
    inner.forwarded_total.fetch_add(1, Ordering::Relaxed);
    let upstream = thread::Builder::new()
        .name("pair-endpoint-up".into())
        .spawn(move || copy_then_close(client_reader, primary));
    copy_then_close(primary_reader, client);
    if let Ok(upstream) = upstream {
        let _ = upstream.join();
    }
    inner.connections.lock().expect("endpoint connections").remove(&id);
}

/// Copies until `from` ends, then closes both directions of both sides, so that the other
/// copy ends too.
fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server that answers each connection's bytes with `tag` and them, until it closes.
    fn tagged_echo(tag: u8) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
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

        endpoint.switch(Some(b));
        first.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = first.write_all(&[3]);
        assert_eq!(first.read(&mut [0u8; 4]).unwrap_or(0), 0, "a connection to the old primary stays open");

        let mut second = TcpStream::connect(endpoint.address()).unwrap();
        assert_eq!(ask(&mut second, 4), vec![b'B', 4]);
        assert_eq!(endpoint.forwarded_total(), 3);
        drop(second);
    }
}
