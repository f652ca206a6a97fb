//! The virtual copy keeper (KeyKOS's VCSK): a copy-on-write copy of a space, used to give
//! a tenant its initial data without copying it. Orders and refusals:
//! `holdfast_userlib::virtual_copy`.
//!
//! A copy is a keeper space: slot 0 the copy's tree, slot 1 a start capability of this
//! keeper whose badge names the copy. At first the tree is a new root node holding the
//! original's subtrees read-only: a copy costs two nodes however large the original, and
//! reads see the original's pages.
//! A write faults to this keeper, which makes the path to the page the copy's own with new
//! nodes from the copy's bank (each holding what the original's did, read-only, as the
//! kernel fetches it through a read-only space), bought together with the page, copies the
//! original's page into that one and puts it in the copy's tree; the write runs again on
//! the private page. A write where the original has no page gets a zeroed one. The original never
//! changes through a copy; it must not change at all while copies of it live, since their
//! unwritten parts read through to it (a constructor's template never runs). It calls the
//! bank each copy is made with: its makers hold its badge-0 capability, constructors, which
//! send banks the space bank has verified or made.
//!
//! Capability registers: 0 console, 1 own process, 2 a node of the copies (slot i: copy
//! i + 1's keeper space), 3 a node of their banks; 4 to 11 and 14 working registers; 12 and
//! 13 the capabilities received; 15 the resume capability.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::{Type, keeper};
use holdfast_userlib::abi::methods::space_flags;
use holdfast_userlib::bank;
use holdfast_userlib::interface::{identify, node, page, process, space};
use holdfast_userlib::space::slot;
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::virtual_copy::{order, refusal};
use holdfast_userlib::{self as user, Invocation};

const OWN_PROCESS: CapReg = CapReg::new(1);
const COPIES: CapReg = CapReg::new(2);
const BANKS: CapReg = CapReg::new(3);
const BANK: CapReg = CapReg::new(5);
const CHILD: CapReg = CapReg::new(8);
/// A copy's making: the copy's root (then its keeper space, the answer), its keeper node,
/// the original's root read-only.
const MADE: CapReg = CapReg::new(9);
const LEVEL: CapReg = CapReg::new(10);
const NEXT: CapReg = CapReg::new(11);
/// What a write fault takes turns with ([`Registers`]): the node it is at, what that holds,
/// and a purchase.
const WORKING: [u8; 6] = [4, 6, 7, 9, 10, 11];
const _: () = assert!(2 + bank::BUY_MANY_MAX <= WORKING.len());
const RECEIVED: [u8; 2] = [12, 13];
const SCRATCH: CapReg = CapReg::new(14);
const RESUME: u8 = 15;

const COPIES_MAX: u64 = 32;
/// A page fault's error code: the access was a write.
const FAULT_WRITE: u64 = 2;
/// `identify`'s rights bit for read-only.
const READ_ONLY: u64 = 1;
const SPACE_SLOTS: u64 = 32;

/// Makes copy `copy` (an index of the copies node) of the space in register 12, paid for
/// by the bank in register 13; the copy's keeper space goes into `MADE`.
fn make_copy(copy: u64) -> Result<(), Error> {
    let original = CapReg::new(RECEIVED[0]);
    let shape = space::info(original)?;
    // An original under a keeper of its own is refused: its faults are not this keeper's.
    if shape.flags != 0 {
        return Err(Error::Reply(refusal::BAD_ORIGINAL));
    }
    node::swap(BANKS, copy, CapReg::new(RECEIVED[1]), SCRATCH)?;
    node::fetch(BANKS, copy, BANK)?;
    // The keeper node and the copy's root, in one purchase.
    bank::buy_many(BANK, 0, 2, &[LEVEL, MADE])?;
    // The keeper node: the original read-only, then this keeper with the copy's badge.
    space::weaken(original, CHILD)?;
    node::swap(LEVEL, 0, CHILD, SCRATCH)?;
    process::make_start(OWN_PROCESS, copy + 1, CHILD)?;
    node::swap(LEVEL, 1, CHILD, SCRATCH)?;
    node::make_space(LEVEL, shape.height, space_flags::KEEPER, LEVEL)?;
    // The root the copy's own from the start: its process may link subtrees of its own
    // into the slots the original leaves empty (the TP1 service's region does).
    space::fetch(LEVEL, 0, NEXT)?;
    link_own(LEVEL, 0, Some(NEXT), MADE, shape.height)?;
    node::swap(COPIES, copy, LEVEL, SCRATCH)?;
    node::fetch(COPIES, copy, MADE)
}

/// What a slot of a copy's tree holds where a `kind` (a space or a page) belongs.
enum Held {
    Empty,
    /// The original's, read-only.
    Shared,
    /// The copy's own.
    Own,
}

/// What the capability in `register` is, as [`Held`]; anything but void or a `kind` is a
/// malformed original.
fn held(register: CapReg, kind: Type) -> Result<Held, Error> {
    match identify(register) {
        Err(_) => Ok(Held::Empty),
        Ok(identity) if identity.type_code != kind as u64 => Err(Error::Reply(refusal::BAD_ORIGINAL)),
        Ok(identity) if identity.rights & READ_ONLY != 0 => Ok(Held::Shared),
        Ok(_) => Ok(Held::Own),
    }
}

/// Makes `made`, a node just bought, the copy's own space of height `height` in slot
/// `at_slot` of `at`, holding what the shared space in `shared` holds (each slot read-only,
/// as fetched through it: still shared), or nothing. The shape of what is copied is not
/// checked: the kernel's walk ends at any node of the wrong height or kind, so a malformed
/// original can only leave its copy's process faulting.
fn link_own(at: CapReg, at_slot: u64, shared: Option<CapReg>, made: CapReg, height: u64) -> Result<(), Error> {
    node::make_space(made, height, 0, made)?;
    if let Some(shared) = shared {
        let occupied = space::occupied(shared)?;
        for held in (0..SPACE_SLOTS).filter(|held| occupied >> held & 1 != 0) {
            space::fetch(shared, held, CHILD)?;
            space::swap(made, held, CHILD, SCRATCH)?;
        }
    }
    space::swap(at, at_slot, made, SCRATCH)
}

/// The working registers a write fault takes from and gives back: the node it is at, what
/// that holds at the address, and what it buys.
struct Registers(u16);

impl Registers {
    fn all() -> Self {
        Self(WORKING.iter().fold(0, |free, register| free | 1 << register))
    }

    fn take(&mut self) -> CapReg {
        let index = self.0.trailing_zeros();
        assert!(index < 16, "a fault holds at most two working registers and a purchase");
        self.0 &= !(1 << index);
        CapReg::new(index as u8)
    }

    fn give(&mut self, register: CapReg) {
        self.0 |= 1 << register.index();
    }
}

/// A write fault at `address` under copy `copy`: the page there becomes the copy's own.
/// The nodes the path needs and the page are bought together, up to
/// [`bank::BUY_MANY_MAX`] at a time: the first write into a copy of a program's stack makes
/// six nodes and a page, which were seven calls to the bank. A fault that fails half-way
/// (a malformed original) leaves what it bought and did not link to the copy's bank, which
/// gives it up with the copy.
fn copy_on_write(copy: u64, address: u64) -> Result<(), Error> {
    let mut free = Registers::all();
    let mut at = free.take();
    node::fetch(COPIES, copy, at)?;
    node::fetch(BANKS, copy, BANK)?;
    // From the keeper node's slot 0 (the tree) down: `below` holds what `at` holds at the
    // address, a space of height `level` (0: the page).
    let (mut at_slot, mut level) = (0, space::info(at)?.height);
    let mut below = free.take();
    // Past the nodes that are the copy's own already.
    let mut shared = loop {
        space::fetch(at, at_slot, below)?;
        match held(below, if level == 0 { Type::Page } else { Type::Space })? {
            // The page is the copy's own already (a fault on the way there raced, or was
            // not a fault).
            Held::Own if level == 0 => return Ok(()),
            Held::Own => {
                free.give(at);
                (at, below) = (below, free.take());
                at_slot = slot(level, address);
                level -= 1;
            }
            Held::Shared => break true,
            Held::Empty => break false,
        }
    };
    // A node for each level left, then the page: the page comes with the last nodes when
    // they leave room for it.
    let mut page = None;
    while level > 0 {
        let nodes = (level as usize).min(bank::BUY_MANY_MAX);
        let pages = usize::from(nodes == level as usize && nodes < bank::BUY_MANY_MAX);
        let mut bought = [CapReg::new(0); bank::BUY_MANY_MAX];
        for register in &mut bought[..pages + nodes] {
            *register = free.take();
        }
        bank::buy_many(BANK, pages, nodes, &bought[..pages + nodes])?;
        if pages == 1 {
            page = Some(bought[0]);
        }
        for &made in &bought[pages..pages + nodes] {
            link_own(at, at_slot, shared.then_some(below), made, level)?;
            free.give(at);
            (at, at_slot) = (made, slot(level, address));
            level -= 1;
            space::fetch(at, at_slot, below)?;
            shared = matches!(held(below, if level == 0 { Type::Page } else { Type::Space })?, Held::Shared);
        }
    }
    let page = match page {
        Some(page) => page,
        None => {
            let page = free.take();
            bank::buy_page(BANK, page)?;
            page
        }
    };
    if shared {
        page::copy_from(page, below)?;
    }
    space::swap(at, at_slot, page, SCRATCH)
}

/// A copies slot that is empty, or whose copy's bank was destroyed (its keeper node with it).
fn free_copy() -> Option<u64> {
    (0..COPIES_MAX).find(|&copy| node::sense(COPIES, copy).is_ok_and(|sensed| sensed.type_code == Type::Void as u64))
}

fn main() -> u64 {
    let wait = |reply: Invocation<'_>| reply.receiving(&RECEIVED).resume_into(RESUME).invoke(&mut []);
    // Register 14 is void at the start: a return through it only waits.
    let mut message = wait(Invocation::return_to(SCRATCH.index(), 0, [0; 4]));
    loop {
        let code = match (message.badge, message.code) {
            (0, order::MAKE_COPY) => match free_copy() {
                None => refusal::TOO_MANY_COPIES,
                Some(copy) => match make_copy(copy) {
                    Ok(()) => {
                        message = wait(Invocation::return_to(RESUME, 0, [0; 4]).sending(&[MADE.index()]));
                        continue;
                    }
                    Err(Error::Reply(code)) if code == refusal::BAD_ORIGINAL => code,
                    Err(_) => refusal::BAD_ORIGINAL,
                },
            },
            (copy @ 1..=COPIES_MAX, keeper::SPACE_FAULT) => {
                let [_, error_code, _, address] = message.words;
                // A write to a shared read-only page, or to where the original has none.
                let resolved = error_code & FAULT_WRITE != 0 && match copy_on_write(copy - 1, address) {
                    Ok(()) => true,
                    Err(error) => {
                        let code = match error {
                            Error::Invocation(error) => error as u64,
                            Error::Object(error) => error as u64,
                            Error::Reply(code) => code,
                        };
                        user::print_numbers(&[(b"virtual-copy: a write to copy ", copy), (b" at ", address), (b" failed: code ", code)], b"\n");
                        false
                    }
                };
                if !resolved {
                    // Not a fault a copy resolves (a read where the original has no page,
                    // the bank exhausted): the process is stopped, as without a keeper
                    // (the reply would run the faulting instruction again).
                    let _ = process::stop(CapReg::new(RECEIVED[0]), 1);
                }
                0
            }
            _ => refusal::BAD_ORIGINAL,
        };
        message = wait(Invocation::return_to(RESUME, code, [0; 4]));
    }
}

user::entry!(main);
