//! The operator of the hostile-tenant test (services/tenant-manifest.toml,
//! hypervisor-glue/holdfast/tests/tenants.rs): it holds the reference monitor's control
//! capability, as the admin service does, and sets the tenants up. It makes compartments
//! `lapsed` (0), `victim` (1) and `hostile` (2); lets `lapsed` hand `hostile` pages and
//! `victim` hand it start capabilities, and nothing back; acting for them, grants the
//! hostile tenant a writable victim data page through `lapsed` (an old sharing, to be
//! revoked) and the victim's server through `victim`. It puts `hostile`'s capability in
//! slot 0 of the hand-off node, and `lapsed`'s in slot 1 (as if stolen), then serves: the
//! hostile tenant calls it with order `RECEIVED` once it has both grants, and it revokes
//! `lapsed` before it replies (word 0: the objects destroyed); every other call, and that
//! order again, gets reply code 99; order `PROBE` (once) has it try a grant the policy
//! allows, from the victim, and replies with the monitor's code in word 0. Waiting for a call rather than polling a page keeps it
//! off the processor while the victim's latency is timed. Prints
//! `tenant-warden: lapsed revoked (N objects)` or `tenant-warden: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 the monitor's control capability, 3
//! the victim's server, 4 a victim data page, 5 the hand-off node; 8 to 11 working
//! registers, 15 the caller's resume capability.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::interface::node;
use holdfast_userlib::keysafe;
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

const CONTROL: CapReg = CapReg::new(2);
const SERVER: CapReg = CapReg::new(3);
const VICTIM_PAGE: CapReg = CapReg::new(4);
const HANDOFF: CapReg = CapReg::new(5);
const LAPSED: CapReg = CapReg::new(8);
const VICTIM: CapReg = CapReg::new(9);
const HOSTILE: CapReg = CapReg::new(10);
const SCRATCH: CapReg = CapReg::new(11);
const HOSTILE_NUMBER: u64 = 2;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;
/// The hostile tenant's order: it received both grants.
const RECEIVED: u64 = 1;
/// Its order: try a grant the policy allows (the victim's server to it again), reply with
/// the monitor's code (0 granted).
const PROBE: u64 = 2;

fn set_up() -> Result<(), &'static str> {
    let created = |name: &[u8], node_limit, into| {
        keysafe::create(CONTROL, name, keysafe::Quota { page_limit: 0, node_limit, cpu_percent: 0 }, into)
    };
    if created(b"lapsed", 8, LAPSED) != Ok(0) || created(b"victim", 8, VICTIM) != Ok(1) {
        return Err("the first two compartments were not made 0 and 1");
    }
    if created(b"hostile", 16, HOSTILE) != Ok(HOSTILE_NUMBER) {
        return Err("the hostile compartment was not made 2");
    }
    keysafe::set_policy(CONTROL, 0, HOSTILE_NUMBER, 1 << Type::Page as u64).map_err(|_| "a policy was refused")?;
    keysafe::set_policy(CONTROL, 1, HOSTILE_NUMBER, 1 << Type::Start as u64).map_err(|_| "a policy was refused")?;
    keysafe::grant(LAPSED, HOSTILE_NUMBER, VICTIM_PAGE).map_err(|_| "the page's grant was refused")?;
    keysafe::grant(VICTIM, HOSTILE_NUMBER, SERVER).map_err(|_| "the server's grant was refused")?;
    node::swap(HANDOFF, 0, HOSTILE, SCRATCH).map_err(|_| "the hand-off node took no capability")?;
    node::swap(HANDOFF, 1, LAPSED, SCRATCH).map_err(|_| "the hand-off node took no capability")?;
    Ok(())
}

fn main() -> u64 {
    if let Err(what) = set_up() {
        user::print_parts(&[b"tenant-warden: MISMATCH: ", what.as_bytes(), b"\n"]);
        return 1;
    }
    let (mut revoked, mut probed) = (false, false);
    // Never returns: the hostile tenant may call at any time, and a call to a process that
    // stopped would wait for ever.
    let mut message = Invocation::return_to(NOTHING, 0, [0; 4]).resume_into(RESUME).invoke(&mut []);
    loop {
        let reply = if message.code == RECEIVED && !revoked {
            revoked = true;
            match keysafe::revoke(CONTROL, b"lapsed") {
                Ok(destroyed) => {
                    let mut digits = [0u8; 20];
                    user::print_parts(&[b"tenant-warden: lapsed revoked (", user::decimal(destroyed, &mut digits), b" objects)\n"]);
                    Invocation::return_to(RESUME, 0, [destroyed, 0, 0, 0])
                }
                Err(_) => {
                    user::print("tenant-warden: MISMATCH: revoking lapsed was refused\n");
                    Invocation::return_to(RESUME, 98, [0; 4])
                }
            }
        } else if message.code == PROBE && !probed {
            probed = true;
            let code = match keysafe::grant(VICTIM, HOSTILE_NUMBER, SERVER) {
                Ok(_) => 0,
                Err(holdfast_userlib::syscall::Error::Reply(code)) => code,
                Err(_) => 97,
            };
            Invocation::return_to(RESUME, 0, [code, 0, 0, 0])
        } else {
            Invocation::return_to(RESUME, 99, [0; 4])
        };
        message = reply.resume_into(RESUME).invoke(&mut []);
    }
}

user::entry!(main);
