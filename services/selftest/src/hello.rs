//! Invokes its console capability and checks the kernel's answers to bad invocations.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::methods::{ObjectError, console};
use holdfast_userlib::{self as user, Invocation};

/// What was tried, what the kernel answered, what it should have answered.
type Check = (&'static str, Result<(), u64>, Result<(), u64>);

fn main() -> u64 {
    user::print("hello from ring 3\n");
    let write = Invocation::call(user::CONSOLE, console::WRITE, [0; 4]);
    let kernel_string = write.with_string(
        // SAFETY: only the address is taken; the kernel must refuse to read it.
        unsafe { core::slice::from_raw_parts(0xffff_ffff_8010_0000 as *const u8, 8) },
    );
    let code = |reply: user::Reply| {
        if reply.code == 0 {
            Ok(())
        } else {
            Err(reply.code)
        }
    };
    let checks: [Check; 5] = [
        (
            "empty register",
            user::write_to(7, b"x"),
            Err(InvocationError::Void as u64),
        ),
        (
            "undefined descriptor bit",
            code(write.invoke_raw(1 << 62, &mut [])),
            Err(InvocationError::MalformedDescriptor as u64),
        ),
        (
            "kernel address",
            code(kernel_string.invoke(&mut [])),
            Err(InvocationError::BadAddress as u64),
        ),
        (
            "string too long",
            user::write_to(user::CONSOLE, &[b'x'; 5000]),
            Err(InvocationError::StringTooLong as u64),
        ),
        (
            "unknown order",
            user::call(user::CONSOLE, 99, [0; 4]).map(|_| ()),
            Err(ObjectError::InvalidOrder as u64),
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
