//! The space bank's test (hypervisor-glue/holdfast/tests/banks.rs, manifest
//! services/bank-manifest.toml): limits, selling back, a bank tree, destroying a bank (all
//! it sold and every capability to it void), one tenant's exhaustion leaving another's
//! purchases alone; then, after a restart, that the banks and what they sold came back as
//! the checkpoint caught them. Prints `bank-test: before the restart: passed`, then
//! `bank-test: after the restart: passed`, or `bank-test: <phase>: MISMATCH: ...` and stops.
//!
//! Capability registers: 0 console, 1 own process, 2 bank A (limits 8 pages, 8 nodes),
//! 3 bank B (64, 64), 4 the clock, 5 a node kept across the restart; 6 to 11 scratch.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::check::{expect, verdict};
use holdfast_userlib::bank::{self, Info, refusal};
use holdfast_userlib::interface::{clock, identify, node, page, process};
use holdfast_userlib::syscall::{CapReg, Error};

const BANK_A: CapReg = CapReg::new(2);
const BANK_B: CapReg = CapReg::new(3);
const CLOCK: CapReg = CapReg::new(4);
const KEEP: CapReg = CapReg::new(5);
const FIRST_PAGE: CapReg = CapReg::new(6);
const OBJECT: CapReg = CapReg::new(7);
const CHILD: CapReg = CapReg::new(8);
const CHILD_PAGE: CapReg = CapReg::new(9);
const CHILD_PROCESS: CapReg = CapReg::new(10);
const SCRATCH: CapReg = CapReg::new(11);
const MARKER: &[u8] = b"bought from bank A";

type Checked = Result<(), &'static str>;

fn is_void(register: CapReg) -> bool {
    identify(register) == Err(Error::Invocation(InvocationError::Void))
}

fn info(bank: CapReg) -> Result<Info, &'static str> {
    bank::info(bank).map_err(|_| "info refused")
}

fn before_the_restart() -> Checked {
    // A bank sells up to its limit, then refuses with a code of its own.
    bank::buy_page(BANK_A, FIRST_PAGE).map_err(|_| "A refused its first page")?;
    page::write(FIRST_PAGE, 0, MARKER).map_err(|_| "writing a bought page failed")?;
    for _ in 1..8 {
        bank::buy_page(BANK_A, OBJECT).map_err(|_| "A refused a page within its limit")?;
    }
    expect(bank::buy_page(BANK_A, SCRATCH) == Err(Error::Reply(refusal::LIMIT_REACHED)), "A sold beyond its limit")?;
    expect(info(BANK_A)? == Info { pages: 8, page_limit: 8, nodes: 0, node_limit: 8 }, "A's info is wrong")?;

    // Selling back destroys the object: every capability to it is void.
    bank::sell(BANK_A, OBJECT).map_err(|_| "A refused its own page back")?;
    expect(is_void(OBJECT), "a page sold back is still live")?;
    expect(info(BANK_A)?.pages == 7, "selling back did not free the count")?;
    expect(bank::sell(BANK_B, FIRST_PAGE) == Err(Error::Reply(refusal::NOT_OWNED)), "B took A's page back")?;
    // The id is used again, at a new version, zeroed.
    bank::buy_page(BANK_A, OBJECT).map_err(|_| "A refused a page after one was sold back")?;
    let mut bytes = [0xffu8; 8];
    page::read(OBJECT, 0, 8, &mut bytes).map_err(|_| "reading a reused page failed")?;
    expect(bytes == [0; 8], "a reused page is not zeroed")?;

    // A tree: the child's purchases count against B too.
    bank::create_child(BANK_B, 4, 3, CHILD).map_err(|_| "B refused a child bank")?;
    for _ in 0..4 {
        bank::buy_page(CHILD, CHILD_PAGE).map_err(|_| "the child refused a page within its limit")?;
    }
    expect(bank::buy_page(CHILD, SCRATCH) == Err(Error::Reply(refusal::LIMIT_REACHED)), "the child sold beyond its limit")?;
    bank::buy_process(CHILD, CHILD_PROCESS).map_err(|_| "the child refused a process")?;
    let mut registers = [0u8; 18 * 8];
    process::read_registers(CHILD_PROCESS, &mut registers).map_err(|_| "a bought process is not one")?;
    // Nodes: the child's forwarder and the process's root.
    expect(info(BANK_B)? == Info { pages: 4, page_limit: 64, nodes: 2, node_limit: 64 }, "B does not count its child's sales")?;
    node::swap(KEEP, 1, CHILD, SCRATCH).map_err(|_| "keeping the child's capability failed")?;

    // Destroying the child destroys all it sold, and the child: every capability void.
    let destroyed = bank::destroy(CHILD).map_err(|_| "destroying the child was refused")?;
    expect(destroyed == 6, "destroy did not count 4 pages, the process and the forwarder")?;
    expect(is_void(CHILD_PAGE), "a page of a destroyed bank is still live")?;
    expect(is_void(CHILD_PROCESS), "a process of a destroyed bank is still live")?;
    expect(is_void(CHILD), "a destroyed bank's capability is still live")?;
    node::fetch(KEEP, 1, SCRATCH).map_err(|_| "fetching the kept child failed")?;
    expect(is_void(SCRATCH), "a copy of a destroyed bank's capability is still live")?;
    expect(info(BANK_B)? == Info { pages: 0, page_limit: 64, nodes: 0, node_limit: 64 }, "destroying the child did not free B's counts")?;

    // Several at once: pages, then nodes; all of them, or past a limit none.
    bank::create_child(BANK_B, 2, 3, CHILD).map_err(|_| "B refused a child bank")?;
    let many = [CHILD_PAGE, CHILD_PROCESS, SCRATCH];
    bank::buy_many(CHILD, 1, 2, &many).map_err(|_| "the child refused a page and two nodes within its limits")?;
    let kinds = many.map(|register| identify(register).map(|identity| identity.type_code));
    let expected = [Type::Page, Type::Node, Type::Node].map(|kind| Ok(kind as u64));
    expect(kinds == expected, "buy_many's objects are not a page, then two nodes")?;
    let refused = bank::buy_many(CHILD, 2, 0, &[OBJECT, SCRATCH]);
    expect(refused == Err(Error::Reply(refusal::LIMIT_REACHED)), "the child sold two pages with room for one")?;
    expect(info(CHILD)? == Info { pages: 1, page_limit: 2, nodes: 3, node_limit: 3 }, "a refused buy_many bought some")?;
    let too_many = bank::buy_many(CHILD, 3, 2, &[OBJECT, SCRATCH, CHILD_PAGE, CHILD_PROCESS]);
    let none = bank::buy_many(CHILD, 0, 0, &[]);
    expect(too_many == Err(Error::Reply(refusal::BAD_REQUEST)) && none == too_many, "buy_many took five objects, or none")?;
    expect(bank::destroy(CHILD) == Ok(4), "destroy did not count the page, two nodes and the forwarder")?;

    // A is at its limit; B goes on selling.
    bank::buy_node(BANK_B, OBJECT).map_err(|_| "B refused a node while A is exhausted")?;
    node::swap(OBJECT, 0, FIRST_PAGE, SCRATCH).map_err(|_| "storing A's page in B's node failed")?;
    node::swap(KEEP, 0, OBJECT, SCRATCH).map_err(|_| "keeping B's node failed")?;
    Ok(())
}

fn after_the_restart() -> Checked {
    expect(info(BANK_A)? == Info { pages: 8, page_limit: 8, nodes: 0, node_limit: 8 }, "A's accounts did not come back")?;
    expect(info(BANK_B)? == Info { pages: 0, page_limit: 64, nodes: 1, node_limit: 64 }, "B's accounts did not come back")?;
    node::fetch(KEEP, 0, OBJECT).and_then(|()| node::fetch(OBJECT, 0, SCRATCH)).map_err(|_| "the kept objects are gone")?;
    let mut bytes = [0u8; MARKER.len()];
    page::read(SCRATCH, 0, MARKER.len() as u64, &mut bytes).map_err(|_| "A's page did not come back")?;
    expect(bytes == MARKER, "A's page came back changed")?;
    node::fetch(KEEP, 1, SCRATCH).map_err(|_| "fetching the kept child failed")?;
    expect(is_void(SCRATCH), "the destroyed bank came back")?;
    expect(bank::buy_page(BANK_A, SCRATCH) == Err(Error::Reply(refusal::LIMIT_REACHED)), "A's limit did not come back")?;

    // Destroying B voids the node it sold, kept in a node the manifest made.
    bank::destroy(BANK_B).map_err(|_| "destroying B was refused")?;
    node::fetch(KEEP, 0, OBJECT).map_err(|_| "fetching the kept node failed")?;
    expect(is_void(OBJECT), "B's node outlived B")?;
    expect(bank::info(BANK_B) == Err(Error::Reply(refusal::NO_SUCH_BANK)), "a destroyed manifest bank still answers")?;
    // A page of A's stored in B's node is A's: still live.
    page::read(FIRST_PAGE, 0, MARKER.len() as u64, &mut bytes).map_err(|_| "A's page went with B")?;
    Ok(())
}

fn main() -> u64 {
    let boot = clock::now(CLOCK).map_or(0, |now| now.boot);
    if !verdict("bank-test: before the restart", before_the_restart()) {
        return 1;
    }
    // Waits for a restart, reading the clock now and then.
    while clock::now(CLOCK).map_or(boot, |now| now.boot) == boot {
        for _ in 0..1_000_000 {
            core::hint::spin_loop();
        }
    }
    if !verdict("bank-test: after the restart", after_the_restart()) {
        return 1;
    }
    0
}

holdfast_userlib::entry!(main);
