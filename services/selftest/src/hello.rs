//! Invokes its console capability and checks the kernel's answers to bad invocations.
#![no_std]
#![no_main]

use holdfast_userlib::{self as user, abi::InvokeResult};

/// What was tried, what the kernel answered, what it should have answered.
type Check = (
    &'static str,
    Result<(), InvokeResult>,
    Result<(), InvokeResult>,
);

fn main() -> u64 {
    user::print("hello from ring 3\n");
    let checks: [Check; 4] = [
        (
            "empty register",
            user::write_to(7, b"x"),
            Err(InvokeResult::Void),
        ),
        (
            "register out of range",
            user::write_to(99, b"x"),
            Err(InvokeResult::InvalidRegister),
        ),
        (
            "kernel address",
            user::invoke(
                user::CONSOLE,
                user::abi::console::WRITE,
                [0xffff_ffff_8010_0000, 8, 0, 0],
            )
            .0,
            Err(InvokeResult::BadAddress),
        ),
        (
            "string too long",
            user::write_to(user::CONSOLE, &[b'x'; 5000]),
            Err(InvokeResult::StringTooLong),
        ),
    ];
    let mut failures = 0;
    for (what, got, expected) in checks {
        if got != expected {
            user::print("hello: wrong answer for ");
            user::print(what);
            user::print("\n");
            failures += 1;
        }
    }
    failures
}

user::entry!(main);
