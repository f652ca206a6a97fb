//! The KeySafe reference monitor (KeyKOS's KeySAFE): compartments, and the only way a
//! capability crosses from one to another. Orders and refusals: `holdfast_userlib::keysafe`;
//! the compartments, policy and audit records: `holdfast_keysafe_policy`.
//!
//! Each compartment has a bank below the monitor's, which pays for what the monitor makes
//! for it: its capability to the monitor (an indirector of a node from that bank, badge
//! naming the compartment), its inbox (a node), and one node of every forwarder granted to
//! or from it. A granted capability reaches the recipient as two indirectors in a row, the
//! outer node bought from the recipient's bank, the inner from the granter's: destroying
//! either bank (a revocation) voids the forwarder, so revoking a compartment voids every
//! forwarder it handed out and every one it was handed, at once, by one version bump each
//! in the space bank's `destroy`. The kind the policy checks is the capability's own type,
//! read with `node.sense` (never by invoking it: a start capability to a process that never
//! answers cannot hold the monitor up).
//!
//! The audit log is pages of the monitor's (a space, for the journal's guarded write), and
//! every record is committed through the journal before the order it records takes effect
//! or is answered: a revocation written only to memory would be lost with any crash before
//! the next checkpoint, and the log would then not show what an operator did. The record
//! count in the log's header is the guard, so an append is made once whatever restart
//! comes, and it is read from the page every time, never from memory (memory comes back as
//! the last checkpoint caught it, possibly before later appends). For the same reason a
//! revocation is logged first and done second: after a restart (the clock's boot count
//! moved) the monitor, before it answers anything, does again every logged revocation whose
//! compartment the checkpoint brought back live. Until its first request after a restart
//! such a compartment's forwarders work; its audit record is never lost.
//!
//! A compartment made with a CPU share has a meter of its own too (KeyKOS's tenants' CPU
//! quota), of a node from its bank, below the meter the manifest gives the monitor for all
//! compartments: what its programs use is charged to both. The monitor gives that one the
//! whole of every period at each start (it only adds up the compartments' time; a one-off
//! amount would run out one day and stop every compartment), so each compartment's own
//! share is what limits it. The compartment's capability hands its programs the meter
//! read-only (they run on it, or make their meters below it) and only the control
//! capability changes its share. Revoking the compartment destroys the meter with the
//! bank. It also hands them banks below the compartment's to buy their storage from: never
//! the compartment's bank itself, whose destruction would take the monitor's forwarders and
//! inbox with it.
//!
//! Capability registers: 0 console, 1 own process, 2 the monitor's bank, 3 the journal, 4
//! the audit log as a space (height 1), 5 the audit log's node (slot i: page i), 6 a node
//! whose slot i holds compartment i's bank (slot 30 holds the meter compartments' meters
//! are made below, if the manifest gives one; slot 31 is where a granted capability is
//! sensed), 7 a node whose slot i holds compartment i's inbox and slot 16 + i its meter, 8
//! the clock; 9 to 11 and 13 scratch; 12 the capability received; 14 void; 15 the
//! caller's resume capability.
#![no_std]
#![no_main]

use holdfast_keysafe_policy::audit::{self, AuditError, Event, Record};
use holdfast_keysafe_policy::{COMPARTMENTS_MAX, Compartments, Name, Refusal};
use holdfast_userlib::abi::interface::ObjectError;
use holdfast_userlib::bank;
use holdfast_userlib::interface::{clock, journal, meter, node, page, process};
use holdfast_userlib::keysafe::{self, control_order, order, refusal};
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::{self as user, Invocation};

const OWN_PROCESS: CapReg = CapReg::new(1);
const MONITOR_BANK: CapReg = CapReg::new(2);
const JOURNAL: CapReg = CapReg::new(3);
const LOG_SPACE: CapReg = CapReg::new(4);
const LOG_NODE: CapReg = CapReg::new(5);
const BANKS: CapReg = CapReg::new(6);
const INBOXES: CapReg = CapReg::new(7);
const CLOCK: CapReg = CapReg::new(8);
const BANK: CapReg = CapReg::new(9);
const OBJECT: CapReg = CapReg::new(10);
const MADE: CapReg = CapReg::new(11);
const RECEIVED: CapReg = CapReg::new(12);
const SCRATCH: CapReg = CapReg::new(13);
const NOTHING: CapReg = CapReg::new(14);
const RESUME: u8 = 15;

/// The slot of `BANKS` where a granted capability is put to be sensed.
const SENSE_SLOT: u64 = 31;
/// The slot of `BANKS` that holds the meter compartments' meters are made below.
const PARENT_METER_SLOT: u64 = 30;
/// Compartment i's meter is in slot `METER_SLOT_FIRST + i` of `INBOXES`.
const METER_SLOT_FIRST: u64 = COMPARTMENTS_MAX as u64;
const _: () = assert!(2 * COMPARTMENTS_MAX <= 32, "an inbox and a meter slot for every compartment");
const _: () = assert!(COMPARTMENTS_MAX as u64 <= PARENT_METER_SLOT, "no compartment's bank in the parent meter's or the sense slot");
/// The audit log's pages (the manifest gives that many; a height-1 space holds 32).
const LOG_PAGES: usize = 8;
const PAGE_BYTES: usize = 4096;
const LOG_BYTES: usize = LOG_PAGES * PAGE_BYTES;
/// Slots of an inbox node.
const INBOX_SLOTS: usize = 32;
const EMPTY: u8 = 0xff;
/// An audit reply's entries: the record's position (8 bytes) and the record.
const AUDIT_ENTRY_BYTES: usize = 8 + audit::RECORD_BYTES;
/// Attempts at an append whose guard moved (a restart between reading the count and the
/// write) before giving up.
const APPEND_ATTEMPTS_MAX: usize = 4;

/// Everything the monitor remembers; the checkpoints keep it with the process.
struct State {
    compartments: Compartments,
    /// `inbox[c][slot]`: the granter of the forwarder in that slot of c's inbox, or EMPTY.
    inbox: [[u8; INBOX_SLOTS]; COMPARTMENTS_MAX],
    /// The boot count when the last request was answered: a different one is a restart.
    boot: u64,
    /// Each compartment's CPU share in percent; 0: it has no meter.
    cpu_percent: [u8; COMPARTMENTS_MAX],
}

static mut STATE: State = State {
    compartments: Compartments::empty(),
    inbox: [[EMPTY; INBOX_SLOTS]; COMPARTMENTS_MAX],
    boot: 0,
    cpu_percent: [0; COMPARTMENTS_MAX],
};
// A list of every compartment fits one reply.
const _: () = assert!(COMPARTMENTS_MAX * keysafe::LIST_ENTRY_BYTES <= user::abi::INVOCATION_STRING_BYTES_MAX);

/// One page of the log, as read.
static mut LOG_PAGE: [u8; PAGE_BYTES] = [0; PAGE_BYTES];
/// The reply string of an audit read.
static mut AUDIT_REPLY: [u8; user::abi::INVOCATION_STRING_BYTES_MAX] = [0; user::abi::INVOCATION_STRING_BYTES_MAX];

/// How a request ends well: words, words and the capability in `MADE`, or words and a
/// string.
enum Answer {
    Words([u64; 4]),
    WithCapability([u64; 4]),
    WithString([u64; 4], usize),
}

fn refusal_code(refused: Refusal) -> u64 {
    match refused {
        Refusal::NoSuchCompartment => refusal::NO_SUCH_COMPARTMENT,
        Refusal::Forbidden => refusal::FORBIDDEN,
        Refusal::TooManyCompartments => refusal::TOO_MANY_COMPARTMENTS,
        Refusal::NameTaken => refusal::NAME_TAKEN,
        Refusal::BadName => refusal::BAD_NAME,
    }
}

fn boot_now() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.boot)
}

/// The audit log, read through the page capabilities of its node.
struct Log<'a> {
    page: &'a mut [u8; PAGE_BYTES],
    /// Which page `page` holds.
    loaded: Option<usize>,
}

impl Log<'_> {
    fn bytes(&mut self, offset: usize, length: usize) -> Result<&[u8], AuditError> {
        let index = offset / PAGE_BYTES;
        if self.loaded != Some(index) {
            self.loaded = None;
            node::fetch(LOG_NODE, index as u64, SCRATCH).map_err(|_| AuditError::BadHeader)?;
            page::read(SCRATCH, 0, PAGE_BYTES as u64, self.page).map_err(|_| AuditError::BadHeader)?;
            self.loaded = Some(index);
        }
        let within = offset % PAGE_BYTES;
        Ok(&self.page[within..within + length])
    }

    fn count(&mut self) -> Result<u64, AuditError> {
        let header = self.bytes(0, 16)?;
        audit::decode_header(header, LOG_BYTES)
    }

    fn record(&mut self, sequence: u64) -> Result<Record, AuditError> {
        let bytes = self.raw(sequence)?;
        Record::decode(&bytes, sequence)
    }

    fn raw(&mut self, sequence: u64) -> Result<[u8; audit::RECORD_BYTES], AuditError> {
        let bytes = self.bytes(audit::record_offset(sequence) as usize, audit::RECORD_BYTES)?;
        Ok(bytes.try_into().expect("a record's bytes"))
    }

    /// Appends `record` (its sequence set here), committed through the journal.
    fn append(&mut self, mut record: Record) -> Result<(), u64> {
        for _ in 0..APPEND_ATTEMPTS_MAX {
            self.loaded = None;
            let count = self.count().map_err(|_| refusal::AUDIT_UNAVAILABLE)?;
            if !audit::has_room(record.event, count, LOG_BYTES) {
                return Err(refusal::AUDIT_UNAVAILABLE);
            }
            record.sequence = count;
            let mut pieces = [0u8; 2 * 10 + audit::RECORD_BYTES + 16];
            let (first, header) = pieces.split_at_mut(10 + audit::RECORD_BYTES);
            first[..8].copy_from_slice(&audit::record_offset(count).to_le_bytes());
            first[8..10].copy_from_slice(&(audit::RECORD_BYTES as u16).to_le_bytes());
            first[10..].copy_from_slice(&record.encode());
            header[..8].copy_from_slice(&0u64.to_le_bytes());
            header[8..10].copy_from_slice(&16u16.to_le_bytes());
            header[10..].copy_from_slice(&audit::encode_header(count + 1));
            self.loaded = None;
            match journal::write(JOURNAL, LOG_SPACE, audit::COUNT_OFFSET as u64, count, &pieces) {
                Ok(_) => return Ok(()),
                Err(Error::Object(ObjectError::Changed)) => continue,
                Err(_) => return Err(refusal::AUDIT_UNAVAILABLE),
            }
        }
        Err(refusal::AUDIT_UNAVAILABLE)
    }
}

fn record(event: Event, state: &State, from: usize, to: Option<usize>) -> Record {
    let name = |index: usize| state.compartments.get(index).map_or(Name::EMPTY, |entry| entry.name);
    Record {
        event,
        type_code: 0,
        code: 0,
        from: from as u8,
        to: to.map_or(audit::NONE, |to| to as u8),
        sequence: 0,
        boot: state.boot,
        from_name: name(from),
        to_name: to.map_or(Name::EMPTY, name),
        detail: 0,
    }
}

/// Voids everything of compartment `index`: its bank destroyed (its capability, inbox and
/// every forwarder's node with it), its entries cleared. Returns how many objects went.
fn end_compartment(state: &mut State, index: usize) -> u64 {
    let destroyed = node::fetch(BANKS, index as u64, BANK).and_then(|()| bank::destroy(BANK)).unwrap_or(0);
    let _ = node::clear(BANKS, index as u64);
    let _ = node::clear(INBOXES, index as u64);
    let _ = node::clear(INBOXES, METER_SLOT_FIRST + index as u64);
    state.cpu_percent[index] = 0;
    let _ = state.compartments.revoke(index);
    state.inbox[index] = [EMPTY; INBOX_SLOTS];
    destroyed
}

/// After a restart: does again every logged revocation whose compartment the checkpoint
/// brought back live (the record was committed through the journal; the destruction was
/// only in memory and the space bank's, both as the checkpoint caught them).
fn redo_revocations(state: &mut State, log: &mut Log<'_>) {
    let Ok(count) = log.count() else {
        user::print("keysafe: the audit log's header is corrupt; revocations not checked after the restart\n");
        return;
    };
    for sequence in 0..count {
        let Ok(logged) = log.record(sequence) else { continue };
        if logged.event != Event::Revoked {
            continue;
        }
        let index = usize::from(logged.from);
        let again = state.compartments.get(index).is_some_and(|entry| entry.name == logged.from_name && entry.generation == logged.detail);
        if again {
            end_compartment(state, index);
            user::print_parts(&[b"keysafe: revocation of ", logged.from_name.as_bytes(), b" done again after a restart\n"]);
        }
    }
}

fn parse_name(string: &[u8]) -> Result<Name, u64> {
    Name::parse(string).map_err(refusal_code)
}

/// The smallest node limit of a compartment's bank: its own forwarder (the space bank
/// counts it), the node of the compartment's capability and its inbox.
const COMPARTMENT_NODES_MIN: u64 = 3;

/// A compartment's CPU share from an order's word: a percent, or 0 for no meter.
fn cpu_percent(word: u64) -> Result<u8, u64> {
    u8::try_from(word).ok().filter(|&percent| percent <= 100).ok_or(refusal::BAD_REQUEST)
}

fn share_of(percent: u8) -> u64 {
    u64::from(percent) * user::abi::METER_PERIOD_MICROSECONDS / 100
}

/// Compartment `index`'s meter into `OBJECT`.
fn fetch_meter(index: usize) -> Result<(), Error> {
    node::fetch(INBOXES, METER_SLOT_FIRST + index as u64, OBJECT)
}

/// Makes compartment `index`'s meter, with `percent` of every period, of a node from its
/// bank in `BANK`, below the parent meter, into its slot of `INBOXES`.
fn make_meter(index: usize, percent: u8) -> Result<(), Error> {
    bank::buy_node(BANK, OBJECT)?;
    node::fetch(BANKS, PARENT_METER_SLOT, SCRATCH)?;
    node::make_meter(OBJECT, SCRATCH, OBJECT)?;
    meter::set_share(OBJECT, share_of(percent))?;
    node::swap(INBOXES, METER_SLOT_FIRST + index as u64, OBJECT, SCRATCH)
}

/// The meter for compartments' meters into `SCRATCH`, if the manifest gave one.
fn fetch_parent_meter() -> bool {
    node::fetch(BANKS, PARENT_METER_SLOT, SCRATCH).is_ok() && meter::remaining(SCRATCH).is_ok()
}

fn create(state: &mut State, log: &mut Log<'_>, string: &[u8], words: [u64; 4]) -> Result<Answer, u64> {
    let name = parse_name(string)?;
    let [page_limit, node_limit, percent, _] = words;
    let percent = cpu_percent(percent)?;
    if node_limit < COMPARTMENT_NODES_MIN + u64::from(percent > 0) {
        return Err(refusal::BAD_REQUEST);
    }
    if percent > 0 && !fetch_parent_meter() {
        return Err(refusal::NO_METER);
    }
    let index = state.compartments.create(name).map_err(refusal_code)?;
    let made = (|| {
        bank::create_child(MONITOR_BANK, page_limit, node_limit, BANK).map_err(|_| refusal::BANK_REFUSED)?;
        let bought = (|| {
            bank::buy_node(BANK, OBJECT)?;
            node::swap(INBOXES, index as u64, OBJECT, SCRATCH)?;
            bank::buy_node(BANK, OBJECT)?;
            process::make_start(OWN_PROCESS, state.compartments.badge(index), SCRATCH)?;
            node::swap(OBJECT, 0, SCRATCH, NOTHING)?;
            node::make_indirector(OBJECT, 0, MADE)?;
            if percent > 0 {
                make_meter(index, percent)?;
            }
            node::swap(BANKS, index as u64, BANK, SCRATCH)
        })();
        if bought.is_err() {
            let _ = bank::destroy(BANK);
            return Err(refusal::BANK_REFUSED);
        }
        let mut created = record(Event::Created, state, index, None);
        created.detail = state.compartments.get(index).map_or(0, |entry| entry.generation);
        log.append(created)
    })();
    if let Err(code) = made {
        end_compartment(state, index);
        return Err(code);
    }
    state.inbox[index] = [EMPTY; INBOX_SLOTS];
    state.cpu_percent[index] = percent;
    Ok(Answer::WithCapability([index as u64, 0, 0, 0]))
}

fn set_quota(state: &mut State, string: &[u8], words: [u64; 4]) -> Result<Answer, u64> {
    let name = parse_name(string)?;
    let index = state.compartments.find(&name).ok_or(refusal::NO_SUCH_COMPARTMENT)?;
    let [page_limit, node_limit, percent, _] = words;
    let percent = cpu_percent(percent)?;
    let metered = state.cpu_percent[index] > 0;
    // A compartment keeps the meter it was made with, or none.
    if metered && percent == 0 || node_limit < COMPARTMENT_NODES_MIN + u64::from(metered) {
        return Err(refusal::BAD_REQUEST);
    }
    if !metered && percent > 0 {
        return Err(refusal::NO_METER);
    }
    // The meter found before anything changes, so that a refusal changes nothing.
    if metered {
        fetch_meter(index).map_err(|_| refusal::NO_METER)?;
    }
    node::fetch(BANKS, index as u64, BANK).map_err(|_| refusal::BANK_REFUSED)?;
    bank::set_child_limits(MONITOR_BANK, BANK, page_limit, node_limit).map_err(|_| refusal::BANK_REFUSED)?;
    if metered {
        meter::set_share(OBJECT, share_of(percent)).map_err(|_| refusal::NO_METER)?;
        state.cpu_percent[index] = percent;
    }
    Ok(Answer::Words([0; 4]))
}

fn set_policy(state: &mut State, log: &mut Log<'_>, words: [u64; 4]) -> Result<Answer, u64> {
    let [from, to, kinds, _] = words;
    let (from, to) = (usize::try_from(from).unwrap_or(usize::MAX), usize::try_from(to).unwrap_or(usize::MAX));
    let kinds = u32::try_from(kinds).map_err(|_| refusal::BAD_REQUEST)?;
    state.compartments.get(from).and(state.compartments.get(to)).ok_or(refusal::NO_SUCH_COMPARTMENT)?;
    let mut set = record(Event::Policy, state, from, Some(to));
    set.detail = kinds;
    log.append(set)?;
    state.compartments.set_policy(from, to, kinds).map_err(refusal_code)?;
    Ok(Answer::Words([0; 4]))
}

fn revoke(state: &mut State, log: &mut Log<'_>, string: &[u8]) -> Result<Answer, u64> {
    let name = parse_name(string)?;
    let index = state.compartments.find(&name).ok_or(refusal::NO_SUCH_COMPARTMENT)?;
    let mut revoked = record(Event::Revoked, state, index, None);
    revoked.detail = state.compartments.get(index).map_or(0, |entry| entry.generation);
    // Logged first: a crash after this is redone at the next request (`redo_revocations`).
    log.append(revoked)?;
    Ok(Answer::Words([end_compartment(state, index), 0, 0, 0]))
}

fn read_audit(log: &mut Log<'_>, reply: &mut [u8], string: &[u8], words: [u64; 4]) -> Result<Answer, u64> {
    let name = parse_name(string)?;
    let count = log.count().map_err(|_| refusal::AUDIT_UNAVAILABLE)?;
    let mut position = words[0].min(count);
    let mut entries = 0;
    while position < count && (entries + 1) * AUDIT_ENTRY_BYTES <= reply.len() {
        let raw = log.raw(position).map_err(|_| refusal::AUDIT_UNAVAILABLE)?;
        // A record that fails its checks is sent too: the reader says which and why.
        if Record::decode(&raw, position).map_or(true, |logged| logged.involves(&name)) {
            let entry = &mut reply[entries * AUDIT_ENTRY_BYTES..(entries + 1) * AUDIT_ENTRY_BYTES];
            entry[..8].copy_from_slice(&position.to_le_bytes());
            entry[8..].copy_from_slice(&raw);
            entries += 1;
        }
        position += 1;
    }
    Ok(Answer::WithString([entries as u64, position, count, 0], entries * AUDIT_ENTRY_BYTES))
}

fn list(state: &State, reply: &mut [u8]) -> Answer {
    let mut entries = 0;
    for (index, entry) in state.compartments.live() {
        let info = node::fetch(BANKS, index as u64, BANK).map_err(|_| ()).and_then(|()| bank::info(BANK).map_err(|_| ()));
        let listed = keysafe::Listed {
            number: index as u8,
            generation: entry.generation,
            name: entry.name.padded(),
            bank: info.unwrap_or(bank::Info { pages: 0, page_limit: 0, nodes: 0, node_limit: 0 }),
            refusals: entry.refusals,
            refusals_logged: entry.refusals_logged,
            // Read back from the meter: one the kernel no longer has is listed as none.
            cpu_percent: match fetch_meter(index).and_then(|()| meter::remaining(OBJECT)) {
                Ok(_) => u64::from(state.cpu_percent[index]),
                Err(_) => 0,
            },
        };
        reply[entries * keysafe::LIST_ENTRY_BYTES..][..keysafe::LIST_ENTRY_BYTES].copy_from_slice(&listed.encode());
        entries += 1;
    }
    Answer::WithString([entries as u64, 0, 0, 0], entries * keysafe::LIST_ENTRY_BYTES)
}

fn grant(state: &mut State, log: &mut Log<'_>, from: usize, words: [u64; 4]) -> Result<Answer, u64> {
    let to = usize::try_from(words[0]).unwrap_or(usize::MAX);
    state.compartments.get(to).ok_or(refusal::NO_SUCH_COMPARTMENT)?;
    let sensed = node::swap(BANKS, SENSE_SLOT, RECEIVED, SCRATCH).and_then(|()| node::sense(BANKS, SENSE_SLOT));
    let _ = node::clear(BANKS, SENSE_SLOT);
    let type_code = sensed.map_err(|_| refusal::BAD_REQUEST)?.type_code;
    if let Err(refused) = state.compartments.check(from, to, type_code) {
        let code = refusal_code(refused);
        let mut refused = record(Event::Refused, state, from, Some(to));
        refused.type_code = type_code as u8;
        refused.code = code as u16;
        // Refused whether or not the refusal could be logged; past a compartment's first
        // few, counted only (`tenant list`), so that no compartment fills the log.
        let logged = state.compartments.refusal_to_log(from) && log.append(refused).is_ok();
        state.compartments.count_refusal(from, logged);
        return Err(code);
    }
    let slot = state.inbox[to].iter().position(|&granter| granter == EMPTY).ok_or(refusal::INBOX_FULL)?;
    // The inner forwarder, from the granter's bank, into OBJECT.
    node::fetch(BANKS, from as u64, BANK).map_err(|_| refusal::NO_SUCH_COMPARTMENT)?;
    let inner = bank::buy_node(BANK, SCRATCH)
        .and_then(|_| node::swap(SCRATCH, 0, RECEIVED, NOTHING))
        .and_then(|()| node::make_indirector(SCRATCH, 0, OBJECT));
    if inner.is_err() {
        let _ = bank::sell(BANK, SCRATCH);
        return Err(refusal::BANK_REFUSED);
    }
    // The outer, from the recipient's bank, into MADE.
    node::fetch(BANKS, to as u64, BANK).map_err(|_| refusal::NO_SUCH_COMPARTMENT)?;
    let outer = bank::buy_node(BANK, SCRATCH)
        .and_then(|_| node::swap(SCRATCH, 0, OBJECT, NOTHING))
        .and_then(|()| node::make_indirector(SCRATCH, 0, MADE));
    let undo = |recipient_node: bool| {
        if recipient_node {
            let _ = bank::sell(BANK, SCRATCH);
        }
        if node::fetch(BANKS, from as u64, BANK).is_ok() {
            let _ = bank::sell(BANK, OBJECT);
        }
    };
    if outer.is_err() {
        undo(true);
        return Err(refusal::BANK_REFUSED);
    }
    let mut logged = record(Event::Granted, state, from, Some(to));
    logged.type_code = type_code as u8;
    if let Err(code) = log.append(logged) {
        undo(true);
        return Err(code);
    }
    node::fetch(INBOXES, to as u64, BANK).and_then(|()| node::swap(BANK, slot as u64, MADE, SCRATCH)).map_err(|_| refusal::BANK_REFUSED)?;
    state.inbox[to][slot] = from as u8;
    Ok(Answer::Words([slot as u64, 0, 0, 0]))
}

fn receive(state: &mut State, me: usize) -> Result<Answer, u64> {
    let slot = state.inbox[me].iter().position(|&granter| granter != EMPTY).ok_or(refusal::INBOX_EMPTY)?;
    node::fetch(INBOXES, me as u64, BANK).and_then(|()| node::swap(BANK, slot as u64, NOTHING, MADE)).map_err(|_| refusal::NO_SUCH_COMPARTMENT)?;
    let granter = state.inbox[me][slot];
    state.inbox[me][slot] = EMPTY;
    Ok(Answer::WithCapability([slot as u64, u64::from(granter), 0, 0]))
}

/// Compartment `me`'s meter, weakened, into `MADE`: its programs run on it, but only the
/// control capability sets its share.
fn own_meter(state: &State, me: usize) -> Result<Answer, u64> {
    if state.cpu_percent[me] == 0 {
        return Err(refusal::NO_METER);
    }
    fetch_meter(me).and_then(|()| meter::weaken(OBJECT, MADE)).map_err(|_| refusal::NO_METER)?;
    Ok(Answer::WithCapability([0; 4]))
}

/// A new bank below compartment `me`'s, into `MADE`: its programs' storage, counted
/// against its bank's limits, destroyed with it.
fn own_bank(me: usize) -> Result<Answer, u64> {
    node::fetch(BANKS, me as u64, BANK)
        .and_then(|()| bank::create_child(BANK, u64::MAX, u64::MAX, MADE))
        .map_err(|_| refusal::BANK_REFUSED)?;
    Ok(Answer::WithCapability([0; 4]))
}

fn answer(state: &mut State, log: &mut Log<'_>, reply: &mut [u8], code: u64, badge: u64, words: [u64; 4], string: &[u8]) -> Result<Answer, u64> {
    if badge == 0 {
        return match code {
            control_order::CREATE => create(state, log, string, words),
            control_order::SET_POLICY => set_policy(state, log, words),
            control_order::REVOKE => revoke(state, log, string),
            control_order::AUDIT => read_audit(log, reply, string, words),
            control_order::LIST => Ok(list(state, reply)),
            control_order::SET_QUOTA => set_quota(state, string, words),
            _ => Err(refusal::BAD_REQUEST),
        };
    }
    let me = state.compartments.from_badge(badge).map_err(refusal_code)?;
    match code {
        order::GRANT => grant(state, log, me, words),
        order::RECEIVE => receive(state, me),
        order::METER => own_meter(state, me),
        order::BANK => own_bank(me),
        _ => Err(refusal::BAD_REQUEST),
    }
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: these are
    // the only references to the statics for the program's life.
    let (state, log_page, audit_reply) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(STATE),
            &mut *core::ptr::addr_of_mut!(LOG_PAGE),
            &mut *core::ptr::addr_of_mut!(AUDIT_REPLY),
        )
    };
    let mut log = Log { page: log_page, loaded: None };
    if fetch_parent_meter() {
        // Whatever it held: see the module's doc.
        let _ = meter::set_share(SCRATCH, user::abi::METER_PERIOD_MICROSECONDS);
    }
    let mut request = [0u8; 64];
    let mut message = Invocation::return_to(NOTHING.index(), 0, [0; 4])
        .receiving(&[RECEIVED.index()])
        .resume_into(RESUME)
        .invoke(&mut request);
    loop {
        let boot = boot_now();
        if boot != state.boot {
            state.boot = boot;
            log.loaded = None;
            redo_revocations(state, &mut log);
        }
        log.loaded = None;
        let string = &request[..message.string_length.min(request.len())];
        let reply = match answer(state, &mut log, audit_reply, message.code, message.badge, message.words, string) {
            Ok(Answer::Words(words)) => Invocation::return_to(RESUME, 0, words),
            Ok(Answer::WithCapability(words)) => Invocation::return_to(RESUME, 0, words).sending(&[MADE.index()]),
            Ok(Answer::WithString(words, length)) => Invocation::return_to(RESUME, 0, words).with_string(&audit_reply[..length]),
            Err(code) => Invocation::return_to(RESUME, code, [0; 4]),
        };
        message = reply.receiving(&[RECEIVED.index()]).resume_into(RESUME).invoke(&mut request);
    }
}

user::entry!(main);
