//! A full store (hypervisor-glue/holdfast/tests/banks.rs, manifest
//! services/store-full-manifest.toml, on a 48 MiB store): a bank whose limits are beyond
//! the store sells pages until the kernel's range has no page id left, and then refuses
//! with `STORE_FULL`, a code of its own, not a kernel failure. With no page id left, the
//! processes the bank sells stop where the checkpoint directory would need another page
//! (one per 84 processes): `make_process` is refused `exhausted`, rather than made and
//! every checkpoint after it failing. Prints `store-full-test: <pages> pages, <processes>
//! processes: passed` or `store-full-test: MISMATCH: ...`.
//!
//! Capability registers: 0 console, 1 own process, 2 a bank (limits beyond the store's),
//! 3 scratch.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::ObjectError;
use holdfast_userlib::bank::{self, refusal};
use holdfast_userlib::check::{expect, verdict};
use holdfast_userlib::syscall::{CapReg, Error};
use holdfast_userlib::{self as user};

const BANK: CapReg = CapReg::new(2);
const OBJECT: CapReg = CapReg::new(3);
/// More than a 48 MiB store holds of either: a bank that never refuses is a failure.
const PURCHASES_MAX: u64 = 100_000;
/// Processes the checkpoint directory's first page names.
const DIRECTORY_PAGE_PROCESSES: u64 = 84;

/// Buys with `buy` until refused: how many were sold, and the refusal.
fn buy_until_refused(buy: impl Fn() -> Result<(), Error>) -> Result<(u64, Error), &'static str> {
    for sold in 0..PURCHASES_MAX {
        if let Err(error) = buy() {
            return Ok((sold, error));
        }
    }
    Err("the bank never refused")
}

fn check() -> Result<(u64, u64), &'static str> {
    let (pages, refused) = buy_until_refused(|| bank::buy_page(BANK, OBJECT).map(|_| ()))?;
    expect(pages > 1000, "the store filled after too few pages")?;
    expect(refused == Error::Reply(refusal::STORE_FULL), "a full store refused a page with another code")?;
    let (processes, refused) = buy_until_refused(|| bank::buy_process(BANK, OBJECT))?;
    expect(refused == Error::Object(ObjectError::Exhausted), "a process the directory cannot name was refused with another code")?;
    expect(processes > 0 && processes < DIRECTORY_PAGE_PROCESSES, "processes were made past the directory's first page")?;
    Ok((pages, processes))
}

fn main() -> u64 {
    match check() {
        Ok((pages, processes)) => {
            let (mut pages_text, mut processes_text) = ([0u8; 20], [0u8; 20]);
            user::print_parts(&[
                b"store-full-test: ",
                user::decimal(pages, &mut pages_text),
                b" pages, ",
                user::decimal(processes, &mut processes_text),
                b" processes: passed\n",
            ]);
            0
        }
        Err(what) => {
            verdict("store-full-test", Err(what));
            1
        }
    }
}

user::entry!(main);
