//! The server `tcp-echo` hands connections over to (services/net-manifest.toml): it serves
//! a private listener of the network service (no port: it gets only the connections handed
//! to it, docs/net-service.md) and sends back every byte in upper case, so that the host's
//! test (hypervisor-glue/holdfast/tests/net.rs) tells which server answered.
//!
//! Its first message is `tcp-echo`'s call carrying the private listener; it answers with a
//! send (so that it goes on running) and then waits on the listener for ever.
//!
//! Capability registers: 3 receives the listener; 14 stays void; 15 the resume capability
//! of that first call.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, Invocation, net};
use user::syscall::CapReg;

const LISTENER: CapReg = CapReg::new(3);
const NOTHING: u8 = 14;
const RESUME: u8 = 15;

static mut EVENTS: [u8; net::WAIT_BYTES_MAX] = [0; net::WAIT_BYTES_MAX];

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread: the only reference.
    let events = unsafe { &mut *core::ptr::addr_of_mut!(EVENTS) };
    Invocation::return_to(NOTHING, 0, [0; 4]).receiving(&[LISTENER.index()]).resume_into(RESUME).invoke(&mut []);
    let _ = Invocation::send(RESUME, 0, [0; 4]).invoke(&mut []);
    user::print("tcp-upper: serving its private listener\n");
    let mut upper = [0u8; net::WAIT_BYTES_MAX];
    loop {
        let Ok(length) = net::wait(LISTENER, events) else {
            user::print("tcp-upper: wait failed [FAILED]\n");
            return 1;
        };
        for event in net::events(&events[..length]) {
            match event.kind {
                net::event::OPENED => user::print("tcp-upper: a connection handed over\n"),
                net::event::DATA => {
                    let bytes = &mut upper[..event.data.len()];
                    bytes.copy_from_slice(event.data);
                    bytes.make_ascii_uppercase();
                    // The test's messages are short: a send the service cuts short fails it.
                    if net::send(LISTENER, event.connection, bytes) != Ok(bytes.len()) {
                        user::print("tcp-upper: a send was cut short [FAILED]\n");
                    }
                }
                net::event::CLOSED | net::event::ENDED => {
                    let _ = net::close(LISTENER, event.connection);
                }
                _ => {}
            }
        }
    }
}

user::entry!(main);
