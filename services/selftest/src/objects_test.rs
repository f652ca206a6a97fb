//! Checks of node, page and process methods, each error included.
//!
//! Capability registers: 0 console, 1 own process, 2 a node, 3 a page, 4 the clock, 5 the
//! number [7, 9], 9 a meter of 5000 µs that no process runs on, 14 a meter for the process
//! it makes, 15 a second page.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::abi::methods::{
    self, ObjectError, clock, meter, node, number, page, process, space, space_flags,
};
use holdfast_userlib::{self as user, Invocation};

const NODE: u8 = 2;
const PAGE: u8 = 3;
const FETCHED: u8 = 6;
const WEAK_NODE: u8 = 7;
const READ_ONLY_PAGE: u8 = 8;
const CLOCK: u8 = 4;
const NUMBER: u8 = 5;
const METER: u8 = 9;
const SPACE: u8 = 10;
const WEAK_SPACE: u8 = 11;
const MADE_PROCESS: u8 = 12;
const SCRATCH: u8 = 13;
const MADE_METER: u8 = 14;
const SECOND_PAGE: u8 = 15;

fn error(error: ObjectError) -> Result<[u64; 4], u64> {
    Err(error as u64)
}

/// Whether the capability in `register` is void: invoking it fails with `void`.
fn is_void(register: u8) -> bool {
    user::call(register, methods::IDENTIFY, [0; 4]) == Err(InvocationError::Void as u64)
}

fn type_of(register: u8) -> Option<Type> {
    let words = user::call(register, methods::IDENTIFY, [0; 4]).ok()?;
    Type::from_code(words[0])
}

fn into(register: u8, target: u8, order: u64, words: [u64; 4]) -> u64 {
    Invocation::call(target, order, words)
        .receiving(&[register])
        .invoke(&mut [])
        .code
}

fn main() -> u64 {
    let mut checks = user::check::Checks::new("objects-test");
    let swap = Invocation::call(NODE, node::SWAP, [0; 4])
        .sending(&[PAGE])
        .receiving(&[FETCHED]);
    let swapped = swap.invoke(&mut []);
    checks.check(
        "node swap: returns the old (void) capability",
        swapped.code == 0 && is_void(FETCHED),
    );
    into(FETCHED, NODE, node::FETCH, [0; 4]);
    checks.check(
        "node fetch: the page comes back",
        type_of(FETCHED) == Some(Type::Page),
    );
    checks.check(
        "node fetch: slot 32 is invalid",
        user::call(NODE, node::FETCH, [32, 0, 0, 0]) == error(ObjectError::InvalidSlot),
    );

    into(WEAK_NODE, NODE, node::WEAKEN, [0; 4]);
    let weak_swap = Invocation::call(WEAK_NODE, node::SWAP, [1, 0, 0, 0])
        .sending(&[PAGE])
        .invoke(&mut []);
    checks.code(
        "weak node: swap is read-only",
        weak_swap.code,
        ObjectError::ReadOnly as u64,
    );
    into(FETCHED, WEAK_NODE, node::FETCH, [0; 4]);
    let weak_fetch_write = Invocation::call(FETCHED, page::WRITE, [0; 4])
        .with_string(b"x")
        .invoke(&mut []);
    checks.code(
        "weak fetch: the page fetched is read-only",
        weak_fetch_write.code,
        ObjectError::ReadOnly as u64,
    );
    Invocation::call(NODE, node::SWAP, [1, 0, 0, 0])
        .sending(&[user::OWN_PROCESS])
        .invoke(&mut []);
    into(FETCHED, WEAK_NODE, node::FETCH, [1, 0, 0, 0]);
    checks.check(
        "weak fetch: a process capability comes back void",
        is_void(FETCHED),
    );

    let wrote = Invocation::call(PAGE, page::WRITE, [10, 0, 0, 0])
        .with_string(b"abc")
        .invoke(&mut []);
    let mut read = [0u8; 8];
    let reply = Invocation::call(PAGE, page::READ, [9, 5, 0, 0]).invoke(&mut read);
    checks.check(
        "page: write then read",
        wrote.code == 0 && reply.code == 0 && read[..reply.string_length] == *b"\0abc\0",
    );
    checks.check(
        "page: a read past the end is out of range",
        user::call(PAGE, page::READ, [4090, 10, 0, 0]) == error(ObjectError::OutOfRange),
    );
    into(READ_ONLY_PAGE, PAGE, page::WEAKEN, [0; 4]);
    let read_only_write = Invocation::call(READ_ONLY_PAGE, page::WRITE, [0; 4])
        .with_string(b"x")
        .invoke(&mut []);
    checks.code(
        "page: writing through a read-only capability",
        read_only_write.code,
        ObjectError::ReadOnly as u64,
    );
    checks.check(
        "page: zero through a read-only capability",
        user::call(READ_ONLY_PAGE, page::ZERO, [0; 4]) == error(ObjectError::ReadOnly),
    );
    let copy_from = |target: u8, source: u8| {
        Invocation::call(target, page::COPY_FROM, [0; 4]).sending(&[source]).invoke(&mut []).code
    };
    let scribbled = Invocation::call(SECOND_PAGE, page::WRITE, [4000, 0, 0, 0])
        .with_string(b"xyz")
        .invoke(&mut []);
    let copied = copy_from(SECOND_PAGE, READ_ONLY_PAGE);
    let (mut head, mut tail) = ([0u8; 8], [0xffu8; 3]);
    let head_reply = Invocation::call(SECOND_PAGE, page::READ, [9, 5, 0, 0]).invoke(&mut head);
    let tail_reply = Invocation::call(SECOND_PAGE, page::READ, [4000, 3, 0, 0]).invoke(&mut tail);
    checks.check(
        "page: copy_from copies every byte, through a read-only capability to the source",
        scribbled.code == 0
            && copied == 0
            && head_reply.code == 0
            && head[..head_reply.string_length] == *b"\0abc\0"
            && tail_reply.code == 0
            && tail == [0; 3],
    );
    checks.code("page: copy_from into a read-only capability", copy_from(READ_ONLY_PAGE, SECOND_PAGE), ObjectError::ReadOnly as u64);
    checks.code("page: copy_from a node", copy_from(SECOND_PAGE, NODE), ObjectError::WrongType as u64);

    checks.check(
        "unknown order",
        user::call(PAGE, 77, [0; 4]) == error(ObjectError::InvalidOrder),
    );
    checks.check(
        "node: space height 8 is out of range",
        user::call(NODE, node::MAKE_SPACE, [8, 0, 0, 0]) == error(ObjectError::OutOfRange),
    );
    // A start capability forwards every order, `identify` too, to its process, which is
    // this one and busy: invoking it here would wait forever. ipc-client uses start
    // capabilities; here only making one is checked.
    let made = into(
        FETCHED,
        user::OWN_PROCESS,
        process::MAKE_START,
        [3, 0, 0, 0],
    );
    checks.code("process: make a start capability", made, 0);
    checks.check(
        "process: writing one's own registers is refused",
        Invocation::call(user::OWN_PROCESS, process::WRITE_REGISTERS, [0; 4])
            .with_string(&[0; 144])
            .invoke(&mut [])
            .code
            == ObjectError::NoRight as u64,
    );
    checks.check(
        "process: a register index of 16 is invalid",
        user::call(user::OWN_PROCESS, process::FETCH_REGISTER, [16, 0, 0, 0])
            == error(ObjectError::InvalidSlot),
    );
    more_methods(&mut checks);
    checks.failures
}

/// Another process, made from the node: its registers can be written and read back, and
/// it can be stopped; then it is given this program's space and started on `made_main`,
/// which marks `MADE_RAN` and stops itself with 0 (as the self-test report then says).
fn other_process(checks: &mut user::check::Checks) {
    let made = into(MADE_PROCESS, NODE, node::MAKE_PROCESS, [0; 4]);
    let stopped = user::call(MADE_PROCESS, process::STOP, [0; 4]);
    let mut registers = [0u8; 144];
    let (rip, rsp) = (0x40_1000u64, 0x7fff_0000u64);
    registers[15 * 8..16 * 8].copy_from_slice(&rip.to_le_bytes());
    registers[16 * 8..17 * 8].copy_from_slice(&rsp.to_le_bytes());
    let written = Invocation::call(MADE_PROCESS, process::WRITE_REGISTERS, [0; 4])
        .with_string(&registers)
        .invoke(&mut []);
    let mut read_back = [0u8; 144];
    let read =
        Invocation::call(MADE_PROCESS, process::READ_REGISTERS, [0; 4]).invoke(&mut read_back);
    checks.check(
        "process: make one, stop it, write and read back its registers",
        made == 0
            && stopped.is_ok()
            && written.code == 0
            && read.code == 0
            && read_back[15 * 8..17 * 8] == registers[15 * 8..17 * 8],
    );
    registers[15 * 8..16 * 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let kernel_rip = Invocation::call(MADE_PROCESS, process::WRITE_REGISTERS, [0; 4])
        .with_string(&registers)
        .invoke(&mut []);
    checks.code(
        "process: rip outside the user half is refused",
        kernel_rip.code,
        ObjectError::OutOfRange as u64,
    );
    started_process(checks);
}

/// Set by the made process: proof that it ran this program's code in this space.
static MADE_RAN: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
const MADE_RAN_MARK: u64 = 0x600d_f00d;

/// The made process's stack, in this program's .bss (16-byte aligned for the ABI); only the
/// made process touches it, through its stack pointer.
#[repr(align(16))]
struct Stack(#[allow(dead_code)] [u8; 4096]);
static mut MADE_STACK: Stack = Stack([0; 4096]);

/// Where the made process starts: its capability register 1 holds itself, so that
/// `user::stop` stops it.
extern "C" fn made_main() -> ! {
    MADE_RAN.store(MADE_RAN_MARK, core::sync::atomic::Ordering::SeqCst);
    user::stop(0)
}

fn started_process(checks: &mut user::check::Checks) {
    let mut registers = [0u8; 144];
    let stack_top = core::ptr::addr_of!(MADE_STACK) as u64 + 4096;
    // As if `made_main` had been called: the return address slot below an aligned top.
    let (rip, rsp, rflags) = (made_main as *const () as u64, stack_top - 8, 0x202u64);
    registers[15 * 8..16 * 8].copy_from_slice(&rip.to_le_bytes());
    registers[16 * 8..17 * 8].copy_from_slice(&rsp.to_le_bytes());
    registers[17 * 8..18 * 8].copy_from_slice(&rflags.to_le_bytes());
    let prepared = Invocation::call(MADE_PROCESS, process::WRITE_REGISTERS, [0; 4])
        .with_string(&registers)
        .invoke(&mut [])
        .code
        == 0
        && into(SCRATCH, user::OWN_PROCESS, process::FETCH_SPACE, [0; 4]) == 0
        && Invocation::call(MADE_PROCESS, process::SET_SPACE, [0; 4]).sending(&[SCRATCH]).invoke(&mut []).code == 0
        && Invocation::call(MADE_PROCESS, process::SWAP_REGISTER, [1, 0, 0, 0])
            .sending(&[MADE_PROCESS])
            .receiving(&[SCRATCH])
            .invoke(&mut [])
            .code
            == 0;
    checks.code(
        "process: a made process without a meter is not started",
        user::call(MADE_PROCESS, process::START, [0; 4]).err().unwrap_or(0),
        ObjectError::NoRight as u64,
    );
    let metered = Invocation::call(MADE_PROCESS, process::SET_METER, [0; 4]).sending(&[MADE_METER]).invoke(&mut []).code == 0;
    let started = prepared && metered && user::call(MADE_PROCESS, process::START, [0; 4]).is_ok();
    // The timer preempts this loop and the made process gets its turn.
    let mut ran = false;
    for _ in 0..200_000_000u64 {
        if MADE_RAN.load(core::sync::atomic::Ordering::SeqCst) == MADE_RAN_MARK {
            ran = true;
            break;
        }
        core::hint::spin_loop();
    }
    checks.check("process: start runs a made process on this program's code in its space", started && ran);
}

/// The methods of clock, number, meter and space capabilities, and reading registers.
fn more_methods(checks: &mut user::check::Checks) {
    let first = user::call(CLOCK, clock::NOW, [0; 4]);
    let second = user::call(CLOCK, clock::NOW, [0; 4]);
    checks.check(
        "clock: time moves on",
        matches!((first, second), (Ok([a, ..]), Ok([b, ..])) if b > a),
    );
    checks.check(
        "number: its two words",
        user::call(NUMBER, number::VALUE, [0; 4]).is_ok_and(|w| w[..2] == [7, 9]),
    );
    checks.check(
        "meter: what it holds",
        user::call(METER, meter::REMAINING, [0; 4]).is_ok_and(|w| w[0] == 5000),
    );
    let refilled = user::call(METER, meter::REFILL, [8000, 0, 0, 0]);
    checks.check(
        "meter: refilled",
        refilled.is_ok() && user::call(METER, meter::REMAINING, [0; 4]).is_ok_and(|w| w[0] == 8000),
    );
    let made = into(
        SPACE,
        NODE,
        node::MAKE_SPACE,
        [2, space_flags::KEEPER, 0, 0],
    );
    checks.check(
        "space: made with height and flags, and says so",
        made == 0
            && user::call(SPACE, space::INFO, [0; 4])
                .is_ok_and(|w| w[..2] == [2, space_flags::KEEPER]),
    );
    into(WEAK_SPACE, SPACE, space::WEAKEN, [0; 4]);
    let weak_swap = Invocation::call(WEAK_SPACE, space::SWAP, [0; 4])
        .sending(&[PAGE])
        .invoke(&mut []);
    checks.code(
        "space: swap through a weakened space is read-only",
        weak_swap.code,
        ObjectError::ReadOnly as u64,
    );
    let wrong = Invocation::call(SPACE, space::SWAP, [0; 4])
        .sending(&[CLOCK])
        .invoke(&mut []);
    checks.code(
        "space: only pages and spaces go in a space",
        wrong.code,
        ObjectError::WrongType as u64,
    );
    let weak_meter = Invocation::call(WEAK_NODE, node::MAKE_METER, [0; 4])
        .sending(&[METER])
        .receiving(&[FETCHED])
        .invoke(&mut [])
        .code;
    checks.code(
        "node: a meter is made only below a meter (its parent)",
        into(FETCHED, NODE, node::MAKE_METER, [0; 4]),
        ObjectError::WrongType as u64,
    );
    let weak_process = into(FETCHED, WEAK_NODE, node::MAKE_PROCESS, [0; 4]);
    checks.check(
        "node: no meter or process from a weak node",
        weak_meter == ObjectError::ReadOnly as u64 && weak_process == ObjectError::ReadOnly as u64,
    );
    let page_keeper = Invocation::call(METER, meter::SET_KEEPER, [0; 4])
        .sending(&[PAGE])
        .invoke(&mut []);
    checks.code(
        "meter: a page is no keeper",
        page_keeper.code,
        ObjectError::WrongType as u64,
    );
    other_process(checks);
    let mut registers = [0u8; 144];
    let read =
        Invocation::call(user::OWN_PROCESS, process::READ_REGISTERS, [0; 4]).invoke(&mut registers);
    let rip = u64::from_le_bytes(registers[15 * 8..16 * 8].try_into().expect("8 bytes"));
    checks.check(
        "process: read its registers",
        read.code == 0 && read.string_length == 144 && (0x40_0000..0x50_0000).contains(&rip),
    );
}

user::entry!(main);
