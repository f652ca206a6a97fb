//! Invokes random capabilities with random orders, words, strings and capability lists, to
//! show that nothing a program can ask makes the kernel panic or disturbs another process.
//! It makes processes (`node.make_process`), indirectors, meters and spaces of the nodes it
//! holds, start capabilities of the processes it made (`process.make_start`), starts and
//! stops those processes, and invokes the resume capabilities the echo server hands it.
//!
//! Every run reproduces from its seed: the first line is `hostile: seed <n>`, and the seed
//! is the kernel's boot number `fuzz-seed` (`--append holdfast.fuzz-seed=<n>`), or the
//! clock's time without one. The last line counts what it did; the same seed prints the
//! same counts.
//!
//! It never waits forever: the only start capability it holds is the echo server's (a
//! process it made never answers, and a call, a send, even an `identify` of a start
//! capability to a process that is not available waits until it is: it makes start
//! capabilities and drops them). So an indirector forwards to no start capability, and
//! `identify` says what it forwards to; a resume capability it holds is a copy of its
//! own, which the kernel refuses at once while it runs. At the end it stops every process it made, with exit code 0, as the self-test
//! expects of a made process.
//!
//! Capability registers: 0 console and 1 own process (neither invoked nor sent: the report
//! must stay readable and the program must live to make it), 2 clock, 3 a node (whose
//! slots hold three more), 4 a page, 5 a start capability to echo-server (never sent: a
//! process made here with it as keeper would keep the echo server busy forever), 6 a
//! number whose first word is how many invocations to make, 7 the boot number `fuzz-seed`,
//! 8 the ledger: a node holding the four nodes, never invoked by the fuzzing, from which
//! the processes made are found at the end, and in slot 4 the meter each process made is
//! given at once (a process made at run time starts only with a meter). Capabilities received land in 6..=15 but 8.
#![no_std]
#![no_main]

use holdfast_userlib::abi::InvocationError;
use holdfast_userlib::abi::interface::Type;
use holdfast_userlib::abi::methods::{self, clock, node, process};
use holdfast_userlib::random::Xorshift as Random;
use holdfast_userlib::{self as user, Invocation};

const CLOCK: u8 = 2;
const ECHO_SERVER: u8 = 5;
const INVOCATIONS: u8 = 6;
const SEED: u8 = 7;
const LEDGER: u8 = 8;
/// Where the end's cleanup fetches each ledger node and the process made of it.
const CLEANUP: [u8; 2] = [9, 10];
/// Nodes in the ledger (`services/manifest.toml`).
const LEDGER_NODES: u64 = 4;
/// The ledger's slot of the meter made processes run on.
const LEDGER_METER: u64 = 4;
/// The echo server's order that replies with a copy of its resume capability
/// (`echo_server.rs` `RESUME_COPY`).
const ECHO_RESUME_COPY: u64 = 7;

/// Capability registers to invoke: any but the own process's and the ledger's.
const INVOKED: [u8; 14] = [0, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15];
/// Capability registers to send: as [`INVOKED`], but not the echo server's.
const SENT: [u8; 13] = [0, 2, 3, 4, 6, 7, 9, 10, 11, 12, 13, 14, 15];
/// Capability registers to receive into: 6..=15 but the ledger's: not the echo server's,
/// which is invoked without asking what it holds (a console received there would be
/// invoked with random bytes), nor the node's and the page's, which stay to be made into
/// processes and spaces again and again.
const RECEIVED: [u8; 9] = [6, 7, 9, 10, 11, 12, 13, 14, 15];

/// What an invocation was, for the summary.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aim {
    Other,
    MakeProcess,
    MakeIndirector,
    MakeStart,
    StartProcess,
    Echo,
    Resume,
}

/// What a capability register holds, as far as choosing an order goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    EchoServer,
    /// A copy of a resume capability the echo server already replied through.
    UsedResume,
    Node,
    Process,
    Other,
}

/// What `target` holds (through an indirector, what it forwards to), or `None` for a
/// console that came back from the echo server (random bytes would garble the report).
/// Only the echo server's start capability, never sent, is a start capability. `used_resumes` has a bit
/// set for each register that received a used resume capability since: identify calls
/// one void, as it is.
fn held(target: u8, used_resumes: u16) -> Option<Held> {
    if target == ECHO_SERVER {
        return Some(Held::EchoServer);
    }
    if used_resumes & 1 << target != 0 {
        return Some(Held::UsedResume);
    }
    let type_code = match user::call(target, methods::IDENTIFY, [0; 4]) {
        Ok(words) => Type::from_code(words[0]),
        // A void capability refuses everything at once: invoke it too.
        Err(code) if code == InvocationError::Void as u64 => return Some(Held::Other),
        Err(_) => return None,
    };
    match type_code {
        Some(Type::Node) => Some(Held::Node),
        Some(Type::Process) => Some(Held::Process),
        // The kernel refuses a used one at once, whatever the order.
        Some(Type::Resume) => Some(Held::UsedResume),
        Some(Type::Start | Type::Indirector | Type::Console) => None,
        _ => Some(Held::Other),
    }
}

/// An order for what `held` holds: often one that makes something (processes, start
/// capabilities, indirectors) or changes a process, else a small one (a real method), now
/// and then anything at all.
fn order_for(random: &mut Random, held: Held) -> u64 {
    const NODE_ORDERS: [u64; 5] =
        [node::MAKE_PROCESS, node::MAKE_INDIRECTOR, node::MAKE_METER, node::MAKE_SPACE, node::FETCH];
    const PROCESS_ORDERS: [u64; 7] = [
        process::MAKE_START,
        process::START,
        process::STOP,
        process::SET_SPACE,
        process::SET_KEEPER,
        process::SET_METER,
        process::SWAP_REGISTER,
    ];
    match (held, random.below(8)) {
        (_, 0) => random.word(),
        (Held::Node, 1..=3) => random.pick(&NODE_ORDERS),
        (Held::Process, 1..=3) => random.pick(&PROCESS_ORDERS),
        // The echo server hands out copies of its resume capability when asked.
        (Held::EchoServer, 1..=2) => ECHO_RESUME_COPY,
        _ => random.below(13),
    }
}

fn aim(held: Held, order: u64) -> Aim {
    match (held, order) {
        (Held::EchoServer, _) => Aim::Echo,
        (Held::UsedResume, _) => Aim::Resume,
        (Held::Node, node::MAKE_PROCESS) => Aim::MakeProcess,
        (Held::Node, node::MAKE_INDIRECTOR) => Aim::MakeIndirector,
        (Held::Process, process::MAKE_START) => Aim::MakeStart,
        (Held::Process, process::START) => Aim::StartProcess,
        _ => Aim::Other,
    }
}

/// What the run did; the same seed gives the same counts.
#[derive(Default)]
struct Counts {
    invocations: u64,
    processes_made: u64,
    indirectors_made: u64,
    starts_made: u64,
    processes_started: u64,
    echo_invocations: u64,
    resume_invocations: u64,
}

impl Counts {
    fn count(&mut self, aim: Aim, succeeded: bool) {
        self.invocations += 1;
        let counter = match aim {
            Aim::Other => return,
            Aim::Echo => &mut self.echo_invocations,
            Aim::Resume => &mut self.resume_invocations,
            Aim::MakeProcess if succeeded => &mut self.processes_made,
            Aim::MakeIndirector if succeeded => &mut self.indirectors_made,
            Aim::MakeStart if succeeded => &mut self.starts_made,
            Aim::StartProcess if succeeded => &mut self.processes_started,
            _ => return,
        };
        *counter += 1;
    }
}

fn now_nanoseconds() -> u64 {
    user::call(CLOCK, clock::NOW, [0; 4]).map_or(0, |words| words[0])
}

/// Stops every process made of a ledger node, with exit code 0: the self-test expects a
/// made process to end stopped so (one it started has faulted: it has no code to run).
/// Returns how many it stopped.
fn stop_made_processes() -> u64 {
    let [node_register, process_register] = CLEANUP;
    let mut stopped = 0;
    for slot in 0..LEDGER_NODES {
        let fetched = Invocation::call(LEDGER, node::FETCH, [slot, 0, 0, 0])
            .receiving(&[node_register])
            .invoke(&mut [])
            .code
            == 0;
        // The process of a node made earlier, or (harmless) one made now to be stopped.
        let made = fetched
            && Invocation::call(node_register, node::MAKE_PROCESS, [0; 4])
                .receiving(&[process_register])
                .invoke(&mut [])
                .code
                == 0;
        if made && user::call(process_register, process::STOP, [0; 4]).is_ok() {
            stopped += 1;
        }
    }
    stopped
}

/// Gives the process made into register `process` the ledger's meter, fetched into a
/// scratch register (15, or 14 if the process is in 15), which it returns.
fn give_meter(process: u8) -> u8 {
    let scratch = if process == 15 { 14 } else { 15 };
    let fetched = Invocation::call(LEDGER, node::FETCH, [LEDGER_METER, 0, 0, 0]).receiving(&[scratch]).invoke(&mut []);
    if fetched.code == 0 {
        let _ = Invocation::call(process, process::SET_METER, [0; 4]).sending(&[scratch]).invoke(&mut []);
    }
    scratch
}

fn main() -> u64 {
    let invocations_max =
        user::call(INVOCATIONS, methods::number::VALUE, [0; 4]).map_or(3000, |words| words[0]);
    // Word 1 says whether the command line gave a seed; without one, the clock's.
    let seed = match user::call(SEED, methods::number::VALUE, [0; 4]) {
        Ok([seed, 1, ..]) => seed,
        _ => now_nanoseconds(),
    };
    user::print_numbers(&[(b"hostile: seed ", seed)], b"\n");
    let mut random = Random::new(seed);
    let mut string = [0u8; 4200];
    let mut buffer = [0u8; 4200];
    let mut counts = Counts::default();
    let mut draws: u64 = 0;
    let mut used_resumes: u16 = 0;
    // Draws that are not invoked (a start capability, a console) are bounded too, so that
    // registers full of them cannot keep it here forever.
    while counts.invocations < invocations_max && draws < 20 * invocations_max {
        draws += 1;
        for byte in string.iter_mut().take(64) {
            *byte = random.word() as u8;
        }
        let words = [
            random.word(),
            random.below(40),
            random.below(5000),
            random.word(),
        ];
        let target = random.pick(&INVOKED);
        let Some(held) = held(target, used_resumes) else {
            continue;
        };
        let order = order_for(&mut random, held);
        // A return would wait for a message that never comes, so calls and sends only.
        let calling = random.below(4) != 0;
        let mut invocation = if calling {
            Invocation::call(target, order, words)
        } else {
            Invocation::send(target, order, words)
        };
        // The echo server replies with the first capability it received (void if none): a
        // call that sends one makes the reply this program's own, so that the run depends
        // on its seed alone.
        let send_count = if held == Held::EchoServer { 1 + random.below(4) } else { random.below(5) } as usize;
        // A start capability of a process made here is never kept: even `identify` of a
        // start capability is an invocation of its process, which would wait forever.
        let receive_count = random.below(5) as usize * usize::from(aim(held, order) != Aim::MakeStart);
        let sent: [u8; 4] = core::array::from_fn(|_| random.pick(&SENT));
        let received: [u8; 4] = core::array::from_fn(|_| random.pick(&RECEIVED));
        invocation = invocation
            .sending(&sent[..send_count])
            .receiving(&received[..receive_count]);
        // Now and then the reply's resume capability (void: a reply is no call) too.
        if random.below(8) == 0 {
            invocation = invocation.resume_into(random.pick(&RECEIVED));
        }
        let length = match random.below(4) {
            0 => 0,
            1 => random.below(64) as usize,
            2 => random.below(4200) as usize,
            _ => 4096,
        };
        invocation = invocation.with_string(&string[..length]);
        let reply = match random.below(16) {
            // Undefined descriptor bits set at random: the kernel must refuse the
            // invocation, not misread it.
            0 => {
                const UNDEFINED_BITS: u64 = 0xfe00_0000_0000_0000 | 1 << 51 | 0xf800_0000 | 0xc0;
                let descriptor = invocation.descriptor.encode() | random.word() & UNDEFINED_BITS;
                invocation.invoke_raw(descriptor, &mut buffer)
            }
            _ => invocation.invoke(&mut buffer),
        };
        counts.count(aim(held, order), reply.code == 0);
        if aim(held, order) == Aim::MakeProcess && reply.code == 0 && receive_count > 0 {
            used_resumes &= !(1 << give_meter(received[0]));
        }
        // What the registers that received hold now; the echo server's copy of its resume
        // capability is the one capability of its reply.
        for &register in &received[..receive_count] {
            used_resumes &= !(1 << register);
        }
        if let Some(register) = invocation.descriptor.resume {
            used_resumes &= !(1 << register);
        }
        if calling && held == Held::EchoServer && order == ECHO_RESUME_COPY && reply.code == 0 && receive_count > 0 {
            used_resumes |= 1 << received[0];
        }
    }
    let stopped = stop_made_processes();
    user::print_numbers(
        &[
            (b"hostile: ", counts.invocations),
            (b" random invocations: ", counts.processes_made),
            (b" make_process, ", counts.indirectors_made),
            (b" make_indirector, ", counts.starts_made),
            (b" make_start, ", counts.processes_started),
            (b" start, ", counts.echo_invocations),
            (b" to the echo server's start capability, ", counts.resume_invocations),
            (b" to used resume capabilities, ", stopped),
        ],
        b" made processes stopped; kernel and other processes unharmed\n",
    );
    0
}

user::entry!(main);
