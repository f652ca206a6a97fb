//! A process keeper: steps its client over `ud2` (2 bytes) and restarts it.
//!
//! Capability registers: 0 console, 1 own process. Each exception arrives as an
//! `EXCEPTION` message with the process as capability 0 (received into 12).
#![no_std]
#![no_main]

use holdfast_userlib::abi::keeper::EXCEPTION;
use holdfast_userlib::abi::methods::process;
use holdfast_userlib::{self as user, Invocation};

const FAULTED: u8 = 12;
const RESUME: u8 = 15;
const NOTHING: u8 = 14;
const INVALID_OPCODE: u64 = 6;
const RIP_WORD: usize = 15;

fn main() -> u64 {
    let wait = |reply: Invocation| {
        reply
            .receiving(&[FAULTED])
            .resume_into(RESUME)
            .invoke(&mut [])
    };
    let mut message = wait(Invocation::return_to(NOTHING, 0, [0; 4]));
    loop {
        if message.code == EXCEPTION && message.words[0] == INVALID_OPCODE {
            let mut registers = [0u8; 144];
            let read =
                Invocation::call(FAULTED, process::READ_REGISTERS, [0; 4]).invoke(&mut registers);
            let rip_bytes = &mut registers[RIP_WORD * 8..RIP_WORD * 8 + 8];
            let rip = u64::from_le_bytes(rip_bytes.try_into().expect("8 bytes")) + 2;
            rip_bytes.copy_from_slice(&rip.to_le_bytes());
            let written = Invocation::call(FAULTED, process::WRITE_REGISTERS, [0; 4])
                .with_string(&registers)
                .invoke(&mut []);
            if read.code != 0 || written.code != 0 {
                user::print("exception-keeper: could not step over the fault\n");
            }
        }
        message = wait(Invocation::return_to(RESUME, 0, [0; 4]));
    }
}

user::entry!(main);
