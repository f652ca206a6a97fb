//! A constructor (KeyKOS's factory, EROS's constructor): yields new processes of one
//! program and says whether they are confined. Orders and refusals:
//! `holdfast_userlib::constructor`.
//!
//! The program is a template process the initial system made and never started
//! (`template = true` in the manifest). A yield makes a bank below the requester's bank for
//! the new process, buys from it a root node and a copy of the template's space (nodes
//! anew; pages the template can write copied, by `page.copy_from`; read-only pages, the
//! code, shared), gives the process the template's registers and the constructor's
//! components as its capability registers, runs it on the requester's meter, and returns
//! its start capability. If any purchase fails the bank below is destroyed, and with it all
//! that was bought.
//!
//! A constructor given a virtual copy keeper (`services/virtual-copy`) yields instead a
//! copy-on-write copy of the template's space: one node at the yield, and each page only
//! when the process first writes it, from the same bank. A large program (the TP1 service,
//! thousands of pages of buffers and index) is yielded so at once; when the keeper keeps
//! all the copies it can, the yield copies the space as above.
//!
//! A constructor may also give each yielded process its own process capability, in the
//! registers its holes number's second word names: a program that must name its own space
//! (the journal's guarded write does) gets it so, since no component could be it.
//!
//! Confinement (EROS): a yielded process holds its space (fresh nodes, private or
//! read-only pages), perhaps its own process, and the components. It is confined if every
//! component is safe — void, a number, a read-only page, a weak node or space: nothing
//! through which it could write or speak — or one of the holes the constructor was built
//! with. Its own process is not a component: through it, it reaches only itself. Nor is a
//! copy-on-write space's keeper: the virtual copy keeper answers the badge of the process's
//! own copy only by making that copy's pages its own.
//!
//! Capability registers: 0 console, 1 own process, 2 the template process, 3 the
//! components (a node: slot i becomes capability register i of each yielded process), 4
//! the holes (a number: word 0 bit i set when register i is a hole; word 1 bit i set when
//! register i gets the yielded process's own process capability instead of slot i), 5 a
//! node for the space walk (slot 31, if not void: the virtual copy keeper's start
//! capability, badge 0; slot 30, if not void: the space bank's verifier, which a yield asks
//! whether the bank it is sent is one before calling it);
//! 6 to 11 and 14 working registers; 12 and 13 the bank and meter a requester sends; 15 the
//! resume capability.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::{ObjectError, Type};
use holdfast_userlib::bank;
use holdfast_userlib::constructor::{order, refusal};
use holdfast_userlib::interface::{node, number, page, process};
use holdfast_userlib::space::TreeCopy;
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::virtual_copy;
use holdfast_userlib::{self as user, Invocation};

const TEMPLATE: CapReg = CapReg::new(2);
const COMPONENTS: CapReg = CapReg::new(3);
const HOLES: CapReg = CapReg::new(4);
const WALK: CapReg = CapReg::new(5);
const PROCESS_BANK: CapReg = CapReg::new(6);
const MADE_PROCESS: CapReg = CapReg::new(7);
const SOURCE: CapReg = CapReg::new(8);
const TARGET: CapReg = CapReg::new(9);
const CHILD: CapReg = CapReg::new(10);
const MADE: CapReg = CapReg::new(11);
const REQUESTER_BANK: u8 = 12;
const REQUESTER_METER: u8 = 13;
const SCRATCH: CapReg = CapReg::new(14);
const RESUME: u8 = 15;

/// The walk node's slot that may hold a virtual copy keeper: the walk uses the first 16.
const VIRTUAL_COPY_SLOT: u64 = 31;
/// The walk node's slot that may hold the space bank's verifier.
const VERIFIER_SLOT: u64 = 30;
const READ_ONLY: u64 = 1;
const WEAK: u64 = 2;
const CAPABILITY_REGISTERS: u64 = 16;

/// `process.read_registers`' answer: the 18 words of `interface.toml`'s `register_file`.
const REGISTER_FILE_BYTES: usize = 18 * 8;

/// Whether component `slot` conveys no authority to write or to communicate. Sensed, never
/// invoked: `identify` would call a start capability, and wait on its process.
fn is_safe(slot: u64) -> bool {
    let Ok(sensed) = node::sense(COMPONENTS, slot) else {
        return false;
    };
    let code = sensed.type_code;
    code == Type::Void as u64
        || code == Type::Number as u64
        || (code == Type::Page as u64 && sensed.rights & READ_ONLY != 0)
        || ((code == Type::Node as u64 || code == Type::Space as u64) && sensed.rights & WEAK != 0)
}

/// The holes (word 0) and the registers that get the process's own process (word 1).
fn holes() -> (u64, u64) {
    number::value(HOLES).map_or((0, 0), |value| (value.word0, value.word1))
}

/// The capability registers whose components are neither safe nor holes, as a bitmask.
fn leaks() -> u64 {
    let (holes, own_process) = holes();
    (0..CAPABILITY_REGISTERS)
        .filter(|&register| (holes | own_process) >> register & 1 == 0)
        .filter(|&register| !is_safe(register))
        .fold(0, |leaks, register| leaks | 1 << register)
}

/// The template's space copied for a new process, into `MADE`: nodes anew, pages it can
/// write copied, read-only ones (code and read-only data) shared.
fn copy_space() -> Result<(), Error> {
    let walk = TreeCopy { walk: WALK, bank: PROCESS_BANK, source: SOURCE, target: TARGET, child: CHILD, made: MADE, scratch: SCRATCH };
    process::fetch_space(TEMPLATE, SOURCE)?;
    walk.copy(SOURCE, &|_| Ok(()), &mut |identity| {
        if identity.type_code != Type::Page as u64 {
            // A keeper space's keeper: templates are loaded programs, which have none.
            return Err(Error::Object(ObjectError::WrongType));
        }
        if identity.rights & READ_ONLY != 0 {
            return Ok(Some(CHILD));
        }
        bank::buy_page(PROCESS_BANK, MADE)?;
        page::copy_from(MADE, CHILD)?;
        Ok(Some(MADE))
    })
}

/// The template's space as a copy-on-write copy, into `MADE`; `Ok(false)` if there is no
/// virtual copy keeper, or it keeps all the copies it can.
fn virtual_copy() -> Result<bool, Error> {
    // Sensed, not identified: identifying a start capability would call it.
    let keeper = node::sense(WALK, VIRTUAL_COPY_SLOT).is_ok_and(|sensed| sensed.type_code == Type::Start as u64);
    if !keeper {
        return Ok(false);
    }
    node::fetch(WALK, VIRTUAL_COPY_SLOT, SCRATCH)?;
    process::fetch_space(TEMPLATE, SOURCE)?;
    match virtual_copy::make_copy(SCRATCH, SOURCE, PROCESS_BANK, MADE) {
        Ok(()) => Ok(true),
        Err(Error::Reply(virtual_copy::refusal::TOO_MANY_COPIES)) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Makes the new process in `MADE_PROCESS` from the template and the components, paid for
/// by `PROCESS_BANK`, and starts it.
fn build() -> Result<(), Error> {
    bank::buy_process(PROCESS_BANK, MADE_PROCESS)?;
    if !virtual_copy()? {
        copy_space()?;
    }
    process::set_space(MADE_PROCESS, MADE)?;
    let mut registers = [0; REGISTER_FILE_BYTES];
    let length = process::read_registers(TEMPLATE, &mut registers)?;
    process::write_registers(MADE_PROCESS, &registers[..length])?;
    let (_, own_process) = holes();
    // A new process's capability registers are void: only the components there are, and
    // its own process where it gets it, are put in (two invocations each).
    let filled = node::occupied(COMPONENTS)? | own_process;
    for register in (0..CAPABILITY_REGISTERS).filter(|register| filled >> register & 1 != 0) {
        let component = if own_process >> register & 1 == 0 {
            node::fetch(COMPONENTS, register, CHILD)?;
            CHILD
        } else {
            MADE_PROCESS
        };
        process::swap_register(MADE_PROCESS, register, component, SCRATCH)?;
    }
    process::set_meter(MADE_PROCESS, CapReg::new(REQUESTER_METER))?;
    process::start(MADE_PROCESS)?;
    process::make_start(MADE_PROCESS, 0, MADE)
}

/// Whether the requester's bank may be called: a live bank, if the walk node holds the
/// space bank's verifier to ask (a constructor without one trusts its requesters).
fn bank_is_genuine() -> bool {
    let verifier = node::sense(WALK, VERIFIER_SLOT).is_ok_and(|sensed| sensed.type_code == Type::Start as u64);
    !verifier
        || node::fetch(WALK, VERIFIER_SLOT, SCRATCH)
            .and_then(|()| bank::verify(SCRATCH, CapReg::new(REQUESTER_BANK)))
            .unwrap_or(false)
}

fn yield_process() -> Result<(), u64> {
    if !bank_is_genuine() {
        return Err(refusal::NOT_A_BANK);
    }
    // Unlimited below the requester's bank: its own limits and those above it bound it.
    bank::create_child(CapReg::new(REQUESTER_BANK), u64::MAX, u64::MAX, PROCESS_BANK)
        .map_err(|_| refusal::BANK_REFUSED)?;
    build().map_err(|error| {
        let _ = bank::destroy(PROCESS_BANK);
        match error {
            Error::Reply(_) => refusal::BANK_REFUSED,
            _ => refusal::COPY_FAILED,
        }
    })
}

fn main() -> u64 {
    let wait = |reply: Invocation<'_>| {
        reply.receiving(&[REQUESTER_BANK, REQUESTER_METER]).resume_into(RESUME).invoke(&mut [])
    };
    // Register 14 is void at the start: a return through it only waits.
    let mut message = wait(Invocation::return_to(SCRATCH.index(), 0, [0; 4]));
    loop {
        let reply = match message.code {
            order::YIELD => match yield_process() {
                Ok(()) => Invocation::return_to(RESUME, 0, [0; 4]).sending(&[MADE.index()]),
                Err(code) => Invocation::return_to(RESUME, code, [0; 4]),
            },
            order::IS_CONFINED => {
                let leaks = leaks();
                Invocation::return_to(RESUME, 0, [u64::from(leaks == 0), leaks, 0, 0])
            }
            _ => Invocation::return_to(RESUME, refusal::BAD_REQUEST, [0; 4]),
        };
        message = wait(reply);
    }
}

user::entry!(main);
