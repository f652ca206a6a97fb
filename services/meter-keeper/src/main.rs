//! The meter keeper: holds the tenants' meters (KeyKOS's meters, kept by a meter keeper)
//! and sets their CPU shares. A share is the microseconds of every 100 ms period the kernel
//! gives a meter (`meter.set_share`); what a tenant's processes use is charged to its meter
//! and to every meter above it, so a tenant that spins forever gets its share and no more.
//!
//! At its first start it gives each meter of the node in register 2 the share in the same
//! slot of the node in register 3 (a number: `[microseconds, 0]`). Orders:
//! `SET_SHARE` (word 0 the tenant's slot, word 1 microseconds per period, at most 100,000)
//! and `SHARE` (word 0 the slot; word 0 back the share).
//!
//! Capability registers: 0 console, 1 own process, 2 the tenants' meters (a node), 3 their
//! shares (a node), 4 and 5 scratch, 15 the resume capability.
#![no_std]
#![no_main]

use holdfast_userlib::interface::{meter, node, number};
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user, Invocation};

pub const SET_SHARE: u64 = 1;
pub const SHARE: u64 = 2;
/// Reply codes of a refusal: no meter in that slot, a share above the period.
pub const NO_SUCH_TENANT: u64 = 600;
pub const BAD_SHARE: u64 = 601;
pub const BAD_REQUEST: u64 = 602;

const METERS: CapReg = CapReg::new(2);
const SHARES: CapReg = CapReg::new(3);
const METER: CapReg = CapReg::new(4);
const SHARE_NUMBER: CapReg = CapReg::new(5);
const RESUME: u8 = 15;
const NOTHING: u8 = 14;
const SLOTS: u64 = 32;

/// Whether the manifest's shares were given, and each tenant's share: this program's data,
/// which the checkpoints keep (a program cannot make number capabilities to keep them in).
struct Shares {
    started: bool,
    microseconds: [u64; SLOTS as usize],
}

static mut SHARES_GIVEN: Shares = Shares { started: false, microseconds: [0; SLOTS as usize] };

fn manifest_share(slot: u64) -> u64 {
    node::fetch(SHARES, slot, SHARE_NUMBER).and_then(|()| number::value(SHARE_NUMBER)).map_or(0, |value| value.word0)
}

/// Gives tenant `slot`'s meter `microseconds` a period, and records it.
fn set_share(shares: &mut Shares, slot: u64, microseconds: u64) -> u64 {
    if slot >= SLOTS || node::fetch(METERS, slot, METER).is_err() {
        return NO_SUCH_TENANT;
    }
    if microseconds > user::abi::METER_PERIOD_MICROSECONDS {
        return BAD_SHARE;
    }
    if meter::set_share(METER, microseconds).is_err() {
        return NO_SUCH_TENANT;
    }
    shares.microseconds[slot as usize] = microseconds;
    0
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: this is the
    // only reference to the shares for the program's life.
    let shares = unsafe { &mut *core::ptr::addr_of_mut!(SHARES_GIVEN) };
    if !shares.started {
        for slot in 0..SLOTS {
            let share = manifest_share(slot);
            if share > 0 && set_share(shares, slot, share) != 0 {
                user::print("meter-keeper: a share in the manifest names no meter or is above 100 ms\n");
            }
        }
        shares.started = true;
    }
    let wait = |reply: Invocation| reply.resume_into(RESUME).invoke(&mut []);
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        let [slot, microseconds, ..] = message.words;
        let reply = match message.code {
            SET_SHARE => Invocation::return_to(RESUME, set_share(shares, slot, microseconds), [0; 4]),
            SHARE if slot < SLOTS => Invocation::return_to(RESUME, 0, [shares.microseconds[slot as usize], 0, 0, 0]),
            SHARE => Invocation::return_to(RESUME, NO_SUCH_TENANT, [0; 4]),
            _ => Invocation::return_to(RESUME, BAD_REQUEST, [0; 4]),
        };
        message = wait(reply);
    }
}

user::entry!(main);
