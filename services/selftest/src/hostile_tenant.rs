//! A hostile tenant (services/tenant-manifest.toml, hypervisor-glue/holdfast/tests/
//! tenants.rs): it tries every way it has to reach the victim tenant's objects, time and
//! storage, then invokes everything it holds at random. The victim (`tenant-victim`)
//! checks afterwards that its data, its bank's counts and its server's latency did not
//! change.
//!
//! In order: it takes its compartment's capability from the hand-off node (and `lapsed`'s,
//! as if stolen) and receives the operator's two grants: a read-only victim page through
//! `lapsed`, and the victim's server through `victim`. While the page's forwarder is live
//! it tries to write through it and to sell both forwarders to its own bank. It calls the
//! operator (`tenant-warden`), which revokes `lapsed`, and then replays what it kept: the
//! page's forwarder (read, write, and a copy of it made through a node) and `lapsed`'s
//! capability. It asks the monitor for forbidden grants: everything it holds to the victim
//! and to itself, to every compartment number up to 63 and beyond, and the control
//! capability's orders through its own; it counts what its registers hold (it holds no
//! range, so no object id it could guess names anything). Then it waits for the victim's
//! ready page, says in its own page (word 0) that it attacks (2), exhausts its bank, spins
//! on its meter for `SPIN_NS` (`meter-spinner`'s measure: the share it ran and its longest
//! run, the quantum the victim may wait), floods the victim's server through the forwarder
//! for `FLOOD_NS`, asks the monitor for 1000 forbidden grants (were each an audit record,
//! they would fill the log, and every tenant's grants would then be refused) and has the
//! operator try an allowed grant after them, and fuzzes for `FUZZ_NS`: calls with random
//! orders, words, strings and capabilities sent, on every register but its console, its
//! own process and its page. Finally its page says done (3).
//!
//! The fuzzing reproduces from its seed: `hostile-tenant: seed <n>` first, the kernel's
//! boot number `fuzz-seed` (`--append holdfast.fuzz-seed=<n>`) or the clock's time without
//! one, and it prints a digest of the reply codes of its first `DIGEST_CALLS` calls, which
//! the same seed repeats. Its last line is `hostile-tenant: passed` or
//! `hostile-tenant: MISMATCH: ...` (an attack that worked).
//!
//! It never waits for ever: every start capability it may hold is to a server that always
//! answers (the monitor, the space bank, the operator, the victim's server; it may not make
//! start capabilities of processes it makes, nor start them).
//!
//! Capability registers: 0 console, 1 own process, 2 the clock, 3 its bank, 4 the
//! hand-off node, 5 the victim's ready page (read-only), 6 its own page, 7 the boot number
//! `fuzz-seed`, 8 the operator; then 9 its compartment, 10 `lapsed`'s, 11 the page's
//! forwarder, 12 the server's; 13 to 15 receive.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::abi::methods::{self, process};
use holdfast_userlib::bank;
use holdfast_userlib::interface::{clock, identify, node, page};
use holdfast_userlib::keysafe::{self, control_order, refusal};
use holdfast_userlib::random::Xorshift as Random;
use holdfast_userlib::spin::{Spun, spin};
use holdfast_userlib::syscall::{self, CapReg, Error};
use holdfast_userlib::{self as user, Invocation};

const CLOCK: CapReg = CapReg::new(2);
const BANK: CapReg = CapReg::new(3);
const HANDOFF: CapReg = CapReg::new(4);
const READY_PAGE: CapReg = CapReg::new(5);
const OWN_PAGE: CapReg = CapReg::new(6);
const SEED: u8 = 7;
const OPERATOR: u8 = 8;
const COMPARTMENT: CapReg = CapReg::new(9);
const STOLEN: CapReg = CapReg::new(10);
const PAGE_FORWARDER: CapReg = CapReg::new(11);
const SERVER_FORWARDER: CapReg = CapReg::new(12);
const SCRATCH: CapReg = CapReg::new(13);
const VICTIM_NUMBER: u64 = 1;
const HOSTILE_NUMBER: u64 = 2;
/// `tenant-warden`'s order: both grants arrived.
const RECEIVED: u64 = 1;
/// `tenant-warden`'s order: try a grant the policy allows, reply with its code.
const PROBE: u64 = 2;
/// `tenant-server`'s.
const ECHO: u64 = 1;
const ATTACKING: u64 = 2;
const DONE: u64 = 3;
const WAIT_NS_MAX: u64 = 120_000_000_000;
const SPIN_NS: u64 = 2_000_000_000;
const FLOOD_NS: u64 = 2_000_000_000;
const FUZZ_NS: u64 = 10_000_000_000;
/// The calls whose reply codes the digest covers: fewer than any run makes in `FUZZ_NS`.
const DIGEST_CALLS: u64 = 2_000;
/// What the fuzzing invokes and sends: all but the console (random bytes would garble the
/// report), its own process (it must live to report) and its own page (the victim reads
/// the phase from it).
const FUZZED: [u8; 13] = [2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const RECEIVE: [u8; 3] = [13, 14, 15];

type Checked = Result<(), &'static str>;

fn expect(condition: bool, what: &'static str) -> Checked {
    if condition { Ok(()) } else { Err(what) }
}

fn now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds)
}

fn is_void(register: CapReg) -> bool {
    identify(register) == Err(Error::Invocation(InvocationError::Void))
}

fn refused(result: Result<u64, Error>, code: u64) -> bool {
    result == Err(Error::Reply(code))
}

fn page_word(register: CapReg) -> u64 {
    let mut bytes = [0u8; 8];
    page::read(register, 0, 8, &mut bytes).map_or(0, |_| u64::from_le_bytes(bytes))
}

fn say(phase: u64) -> Checked {
    page::write(OWN_PAGE, 0, &phase.to_le_bytes()).map_err(|_| "its own page does not write")
}

/// Takes its capabilities and grants, attacks the live page forwarder, has `lapsed` revoked.
fn take_grants() -> Checked {
    let start = now();
    while node::fetch(HANDOFF, 0, COMPARTMENT).is_err() || is_void(COMPARTMENT) {
        expect(now() - start < WAIT_NS_MAX, "its compartment's capability never came")?;
    }
    node::fetch(HANDOFF, 1, STOLEN).map_err(|_| "lapsed's capability is not in the hand-off node")?;
    expect(keysafe::receive(COMPARTMENT, PAGE_FORWARDER) == Ok(0), "the page's grant from lapsed did not come first")?;
    expect(keysafe::receive(COMPARTMENT, SERVER_FORWARDER) == Ok(VICTIM_NUMBER), "the server's grant from victim did not come")?;
    expect(page_word(PAGE_FORWARDER) != 0, "the victim's page does not read through its live forwarder")?;
    expect(page::write(PAGE_FORWARDER, 0, &[0xee; 8]).is_err(), "it wrote through a read-only forwarder")?;
    expect(bank::sell(BANK, PAGE_FORWARDER).is_err(), "its bank took the victim's page")?;
    expect(bank::sell(BANK, SERVER_FORWARDER).is_err(), "its bank took the victim's server")?;
    expect(page_word(PAGE_FORWARDER) != 0, "the victim's page went with a sale")?;
    let revoked = user::call(OPERATOR, RECEIVED, [0; 4]);
    expect(revoked.is_ok_and(|words| words[0] > 0), "the operator did not revoke lapsed")?;
    Ok(())
}

/// Replays what the revocation voided.
fn replay_revoked() -> Checked {
    let mut bytes = [0u8; 8];
    expect(is_void(PAGE_FORWARDER), "the page's forwarder outlived lapsed")?;
    expect(page::read(PAGE_FORWARDER, 0, 8, &mut bytes).is_err(), "the victim's page read after the revocation")?;
    expect(page::write(PAGE_FORWARDER, 0, &[0xee; 8]).is_err(), "the victim's page took a write after the revocation")?;
    // A copy made through a node is as void.
    node::swap(HANDOFF, 3, PAGE_FORWARDER, SCRATCH).map_err(|_| "the hand-off node took no capability")?;
    node::fetch(HANDOFF, 3, SCRATCH).map_err(|_| "the hand-off node gave no capability back")?;
    expect(is_void(SCRATCH), "a copy of the page's forwarder outlived lapsed")?;
    expect(is_void(STOLEN), "lapsed's capability outlived lapsed")?;
    expect(keysafe::receive(STOLEN, SCRATCH).is_err(), "lapsed's capability received after the revocation")?;
    expect(keysafe::grant(STOLEN, HOSTILE_NUMBER, CLOCK).is_err(), "lapsed's capability granted after the revocation")?;
    expect(refused(keysafe::grant(COMPARTMENT, 0, CLOCK), refusal::NO_SUCH_COMPARTMENT), "a grant reached revoked lapsed")?;
    Ok(())
}

/// Asks the monitor for what the policy forbids; returns how many refusals said the audit
/// log is full (`AUDIT_UNAVAILABLE`).
fn forbidden_grants() -> Result<u64, &'static str> {
    let mut log_full = 0;
    let mut forbidden = |result: Result<u64, Error>| {
        log_full += u64::from(refused(result, refusal::AUDIT_UNAVAILABLE));
        refused(result, refusal::FORBIDDEN) || refused(result, refusal::AUDIT_UNAVAILABLE)
    };
    // Everything it holds, to the victim and to itself.
    for register in 0..13u8 {
        let held = CapReg::new(register);
        if register == 10 || register == 11 {
            continue; // void: refused before any policy is asked
        }
        expect(forbidden(keysafe::grant(COMPARTMENT, VICTIM_NUMBER, held)), "the monitor granted the victim something")?;
        expect(forbidden(keysafe::grant(COMPARTMENT, HOSTILE_NUMBER, held)), "the monitor granted it to itself")?;
    }
    for to in (3..64).chain([255, 256, u64::MAX]) {
        expect(refused(keysafe::grant(COMPARTMENT, to, CLOCK), refusal::NO_SUCH_COMPARTMENT), "a grant went to a compartment that does not exist")?;
    }
    expect(refused(keysafe::receive(COMPARTMENT, SCRATCH), refusal::INBOX_EMPTY), "something more came to its inbox")?;
    // The control capability's orders, through its own capability.
    let control = |order, words: [u64; 4], string: &[u8]| {
        syscall::invoke(syscall::Invocation { words, string, receive: &[SCRATCH], ..syscall::Invocation::call(COMPARTMENT, order) })
            .check()
            .map(|received| received.words[0])
    };
    let all_kinds = u64::MAX;
    expect(refused(control(control_order::CREATE, [64, 64, 0, 0], b"mine"), refusal::BAD_REQUEST), "it made a compartment")?;
    expect(refused(control(control_order::SET_POLICY, [HOSTILE_NUMBER, VICTIM_NUMBER, all_kinds, 0], b""), refusal::BAD_REQUEST), "it set a policy")?;
    expect(refused(control(control_order::REVOKE, [0; 4], b"victim"), refusal::BAD_REQUEST), "it revoked the victim")?;
    expect(refused(control(control_order::AUDIT, [0; 4], b"victim"), refusal::BAD_REQUEST), "it read the victim's audit records")?;
    expect(refused(control(control_order::LIST, [0; 4], b""), refusal::BAD_REQUEST), "it listed the compartments")?;
    expect(refused(control(control_order::SET_QUOTA, [1 << 40, 1 << 40, 0, 0], b"hostile"), refusal::BAD_REQUEST), "it set its own quota")?;
    expect(forbidden(keysafe::grant(COMPARTMENT, VICTIM_NUMBER, CLOCK)), "a policy it asked for let it grant the victim")?;
    // The victim is still there: its server answers through the forwarder.
    expect(user::call(12, ECHO, [5, 6, 7, 0]).is_ok_and(|words| words[..3] == [5, 6, 7]), "the victim's server is gone")?;
    Ok(log_full)
}

/// Counts what its registers hold: only what it was given, and nothing it could name
/// reaches further (it holds no range: no invocation takes an object id).
fn census() -> Result<u64, &'static str> {
    let mut live = 0;
    for register in 0..16 {
        let held = CapReg::new(register);
        let identity = identify(held);
        if identity.is_ok() {
            live += 1;
        }
        // The registers it did not fill hold nothing.
        if (13..16).contains(&register) {
            expect(identity.is_err(), "an empty register held a capability")?;
        }
    }
    Ok(live)
}

/// Buys pages and nodes until its bank refuses; returns how many of each.
fn exhaust_bank() -> Result<(u64, u64), &'static str> {
    let info = bank::info(BANK).map_err(|_| "its bank's counts do not read")?;
    let mut pages = 0;
    let last = loop {
        match bank::buy_page(BANK, SCRATCH) {
            Ok(_) => pages += 1,
            Err(error) => break error,
        }
        expect(pages <= info.page_limit, "its bank sold more pages than its limit")?;
    };
    expect(last == Error::Reply(bank::refusal::LIMIT_REACHED), "its bank refused a page without its limit's code")?;
    let mut nodes = 0;
    let last = loop {
        match bank::buy_node(BANK, SCRATCH) {
            Ok(_) => nodes += 1,
            Err(error) => break error,
        }
        expect(nodes <= info.node_limit, "its bank sold more nodes than its limit")?;
    };
    expect(last == Error::Reply(bank::refusal::LIMIT_REACHED), "its bank refused a node without its limit's code")?;
    expect(pages == info.page_limit - info.pages && nodes == info.node_limit - info.nodes, "its bank refused before its limit")?;
    // Its bank's holder cannot raise the bank's limits: only the parent's holder can.
    expect(
        bank::set_child_limits(BANK, BANK, 1 << 40, 1 << 40) == Err(Error::Reply(bank::refusal::NOT_OWNED)),
        "its bank raised its own limits",
    )?;
    expect(bank::create_child(BANK, 1 << 40, 1 << 40, CapReg::new(14)).is_err() || bank::buy_page(CapReg::new(14), SCRATCH).is_err(), "a bank below its full bank sold a page")?;
    Ok((pages, nodes))
}

/// Calls the victim's server as fast as it can for `FLOOD_NS`, now and then with an order
/// it does not have; returns how many calls.
fn flood() -> Result<u64, &'static str> {
    let start = now();
    let mut calls = 0u64;
    while now() - start < FLOOD_NS {
        let order = if calls % 8 == 7 { calls } else { ECHO };
        let reply = Invocation::call(12, order, [calls, 0, 0, 0]).invoke(&mut []);
        expect(reply.code == 0 || order != ECHO, "the victim's server refused its call")?;
        calls += 1;
    }
    Ok(calls)
}

/// Asks the monitor for a forbidden grant `FORBIDDEN_COUNT` times, twice what the audit log
/// holds, were each refusal a record (the monitor logs a compartment's first few and counts
/// the rest; it refuses with `FORBIDDEN` whether or not the record fit). Returns how many
/// refusals.
fn fill_audit_log() -> Result<u64, &'static str> {
    const FORBIDDEN_COUNT: u64 = 1_000;
    for _ in 0..FORBIDDEN_COUNT {
        let refused = keysafe::grant(COMPARTMENT, VICTIM_NUMBER, CLOCK);
        expect(refused == Err(Error::Reply(refusal::FORBIDDEN)), "a forbidden grant was not refused")?;
    }
    Ok(FORBIDDEN_COUNT)
}

/// What the fuzzing did.
#[derive(Default)]
struct Fuzzed {
    calls: u64,
    answered_zero: u64,
    elapsed_ms: u64,
    /// FNV-1a over the reply codes of the first `DIGEST_CALLS` calls.
    digest: u64,
    log_full: u64,
    /// The slowest call to each register, in us: which servers a call can keep busy.
    slowest_us: [u64; 16],
}

fn fuzz(seed: u64) -> Fuzzed {
    let mut random = Random::new(seed);
    let mut string = [0u8; 4200];
    let mut buffer = [0u8; 4200];
    let mut fuzzed = Fuzzed { digest: 0xcbf2_9ce4_8422_2325, ..Fuzzed::default() };
    let start = now();
    while fuzzed.calls < DIGEST_CALLS || now() - start < FUZZ_NS {
        let target = random.pick(&FUZZED);
        let mut order = if random.below(8) == 0 { random.word() } else { random.below(16) };
        // A process it made or bought is never started (it has no code: it would fault)
        // nor given a start capability (a call to one would wait for ever). Only the
        // receiving registers can hold one; the others hold what they were given.
        let is_process = RECEIVE.contains(&target)
            && identify(CapReg::new(target)).is_ok_and(|identity| identity.type_code == Type::Process as u64);
        if is_process && (order == process::START || order == process::MAKE_START) {
            order = methods::IDENTIFY;
        }
        let words = [random.below(70), random.word(), random.below(5000), random.word()];
        for byte in string.iter_mut().take(64) {
            *byte = random.word() as u8;
        }
        let length = match random.below(4) {
            0 => 0,
            1 => random.below(64) as usize,
            2 => random.below(4200) as usize,
            _ => 4096,
        };
        let sent: [u8; 3] = core::array::from_fn(|_| random.pick(&FUZZED));
        let received: [u8; 3] = core::array::from_fn(|_| random.pick(&RECEIVE));
        let send_count = random.below(3) as usize;
        let receive_count = random.below(4) as usize;
        let before = now();
        let reply = Invocation::call(target, order, words)
            .with_string(&string[..length])
            .sending(&sent[..send_count])
            .receiving(&received[..receive_count])
            .invoke(&mut buffer);
        let slowest = &mut fuzzed.slowest_us[usize::from(target)];
        *slowest = (*slowest).max((now() - before) / 1000);
        if fuzzed.calls < DIGEST_CALLS {
            for byte in reply.code.to_le_bytes() {
                fuzzed.digest = (fuzzed.digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        fuzzed.calls += 1;
        fuzzed.answered_zero += u64::from(reply.code == 0);
        fuzzed.log_full += u64::from(reply.code == refusal::AUDIT_UNAVAILABLE);
    }
    fuzzed.elapsed_ms = (now() - start) / 1_000_000;
    fuzzed
}

fn run(seed: u64) -> Checked {
    take_grants()?;
    replay_revoked()?;
    let log_full = forbidden_grants()?;
    let live = census()?;
    user::print_numbers(
        &[(b"hostile-tenant: revoked capabilities void, forbidden grants refused (", log_full), (b" for a full audit log), ", live)],
        b" registers hold what it was given\n",
    );
    let start = now();
    while page_word(READY_PAGE) == 0 {
        expect(now() - start < WAIT_NS_MAX, "the victim never got ready")?;
    }
    say(ATTACKING)?;
    let (pages, nodes) = exhaust_bank()?;
    let Spun { ran_permille, longest_run_us, .. } = spin(SPIN_NS, now);
    let calls = flood()?;
    user::print_numbers(
        &[
            (b"hostile-tenant: its bank sold ", pages),
            (b" pages and ", nodes),
            (b" nodes, then refused; it spun ", ran_permille),
            (b" permille of 2000 ms, its longest run ", longest_run_us),
            (b" us; it flooded the victim's server with ", calls),
        ],
        b" calls in 2000 ms\n",
    );
    let fill_start = now();
    let refusals = fill_audit_log()?;
    let fill_ms = (now() - fill_start) / 1_000_000;
    // The operator tries a grant the policy allows, from the victim: the log has room.
    let code = user::call(OPERATOR, PROBE, [0; 4]).map_or(u64::MAX, |words| words[0]);
    user::print_numbers(
        &[
            (b"hostile-tenant: ", refusals),
            (b" forbidden grants refused in ", fill_ms),
            (b" ms; then the victim's allowed grant got code ", code),
        ],
        b"\n",
    );
    expect(code == 0, "after its refusals the victim's allowed grant was refused")?;
    user::print_numbers(&[(b"hostile-tenant: fuzzing with seed ", seed)], b"\n");
    let fuzzed = fuzz(seed);
    user::print_numbers(
        &[
            (b"hostile-tenant: fuzz: ", fuzzed.calls),
            (b" calls in ", fuzzed.elapsed_ms),
            (b" ms, ", fuzzed.answered_zero),
            (b" answered 0, ", fuzzed.log_full),
            (b" refused for a full audit log; the first 2000 calls' digest ", fuzzed.digest),
        ],
        b"\n",
    );
    let slowest = fuzzed.slowest_us;
    user::print_numbers(
        &[
            (b"hostile-tenant: its slowest calls in us: clock ", slowest[2]),
            (b", bank ", slowest[3]),
            (b", node ", slowest[4]),
            (b", monitor ", slowest[9]),
            (b", operator ", slowest[8]),
            (b", server ", slowest[12]),
            (b", received ", slowest[13].max(slowest[14]).max(slowest[15])),
        ],
        b"\n",
    );
    say(DONE)
}

fn main() -> u64 {
    // Word 1 says whether the command line gave a seed; without one, the clock's.
    let seed = match user::call(SEED, methods::number::VALUE, [0; 4]) {
        Ok([seed, 1, ..]) => seed,
        _ => now(),
    };
    user::print_numbers(&[(b"hostile-tenant: seed ", seed)], b"\n");
    let result = run(seed);
    // The victim waits for this whatever happened.
    let _ = say(DONE);
    u64::from(!holdfast_userlib::check::verdict("hostile-tenant", result))
}

user::entry!(main);
