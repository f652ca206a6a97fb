//! The IPC checks, against `echo-server`.
//!
//! Capability registers: 0 console, 1 own process, 2 start capability to echo-server (badge
//! 7), 3 the same without the right to call (badge 8), 4 an indirector whose node (5) holds
//! the start capability of register 2 in slot 0. Capabilities received land in 6 and 9; 7
//! stays empty.
#![no_std]
#![no_main]

use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::abi::methods;
use holdfast_userlib::abi::{INVOCATION_STRING_BYTES_MAX, InvocationError};
use holdfast_userlib::{self as user, Invocation};

const ECHO: u64 = 1;
const SLOW: u64 = 2;
const REPLY_TWICE: u64 = 3;
const CONSOLE_BACK: u64 = 6;
const SERVER: u8 = 2;
const SERVER_NO_CALL: u8 = 3;
const FORWARDER: u8 = 4;
const FORWARDER_NODE: u8 = 5;
const RECEIVED: u8 = 6;
const RECEIVED_AGAIN: u8 = 9;

fn void(error: InvocationError) -> u64 {
    error as u64
}

fn main() -> u64 {
    let mut checks = user::check::Checks::new("ipc-client");
    let mut buffer = [0u8; 64];

    let reply = Invocation::call(SERVER, ECHO, [1, 2, 3, 0])
        .with_string(b"ping")
        .invoke(&mut buffer);
    checks.check(
        "call: words, badge and string come back",
        reply.code == 0 && reply.words == [1, 2, 3, 7] && buffer[..reply.string_length] == *b"ping",
    );

    // No string, and no capability delivered either way (the server sends its register 12
    // back, but this caller takes none): the kernel's fast path both ways (`ipc::fast_call`,
    // `ipc::fast_return`).
    let reply = Invocation::call(SERVER, ECHO, [4, 5, 6, 0]).invoke(&mut buffer);
    checks.check(
        "call: words only: words and badge come back, no string",
        reply.code == 0 && reply.words == [4, 5, 6, 7] && reply.string_length == 0,
    );

    let holds_console = |register| {
        user::call(register, methods::IDENTIFY, [0; 4]).map(|words| Type::from_code(words[0]))
            == Ok(Some(Type::Console))
    };
    let reply = Invocation::call(SERVER, ECHO, [0; 4])
        .sending(&[user::CONSOLE])
        .receiving(&[RECEIVED])
        .invoke(&mut []);
    checks.check(
        "call: a capability goes and comes back",
        reply.code == 0 && holds_console(RECEIVED),
    );

    // A call of words only that asks for capabilities gets the one the reply carries (the
    // fast path leaves such a call and reply to the general one). The server sends its own
    // console: what its register 12 holds depends on who called it last, and `hostile`
    // calls it too.
    let reply = Invocation::call(SERVER, CONSOLE_BACK, [0; 4])
        .receiving(&[RECEIVED_AGAIN])
        .invoke(&mut []);
    checks.check(
        "call: a reply's capability reaches a caller that asks for one",
        reply.code == 0 && holds_console(RECEIVED_AGAIN),
    );

    let too_long = [0; INVOCATION_STRING_BYTES_MAX + 1];
    let reply = Invocation::call(SERVER, ECHO, [0; 4])
        .with_string(&too_long)
        .invoke(&mut []);
    checks.code(
        "string too long",
        reply.code,
        void(InvocationError::StringTooLong),
    );

    let reply = Invocation::call(SERVER_NO_CALL, ECHO, [0; 4]).invoke(&mut []);
    checks.code(
        "no-call: a call is refused",
        reply.code,
        void(InvocationError::NoCall),
    );
    let reply = Invocation::send(SERVER_NO_CALL, ECHO, [0; 4]).invoke(&mut []);
    checks.code("no-call: a send goes through", reply.code, 0);

    // The send leaves the server busy; the call must wait for it, not fail.
    let sent = Invocation::send(SERVER, SLOW, [0; 4]).invoke(&mut []);
    let reply = Invocation::call(SERVER, ECHO, [5, 0, 0, 0]).invoke(&mut []);
    checks.check(
        "busy target: the call waits and then gets its reply",
        sent.code == 0 && reply.words[0] == 5,
    );

    let reply = Invocation::call(SERVER, REPLY_TWICE, [6, 0, 0, 0]).invoke(&mut []);
    checks.check(
        "resume: the first reply arrives",
        reply.code == 0 && reply.words[0] == 6,
    );

    let reply = Invocation::call(FORWARDER, ECHO, [8, 0, 0, 0]).invoke(&mut []);
    checks.check(
        "indirector: forwards to its target",
        reply.code == 0 && reply.words == [8, 0, 0, 7],
    );
    // node.sense describes the slot's own capability: the start capability (not what the
    // server would answer to order 0, which would be a call), and is refused for no slot.
    let sensed = user::call(FORWARDER_NODE, methods::node::SENSE, [0; 4]);
    let beyond = user::call(FORWARDER_NODE, methods::node::SENSE, [32, 0, 0, 0]);
    checks.check(
        "node.sense: a start capability is described, not called",
        sensed.map(|words| words[0]) == Ok(Type::Start as u64)
            && beyond == Err(methods::ObjectError::InvalidSlot as u64),
    );
    let cleared = user::call(FORWARDER_NODE, methods::node::CLEAR, [0; 4]);
    let reply = Invocation::call(FORWARDER, ECHO, [8, 0, 0, 0]).invoke(&mut []);
    checks.check(
        "indirector: void once revoked",
        cleared.is_ok() && reply.code == void(InvocationError::Void),
    );
    let sensed = user::call(FORWARDER_NODE, methods::node::SENSE, [0; 4]);
    checks.check("node.sense: an empty slot is void", sensed == Ok([Type::Void as u64, 0, 0, 0]));

    let reply = user::call(SERVER, 12345, [0; 4]);
    checks.check("server's own reply code comes through", reply == Err(99));
    let reply = user::call(RECEIVED + 1, ECHO, [0; 4]);
    checks.check(
        "empty register is void",
        reply == Err(void(InvocationError::Void)),
    );
    checks.failures
}

user::entry!(main);
