//! The victim tenant's server in the hostile-tenant test (services/tenant-manifest.toml,
//! hypervisor-glue/holdfast/tests/tenants.rs): order `ECHO` replies with the words it was
//! called with; anything else gets reply code 99. Unlike `echo-server` it has no order that
//! spins, hands out a capability or keeps one: the hostile tenant reaches it through a
//! forwarder, and the only thing a flood of calls may cost the victim is the server's time.
//!
//! Capability registers: 0 console, 1 own process; it receives no capabilities and keeps
//! the caller's resume capability in 15.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, Invocation};

const ECHO: u64 = 1;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;

fn main() -> u64 {
    // Strings are not kept: a zero-length buffer takes none.
    let mut message = Invocation::return_to(NOTHING, 0, [0; 4]).resume_into(RESUME).invoke(&mut []);
    loop {
        let reply = match message.code {
            ECHO => Invocation::return_to(RESUME, 0, message.words),
            _ => Invocation::return_to(RESUME, 99, [0; 4]),
        };
        message = reply.resume_into(RESUME).invoke(&mut []);
    }
}

user::entry!(main);
