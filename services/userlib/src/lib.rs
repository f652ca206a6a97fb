//! The ring-3 side of the Holdfast ABI. A program links this crate, defines
//! `fn main() -> u64` through [`entry!`], and talks to the kernel only through
//! [`invoke`] on its capability registers.
//!
//! Capability registers given to every foundation program: 0 = console, 1 = own process.
//!
//! [`syscall`] and the stubs in [`interface`] speak ABI version 2, which the kernel core
//! being written implements; [`invoke`], [`print`] and [`stop`] speak version 1, which the
//! running kernel speaks until then.
#![no_std]

pub mod interface;
pub mod syscall;

use abi::InvokeResult;
pub use holdfast_abi as abi;

pub const CONSOLE: u64 = 0;
pub const OWN_PROCESS: u64 = 1;

/// `invoke(capability register, order, four words)`: the one system call.
pub fn invoke(capability: u64, order: u64, words: [u64; 4]) -> (Result<(), InvokeResult>, u64) {
    let result: u64;
    let value: u64;
    // SAFETY: `syscall` enters the kernel, which reads the registers named here, writes rax
    // and rdx, and clobbers rcx and r11 (the instruction saves rip and rflags in them);
    // nothing else changes and no memory of ours is written.
    unsafe {
        core::arch::asm!(
            "syscall",
            in("rdi") capability,
            in("rsi") order,
            inout("rdx") words[0] => value,
            in("r10") words[1],
            in("r8") words[2],
            in("r9") words[3],
            lateout("rax") result,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    match InvokeResult::from_code(result) {
        Some(InvokeResult::Ok) => (Ok(()), value),
        Some(error) => (Err(error), value),
        None => panic!("kernel returned unknown result code {result}"),
    }
}

/// Writes `text` to the console capability in register `capability`.
pub fn write_to(capability: u64, text: &[u8]) -> Result<(), InvokeResult> {
    invoke(
        capability,
        abi::console::WRITE,
        [text.as_ptr() as u64, text.len() as u64, 0, 0],
    )
    .0
}

pub fn print(text: &str) {
    let _ = write_to(CONSOLE, text.as_bytes());
}

/// Stops this process with `exit_code`.
pub fn stop(exit_code: u64) -> ! {
    let _ = invoke(OWN_PROCESS, abi::process::STOP, [exit_code, 0, 0, 0]);
    // The kernel never resumes a stopped process; if it did, fault rather than run on.
    // SAFETY: ud2 only raises #UD.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}

/// Defines the program's entry point: runs `$main` and stops with the code it returns.
/// Also stamps the program with the ABI version note the kernel's loader checks.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        core::arch::global_asm!(
            ".pushsection .note.holdfast, \"a\", @note",
            ".balign 4",
            ".long 9",  // name size: "Holdfast\0"
            ".long 4",  // descriptor size
            ".long {note_type}",
            ".asciz \"Holdfast\"",
            ".balign 4",
            ".long {abi_version}",
            ".popsection",
            note_type = const $crate::abi::note::TYPE_ABI_VERSION,
            abi_version = const $crate::abi::ABI_VERSION,
        );

        #[unsafe(no_mangle)]
        pub extern "C" fn _start() -> ! {
            $crate::stop($main())
        }

        #[panic_handler]
        fn panic(_info: &core::panic::PanicInfo) -> ! {
            $crate::print("panic in ring 3\n");
            $crate::stop(101)
        }
    };
}
