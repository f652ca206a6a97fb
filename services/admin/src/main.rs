//! The admin service: reads the host's requests from the control channel, one line each,
//! and answers each with the capabilities it holds. Every reply ends with a line that
//! starts `ok` or `error`; lines before it (the counters) are the reply's body. A request
//! may begin with a tag, `@<tag> ` (1 to 32 letters, digits and `-`): its reply then begins
//! with the line `@<tag>`, so that a client can tell its own reply from one left over for a
//! client that gave up before its answer came. Blank lines and lines holding the byte 0x18
//! ([`DISCARD`]) are dropped unanswered: a client begins with the latter.
//!
//! | request | reply |
//! |---|---|
//! | `checkpoint status` | `ok generation <g> interval-ms <ms> log-fill-permille <p> degraded <0/1> failures-since-commit <n>` |
//! | `checkpoint interval <ms>` | `ok interval-ms <ms>` |
//! | `checkpoint now` | `ok` (the commit shows in `checkpoint status`) |
//! | `counters` | `<name> <value>` lines in the Prometheus text format (the kernel's, every page of them, then the TP1 services', each family's samples together: the appliance's own without labels, each tenant's labelled `tenant="<name>"`), then `ok` |
//! | `tp1 token <name> [admin]` | `ok token <32 hex digits>`: a new token for the TP1 service (an admin token may also load), minted from RDRAND and committed through the journal before the reply; minting a name again revokes its old token |
//! | `tenant list` | a line per live tenant (a compartment of the reference monitor): `<name> number <n> generation <g> pages <held>/<limit> nodes <held>/<limit>` (its bank's) `cpu <p>%` (its meter's share; `cpu none` without one) `refusals <r> logged <l>` (its grants the policy refused; the audit log holds the first 8), on the TP1 appliance `tp1 yes` or `tp1 no` (whether it has a TP1 service of its own), then `ok tenants <count>` |
//! | `tenant create <name> <pages> <nodes> <cpu-percent> [tp1]` | `ok number <n>`: a new tenant, a compartment of the reference monitor whose bank (below the monitor's) has these limits and whose meter (below the monitor's meter for all tenants) gets that percent of every 100 ms period; its creation is in the audit log (committed before the reply), the compartment itself persists with the next checkpoint. With `tp1`, a TP1 service of its own too: yielded by the TP1 constructor on a bank below the tenant's and on its meter, serving the tenant's tokens on a private listener that the appliance's TP1 service hands their connections to, from a tokens page of its own bought from that bank (`tenant token` refuses to mint into it until two checkpoints have committed since, so that no token is journaled into a page a restart would find unsold; the host's `tenant create` waits for them); if it cannot be made the tenant is revoked again and the reply says why |
//! | `tenant token <tenant> <name> [admin]` | `ok token <32 hex digits>`: as `tp1 token`, for the tenant's own TP1 service (it must have one): minted into the tenant's own tokens page, which its service reads, and then into the appliance's, which routes its connections |
//! | `tenant quota <name> <pages> <nodes> <cpu-percent>` | `ok`: new limits for the tenant's bank (a limit below what it holds stops further sales; nothing held is taken back) and a new share for its meter; they persist with the next checkpoint |
//! | `tenant revoke <name>` | `ok objects <n>`: the tenant's TP1 tokens cleared from the appliance's tokens page and its own (committed through the journal), its TP1 service's listener shut (its connections reset), its bank destroyed (with its TP1 service, its tokens page and database), every forwarder to and from it void, the revocation in the audit log (committed before the reply) |
//! | `tenant audit <name>` | the reference monitor's audit records about compartment `<name>`, a line each (`<sequence> boot <b> granted A -> B page`, `holdfast_keysafe_policy::audit::Record::render`), then `ok records <n>`; a record that fails its checks ends the reply with an `error` line naming it |
//!
//! Capability registers: 0 console, 1 control channel, 2 checkpoint control; on an
//! appliance with the TP1 service, 4 the journal, 5 the tokens space, whose pages are the
//! tokens pages (the journal's guarded `write` writes through it): slot 0 the appliance's,
//! which its TP1 service reads, slot 1 + n tenant n's own, which only tenant n's TP1 service
//! reads (bought from its bank; void without one), 6 the TP1
//! service's counters page (read-only); 7 the clock (its boot count tells a restart); 8 the
//! reference monitor's control capability (`services/keysafe`), on an appliance with one;
//! 9 scratch; on the TP1 appliance, 10 the TP1 constructor (its tenants' services), 11 the
//! network service's capability that makes private listeners only (their listeners: it
//! takes no port), 12 the TP1 routes node (slot n: tenant n's
//! listener, which the appliance's TP1 service reads; slot 16 + n: tenant n's TP1 counters
//! page, read-only, which only this service reads); 3 and 13 to 15 working registers.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use holdfast_keysafe_policy::audit::{self, Record};
use holdfast_tp1_ledger::{counters, tokens};
use user::abi::interface::Type;
use user::interface::{checkpoint, clock, control, identify, journal, node, page, space};
use user::syscall::{CapReg, Error};

const CONTROL: CapReg = CapReg::new(1);
const CHECKPOINT: CapReg = CapReg::new(2);
/// The tokens page being read, fetched from the tokens space; a tenant's, read-only, on its
/// way to its TP1 service.
const TOKENS_PAGE: CapReg = CapReg::new(3);
const JOURNAL: CapReg = CapReg::new(4);
/// The tokens pages: the appliance's in slot 0, tenant n's own in slot 1 + n.
const TOKENS_SPACE: CapReg = CapReg::new(5);
const TP1_COUNTERS: CapReg = CapReg::new(6);
/// The clock, whose boot count tells a restart.
const CLOCK: CapReg = CapReg::new(7);
/// The reference monitor's control capability.
const KEYSAFE: CapReg = CapReg::new(8);
/// Where a capability the admin service does not keep lands.
const SCRATCH: CapReg = CapReg::new(9);
const TP1_CONSTRUCTOR: CapReg = CapReg::new(10);
const NETWORK: CapReg = CapReg::new(11);
const TP1_ROUTES: CapReg = CapReg::new(12);
/// A tenant's compartment capability, then its TP1 service's start capability.
const TENANT: CapReg = CapReg::new(13);
const TENANT_BANK: CapReg = CapReg::new(14);
/// A tenant's meter, then its TP1 service's listener.
const TENANT_METER: CapReg = CapReg::new(15);
/// Attempts at a token write whose guard moved (a restart between reading the page and
/// writing it) before giving up.
const MINT_ATTEMPTS_MAX: usize = 4;
/// The reference monitor's compartments: the routes node holds a listener and a counters
/// page for each.
const TENANTS_MAX: u64 = holdfast_keysafe_policy::COMPARTMENTS_MAX as u64;
const _: () = assert!(2 * TENANTS_MAX <= 32, "a node has 32 slots");
const _: () = assert!(tokens_slot(TENANTS_MAX - 1) < 32, "the tokens space has 32 slots");
/// For each tenant: the newest committed checkpoint's generation when its tokens page was
/// bought. A checkpoint two commits later holds the purchase (one under way then may have
/// taken its snapshot before); until then no token is minted into the page. This program's
/// data, which the checkpoints keep with the purchase itself.
static mut TOKENS_PAGE_BOUGHT_AT: [u64; TENANTS_MAX as usize] = [0; TENANTS_MAX as usize];
/// The most a tenant's TP1 service writes of its own memory: the TP1 program's data, bss
/// and stack, 4,053 pages (128 connections' 64 KiB buffers and the 4 MiB index above all),
/// which a yield copied whole before it copied on write.
const TP1_SERVICE_PAGES: u64 = 4_100;
/// The longest request line; longer ones are refused whole.
const LINE_BYTES_MAX: usize = 256;

/// A reply being built: a fixed buffer, as the program has no heap.
struct Reply {
    bytes: [u8; REPLY_BYTES_MAX],
    length: usize,
    /// Something pushed did not fit: the reply is refused whole rather than sent cut.
    overflowed: bool,
}

/// The longest reply: the counters, the kernel's (about 5 KiB with its three histograms)
/// and the TP1 services' (about 1.5 KiB each: the appliance's and up to 16 tenants'), with
/// room to grow. In `.bss` ([`REPLY`]), not on the 64 KiB stack.
const REPLY_BYTES_MAX: usize = 48 * 1024;

static mut REPLY: Reply = Reply::new();

impl Reply {
    const fn new() -> Self {
        Self { bytes: [0; REPLY_BYTES_MAX], length: 0, overflowed: false }
    }

    fn push(&mut self, part: &[u8]) -> &mut Self {
        let taken = part.len().min(self.bytes.len() - self.length);
        self.bytes[self.length..self.length + taken].copy_from_slice(&part[..taken]);
        self.length += taken;
        self.overflowed |= taken < part.len();
        self
    }

    fn clear(&mut self) -> &mut Self {
        self.length = 0;
        self.overflowed = false;
        self
    }

    fn number(&mut self, value: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        self.push(user::decimal(value, &mut digits))
    }

    /// A non-negative value with up to three decimals (counters are whole; ratios are not).
    fn decimal_fraction(&mut self, value: f64) -> &mut Self {
        let thousandths = (value.max(0.0) * 1000.0 + 0.5) as u64;
        self.number(thousandths / 1000);
        let fraction = thousandths % 1000;
        if fraction != 0 {
            let digits = [b'0' + (fraction / 100) as u8, b'0' + (fraction / 10 % 10) as u8, b'0' + (fraction % 10) as u8];
            let last = digits.iter().rposition(|&digit| digit != b'0').expect("not 0");
            self.push(b".").push(&digits[..=last]);
        }
        self
    }

    fn error(&mut self, what: &[u8]) -> &mut Self {
        self.push(b"error ").push(what).push(b"\n")
    }

    /// Why an invocation failed: the invocation's or the object's error, or the code of a
    /// reply the caller could not take.
    fn describe(&mut self, error: Error) -> &mut Self {
        match error {
            Error::Invocation(error) => self.push(error.description().as_bytes()),
            Error::Object(error) => self.push(error.description().as_bytes()),
            Error::Reply(code) => self.push(b"unexpected reply code ").number(code),
        }
    }

    fn failed(&mut self, error: Error) -> &mut Self {
        self.push(b"error ").describe(error).push(b"\n")
    }
}

fn parse_number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |value, digit| value * 10 + u64::from(digit - b'0')))
}

fn answer(request: &[u8], reply: &mut Reply) {
    let mut words = request.split(|&byte| byte == b' ').filter(|word| !word.is_empty());
    // The requests of five to seven words; every other request has four at most.
    let mut ahead = words.clone();
    let first_eight: [Option<&[u8]>; 8] = core::array::from_fn(|_| ahead.next());
    match first_eight {
        [Some(b"tenant"), Some(verb @ (b"create" | b"quota")), Some(name), Some(pages), Some(nodes), Some(cpu), tp1, None]
            if tp1.is_none() || (verb == b"create" && tp1 == Some(b"tp1")) =>
        {
            return tenant_quota(verb, name, [pages, nodes, cpu], tp1.is_some(), reply);
        }
        [Some(b"tenant"), Some(b"token"), Some(tenant), Some(name), kind, None, ..] => {
            let owner = match tenant_number(tenant) {
                Ok(number) if tenant_listener(number, SCRATCH) => tokens::Owner::Tenant(number),
                Ok(_) => {
                    reply.push(b"error tenant ").push(tenant).push(b" has no TP1 service (made without --tp1)\n");
                    return;
                }
                Err(error) => return keysafe_failed(error, tenant, reply),
            };
            return token(name, kind, owner, reply);
        }
        _ => {}
    }
    match (words.next(), words.next(), words.next(), words.next()) {
        // `failures-since-commit` above 0: checkpoints are failing (and retried at each
        // interval), so nothing since generation <g> is persisted but journal commits.
        (Some(b"checkpoint"), Some(b"status"), None, None) => match checkpoint::status(CHECKPOINT)
            .and_then(|status| Ok((status, checkpoint::failures(CHECKPOINT)?)))
        {
            Ok((status, failures)) => {
                reply.push(b"ok generation ").number(status.generation);
                reply.push(b" interval-ms ").number(status.milliseconds);
                reply.push(b" log-fill-permille ").number(status.log_fill_permille);
                reply.push(b" degraded ").number(status.degraded);
                reply.push(b" failures-since-commit ").number(failures.since_commit).push(b"\n");
            }
            Err(error) => {
                reply.failed(error);
            }
        },
        (Some(b"checkpoint"), Some(b"interval"), Some(value), None) => match parse_number(value) {
            None => {
                reply.error(b"the interval is not a number of milliseconds");
            }
            Some(milliseconds) => match checkpoint::set_interval(CHECKPOINT, milliseconds) {
                Ok(()) => {
                    reply.push(b"ok interval-ms ").number(milliseconds).push(b"\n");
                }
                Err(Error::Object(user::abi::methods::ObjectError::OutOfRange)) => {
                    reply.error(b"the interval must be 10 to 86400000 milliseconds");
                }
                Err(error) => {
                    reply.failed(error);
                }
            },
        },
        (Some(b"checkpoint"), Some(b"now"), None, None) => match checkpoint::take(CHECKPOINT) {
            Ok(()) => {
                reply.push(b"ok\n");
            }
            Err(error) => {
                reply.failed(error);
            }
        },
        (Some(b"counters"), None, None, None) => {
            // The kernel's text comes in pages of whole lines; its journal writes are the
            // denominator of the TP1 service's commits per flush.
            let mut journal_writes = None;
            let read = user::counters::read_pages(CHECKPOINT, |page| {
                journal_writes = journal_writes.or_else(|| {
                    page.split(|&byte| byte == b'\n')
                        .find_map(|line| line.strip_prefix(b"holdfast_journal_writes_total "))
                        .and_then(parse_number)
                });
                reply.push(page);
            });
            match read {
                Ok(()) => {
                    tp1_counters(journal_writes, reply);
                    reply.push(b"ok\n");
                }
                Err(error) => {
                    reply.clear().failed(error);
                }
            }
        }
        (Some(b"tp1"), Some(b"token"), Some(name), kind) if words.next().is_none() => {
            token(name, kind, tokens::Owner::Appliance, reply);
        }
        (Some(b"tenant"), Some(b"audit"), Some(name), None) => tenant_audit(name, reply),
        (Some(b"tenant"), Some(b"list"), None, None) => tenant_list(reply),
        (Some(b"tenant"), Some(b"revoke"), Some(name), None) => tenant_revoke(name, reply),
        _ => {
            reply.error(b"unknown request ([@<tag> ] checkpoint status | checkpoint interval <ms> | checkpoint now | counters | tp1 token <name> [admin] | tenant list | tenant create <name> <pages> <nodes> <cpu-percent> [tp1] | tenant quota <name> <pages> <nodes> <cpu-percent> | tenant token <tenant> <name> [admin] | tenant revoke <name> | tenant audit <name>)");
        }
    }
}

/// `tenant create <name> <pages> <nodes> <cpu-percent> [tp1]`: a new compartment of the
/// reference monitor, its bank of these limits below the monitor's and its meter of that
/// share (and its own TP1 service with `tp1`); `tenant quota <name> <pages> <nodes>
/// <cpu-percent>`: new ones for a live one.
fn tenant_quota(verb: &[u8], name: &[u8], [pages, nodes, cpu]: [&[u8]; 3], tp1: bool, reply: &mut Reply) {
    let (Some(page_limit), Some(node_limit), Some(cpu_percent)) = (parse_number(pages), parse_number(nodes), parse_number(cpu)) else {
        reply.error(b"the page and node limits and the CPU percent are whole numbers");
        return;
    };
    // Every tenant has a meter: a compartment without one runs no programs.
    if !(1..=100).contains(&cpu_percent) {
        reply.error(b"a tenant's CPU share is 1 to 100 percent");
        return;
    }
    let quota = user::keysafe::Quota { page_limit, node_limit, cpu_percent };
    let done = if verb == b"create" {
        // The compartment's capability is for programs of the tenant's own: its TP1 service
        // is made with it; the admin service keeps none (the monitor holds what it needs).
        user::keysafe::create(KEYSAFE, name, quota, TENANT).map(|number| {
            // Nothing of an earlier tenant of this number may reach the new one. Its tokens
            // are journaled, so they outlive a crash that takes its compartment back (made
            // or revoked after the last checkpoint), and its listener and routes come back
            // with such a checkpoint: its tokens cleared, its listener shut, its routes
            // cleared, before anything is made.
            let compartment = u8::try_from(number).map_err(|_| "the reference monitor gave a compartment number out of range");
            let failed = match compartment.and_then(forget_tenant) {
                Err(why) => Some((&b""[..], why)),
                Ok(()) if tp1 => tenant_tp1(number, page_limit).err().map(|why| (&b"the tenant's TP1 service could not be made: "[..], why)),
                Ok(()) => None,
            };
            if let Some((context, why)) = failed {
                let revoked = user::keysafe::revoke(KEYSAFE, name).is_ok();
                reply.push(b"error ").push(context).push(why.as_bytes());
                reply.push(if revoked { b"; the tenant was revoked again\n" } else { b"; revoke the tenant\n" });
                return;
            }
            reply.push(b"ok number ").number(number).push(b"\n");
        })
    } else {
        user::keysafe::set_quota(KEYSAFE, name, quota).map(|()| {
            reply.push(b"ok\n");
        })
    };
    if let Err(error) = done {
        keysafe_failed(error, name, reply);
    }
}

/// Makes tenant `number`'s TP1 service, whose compartment capability is in `TENANT`: an
/// instance the TP1 constructor yields on a bank below the tenant's and on its meter, given
/// its private listener, its bank, a counters page and its own tokens page (read-only; the
/// page, writable, goes in the tokens space's slot 1 + `number`), the listener put in the
/// routes node's slot for the appliance's TP1 service to hand the tenant's connections to,
/// and the counters page, read-only, in the slot after the listeners' for `counters`.
fn tenant_tp1(number: u64, page_limit: u64) -> Result<(), &'static str> {
    use user::syscall::{Invocation, invoke};
    // The service's memory is a copy-on-write copy of the template's, bought page by page
    // as it writes: a tenant whose bank could not hold all of it would see its service
    // stopped by a fault some day, so it is refused now.
    if page_limit < TP1_SERVICE_PAGES {
        return Err("the tenant's bank cannot hold it (a TP1 service may write up to 4,100 pages; its database needs more when loaded)");
    }
    user::keysafe::bank(TENANT, TENANT_BANK).map_err(|_| "the reference monitor gave no bank for it")?;
    user::keysafe::meter(TENANT, TENANT_METER).map_err(|_| "the reference monitor gave no meter for it")?;
    user::constructor::yield_process(TP1_CONSTRUCTOR, TENANT_BANK, TENANT_METER, TENANT).map_err(|error| match error {
        Error::Invocation(user::abi::InvocationError::Void) => "no TP1 constructor on this appliance",
        Error::Reply(user::constructor::refusal::BANK_REFUSED) => "the tenant's bank refused the service's first nodes",
        _ => "the constructor could not copy the TP1 program",
    })?;
    // Its tokens page: the tenant's, so that its service can read no other owner's tokens.
    // Nothing is journaled into it before a checkpoint holds it (`mint`): the journal makes
    // a page's bytes durable, not its purchase, and a token committed into a page that a
    // restart found unsold would be lost with it (or reach whoever bought the page next).
    // Not waited for here: the host's `tenant create` waits for two commits after the
    // reply, and the control channel stays free for others meanwhile.
    user::bank::buy_page(TENANT_BANK, TOKENS_PAGE).map_err(|_| "the tenant's bank refused a page for its tokens")?;
    space::swap(TOKENS_SPACE, tokens_slot(number), TOKENS_PAGE, SCRATCH).map_err(|_| "its tokens page could not be kept")?;
    // Read after the purchase: a checkpoint that committed before it is no help.
    let bought_at = checkpoint::status(CHECKPOINT).map_err(|_| "the checkpoint control did not answer")?.generation;
    // SAFETY: one thread; the reference is used and dropped within the statement.
    match unsafe { (*core::ptr::addr_of_mut!(TOKENS_PAGE_BOUGHT_AT)).get_mut(number as usize) } {
        Some(slot) => *slot = bought_at,
        None => return Err("no such tenant"),
    }
    user::bank::buy_page(TENANT_BANK, SCRATCH).map_err(|_| "the tenant's bank refused a page for its counters")?;
    user::net::listen_private(NETWORK, TENANT_METER).map_err(|_| "the network service made no listener for it")?;
    let configured = page::weaken(TOKENS_PAGE, TOKENS_PAGE)
        .and_then(|()| {
            invoke(Invocation {
                words: [number, 0, 0, 0],
                send: &[TENANT_METER, TENANT_BANK, SCRATCH, TOKENS_PAGE],
                ..Invocation::call(TENANT, holdfast_tp1_ledger::instance::CONFIGURE)
            })
            .check()
        })
        .and_then(|_| page::weaken(SCRATCH, SCRATCH))
        .and_then(|()| node::swap(TP1_ROUTES, counters_slot(number), SCRATCH, TENANT))
        .and_then(|()| node::swap(TP1_ROUTES, number, TENANT_METER, SCRATCH));
    if configured.is_err() {
        let _ = user::net::shut(TENANT_METER);
        return Err("it refused its configuration");
    }
    Ok(())
}

/// Clears what a tenant of `compartment` has, or an earlier one left: its TP1 tokens first
/// (so nothing routes to it any more), then its listener (shut: its connections reset) and
/// its routes.
fn forget_tenant(compartment: u8) -> Result<(), &'static str> {
    revoke_tokens(tokens::Owner::Tenant(compartment))?;
    if tenant_listener(compartment, TENANT_METER) {
        let _ = user::net::shut(TENANT_METER);
    }
    let number = u64::from(compartment);
    let _ = node::clear(TP1_ROUTES, number);
    let _ = node::clear(TP1_ROUTES, counters_slot(number));
    Ok(())
}

/// The routes node's slot of tenant `number`'s TP1 counters page: after the listeners'.
fn counters_slot(number: u64) -> u64 {
    TENANTS_MAX + number
}

/// The tokens space's slot of tenant `number`'s own tokens page: after the appliance's.
const fn tokens_slot(number: u64) -> u64 {
    1 + number
}

/// Whether tenant `number` has a TP1 service: its listener, into `into`, if so. Sensed, not
/// identified: a listener is a start capability, which `identify` would call.
fn tenant_listener(number: u8, into: CapReg) -> bool {
    let slot = u64::from(number);
    node::sense(TP1_ROUTES, slot).is_ok_and(|sensed| sensed.type_code != Type::Void as u64)
        && node::fetch(TP1_ROUTES, slot, into).is_ok()
}

/// The compartment number of live tenant `name`.
fn tenant_number(name: &[u8]) -> Result<u8, Error> {
    use user::keysafe::{LIST_ENTRY_BYTES, Listed};
    let mut buffer = [0u8; user::abi::INVOCATION_STRING_BYTES_MAX];
    let count = user::keysafe::list(KEYSAFE, &mut buffer)?;
    buffer
        .chunks_exact(LIST_ENTRY_BYTES)
        .take(count)
        .map(|entry| Listed::decode(entry.try_into().expect("an entry")))
        .find(|listed| listed.name() == name)
        .map(|listed| listed.number)
        .ok_or(Error::Reply(user::keysafe::refusal::NO_SUCH_COMPARTMENT))
}

/// `tenant revoke <name>`: its TP1 tokens cleared first (so nothing routes to it any more),
/// its TP1 service's listener shut (its connections reset), then the compartment revoked:
/// its bank destroyed, and with it its TP1 service and database.
fn tenant_revoke(name: &[u8], reply: &mut Reply) {
    // Its tokens, listener and routes first: nothing of the tenant answers clients once the
    // monitor has destroyed its service.
    let forgotten = match tenant_number(name) {
        Ok(number) => match forget_tenant(number) {
            Ok(()) => true,
            Err(what) => {
                reply.push(b"error ").push(what.as_bytes()).push(b": the tenant was not revoked\n");
                return;
            }
        },
        Err(_) => false,
    };
    match user::keysafe::revoke(KEYSAFE, name) {
        Ok(objects) => {
            reply.push(b"ok objects ").number(objects).push(b"\n");
        }
        // Not "nothing was done", as the monitor's own refusals say: its tokens and service
        // are gone already.
        Err(error) if forgotten => {
            reply.push(b"error the tenant's tokens and TP1 routes were cleared, but the reference monitor refused to revoke the tenant (");
            reply.describe(error).push(b"): revoke it again\n");
        }
        Err(error) => keysafe_failed(error, name, reply),
    }
}

/// Says why the reference monitor refused an order about tenant `name`.
fn keysafe_failed(error: Error, name: &[u8], reply: &mut Reply) {
    use user::keysafe::refusal;
    match error {
        Error::Invocation(user::abi::InvocationError::Void) => reply.error(b"no reference monitor on this appliance"),
        Error::Reply(refusal::NO_SUCH_COMPARTMENT) => reply.push(b"error no tenant named ").push(name).push(b"\n"),
        Error::Reply(refusal::BAD_NAME) => reply.error(b"a tenant's name is 1 to 16 printable characters without spaces"),
        Error::Reply(refusal::AUDIT_UNAVAILABLE) => reply.error(b"the audit log could not be written: nothing was done"),
        Error::Reply(refusal::NAME_TAKEN) => reply.push(b"error a tenant named ").push(name).push(b" exists already\n"),
        Error::Reply(refusal::TOO_MANY_COMPARTMENTS) => reply.error(b"the reference monitor holds as many tenants as it can (16)"),
        Error::Reply(refusal::BAD_REQUEST) => reply.error(b"a tenant's node limit is at least 4 (its bank's forwarder, its capability, its inbox and its meter)"),
        Error::Reply(refusal::NO_METER) => reply.error(b"the tenant has no meter (made without one), or the reference monitor was given none for tenants' meters: nothing was done"),
        Error::Reply(refusal::BANK_REFUSED) => reply.error(b"the monitor's bank refused (its limits reached, or the store full): nothing was done"),
        error => reply.failed(error),
    };
}

fn tenant_list(reply: &mut Reply) {
    use user::keysafe::{LIST_ENTRY_BYTES, Listed};
    let mut buffer = [0u8; user::abi::INVOCATION_STRING_BYTES_MAX];
    let count = match user::keysafe::list(KEYSAFE, &mut buffer) {
        Ok(count) => count,
        Err(error) => {
            keysafe_failed(error, b"", reply);
            return;
        }
    };
    for entry in buffer.chunks_exact(LIST_ENTRY_BYTES).take(count) {
        let listed = Listed::decode(entry.try_into().expect("an entry"));
        reply.push(listed.name()).push(b" number ").number(u64::from(listed.number));
        reply.push(b" generation ").number(u64::from(listed.generation));
        reply.push(b" pages ").number(listed.bank.pages).push(b"/").number(listed.bank.page_limit);
        reply.push(b" nodes ").number(listed.bank.nodes).push(b"/").number(listed.bank.node_limit);
        match listed.cpu_percent {
            // Made by another holder of the monitor's control capability without a meter.
            0 => reply.push(b" cpu none"),
            percent => reply.push(b" cpu ").number(percent).push(b"%"),
        };
        reply.push(b" refusals ").number(listed.refusals).push(b" logged ").number(listed.refusals_logged);
        // On the TP1 appliance: whether it has a TP1 service of its own.
        if identify(TP1_ROUTES).is_ok() {
            reply.push(if tenant_listener(listed.number, SCRATCH) { b" tp1 yes" } else { b" tp1 no" });
        }
        reply.push(b"\n");
    }
    reply.push(b"ok tenants ").number(count as u64).push(b"\n");
}

/// The audit records about compartment `name`, read from the monitor in parts and each
/// checked again here (its checksum, version and position) before it is printed.
fn tenant_audit(name: &[u8], reply: &mut Reply) {
    use user::keysafe::refusal;
    /// Parts asked for at most: a log of 511 records comes in 8 parts of 56 at worst.
    const PARTS_MAX: usize = 64;
    const ENTRY_BYTES: usize = 8 + audit::RECORD_BYTES;
    let mut buffer = [0u8; user::abi::INVOCATION_STRING_BYTES_MAX];
    let mut next = 0;
    let mut shown = 0;
    for _ in 0..PARTS_MAX {
        let part = match user::keysafe::audit(KEYSAFE, name, next, &mut buffer) {
            Ok(part) => part,
            Err(Error::Invocation(user::abi::InvocationError::Void)) => {
                reply.clear().error(b"no reference monitor on this appliance");
                return;
            }
            Err(Error::Reply(refusal::BAD_NAME)) => {
                reply.clear().error(b"a compartment's name is 1 to 16 printable characters without spaces");
                return;
            }
            Err(_) => {
                reply.clear().error(b"the reference monitor could not read its audit log");
                return;
            }
        };
        let entries = usize::try_from(part.records).unwrap_or(usize::MAX).min(buffer.len() / ENTRY_BYTES);
        for entry in buffer[..entries * ENTRY_BYTES].chunks_exact(ENTRY_BYTES) {
            let position = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
            match Record::decode(entry[8..].try_into().expect("a record"), position) {
                Ok(record) => {
                    record.render(&mut |piece| {
                        reply.push(piece);
                    });
                    reply.push(b"\n");
                    shown += 1;
                }
                Err(error) => {
                    reply.push(b"error audit record ").number(position).push(b": ").push(error.description().as_bytes()).push(b"\n");
                    return;
                }
            }
        }
        if part.next >= part.count || part.next <= next {
            break;
        }
        next = part.next;
    }
    if shown == 0 {
        reply.clear().push(b"error no compartment named ").push(name).push(b" has an audit record\n");
        return;
    }
    reply.push(b"ok records ").number(shown).push(b"\n");
}

/// 128 random bits: the token is a password capability.
fn random_token() -> Result<[u8; 16], &'static str> {
    let words = user::random::words::<2>().map_err(user::random::RandomError::message)?;
    let mut token = [0u8; 16];
    for (half, word) in token.chunks_exact_mut(8).zip(words) {
        half.copy_from_slice(&word.to_le_bytes());
    }
    Ok(token)
}

/// The TP1 services' counters, from the pages they write, on an appliance that runs them:
/// the appliance's own, then each tenant's (labelled with its name); and
/// `holdfast_journal_commits_per_flush`: TP1 transactions made durable per journal write
/// (flush) since boot, from all of theirs and the kernel's `holdfast_journal_writes_total`,
/// `journal_writes` (group commit: many clients' transactions share a flush).
fn tp1_counters(journal_writes: Option<u64>, reply: &mut Reply) {
    use user::keysafe::{LIST_ENTRY_BYTES, Listed};
    let read = |page: CapReg| {
        let mut page_bytes = [0u8; counters::PAGE_BYTES];
        page::read(page, 0, counters::PAGE_BYTES as u64, &mut page_bytes).ok()?;
        counters::Counters::decode(&page_bytes)
    };
    // Tenants' names are the labels: the reference monitor's list holds them.
    let mut list = [0u8; user::abi::INVOCATION_STRING_BYTES_MAX];
    let listed = user::keysafe::list(KEYSAFE, &mut list).unwrap_or(0);
    let mut tenants = [([0u8; 16], 0, counters::Counters::default()); TENANTS_MAX as usize];
    let mut tenant_count = 0;
    for entry in list.chunks_exact(LIST_ENTRY_BYTES).take(listed.min(tenants.len())) {
        let tenant = Listed::decode(entry.try_into().expect("an entry"));
        let page = node::fetch(TP1_ROUTES, counters_slot(u64::from(tenant.number)), SCRATCH);
        if let (Ok(()), Some(tenant_counters)) = (page, read(SCRATCH)) {
            tenants[tenant_count] = (tenant.name, tenant.name().len(), tenant_counters);
            tenant_count += 1;
        }
    }
    let mut sources = [(None, counters::Counters::default()); 1 + TENANTS_MAX as usize];
    let mut count = 0;
    if let Some(own) = read(TP1_COUNTERS) {
        sources[0].1 = own;
        count = 1;
    }
    for (name, length, tenant_counters) in &tenants[..tenant_count] {
        if let Ok(name) = core::str::from_utf8(&name[..*length]) {
            sources[count] = (Some(name), *tenant_counters);
            count += 1;
        }
    }
    let sources = &sources[..count];
    if sources.is_empty() {
        return;
    }
    let status_name = |code: usize| {
        holdfast_tp1_protocol::Status::from_code(code as u8).map_or("unknown", holdfast_tp1_protocol::Status::name)
    };
    counters::render(sources, status_name, |name, labels, value| {
        reply.push(name.as_bytes());
        for (index, (key, label)) in labels.iter().enumerate() {
            reply.push(if index == 0 { b"{" } else { b"," }).push(key.as_bytes()).push(b"=\"").push(label.as_bytes()).push(b"\"");
        }
        if !labels.is_empty() {
            reply.push(b"}");
        }
        reply.push(b" ").decimal_fraction(value).push(b"\n");
    });
    let transactions: u64 = sources.iter().map(|(_, source)| source.transactions_total).sum();
    if let Some(flushes) = journal_writes.filter(|&flushes| flushes > 0) {
        reply.push(b"holdfast_journal_commits_per_flush ").decimal_fraction(transactions as f64 / flushes as f64).push(b"\n");
    }
}

/// `tp1 token <name> [admin]` and `tenant token <tenant> <name> [admin]`: a new token for
/// `owner`'s TP1 service.
fn token(name: &[u8], kind: Option<&[u8]>, owner: tokens::Owner, reply: &mut Reply) {
    let kind = match kind {
        None => Some(tokens::Kind::Client),
        Some(b"admin") => Some(tokens::Kind::Admin),
        Some(_) => None,
    };
    match kind.ok_or("the token's kind is 'admin' or nothing").and_then(|kind| mint(name, kind, owner)) {
        Ok(token) => {
            reply.push(b"ok token ");
            for byte in token {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                reply.push(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
            }
            reply.push(b"\n");
        }
        Err(what) => {
            reply.error(what.as_bytes());
        }
    }
}

/// Mints a token for `name` of `owner`: into the appliance's tokens page, and a tenant's
/// into its own page first. In that order a crash between the two writes leaves a token
/// that its tenant's service would serve but nothing routes to it (and nobody was told it),
/// never one that routes to a service that refuses it.
fn mint(name: &[u8], kind: tokens::Kind, owner: tokens::Owner) -> Result<[u8; 16], &'static str> {
    let token = random_token()?;
    let mint_into = |slot: u64| {
        write_tokens(slot, |page| {
            tokens::mint(page, name, kind, owner, token).map(Some).map_err(|error| match error {
                tokens::MintError::BadName => "a token's name is 1 to 32 printable characters without spaces",
                tokens::MintError::Full => "every token entry is in use (mint an existing name again to replace its token)",
                tokens::MintError::BadOwner => "no such tenant",
            })
        })
    };
    if let tokens::Owner::Tenant(number) = owner {
        // SAFETY: one thread; no reference to the array outlives the statement.
        let bought_at = unsafe { (*core::ptr::addr_of!(TOKENS_PAGE_BOUGHT_AT)).get(usize::from(number)).copied() };
        let bought_at = bought_at.ok_or("no such tenant")?;
        let newest = checkpoint::status(CHECKPOINT).map_err(|_| "the checkpoint control did not answer")?.generation;
        if newest < bought_at + 2 {
            return Err("the tenant's tokens page is not in a checkpoint yet: try again after the next one");
        }
        let written = mint_into(tokens_slot(u64::from(number)))
            .map_err(|why| if why == NO_TOKENS_PAGE { "the tenant's TP1 service has no tokens page of its own" } else { why })?;
        if !written {
            return Err("the tenant's tokens page could not be written");
        }
    }
    mint_into(APPLIANCE_TOKENS_SLOT)?.then_some(token).ok_or("the tokens page could not be written")
}

/// The tokens space's slot of the appliance's tokens page.
const APPLIANCE_TOKENS_SLOT: u64 = 0;
/// [`write_tokens`]'s error for a slot with no live page.
const NO_TOKENS_PAGE: &str = "no TP1 tokens page on this appliance";

/// Clears every token of `owner`'s, a write each: from the appliance's tokens page first (so
/// nothing routes to it any more), then from a tenant's own page. A slot without a live page
/// holds none: the appliance's on an appliance without TP1, a tenant's made without TP1 or
/// whose bank is destroyed.
fn revoke_tokens(owner: tokens::Owner) -> Result<(), &'static str> {
    let own_slot = match owner {
        tokens::Owner::Tenant(number) => Some(tokens_slot(u64::from(number))),
        tokens::Owner::Appliance => None,
    };
    for slot in core::iter::once(APPLIANCE_TOKENS_SLOT).chain(own_slot) {
        revoke_tokens_in(slot, owner)?;
    }
    Ok(())
}

fn revoke_tokens_in(slot: u64, owner: tokens::Owner) -> Result<(), &'static str> {
    // One write per entry, and one more to find none left.
    for _ in 0..=tokens::ENTRIES_MAX {
        match write_tokens(slot, |page| Ok(tokens::revoke(page, owner))) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(NO_TOKENS_PAGE) => return Ok(()),
            Err(why) => return Err(why),
        }
    }
    Err("the tenant's tokens could not all be cleared")
}

/// Makes the write `pieces` computes from the tokens page in the tokens space's `slot` (none:
/// returns false), committed through the journal's guarded write: a restart between reading
/// the page and writing it moves the guard, and the write is computed again from the page as
/// it then is, so no token minted or cleared meanwhile is overwritten.
fn write_tokens(slot: u64, pieces: impl Fn(&[u8; tokens::PAGE_BYTES]) -> Result<Option<tokens::Pieces>, &'static str>) -> Result<bool, &'static str> {
    let page_address = slot * tokens::PAGE_BYTES as u64;
    for _ in 0..MINT_ATTEMPTS_MAX {
        let mut page = [0u8; tokens::PAGE_BYTES];
        let read = space::fetch(TOKENS_SPACE, slot, TOKENS_PAGE)
            .and_then(|()| page::read(TOKENS_PAGE, 0, tokens::PAGE_BYTES as u64, &mut page));
        if read.is_err() {
            return Err(NO_TOKENS_PAGE);
        }
        let Some(pieces) = pieces(&page)? else {
            return Ok(false);
        };
        let mut bytes = [0u8; 2 * (10 + 64)];
        for ((offset, data), piece) in pieces.iter().zip(bytes.chunks_exact_mut(10 + 64)) {
            piece[..8].copy_from_slice(&(page_address + offset).to_le_bytes());
            piece[8..10].copy_from_slice(&(data.len() as u16).to_le_bytes());
            piece[10..].copy_from_slice(data);
        }
        match journal::write(JOURNAL, TOKENS_SPACE, page_address + tokens::GUARD_OFFSET, tokens::guard(&page), &bytes) {
            Ok(_) => return Ok(true),
            Err(Error::Object(user::abi::methods::ObjectError::Changed)) => continue,
            Err(_) => return Err("the tokens page could not be committed through the journal"),
        }
    }
    Err("the tokens page kept changing under the write")
}

/// A line that holds this byte (ASCII CAN, "cancel") is dropped whole, unanswered: a client
/// begins with one to end the part of a request that a client before it left unfinished
/// (QEMU hands the guest what it read of a request whose client has gone), so that the
/// part is never carried out.
const DISCARD: u8 = 0x18;

/// The longest request tag.
const TAG_BYTES_MAX: usize = 32;

/// A request's tag (`@<tag> ` before it) and the request after it. A tag that is not 1 to
/// [`TAG_BYTES_MAX`] letters, digits and `-` comes back empty, to be refused.
fn split_tag(request: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let Some(tagged) = request.strip_prefix(b"@") else { return (None, request) };
    let (tag, rest) = tagged.split_at(tagged.iter().position(|&byte| byte == b' ').unwrap_or(tagged.len()));
    let valid = (1..=TAG_BYTES_MAX).contains(&tag.len())
        && tag.iter().all(|&byte| byte.is_ascii_alphanumeric() || byte == b'-');
    (Some(if valid { tag } else { b"" }), rest.strip_prefix(b" ").unwrap_or(rest))
}

fn main() -> u64 {
    let mut line = [0u8; LINE_BYTES_MAX];
    let mut length = 0;
    // A line longer than the buffer: skipped up to its end, then refused.
    let mut overlong = false;
    // The line holds [`DISCARD`]: dropped at its end, unanswered.
    let mut discarded = false;
    let mut input = [0u8; 512];
    // SAFETY: `main` runs once, on the program's only thread, and never returns: this is the
    // only reference to the reply buffer for the program's life.
    let reply = unsafe { &mut *core::ptr::addr_of_mut!(REPLY) };
    let boot_now = || clock::now(CLOCK).map(|now| now.boot).ok();
    let mut boot = boot_now();
    loop {
        let count = match control::read(CONTROL, input.len() as u64, &mut input) {
            Ok(count) => count,
            Err(_) => {
                user::print("admin: no control channel; stopping\n");
                return 1;
            }
        };
        // The part of a line read before a restart came back with the checkpoint, but its
        // client is gone: the new client's request must not be glued onto it.
        if boot_now() != boot {
            boot = boot_now();
            (length, overlong, discarded) = (0, false, false);
        }
        for &byte in &input[..count] {
            match byte {
                b'\n' => {}
                DISCARD => {
                    discarded = true;
                    continue;
                }
                _ if length < line.len() => {
                    line[length] = byte;
                    length += 1;
                    continue;
                }
                _ => {
                    overlong = true;
                    continue;
                }
            }
            let request = line[..length].strip_suffix(b"\r").unwrap_or(&line[..length]);
            if discarded || (request.is_empty() && !overlong) {
                (length, overlong, discarded) = (0, false, false);
                continue;
            }
            let reply = reply.clear();
            let (tag, request) = split_tag(request);
            if let Some(tag) = tag.filter(|tag| !tag.is_empty()) {
                // Written apart from the reply: a reply that clears itself keeps its tag.
                let mut tag_line = [0u8; TAG_BYTES_MAX + 2];
                tag_line[0] = b'@';
                tag_line[1..=tag.len()].copy_from_slice(tag);
                tag_line[tag.len() + 1] = b'\n';
                let _ = control::write(CONTROL, &tag_line[..tag.len() + 2]);
            }
            if overlong {
                reply.error(b"request longer than 256 bytes");
            } else if tag == Some(b"") {
                reply.error(b"a request tag is 1 to 32 letters, digits and '-', then a space");
            } else {
                answer(request, reply);
                if reply.overflowed {
                    // A cut line would make the host's exporter refuse the whole poll, and
                    // a cut reply lacks its `ok`: say why instead.
                    reply.clear().error(b"reply longer than the admin service's buffer");
                }
            }
            // An invocation carries at most 4 KiB.
            for part in reply.bytes[..reply.length].chunks(user::abi::INVOCATION_STRING_BYTES_MAX) {
                let _ = control::write(CONTROL, part);
            }
            length = 0;
            overlong = false;
        }
    }
}

user::entry!(main);
