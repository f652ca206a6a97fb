//! The virtual copy keeper (KeyKOS's VCSK): a copy-on-write copy of a space, used to give
//! a tenant its initial data without copying it. Orders and refusals:
//! `holdfast_userlib::virtual_copy`.
//!
//! A copy is a keeper space: slot 0 the copy's tree, slot 1 a start capability of this
//! keeper whose badge names the copy. At first the tree is a new root node holding the
//! original's subtrees read-only: a copy costs two nodes however large the original, and
//! reads see the original's pages.
//! A write faults to this keeper, which makes the path to the page the copy's own, node by
//! node from the copy's bank (each new node holding what the original's did, read-only, as
//! the kernel fetches it through a read-only space), then buys a page, copies the
//! original's into it and puts it in the copy's tree; the write runs again on the private
//! page. A write where the original has no page gets a zeroed one. The original never
//! changes through a copy; it must not change at all while copies of it live, since their
//! unwritten parts read through to it (a constructor's template never runs).
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
const MADE: CapReg = CapReg::new(9);
const LEVEL: CapReg = CapReg::new(10);
const NEXT: CapReg = CapReg::new(11);
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
    // The keeper node: the original read-only, then this keeper with the copy's badge.
    bank::buy_node(BANK, LEVEL)?;
    space::weaken(original, CHILD)?;
    node::swap(LEVEL, 0, CHILD, SCRATCH)?;
    process::make_start(OWN_PROCESS, copy + 1, CHILD)?;
    node::swap(LEVEL, 1, CHILD, SCRATCH)?;
    node::make_space(LEVEL, shape.height, space_flags::KEEPER, LEVEL)?;
    // The root the copy's own from the start: its process may link subtrees of its own
    // into the slots the original leaves empty (the TP1 service's region does).
    space::fetch(LEVEL, 0, NEXT)?;
    own_node(LEVEL, 0, NEXT, MADE, shape.height)?;
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

/// Makes the height-`height` space in slot `at_slot` of `at` (fetched into `below`) the
/// copy's own and returns the register that holds it: `below` if it was the copy's own
/// already, else `spare`, into which a new node is bought, holding what a shared
/// (read-only) one held or nothing for an empty slot. The shape of what is copied is not
/// checked: the kernel's walk ends at any node of the wrong height or kind, so a malformed
/// original can only leave its copy's process faulting.
fn own_node(at: CapReg, at_slot: u64, below: CapReg, spare: CapReg, height: u64) -> Result<CapReg, Error> {
    let shared = match held(below, Type::Space)? {
        Held::Empty => false,
        Held::Shared => true,
        Held::Own => return Ok(below),
    };
    bank::buy_node(BANK, spare)?;
    node::make_space(spare, height, 0, spare)?;
    if shared {
        // Fetched through a read-only space, each slot comes read-only: still shared.
        let occupied = space::occupied(below)?;
        for held in (0..SPACE_SLOTS).filter(|held| occupied >> held & 1 != 0) {
            space::fetch(below, held, CHILD)?;
            space::swap(spare, held, CHILD, SCRATCH)?;
        }
    }
    space::swap(at, at_slot, spare, SCRATCH)?;
    Ok(spare)
}

/// The three registers a walk down a copy takes turns with: the level it is at, the one
/// below, and a spare for a node bought.
const WALK: [CapReg; 3] = [LEVEL, NEXT, MADE];

/// The two of [`WALK`] that are not `at`.
fn others(at: CapReg) -> (CapReg, CapReg) {
    let mut rest = WALK.iter().copied().filter(|&register| register != at);
    (rest.next().expect("three registers"), rest.next().expect("three registers"))
}

/// A write fault at `address` under copy `copy`: the page there becomes the copy's own.
fn copy_on_write(copy: u64, address: u64) -> Result<(), Error> {
    node::fetch(COPIES, copy, LEVEL)?;
    node::fetch(BANKS, copy, BANK)?;
    let height = space::info(LEVEL)?.height;
    // From the keeper node's slot 0 (the tree, of the copy's height) down to the node of
    // height 1 that holds the page.
    let (mut at, mut at_slot) = (LEVEL, 0);
    for level in (1..=height).rev() {
        let (below, spare) = others(at);
        space::fetch(at, at_slot, below)?;
        (at, at_slot) = (own_node(at, at_slot, below, spare, level)?, slot(level, address));
    }
    let (bought, _) = others(at);
    space::fetch(at, at_slot, CHILD)?;
    let shared = match held(CHILD, Type::Page)? {
        Held::Empty => false,
        Held::Shared => true,
        // The copy's own already (a fault on the way there raced, or was not a fault).
        Held::Own => return Ok(()),
    };
    bank::buy_page(BANK, bought)?;
    if shared {
        page::copy_from(bought, CHILD)?;
    }
    space::swap(at, at_slot, bought, SCRATCH)
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
