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
//! Capability registers: 0 console, 2 the network service (badge 0); 3 receives the
//! listener.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, net};
use user::syscall::{CapReg, Error};

const SERVICE: CapReg = CapReg::new(2);
const LISTENER: CapReg = CapReg::new(3);
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

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread: the only reference.
    let events = unsafe { &mut *core::ptr::addr_of_mut!(EVENTS) };
    if let Err(error) = net::listen(SERVICE, PORT, LISTENER) {
        report(b"listen on 7100", error);
        return 1;
    }
    user::print("tcp-echo: listening on 7100\n");
    let mut opened: u64 = 0;
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
                    opened += 1;
                    // A line now and then: the tests see connections arrive, the console is
                    // not flooded.
                    if opened.is_power_of_two() {
                        let mut digits = [0u8; 20];
                        user::print_parts(&[b"tcp-echo: ", user::decimal(opened, &mut digits), b" connections opened\n"]);
                    }
                }
                net::event::DATA => echo(event.connection, event.data),
                net::event::CLOSED => {
                    let _ = net::close(LISTENER, event.connection);
                }
                _ => {}
            }
        }
    }
}

user::entry!(main);
