//! The reference monitor's test (hypervisor-glue/holdfast/tests/banks.rs, manifest
//! services/bank-manifest.toml). It holds the monitor's control capability and acts for
//! three compartments, A, B and C, through their capabilities: an allowed grant arrives as
//! a forwarder that works; a grant of a kind the policy does not allow, or in a direction
//! it does not allow, is refused with its code and nothing arrives; revoking A voids every
//! forwarder that crossed from A, its capability, and what waits in an inbox from it, while
//! B's grant to C goes on working. After a restart, B's forwarder to C came back, and
//! revoking B voids it. Prints `keysafe-test: before the restart: passed`, then
//! `keysafe-test: after the restart: passed`, or `keysafe-test: <phase>: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 the monitor's control capability, 3
//! the clock, 4 a page (filled with 0x5a) that the compartments grant, 5 a node kept across
//! the restart, 6 a node (a kind A may not grant); 7 to 14 working registers.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::{ObjectError, Type};
use holdfast_userlib::check::verdict;
use holdfast_userlib::interface::{clock, identify, meter, node, page};
use holdfast_userlib::keysafe::{self, refusal};
use holdfast_userlib::syscall::{CapReg, Error};

const CONTROL: CapReg = CapReg::new(2);
const CLOCK: CapReg = CapReg::new(3);
const SHARED_PAGE: CapReg = CapReg::new(4);
const KEEP: CapReg = CapReg::new(5);
const A_NODE: CapReg = CapReg::new(6);
const A: CapReg = CapReg::new(7);
const B: CapReg = CapReg::new(8);
const C: CapReg = CapReg::new(9);
const FROM_A_AT_B: CapReg = CapReg::new(10);
const FROM_A_AT_C: CapReg = CapReg::new(11);
const FROM_B_AT_C: CapReg = CapReg::new(12);
const WAITING: CapReg = CapReg::new(13);
const SCRATCH: CapReg = CapReg::new(14);
/// The compartments' numbers: the first three the monitor makes.
const A_NUMBER: u64 = 0;
const B_NUMBER: u64 = 1;
const C_NUMBER: u64 = 2;
const D_NUMBER: u64 = 3;
const FILL: u8 = 0x5a;
const PAGES: u64 = 1 << Type::Page as u64;

type Checked = Result<(), &'static str>;

fn expect(condition: bool, what: &'static str) -> Checked {
    if condition { Ok(()) } else { Err(what) }
}

fn is_void(register: CapReg) -> bool {
    identify(register) == Err(Error::Invocation(InvocationError::Void))
}

/// Whether `register` reads as the shared page: a forwarder to it does.
fn reads_shared_page(register: CapReg) -> bool {
    let mut bytes = [0u8; 8];
    page::read(register, 0, 8, &mut bytes).is_ok() && bytes == [FILL; 8]
}

/// Compartment `name`'s CPU share and its bank's nodes, as the monitor lists them.
fn listed(name: &[u8]) -> Option<(u64, u64)> {
    // Room for as many compartments as the monitor holds (`keysafe::list`).
    let mut buffer = [0u8; 16 * keysafe::LIST_ENTRY_BYTES];
    let count = keysafe::list(CONTROL, &mut buffer).ok()?;
    buffer
        .chunks_exact(keysafe::LIST_ENTRY_BYTES)
        .take(count)
        .map(|entry| keysafe::Listed::decode(entry.try_into().expect("an entry")))
        .find(|entry| entry.name() == name)
        .map(|entry| (entry.cpu_percent, entry.bank.nodes))
}

fn refused(result: Result<u64, Error>, code: u64) -> bool {
    result == Err(Error::Reply(code))
}

fn before_the_restart() -> Checked {
    let quota = |node_limit| keysafe::Quota { page_limit: 0, node_limit, cpu_percent: 0 };
    let created = |name: &[u8], into| keysafe::create(CONTROL, name, quota(8), into);
    expect(created(b"A", A) == Ok(A_NUMBER), "A was not made first")?;
    expect(created(b"B", B) == Ok(B_NUMBER), "B was not made second")?;
    expect(created(b"C", C) == Ok(C_NUMBER), "C was not made third")?;
    expect(refused(created(b"A", SCRATCH), refusal::NAME_TAKEN), "a second A was made")?;
    expect(refused(created(b"two words", SCRATCH), refusal::BAD_NAME), "a name with a space was taken")?;
    keysafe::set_policy(CONTROL, A_NUMBER, B_NUMBER, PAGES).map_err(|_| "the policy A -> B was refused")?;
    keysafe::set_policy(CONTROL, A_NUMBER, C_NUMBER, PAGES).map_err(|_| "the policy A -> C was refused")?;
    keysafe::set_policy(CONTROL, B_NUMBER, C_NUMBER, PAGES).map_err(|_| "the policy B -> C was refused")?;

    // Allowed: a page from A reaches B as a forwarder that reads as the page.
    keysafe::grant(A, B_NUMBER, SHARED_PAGE).map_err(|_| "A's grant of a page to B was refused")?;
    expect(keysafe::receive(B, FROM_A_AT_B) == Ok(A_NUMBER), "B did not receive A's grant")?;
    expect(reads_shared_page(FROM_A_AT_B), "A's page does not read through B's forwarder")?;
    expect(identify(FROM_A_AT_B).is_ok_and(|identity| identity.type_code == Type::Page as u64), "the forwarder does not identify as a page")?;

    // Refused: a kind the policy does not name, and a direction it does not name.
    expect(refused(keysafe::grant(A, B_NUMBER, A_NODE), refusal::FORBIDDEN), "A granted B a node")?;
    // A start capability is sensed, not called: were it called, the monitor would be
    // calling itself here, and wait for ever.
    expect(refused(keysafe::grant(A, B_NUMBER, CONTROL), refusal::FORBIDDEN), "A granted B a start capability")?;
    expect(refused(keysafe::receive(B, SCRATCH), refusal::INBOX_EMPTY), "a refused grant reached B")?;
    expect(refused(keysafe::grant(B, A_NUMBER, SHARED_PAGE), refusal::FORBIDDEN), "B granted A a page against the policy")?;
    expect(refused(keysafe::grant(A, 9, SHARED_PAGE), refusal::NO_SUCH_COMPARTMENT), "A granted to a compartment that does not exist")?;

    keysafe::grant(A, C_NUMBER, SHARED_PAGE).map_err(|_| "A's grant to C was refused")?;
    keysafe::receive(C, FROM_A_AT_C).map_err(|_| "C did not receive A's grant")?;
    keysafe::grant(B, C_NUMBER, SHARED_PAGE).map_err(|_| "B's grant to C was refused")?;
    expect(keysafe::receive(C, FROM_B_AT_C) == Ok(B_NUMBER), "C did not receive B's grant")?;
    // One more from A, left waiting in B's inbox.
    keysafe::grant(A, B_NUMBER, SHARED_PAGE).map_err(|_| "A's second grant to B was refused")?;

    // A compartment whose bank is full: a grant to it is refused, and the node A's bank
    // bought for it is sold back (A's count below shows it).
    expect(refused(keysafe::create(CONTROL, b"tiny", quota(2), SCRATCH), refusal::BAD_REQUEST), "a compartment too small for its capability and inbox was made")?;
    expect(keysafe::create(CONTROL, b"D", quota(3), SCRATCH) == Ok(D_NUMBER), "D was not made fourth")?;
    keysafe::set_policy(CONTROL, A_NUMBER, D_NUMBER, PAGES).map_err(|_| "the policy A -> D was refused")?;
    expect(refused(keysafe::grant(A, D_NUMBER, SHARED_PAGE), refusal::BANK_REFUSED), "A granted to D beyond D's bank")?;
    keysafe::revoke(CONTROL, b"D").map_err(|_| "revoking D was refused")?;

    // A compartment with a CPU share has a meter of its own, of a fourth node from its
    // bank; its quota changes the share. One made without a meter keeps none.
    let metered = keysafe::Quota { page_limit: 0, node_limit: 4, cpu_percent: 20 };
    let bad_request = Err(Error::Reply(refusal::BAD_REQUEST));
    expect(keysafe::create(CONTROL, b"E", keysafe::Quota { node_limit: 3, ..metered }, SCRATCH) == bad_request, "a metered compartment without room for its meter was made")?;
    expect(keysafe::create(CONTROL, b"E", keysafe::Quota { cpu_percent: 101, ..metered }, SCRATCH) == bad_request, "a share above 100 percent was taken")?;
    keysafe::create(CONTROL, b"E", metered, WAITING).map_err(|_| "the metered compartment E was refused")?;
    // E's programs get its meter from E's capability, read-only: they cannot raise E's share.
    keysafe::meter(WAITING, SCRATCH).map_err(|_| "E's capability gave no meter")?;
    expect(meter::remaining(SCRATCH).is_ok(), "E's meter is not a meter")?;
    let read_only = Err(Error::Object(ObjectError::ReadOnly));
    expect(meter::set_share(SCRATCH, 100_000) == read_only, "E's own meter took a new share")?;
    expect(meter::refill(SCRATCH, 1_000_000) == read_only, "E's own meter was refilled")?;
    expect(keysafe::meter(C, SCRATCH) == Err(Error::Reply(refusal::NO_METER)), "C, made without a meter, gave one")?;
    expect(listed(b"E") == Some((20, 4)), "E is not listed with its share and its meter's node")?;
    keysafe::set_quota(CONTROL, b"E", keysafe::Quota { cpu_percent: 35, ..metered }).map_err(|_| "E's new share was refused")?;
    expect(listed(b"E") == Some((35, 4)), "E's new share is not listed")?;
    let quota_refused = |code| Err(Error::Reply(code));
    expect(keysafe::set_quota(CONTROL, b"E", keysafe::Quota { cpu_percent: 0, ..metered }) == quota_refused(refusal::BAD_REQUEST), "E's meter was given up")?;
    expect(keysafe::set_quota(CONTROL, b"C", keysafe::Quota { cpu_percent: 10, ..quota(8) }) == quota_refused(refusal::NO_METER), "C, made without a meter, was given a share")?;
    expect(listed(b"C").map(|(percent, _)| percent) == Some(0), "C is listed with a share")?;
    // The bank's own forwarder, E's capability, inbox and meter.
    expect(keysafe::revoke(CONTROL, b"E") == Ok(4), "revoking E did not destroy exactly its 4 nodes, its meter's among them")?;
    expect(listed(b"E").is_none(), "E is listed after its revocation")?;

    // Revoking A voids every forwarder from A at once, wherever it is, and A's capability.
    let destroyed = keysafe::revoke(CONTROL, b"A").map_err(|_| "revoking A was refused")?;
    // The bank's own forwarder, A's capability and inbox, the inner nodes of its 3 grants.
    expect(destroyed == 6, "revoking A did not destroy exactly its 6 nodes")?;
    expect(is_void(FROM_A_AT_B), "A's forwarder at B outlived A")?;
    expect(is_void(FROM_A_AT_C), "A's forwarder at C outlived A")?;
    expect(is_void(A), "A's capability outlived A")?;
    keysafe::receive(B, WAITING).map_err(|_| "B's waiting grant from A is gone from its inbox")?;
    expect(is_void(WAITING), "A's forwarder waiting in B's inbox outlived A")?;
    // Others see no change; the page itself is not A's to lose.
    expect(reads_shared_page(FROM_B_AT_C), "B's forwarder at C went with A")?;
    expect(reads_shared_page(SHARED_PAGE), "the page went with A")?;
    expect(refused(keysafe::revoke(CONTROL, b"A"), refusal::NO_SUCH_COMPARTMENT), "A was revoked twice")?;
    expect(refused(keysafe::grant(B, A_NUMBER, SHARED_PAGE), refusal::NO_SUCH_COMPARTMENT), "B granted to revoked A")?;

    node::swap(KEEP, 0, B, SCRATCH).map_err(|_| "keeping B failed")?;
    node::swap(KEEP, 1, C, SCRATCH).map_err(|_| "keeping C failed")?;
    node::swap(KEEP, 2, FROM_B_AT_C, SCRATCH).map_err(|_| "keeping B's forwarder at C failed")?;
    Ok(())
}

fn after_the_restart() -> Checked {
    for (slot, into) in [(0, B), (1, C), (2, FROM_B_AT_C)] {
        node::fetch(KEEP, slot, into).map_err(|_| "the kept capabilities are gone")?;
    }
    expect(reads_shared_page(FROM_B_AT_C), "B's forwarder at C did not come back")?;
    keysafe::grant(B, C_NUMBER, SHARED_PAGE).map_err(|_| "B's grant to C was refused after the restart")?;
    keysafe::receive(C, WAITING).map_err(|_| "C did not receive B's grant after the restart")?;
    keysafe::revoke(CONTROL, b"B").map_err(|_| "revoking B was refused")?;
    expect(is_void(FROM_B_AT_C), "B's forwarder from before the restart outlived B")?;
    expect(is_void(WAITING), "B's forwarder from after the restart outlived B")?;
    expect(is_void(B), "B's capability outlived B")?;
    expect(refused(keysafe::receive(C, SCRATCH), refusal::INBOX_EMPTY), "C's capability went with B")?;
    Ok(())
}

fn main() -> u64 {
    let boot = clock::now(CLOCK).map_or(0, |now| now.boot);
    if !verdict("keysafe-test: before the restart", before_the_restart()) {
        return 1;
    }
    // Waits for a restart, reading the clock now and then.
    while clock::now(CLOCK).map_or(boot, |now| now.boot) == boot {
        for _ in 0..1_000_000 {
            core::hint::spin_loop();
        }
    }
    if !verdict("keysafe-test: after the restart", after_the_restart()) {
        return 1;
    }
    0
}

holdfast_userlib::entry!(main);
