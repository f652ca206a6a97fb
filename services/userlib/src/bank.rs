//! Buying storage from a space bank (`services/space-bank`): the orders a bank capability
//! takes, its refusals, and a call for each. A bank capability is a start capability of the
//! space bank (a bank the initial system's manifest names) or an indirector the bank made
//! (a bank made by `create_child`), which `destroy` voids.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// The orders of a bank capability.
pub mod order {
    /// Word 0 back: the page's id. Capability back: the page.
    pub const BUY_PAGE: u64 = 1;
    /// Word 0 back: the node's id. Capability back: the node.
    pub const BUY_NODE: u64 = 2;
    /// A node made a process (stopped, no space, meter or keeper yet). Capability back: the
    /// process capability.
    pub const BUY_PROCESS: u64 = 3;
    /// Capability sent: an object this bank sold (a page, or any capability to a node it
    /// sold); the object is destroyed, every capability to it void.
    pub const SELL: u64 = 4;
    /// Words 0 and 1: the page and node limits of a new bank below this one (its own
    /// forwarder node counts against its nodes, so at least 1). Capability back: the bank.
    pub const CREATE_CHILD: u64 = 5;
    /// Destroys this bank, every bank below it and everything any of them sold. Word 0
    /// back: how many objects were destroyed.
    pub const DESTROY: u64 = 6;
    /// Words back: pages held, page limit, nodes held, node limit (held: sold by this
    /// bank or any below it).
    pub const INFO: u64 = 7;
    /// Capability sent: a bank directly below this one (as `create_child` gave it). Words
    /// 0 and 1: its new page and node limits (nodes at least 1). A limit below what it
    /// holds stops its sales of that kind until it holds less; nothing it holds is taken
    /// back. Refused (`not_owned`) for any other bank: a bank's holder cannot raise its own
    /// limits.
    pub const SET_CHILD_LIMITS: u64 = 8;
    /// Words 0 and 1: how many pages, then how many nodes, [`BUY_MANY_MAX`] at most in all
    /// (at least one). Capabilities back: the pages, then the nodes, in that order. All of
    /// them or, refused as a single purchase would be, none: one call where a keeper
    /// making a path of new nodes would make several (KeyKOS's bank sold up to three).
    pub const BUY_MANY: u64 = 9;
    /// Capability sent: any. Word 0 back: 1 if it is a live bank of this space bank (any
    /// of them, not only this one's), else 0. Taken by every bank capability and by the
    /// verifier ([`VERIFIER_BADGE`]): a server that calls banks its clients send (a
    /// constructor) asks first, since a capability that is no bank might never answer
    /// (KeyKOS's official-bank check).
    pub const VERIFY: u64 = 10;
}

/// The badge of the space bank's start capability that only verifies banks
/// ([`order::VERIFY`]): it names no bank (a badge's low 32 bits are a bank's index), so it
/// buys nothing.
pub const VERIFIER_BADGE: u64 = 0xffff_ffff;

/// The most objects one [`order::BUY_MANY`] sells: a reply carries four capabilities.
pub const BUY_MANY_MAX: usize = 4;

/// What a bank answers instead of 0 when it refuses (server reply codes, apart from the
/// kernel's error codes).
pub mod refusal {
    /// This bank or one above it has sold as many as its limit allows.
    pub const LIMIT_REACHED: u64 = 300;
    /// The object was not sold by this bank.
    pub const NOT_OWNED: u64 = 301;
    /// The bank was destroyed.
    pub const NO_SUCH_BANK: u64 = 302;
    /// The space bank holds as many banks as it can.
    pub const TOO_MANY_BANKS: u64 = 303;
    /// The space bank holds as many objects as it can record.
    pub const TOO_MANY_OBJECTS: u64 = 304;
    /// The prime bank is not destroyed.
    pub const PRIME: u64 = 305;
    /// The store is full (the kernel's range refused with `exhausted`).
    pub const STORE_FULL: u64 = 306;
    /// An order the bank does not have, or arguments out of range.
    pub const BAD_REQUEST: u64 = 307;
}

/// What [`info`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    pub pages: u64,
    pub page_limit: u64,
    pub nodes: u64,
    pub node_limit: u64,
}

fn buy(bank: CapReg, order: u64, into: CapReg) -> Result<u64, Error> {
    let received = invoke(Invocation { receive: &[into], ..Invocation::call(bank, order) }).check()?;
    Ok(received.words[0])
}

/// Buys a zeroed page into `into`; returns its id.
pub fn buy_page(bank: CapReg, into: CapReg) -> Result<u64, Error> {
    buy(bank, order::BUY_PAGE, into)
}

/// Buys an empty node into `into`; returns its id.
pub fn buy_node(bank: CapReg, into: CapReg) -> Result<u64, Error> {
    buy(bank, order::BUY_NODE, into)
}

/// Buys `pages` zeroed pages and then `nodes` empty nodes, into `into`'s registers in that
/// order (as many registers as objects, [`BUY_MANY_MAX`] at most): all of them, or none.
pub fn buy_many(bank: CapReg, pages: usize, nodes: usize, into: &[CapReg]) -> Result<(), Error> {
    invoke(Invocation {
        words: [pages as u64, nodes as u64, 0, 0],
        receive: into,
        ..Invocation::call(bank, order::BUY_MANY)
    })
    .check()
    .map(|_| ())
}

/// Whether `candidate` is a live bank, asked through `verifier` (a bank or the verifier).
pub fn verify(verifier: CapReg, candidate: CapReg) -> Result<bool, Error> {
    Ok(invoke(Invocation { send: &[candidate], ..Invocation::call(verifier, order::VERIFY) }).check()?.words[0] == 1)
}

/// Buys a process (stopped) into `into`.
pub fn buy_process(bank: CapReg, into: CapReg) -> Result<(), Error> {
    buy(bank, order::BUY_PROCESS, into).map(|_| ())
}

/// Sells `object` back to the bank that sold it, which destroys it.
pub fn sell(bank: CapReg, object: CapReg) -> Result<(), Error> {
    invoke(Invocation { send: &[object], ..Invocation::call(bank, order::SELL) }).check().map(|_| ())
}

/// Makes a bank below `bank` with its own limits, into `into`.
pub fn create_child(bank: CapReg, page_limit: u64, node_limit: u64, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { words: [page_limit, node_limit, 0, 0], receive: &[into], ..Invocation::call(bank, order::CREATE_CHILD) })
        .check()
        .map(|_| ())
}

/// Sets the limits of `child`, a bank directly below `bank`.
pub fn set_child_limits(bank: CapReg, child: CapReg, page_limit: u64, node_limit: u64) -> Result<(), Error> {
    invoke(Invocation { words: [page_limit, node_limit, 0, 0], send: &[child], ..Invocation::call(bank, order::SET_CHILD_LIMITS) })
        .check()
        .map(|_| ())
}

/// Destroys `bank`, the banks below it and all they sold; returns how many objects went.
pub fn destroy(bank: CapReg) -> Result<u64, Error> {
    Ok(invoke(Invocation::call(bank, order::DESTROY)).check()?.words[0])
}

pub fn info(bank: CapReg) -> Result<Info, Error> {
    let [pages, page_limit, nodes, node_limit] = invoke(Invocation::call(bank, order::INFO)).check()?.words;
    Ok(Info { pages, page_limit, nodes, node_limit })
}
