//! The space bank (KeyKOS's space bank): the one holder of the kernel's range capability.
//! Every other program gets pages, nodes and processes by buying them from a bank, a
//! capability to this process whose badge names the bank; the orders and refusals are
//! `holdfast_userlib::bank`'s, the accounts `holdfast_bank_accounts`'s.
//!
//! The banks the initial system's manifest names are opened at the first start, below the
//! prime bank, from the node in register 3: slot i a number `[page_limit, node_limit]` for
//! bank i + 1, whose capabilities the manifest gives as start capabilities of this process
//! with badge i + 1. A bank made by `create_child` is handed out as an indirector of a node
//! bought for it, so that destroying the bank voids every capability to it at once, as it
//! does every object the bank sold (the range's `rescind`).
//!
//! The accounts are this process's memory, so checkpoints keep them with everything else:
//! after a restart the banks and what they sold are as the checkpoint caught them, and so
//! are the objects themselves.
//!
//! Capability registers: 0 console, 1 own process, 2 the range, 3 the manifest's bank
//! limits (a node; void: none); 4 to 6 scratch; 7 to 10 a `buy_many`'s objects; 12 the
//! capability received; 15 the caller's resume capability.
#![no_std]
#![no_main]

use holdfast_bank_accounts::{Accounts, Kind, PRIME, Refusal};
use holdfast_userlib::abi::interface::ObjectError;
use holdfast_userlib::bank::{self, order, refusal};
use holdfast_userlib::interface::{node, number, process, range};
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::{self as user, Invocation};

const OWN_PROCESS: CapReg = CapReg::new(1);
const RANGE: CapReg = CapReg::new(2);
const MANIFEST_BANKS: CapReg = CapReg::new(3);
const OBJECT: CapReg = CapReg::new(4);
const MADE: CapReg = CapReg::new(5);
const SCRATCH: CapReg = CapReg::new(6);
const RECEIVED: u8 = 12;
const NOTHING: u8 = 14;
const RESUME: u8 = 15;
/// The slots of the manifest's bank node: a node has 32.
const MANIFEST_BANK_SLOTS: u64 = 32;

/// All zero until the first start opens the prime bank: in `.bss`, not in the program file.
static mut ACCOUNTS: Accounts = Accounts::empty();

/// Where a `buy_many`'s objects wait for the reply, in order.
const BOUGHT: [CapReg; bank::BUY_MANY_MAX] = [CapReg::new(7), CapReg::new(8), CapReg::new(9), CapReg::new(10)];

/// How a request ends well: words, or words and the capability in a register, or words and
/// the first `n` of [`BOUGHT`].
enum Answer {
    Words([u64; 4]),
    WithCapability(CapReg, [u64; 4]),
    WithBought(usize),
}

fn refusal_code(refused: Refusal) -> u64 {
    match refused {
        Refusal::LimitReached => refusal::LIMIT_REACHED,
        Refusal::NotOwned => refusal::NOT_OWNED,
        Refusal::NoSuchBank => refusal::NO_SUCH_BANK,
        Refusal::TooManyBanks => refusal::TOO_MANY_BANKS,
        Refusal::TooManyObjects => refusal::TOO_MANY_OBJECTS,
        Refusal::Prime => refusal::PRIME,
    }
}

/// Opens the prime bank and the manifest's banks, the first time only.
fn open_banks(accounts: &mut Accounts) {
    if accounts.bank(PRIME).live {
        return;
    }
    // The prime bank's only bound is the store's size, which the range enforces.
    accounts.open_prime(u64::MAX, u64::MAX);
    for slot in 0..MANIFEST_BANK_SLOTS {
        let limits = node::fetch(MANIFEST_BANKS, slot, SCRATCH).and_then(|()| number::value(SCRATCH));
        let Ok(limits) = limits else { break };
        if accounts.open(PRIME, limits.word0, limits.word1).is_err() {
            user::print("space-bank: more banks in the manifest than the bank holds\n");
            break;
        }
    }
}

/// An object of `kind` into `into`: a destroyed one's id again if one is kept, else a new
/// one from the range. Returns its id.
fn obtain(accounts: &mut Accounts, kind: Kind, into: CapReg) -> Result<u64, u64> {
    if let Some(id) = accounts.reusable_id(kind)
        && range::reissue(RANGE, kind.range_word(), id, into).is_ok()
    {
        return Ok(id);
    }
    let made = match kind {
        Kind::Page => range::create_page(RANGE, into),
        Kind::Node => range::create_node(RANGE, into),
    };
    made.map_err(|_| refusal::STORE_FULL)
}

/// Destroys object `id` and takes it off the accounts.
fn destroy(accounts: &mut Accounts, kind: Kind, id: u64) {
    // Refused only for an id the range never made, which the accounts never hold.
    let _ = range::rescind(RANGE, kind.range_word(), id);
    accounts.forget(kind, id);
}

fn buy(accounts: &mut Accounts, bank: u32, kind: Kind, into: CapReg) -> Result<u64, u64> {
    accounts.may_sell(bank, kind).map_err(refusal_code)?;
    let id = obtain(accounts, kind, into)?;
    accounts.record_sale(bank, kind, id, false);
    Ok(id)
}

/// `pages` pages and then `nodes` nodes into [`BOUGHT`]; if one is refused, those bought
/// before it are destroyed again and the refusal stands for the whole order.
fn buy_many(accounts: &mut Accounts, bank: u32, pages: u64, nodes: u64) -> Result<Answer, u64> {
    let count = pages.checked_add(nodes).filter(|count| (1..=BOUGHT.len() as u64).contains(count)).ok_or(refusal::BAD_REQUEST)?;
    let kinds = (0..count).map(|at| if at < pages { Kind::Page } else { Kind::Node });
    let mut bought = [0; bank::BUY_MANY_MAX];
    for (at, kind) in kinds.clone().enumerate() {
        match buy(accounts, bank, kind, BOUGHT[at]) {
            Ok(id) => bought[at] = id,
            Err(code) => {
                for (id, kind) in bought.iter().zip(kinds).take(at) {
                    destroy(accounts, kind, *id);
                }
                return Err(code);
            }
        }
    }
    Ok(Answer::WithBought(count as usize))
}

/// Whether the capability received is a live bank: one of this process's start
/// capabilities whose badge names one (a manifest's bank), or an indirector of a bank's
/// forwarder node (a bank `create_child` made), which only this process holds.
fn is_bank(accounts: &Accounts) -> bool {
    let received = CapReg::new(RECEIVED);
    if let Ok(badge) = process::start_badge(OWN_PROCESS, received) {
        return accounts.bank_of(badge).is_ok();
    }
    range::object_id(RANGE, received).is_ok_and(|object| {
        Kind::from_range_word(object.kind) == Some(Kind::Node) && accounts.bank_forwarded_by(object.id).is_some()
    })
}

fn answer(accounts: &mut Accounts, code: u64, badge: u64, words: [u64; 4]) -> Result<Answer, u64> {
    // Through any capability, the verifier's too.
    if code == order::VERIFY {
        return Ok(Answer::Words([u64::from(is_bank(accounts)), 0, 0, 0]));
    }
    let bank = accounts.bank_of(badge).map_err(refusal_code)?;
    Ok(match code {
        order::BUY_PAGE => Answer::WithCapability(OBJECT, [buy(accounts, bank, Kind::Page, OBJECT)?, 0, 0, 0]),
        order::BUY_NODE => Answer::WithCapability(OBJECT, [buy(accounts, bank, Kind::Node, OBJECT)?, 0, 0, 0]),
        order::BUY_MANY => buy_many(accounts, bank, words[0], words[1])?,
        order::BUY_PROCESS => {
            let id = buy(accounts, bank, Kind::Node, OBJECT)?;
            if let Err(error) = node::make_process(OBJECT, MADE) {
                // The kernel's one limit on processes (memory for their tables).
                destroy(accounts, Kind::Node, id);
                return Err(match error {
                    Error::Object(ObjectError::Exhausted) => ObjectError::Exhausted as u64,
                    _ => refusal::STORE_FULL,
                });
            }
            Answer::WithCapability(MADE, [id, 0, 0, 0])
        }
        order::SELL => {
            let object = range::object_id(RANGE, CapReg::new(RECEIVED)).map_err(|_| refusal::NOT_OWNED)?;
            let kind = Kind::from_range_word(object.kind).ok_or(refusal::NOT_OWNED)?;
            accounts.check_return(bank, kind, object.id).map_err(refusal_code)?;
            destroy(accounts, kind, object.id);
            Answer::Words([0; 4])
        }
        order::CREATE_CHILD => {
            let [page_limit, node_limit, ..] = words;
            if node_limit == 0 {
                return Err(refusal::BAD_REQUEST);
            }
            let child = accounts.open(bank, page_limit, node_limit).map_err(refusal_code)?;
            // The child's forwarder is its own first node, counted against it and above.
            let forwarder =
                accounts.may_sell(child, Kind::Node).map_err(refusal_code).and_then(|()| obtain(accounts, Kind::Node, OBJECT));
            let forwarder = match forwarder {
                Ok(id) => id,
                Err(code) => {
                    let _ = accounts.destroy(child, |_, _| {});
                    return Err(code);
                }
            };
            accounts.record_sale(child, Kind::Node, forwarder, true);
            let badge = accounts.badge(child);
            let made = process::make_start(OWN_PROCESS, badge, MADE)
                .and_then(|()| node::swap(OBJECT, 0, MADE, SCRATCH))
                .and_then(|()| node::make_indirector(OBJECT, 0, MADE));
            if made.is_err() {
                let _ = accounts.destroy(child, |kind, id| {
                    let _ = range::rescind(RANGE, kind.range_word(), id);
                });
                return Err(refusal::STORE_FULL);
            }
            Answer::WithCapability(MADE, [0; 4])
        }
        order::DESTROY => {
            let destroyed = accounts.destroy(bank, |kind, id| {
                let _ = range::rescind(RANGE, kind.range_word(), id);
            });
            Answer::Words([destroyed.map_err(refusal_code)? as u64, 0, 0, 0])
        }
        order::SET_CHILD_LIMITS => {
            let [page_limit, node_limit, ..] = words;
            if node_limit == 0 {
                return Err(refusal::BAD_REQUEST);
            }
            // A bank's capability is an indirector of its forwarder node, which names it.
            let forwarder = range::object_id(RANGE, CapReg::new(RECEIVED)).map_err(|_| refusal::NO_SUCH_BANK)?;
            let child = Kind::from_range_word(forwarder.kind)
                .filter(|&kind| kind == Kind::Node)
                .and_then(|_| accounts.bank_forwarded_by(forwarder.id))
                .ok_or(refusal::NOT_OWNED)?;
            accounts.set_limits(bank, child, page_limit, node_limit).map_err(refusal_code)?;
            Answer::Words([0; 4])
        }
        order::INFO => {
            let held = accounts.bank(bank);
            Answer::Words([held.pages, held.page_limit, held.nodes, held.node_limit])
        }
        _ => return Err(refusal::BAD_REQUEST),
    })
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: this is the
    // only reference to the accounts for the program's life.
    let accounts = unsafe { &mut *core::ptr::addr_of_mut!(ACCOUNTS) };
    open_banks(accounts);
    let wait = |reply: Invocation<'_>| reply.receiving(&[RECEIVED]).resume_into(RESUME).invoke(&mut []);
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        let reply = match answer(accounts, message.code, message.badge, message.words) {
            Ok(Answer::Words(words)) => Invocation::return_to(RESUME, 0, words),
            Ok(Answer::WithCapability(register, words)) => {
                Invocation::return_to(RESUME, 0, words).sending(&[register.index()])
            }
            Ok(Answer::WithBought(count)) => {
                let registers = BOUGHT.map(|register| register.index());
                Invocation::return_to(RESUME, 0, [count as u64, 0, 0, 0]).sending(&registers[..count])
            }
            Err(code) => Invocation::return_to(RESUME, code, [0; 4]),
        };
        message = wait(reply);
    }
}

user::entry!(main);
