//! The fault-checkpoint test's workload (hypervisor-glue/holdfast/tests/persistence.rs):
//! shows whether a checkpoint taken in the middle of a page fault caught the faulting
//! process's registers and its memory at one moment.
//!
//! Step `i` writes `i` into the next of [`PAGES`] pages (after each snapshot has dropped the
//! translations, each is a write fault, in which the test's forced checkpoints come), then
//! checks that the count in memory is `i`, then stores `i + 1` there; `i` itself lives in a
//! register. A restart that brought back the registers of the process's previous fault
//! beside the memory of the checkpoint's resumes at an earlier step's first write, and its
//! check finds the count in memory ahead: `register-witness: MISMATCH at step <i>, memory
//! count <n>`. Every [`REPORT_STEPS`] steps it prints `register-witness: <i>`.
//!
//! Capability registers: 0 console.
#![no_std]
#![no_main]

use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use holdfast_userlib as user;

const PAGES: usize = 64;
const WORDS_PER_PAGE: usize = 512;
const REPORT_STEPS: u64 = 1 << 8;

#[repr(C, align(4096))]
struct Pages([u64; PAGES * WORDS_PER_PAGE]);

/// On a page of its own, so that its fault is not one of the steps'.
#[repr(C, align(4096))]
struct Count(u64);

static mut TOUCHED: Pages = Pages([0; PAGES * WORDS_PER_PAGE]);
static mut COUNT: Count = Count(0);

fn main() -> u64 {
    let mut step = 0u64;
    loop {
        let page = (step % PAGES as u64) as usize;
        // SAFETY: a single-threaded program, and these volatile accesses are the only ones
        // to TOUCHED and COUNT; `page * WORDS_PER_PAGE` is within TOUCHED.
        let count = unsafe {
            write_volatile(addr_of_mut!(TOUCHED.0[page * WORDS_PER_PAGE]), step);
            read_volatile(addr_of!(COUNT.0))
        };
        if count != step {
            let (mut digits, mut more) = ([0u8; 20], [0u8; 20]);
            let step_digits = user::decimal(step, &mut digits);
            user::print_parts(&[b"register-witness: MISMATCH at step ", step_digits, b", memory count ", user::decimal(count, &mut more), b"\n"]);
            return 1;
        }
        // SAFETY: as above.
        unsafe { write_volatile(addr_of_mut!(COUNT.0), step + 1) };
        step += 1;
        if step.is_multiple_of(REPORT_STEPS) {
            let mut digits = [0u8; 20];
            user::print_parts(&[b"register-witness: ", user::decimal(step, &mut digits), b"\n"]);
        }
    }
}

user::entry!(main);
