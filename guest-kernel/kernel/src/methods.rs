//! Kernel objects' methods: what invoking a capability other than a start or resume
//! capability does.
//!
//! Order codes and errors are the ABI's (`holdfast_abi`). A method's result goes back to
//! the invoker as a [`Message`]: code 0 and result words on success, an object error code
//! otherwise.

use holdfast_abi as abi;
use holdfast_objects::{CapType, Capability};

use crate::arch::{self, timer};
use crate::ipc::Message;
use crate::process::{ProcessState, SCHEDULER};

/// Object error: the capability's type has no method with this order code.
const INVALID_ORDER: u64 = 1;

/// Runs `message.code` as an order on the kernel object `target`.
pub fn invoke(target: Capability, message: Message) -> Message {
    let ok = |words| Message::reply(0, words);
    match (target.kind(), message.code) {
        (kind, abi::IDENTIFY) => ok([kind as u64, u64::from(target.rights().bits()), 0, 0]),
        (CapType::Console, abi::console::WRITE) => {
            crate::console::write_bytes(&message.string);
            ok([message.string.len() as u64, 0, 0, 0])
        }
        (CapType::Clock, abi::clock::NOW) => {
            let nanoseconds = timer::tsc_to_nanoseconds(arch::read_tsc());
            ok([nanoseconds, 0, 0, 0])
        }
        (CapType::Number, abi::number::VALUE) => {
            let [first, second] = target.number_words().expect("a number capability");
            ok([first, second, 0, 0])
        }
        (CapType::Process, abi::process::STOP) => {
            let mut scheduler = SCHEDULER.lock();
            if let Some(index) = scheduler.index_of(target.object()) {
                scheduler.processes[index].state =
                    ProcessState::Stopped { exit_code: message.words[0] };
            }
            ok([0; 4])
        }
        _ => Message::reply(INVALID_ORDER, [0; 4]),
    }
}
