//! The virtual copy keeper (KeyKOS's VCSK): a copy-on-write copy of a space, used to give
//! a tenant its initial data without copying it. Orders and refusals:
//! `holdfast_userlib::virtual_copy`.
//!
//! A copy is a keeper space: slot 0 a tree of nodes of the original's shape, bought from the
//! requester's bank, whose leaves are the original's pages made read-only; slot 1 a start
//! capability of this keeper whose badge names the copy. A read sees the original's page. A
//! write faults to this keeper, which buys a page from the copy's bank, copies the original
//! page into it and puts it in the copy's tree, and the write runs again on the private
//! page; a write where the original has no page gets a zeroed one. The original never
//! changes through a copy.
//!
//! Capability registers: 0 console, 1 own process, 2 a node of the copies' trees (slot i:
//! copy i + 1), 3 a node of their banks, 4 a node for the walk when a copy is made; 5 to 11
//! and 14 working registers; 12 and 13 the capabilities received; 15 the resume capability.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::{Type, keeper};
use holdfast_userlib::bank;
use holdfast_userlib::interface::{identify, node, page, process, space};
use holdfast_userlib::space::{TreeCopy, slot};
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::virtual_copy::{order, refusal};
use holdfast_userlib::{self as user, Invocation};

const OWN_PROCESS: CapReg = CapReg::new(1);
const COPIES: CapReg = CapReg::new(2);
const BANKS: CapReg = CapReg::new(3);
const WALK: CapReg = CapReg::new(4);
const BANK: CapReg = CapReg::new(5);
const SOURCE: CapReg = CapReg::new(6);
const TARGET: CapReg = CapReg::new(7);
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

static mut PAGE_BYTES: [u8; 4096] = [0; 4096];

/// Makes copy `copy` (an index of the copies node) of the space in register 12, paid for
/// by the bank in register 13; the copy's keeper space goes into `MADE`.
fn make_copy(copy: u64) -> Result<(), Error> {
    let original = CapReg::new(RECEIVED[0]);
    let height = space::info(original)?.height;
    node::swap(BANKS, copy, CapReg::new(RECEIVED[1]), SCRATCH)?;
    node::fetch(BANKS, copy, BANK)?;
    // Inner nodes anew from the copy's bank, pages shared read-only; an original under a
    // keeper of its own is refused.
    let walk = TreeCopy { walk: WALK, bank: BANK, source: SOURCE, target: TARGET, child: CHILD, made: MADE, scratch: SCRATCH };
    let plain = |flags| if flags == 0 { Ok(()) } else { Err(Error::Reply(refusal::BAD_ORIGINAL)) };
    walk.copy(original, &plain, &mut |identity| {
        if identity.type_code != Type::Page as u64 {
            return Ok(None);
        }
        page::weaken(CHILD, MADE)?;
        Ok(Some(MADE))
    })?;
    node::swap(COPIES, copy, MADE, SCRATCH)?;
    node::fetch(COPIES, copy, TARGET)?;
    // The keeper node: the copy's tree, then this keeper with the copy's badge.
    bank::buy_node(BANK, MADE)?;
    node::swap(MADE, 0, TARGET, SCRATCH)?;
    process::make_start(OWN_PROCESS, copy + 1, CHILD)?;
    node::swap(MADE, 1, CHILD, SCRATCH)?;
    node::make_space(MADE, height, holdfast_userlib::abi::methods::space_flags::KEEPER, MADE)
}

/// A write fault at `address` under copy `copy`: the page there becomes the copy's own.
fn copy_on_write(copy: u64, address: u64, buffer: &mut [u8; 4096]) -> Result<(), Error> {
    node::fetch(COPIES, copy, LEVEL)?;
    node::fetch(BANKS, copy, BANK)?;
    let height = space::info(LEVEL)?.height;
    let (mut at, mut below) = (LEVEL, NEXT);
    for level in (2..=height).rev() {
        space::fetch(at, slot(level, address), below)?;
        (at, below) = (below, at);
    }
    let leaf = slot(1, address);
    space::fetch(at, leaf, CHILD)?;
    bank::buy_page(BANK, MADE)?;
    // A page the original lacks stays zeroed.
    if let Ok(length) = page::read(CHILD, 0, 4096, buffer) {
        page::write(MADE, 0, &buffer[..length])?;
    }
    space::swap(at, leaf, MADE, SCRATCH)
}

fn free_copy() -> Option<u64> {
    (0..COPIES_MAX).find(|&copy| node::fetch(COPIES, copy, SCRATCH).is_ok() && identify(SCRATCH).is_err())
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread, and never returns: this is the
    // only reference to the buffer for the program's life.
    let buffer = unsafe { &mut *core::ptr::addr_of_mut!(PAGE_BYTES) };
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
                let resolved = error_code & FAULT_WRITE != 0 && copy_on_write(copy - 1, address, buffer).is_ok();
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
