//! The program the constructor test's constructors yield (services/constructor;
//! services/selftest/src/constructor_test.rs): it checks the capability registers its
//! constructor gave it — a number in 1, a read-only page in 2 — and that its data is its
//! own copy, then prints `constructed: passed` on the console in register 0 (a hole its
//! constructor lists) and waits for good: it holds no capability to its own process to stop
//! with (a constructor gives none).
#![no_std]
#![no_main]

use holdfast_userlib::check::verdict;
use holdfast_userlib::interface::{number, page};
use holdfast_userlib::syscall::CapReg;
use holdfast_userlib::{self as user};

const NUMBER: CapReg = CapReg::new(1);
const READ_ONLY_PAGE: CapReg = CapReg::new(2);

/// Data the program writes: each yielded process must start from the template's value.
static mut RUNS: u64 = 0;

fn check() -> Result<(), &'static str> {
    // SAFETY: one thread; the only access to `RUNS` in the program.
    let runs = unsafe {
        let runs = &mut *core::ptr::addr_of_mut!(RUNS);
        *runs += 1;
        *runs
    };
    if runs != 1 {
        return Err("its data was not a fresh copy of the template's");
    }
    if number::value(NUMBER).map(|value| value.word0) != Ok(42) {
        return Err("register 1 is not the number 42");
    }
    let mut bytes = [0u8; 4];
    page::read(READ_ONLY_PAGE, 0, 4, &mut bytes).map_err(|_| "register 2 is not a page")?;
    if page::write(READ_ONLY_PAGE, 0, b"x").is_ok() {
        return Err("register 2 is writable");
    }
    Ok(())
}

fn main() -> u64 {
    verdict("constructed", check());
    // A return through a void register (15) waits for a message that never comes.
    let _ = user::Invocation::return_to(15, 0, [0; 4]).invoke(&mut []);
    0
}

user::entry!(main);
