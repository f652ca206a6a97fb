//! The virtual copy keeper's test (services/virtual-copy; hypervisor-glue/holdfast/tests/
//! banks.rs, manifest services/bank-manifest.toml): two copies of a height-1 space of two
//! pages are put into this program's own address space; a copy is two nodes at first, and
//! the pages it shares cannot be written through what is fetched from it; writes through
//! one copy are seen in it alone, never in the other copy or the original, and a write
//! where the original has no page gets a zeroed private one. Prints `virtual-copy-test: passed` or
//! `virtual-copy-test: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 the keeper, 3 the original space,
//! 4 the original's first page, 5 bank D; 6 to 11 scratch.
#![no_std]
#![no_main]

use holdfast_userlib::bank;
use holdfast_userlib::check::{expect, verdict};
use holdfast_userlib::interface::{page, process, space};
use holdfast_userlib::space::{SPACE_HEIGHT, slot};
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::virtual_copy::make_copy;
use holdfast_userlib::{self as user};

const OWN_PROCESS: CapReg = CapReg::new(1);
const KEEPER: CapReg = CapReg::new(2);
const ORIGINAL: CapReg = CapReg::new(3);
const ORIGINAL_PAGE: CapReg = CapReg::new(4);
const BANK: CapReg = CapReg::new(5);
const COPY: CapReg = CapReg::new(6);
const AT: CapReg = CapReg::new(7);
const BELOW: CapReg = CapReg::new(8);
const SCRATCH: CapReg = CapReg::new(9);
const PAGE: u64 = 4096;
/// The original's pages are filled with these bytes (the manifest's `fill`).
const FIRST_PAGE_WORD: u64 = 0x1111_1111_1111_1111;
const SECOND_PAGE_WORD: u64 = 0x2222_2222_2222_2222;
/// Where the copies go: the last two height-1 slots of the height-2 node that holds this
/// program (loaded at 4 MiB, far smaller than the 3.75 MiB before them).
const FIRST_COPY_AT: u64 = 0x40_0000 + 30 * 32 * PAGE;
const SECOND_COPY_AT: u64 = 0x40_0000 + 31 * 32 * PAGE;

/// Puts the space in `COPY` into this process's own space at `address` (a height-1 slot).
fn install(address: u64) -> Result<(), &'static str> {
    process::fetch_space(OWN_PROCESS, AT).map_err(|_| "fetching the own space failed")?;
    let (mut at, mut below) = (AT, BELOW);
    for height in (3..=SPACE_HEIGHT).rev() {
        space::fetch(at, slot(height, address), below).map_err(|_| "walking the own space failed")?;
        (at, below) = (below, at);
    }
    space::swap(at, slot(2, address), COPY, SCRATCH).map_err(|_| "installing the copy failed")
}

fn read(address: u64) -> u64 {
    // SAFETY: `address` lies in a copy installed by `install`, an aligned word; a fault
    // there is resolved by the keeper or stops this process.
    unsafe { core::ptr::read_volatile(address as *const u64) }
}

fn write(address: u64, value: u64) {
    // SAFETY: as in `read`; the write faults to the keeper, which makes the page private.
    unsafe { core::ptr::write_volatile(address as *mut u64, value) }
}

fn check() -> Result<(), &'static str> {
    for address in [FIRST_COPY_AT, SECOND_COPY_AT] {
        make_copy(KEEPER, ORIGINAL, BANK, COPY).map_err(|_| "make_copy refused")?;
        install(address)?;
    }
    expect(bank::info(BANK).map(|info| info.nodes) == Ok(4), "a copy is more than its keeper node and its root")?;
    // What a copy shares comes out of it read-only: its holder cannot write the original.
    space::fetch(COPY, 0, AT).and_then(|()| space::fetch(AT, 0, BELOW)).map_err(|_| "fetching the copy's first page failed")?;
    expect(page::write(BELOW, 0, &[0xee]).is_err(), "a shared page fetched through a copy is writable")?;
    expect(read(FIRST_COPY_AT) == FIRST_PAGE_WORD, "a copy does not read as the original")?;
    expect(read(SECOND_COPY_AT + PAGE) == SECOND_PAGE_WORD, "a copy's second page does not read as the original's")?;
    expect(bank::info(BANK).map(|info| info.pages) == Ok(0), "reading bought pages")?;

    write(FIRST_COPY_AT, 0xaaaa);
    expect(read(FIRST_COPY_AT) == 0xaaaa, "a write through a copy is not seen in it")?;
    expect(read(FIRST_COPY_AT + 8) == FIRST_PAGE_WORD, "the rest of the written page is not the original's")?;
    expect(read(SECOND_COPY_AT) == FIRST_PAGE_WORD, "a write through one copy is seen in the other")?;
    let mut bytes = [0u8; 8];
    page::read(ORIGINAL_PAGE, 0, 8, &mut bytes).map_err(|_| "reading the original failed")?;
    expect(u64::from_le_bytes(bytes) == FIRST_PAGE_WORD, "a write through a copy changed the original")?;

    write(SECOND_COPY_AT + PAGE, 0xbbbb);
    expect(read(SECOND_COPY_AT + PAGE) == 0xbbbb && read(FIRST_COPY_AT + PAGE) == SECOND_PAGE_WORD, "the second copy's write leaked")?;
    // The original has no page 5: a zeroed private page.
    write(FIRST_COPY_AT + 5 * PAGE + 16, 0xcccc);
    expect(read(FIRST_COPY_AT + 5 * PAGE + 16) == 0xcccc && read(FIRST_COPY_AT + 5 * PAGE) == 0, "a write where the original has no page")?;
    expect(bank::info(BANK).map(|info| info.pages) == Ok(3), "each page written is bought once from the bank")?;
    Ok(())
}

fn main() -> u64 {
    u64::from(!verdict("virtual-copy-test", check()))
}

user::entry!(main);
