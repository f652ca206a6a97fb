//! Checks the journal's guarded `write` from ring 3 (run by the control test,
//! hypervisor-glue/holdfast/tests/control.rs, on a system with a store): a stale guard
//! writes nothing; a good one writes every piece, across pages; malformed pieces, addresses
//! outside the space or not writable through it, an unaligned guard, more pages than one
//! commit holds and a capability that is not a space are refused. Prints
//! `journal-guard: ok`, or `journal-guard: MISMATCH <what>` at the first check that fails.
//!
//! Should it run where a kill may come in the middle (a restart test's system), a check
//! that fails after a restart (the clock's boot count changed), or a run that finds the
//! guard already moved (a restart brought back the journaled pages of a run it interrupted,
//! before this one read the boot count), prints `journal-guard: interrupted by a restart`
//! instead, as its memory and the store's may then be from different moments.
//!
//! Capability registers: 0 console, 1 its own process, 2 the journal, 4 the clock; 3
//! receives its space.
#![no_std]
#![no_main]

use holdfast_userlib as user;
use user::abi::interface::ObjectError;
use user::interface::{clock, journal, process};
use user::syscall::{CapReg, Error};

const OWN_PROCESS: CapReg = CapReg::new(1);
const JOURNAL: CapReg = CapReg::new(2);
const SPACE: CapReg = CapReg::new(3);
const CLOCK: CapReg = CapReg::new(4);
const PAGE_BYTES: usize = 4096;
const PAGES: usize = 66;

#[repr(C, align(4096))]
struct Region([u8; PAGES * PAGE_BYTES]);

/// In .bss: writable pages of the program's own space.
static mut REGION: Region = Region([0; PAGES * PAGE_BYTES]);

fn region_address() -> u64 {
    core::ptr::addr_of!(REGION) as u64
}

fn byte_at(offset: usize) -> u8 {
    // SAFETY: within REGION; read volatile because the kernel writes it behind the
    // compiler's back, and this program has one thread.
    unsafe { core::ptr::read_volatile((core::ptr::addr_of!(REGION) as *const u8).add(offset)) }
}

/// Pieces: a little-endian u64 address, a u16 length, the bytes.
struct Pieces {
    bytes: [u8; 4096],
    length: usize,
}

impl Pieces {
    fn new() -> Self {
        Self { bytes: [0; 4096], length: 0 }
    }

    fn add(mut self, address: u64, data: &[u8]) -> Self {
        let end = self.length + 10 + data.len();
        self.bytes[self.length..self.length + 8].copy_from_slice(&address.to_le_bytes());
        self.bytes[self.length + 8..self.length + 10].copy_from_slice(&(data.len() as u16).to_le_bytes());
        self.bytes[self.length + 10..end].copy_from_slice(data);
        self.length = end;
        self
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.length]
    }
}

fn write(space: CapReg, guard: (u64, u64), pieces: &[u8]) -> Result<u64, Error> {
    journal::write(JOURNAL, space, guard.0, guard.1, pieces)
}

fn refused_with(result: Result<u64, Error>, expected: ObjectError) -> bool {
    matches!(result, Err(Error::Object(error)) if error == expected)
}

fn check() -> Result<(), &'static str> {
    process::fetch_space(OWN_PROCESS, SPACE).map_err(|_| "fetch_space failed")?;
    let base = region_address();
    let guard = (base, 0);

    let stale = Pieces::new().add(base + 8, b"stale");
    if !refused_with(write(SPACE, (base, 1), stale.as_bytes()), ObjectError::Changed) || byte_at(8) != 0 {
        return Err("a stale guard was not refused as changed, or wrote");
    }

    // The guard moves with the write, as a program's batch counter does.
    let across = 2 * PAGE_BYTES - 4;
    let good = Pieces::new()
        .add(base, &1u64.to_le_bytes())
        .add(base + 8, b"hello")
        .add(base + across as u64, b"across!!");
    if write(SPACE, guard, good.as_bytes()).is_err() {
        return Err("a good write failed");
    }
    let written = |offset: usize, expected: &[u8]| expected.iter().enumerate().all(|(at, byte)| byte_at(offset + at) == *byte);
    if !written(0, &1u64.to_le_bytes()) || !written(8, b"hello") || !written(across, b"across!!") {
        return Err("a good write's pieces are not all in memory");
    }
    if !refused_with(write(SPACE, guard, good.as_bytes()), ObjectError::Changed) {
        return Err("the same guard worked twice");
    }
    let guard = (base, 1);

    let out_of_range = ObjectError::OutOfRange;
    let mut truncated = Pieces::new().add(base + 16, b"abc");
    truncated.length -= 1;
    let kernel = Pieces::new().add(0xffff_8000_0000_0000, b"x");
    let code = Pieces::new().add(main as fn() -> u64 as usize as u64, b"x");
    for (pieces, what) in [
        (truncated.as_bytes(), "a truncated piece"),
        (kernel.as_bytes(), "a kernel address"),
        (code.as_bytes(), "a read-only page (the program's code)"),
    ] {
        if !refused_with(write(SPACE, guard, pieces), out_of_range) {
            user::print_parts(&[b"journal-guard: not refused: ", what.as_bytes(), b"\n"]);
            return Err("a bad piece was not refused as out_of_range");
        }
    }
    if !refused_with(write(SPACE, (base + 4, 1), good.as_bytes()), out_of_range) {
        return Err("an unaligned guard was not refused");
    }
    let pages = |count: usize| (1..=count).fold(Pieces::new(), |pieces, page| pieces.add(base + (page * PAGE_BYTES) as u64, &[page as u8]));
    if !refused_with(write(SPACE, guard, pages(65).as_bytes()), out_of_range) || byte_at(PAGE_BYTES) != 0 {
        return Err("65 pages were not refused, or some were written");
    }
    if write(SPACE, guard, pages(64).as_bytes()).is_err() || byte_at(64 * PAGE_BYTES) != 64 {
        return Err("64 pages were refused");
    }
    if !refused_with(write(OWN_PROCESS, guard, good.as_bytes()), ObjectError::WrongType) {
        return Err("a process capability was taken for a space");
    }
    Ok(())
}

fn boot() -> u64 {
    clock::now(CLOCK).map_or(u64::MAX, |now| now.boot)
}

fn main() -> u64 {
    let started_in = boot();
    // The guard moves only with a write this program commits: a restart brought back the
    // pages of a run it interrupted, newer than the rest of the program.
    if byte_at(0) != 0 {
        user::print("journal-guard: interrupted by a restart\n");
        return 0;
    }
    match check() {
        Ok(()) => {
            user::print("journal-guard: ok\n");
            0
        }
        Err(_) if boot() != started_in => {
            user::print("journal-guard: interrupted by a restart\n");
            0
        }
        Err(what) => {
            user::print_parts(&[b"journal-guard: MISMATCH ", what.as_bytes(), b"\n"]);
            1
        }
    }
}

user::entry!(main);
