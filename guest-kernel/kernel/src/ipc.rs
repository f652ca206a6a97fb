//! The invocation path: `invoke` is the only system call (see `holdfast_abi::descriptor` for
//! its registers).
//!
//! Invoking a start capability delivers a message to an available process; invoking a
//! resume capability delivers the reply to the process waiting in a call; invoking any
//! other capability runs a kernel object's method ([`crate::methods`]). Nothing is buffered:
//! an invocation of a busy process stalls the invoker, which runs its `syscall` again when
//! the target becomes available, first come first served ([`make_available`]). So every
//! invocation either completes or leaves no trace, and no process needs a kernel stack of
//! its own while it waits.

use arrayvec::ArrayVec;
use holdfast_abi::descriptor::{self, Descriptor, Kind};
use holdfast_abi::{self as abi, InvocationError};
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, Slot};

use crate::arch::syscall::UserRegisters;
use crate::arch::timer;
use crate::{methods, network, persistence, services};
use crate::objects::{OBJECTS, Objects};
use crate::process::{self, ProcessState, SCHEDULER};
use crate::message::{KeeperMessage, Message, MessageString};
use crate::user_memory;

/// How many indirectors an invocation may pass through: a bound on kernel work that a
/// cycle of forwarders cannot defeat.
const INDIRECTION_DEPTH_MAX: usize = 8;

fn register_slot(index: u8) -> Slot {
    process_root::capability_register(u64::from(index)).expect("descriptor registers are 0..=15")
}

/// Whether capability register `index` of a root node is among `translated_slots` (as
/// `ObjectCache::node_mut_translated` gives them): changing it must drop translations.
fn register_translated(translated_slots: u32, index: u8) -> bool {
    translated_slots & (1 << register_slot(index).index()) != 0
}

/// Voids capability register `index` of a root node, unless it is void already (a server
/// that takes capabilities mostly gets none: a read, not a swap and the drop of what it
/// held, at each message).
fn clear_register(node: &mut holdfast_objects::Node, index: u8) {
    let slot = register_slot(index);
    if !node.get(slot).is_void() {
        node.swap(slot, Capability::VOID);
    }
}

/// Hands `message` to the process whose saved registers are `registers` (its root node
/// `root`), as the result of its pending `invoke`: `descriptor`, the one it invoked with
/// (`None` if it never did), says which capability registers receive, `r14`/`r15` where the
/// string goes. The capabilities are moved out of `message`; it is taken by reference
/// because moving its 240 bytes is a `memcpy` call, a loop of translation blocks under TCG.
pub fn deliver(
    objects: &mut Objects,
    root: &Capability,
    registers: &mut UserRegisters,
    descriptor: Option<&Descriptor>,
    message: &mut Message,
) {
    if let Some(descriptor) = descriptor
        && !(descriptor.receive.is_empty() && descriptor.resume.is_none())
        && let Ok((node, translated_slots)) = objects.cache.node_mut_translated(root)
    {
        // Every receive register changes: to the message's next capability, or void once it
        // has no more, so that a server cannot take what an earlier caller sent for what
        // this one did (a constructor paid from another requester's bank).
        let mut capabilities = message.capabilities.drain(..);
        for index in descriptor.receive.iter() {
            match capabilities.next() {
                Some(capability) => {
                    node.swap(register_slot(index), capability);
                }
                None => clear_register(node, index),
            }
        }
        drop(capabilities);
        // The resume register always changes: to the caller's resume capability for a
        // call, to void otherwise, so that a server cannot mistake an old one for the
        // current caller.
        if let Some(index) = descriptor.resume {
            node.swap(
                register_slot(index),
                message.resume.take().unwrap_or(Capability::VOID),
            );
        }
        // Only a root node that is also part of a space tree has translations through these
        // slots, and only the slots that changed matter (the lookup above told which slots
        // translations read). The scheduler may be held here: the flush comes before ring 3
        // runs again.
        let translated = |index| register_translated(translated_slots, index);
        let receive_stale = descriptor.receive.iter().any(translated);
        if receive_stale || descriptor.resume.is_some_and(translated) {
            process::translations_stale();
        }
    }
    // The receiver's buffer: as much of the string as fits; a buffer that is not mapped
    // writable receives nothing (the receiver's own doing, so not the sender's error).
    let length = message.string.len().min(registers.r15 as usize);
    let delivered = length > 0
        && user_memory::write(
            objects,
            root,
            registers.r14,
            &message.string[..length],
        )
        .is_ok();
    let string_length = if delivered { length as u64 } else { 0 };
    receive(registers, message.code, message.words, message.badge, string_length);
}

/// The kernel side of `invoke`. Returns to the invoker (through `sysretq`) when the
/// invocation is done; otherwise switches to another process and does not return.
#[unsafe(link_section = ".text.ipc")] // see linker.ld
pub extern "C" fn system_call(registers: &mut UserRegisters) {
    if let Err(error) = invoke(registers) {
        registers.rax = error as u64;
    }
    // Back to the invoker by `sysret`, past `process::enter`.
    process::flush_if_stale();
}

fn invoke(registers: &mut UserRegisters) -> Result<(), InvocationError> {
    // Both locked until the fast path has switched or found it does not apply (each locking
    // is a few translation blocks under TCG); the object cache first, as everywhere.
    let mut objects = OBJECTS.lock();
    let mut scheduler = SCHEDULER.lock();
    let invoker = scheduler.current();
    let process = &mut scheduler.processes[invoker];
    process.invocation_count += 1;
    let root = process.root;
    let descriptor =
        Descriptor::decode(registers.rdi).map_err(|_| InvocationError::MalformedDescriptor)?;
    // One lookup of the invoker's root node gives the target and, for a call, the invoker's
    // resume capability (each lookup is about ten translation blocks under TCG).
    let (held_target, invoker_resume) = objects.cache.node_and_resume(&root).map_or(
        (Capability::VOID, Capability::VOID),
        |(node, resume)| (node.get(register_slot(descriptor.target)), resume),
    );
    // No string, a call of a start capability or a return through a resume capability:
    // the fast path, which changes nothing when it does not apply. One test of a kind
    // code for the common case of neither (3 matches no descriptor's kind).
    let fast_kind = match held_target.kind() {
        CapType::Start => Kind::Call as u8,
        CapType::Resume => Kind::Return as u8,
        _ => 3,
    };
    if (registers.r13 == 0) & (descriptor.kind as u8 == fast_kind) {
        let sends = !descriptor.send.is_empty();
        let fast = if descriptor.kind == Kind::Call {
            fast_call(&mut objects, &mut scheduler, registers, invoker, held_target, invoker_resume, sends)
        } else {
            fast_return(&mut objects, &mut scheduler, registers, invoker, held_target)
        };
        if let Some(receiver) = fast {
            drop(objects);
            process::enter(scheduler, receiver)
        }
    }
    // What a checkpoint taken during the invocation writes for the invoker: its `invoke`,
    // run again after a restart. Such a checkpoint is taken only where a page is loaded
    // with memory short, before the invocation has changed anything (reading its string,
    // a page's method, the journal's, `make_process`); without this it wrote the registers
    // of the invoker's last switch or fault beside newer memory.
    let process = &mut scheduler.processes[invoker];
    process.registers = *registers;
    process.registers.rip -= 2;
    drop(scheduler);
    invoke_general(objects, registers, invoker, root, descriptor, held_target)
}

/// Every invocation the fast path does not take: kept out of line, so that the fast path's
/// code stays together (under TCG a jump to another page costs a lookup).
#[inline(never)]
fn invoke_general(
    mut objects: spin::MutexGuard<'static, Objects>,
    registers: &mut UserRegisters,
    invoker: usize,
    root: Capability,
    descriptor: Descriptor,
    held_target: Capability,
) -> Result<(), InvocationError> {
    // Before the invocation changes anything (its registers are in the table, at the
    // `syscall`): a kernel write (a string received, a page's method, the journal's, a
    // range's) must not take the dirty pages past what the log can take either.
    persistence::limit_dirty_pages(&mut objects);
    // Made first and filled in place: moving it (or an `ArrayVec` returned by `collect`)
    // is a `rep movsq`, an iteration per translation block under TCG.
    let mut message = Message {
        code: registers.rsi,
        words: [registers.rdx, registers.r10, registers.r8, registers.r9],
        string: MessageString::EMPTY,
        capabilities: ArrayVec::new(),
        badge: 0,
        resume: None,
    };
    if !descriptor.send.is_empty() {
        let invoker_node = objects.cache.node(&root).ok();
        for index in descriptor.send.iter() {
            let held = invoker_node.map_or(Capability::VOID, |node| node.get(register_slot(index)));
            message.capabilities.push(objects.cache.live_or_void(held));
        }
    }
    // A resume capability is checked by consuming it (below), not twice.
    let mut target = if held_target.kind() == CapType::Resume {
        held_target
    } else {
        objects.cache.live_or_void(held_target)
    };
    // A loop only for a forwarder: its test alone is a translation block under TCG.
    for _ in 0..INDIRECTION_DEPTH_MAX * usize::from(target.kind() == CapType::Indirector) {
        if target.kind() != CapType::Indirector {
            break;
        }
        let forward = objects
            .cache
            .node(&target)
            .map(|node| node.get(register_slot(0)));
        target = forward.map_or(Capability::VOID, |forward| {
            objects.cache.live_or_void(forward)
        });
    }

    let (string_address, string_length) = (registers.r12, registers.r13);
    if string_length > abi::INVOCATION_STRING_BYTES_MAX as u64 {
        return Err(InvocationError::StringTooLong);
    }
    // Most invocations carry no string: skip the walk of the invoker's space.
    if string_length != 0 {
        message.string = user_memory::read(&mut objects, &root, string_address, string_length)
            .map_err(|_| InvocationError::BadAddress)?
            .into();
    }
    message.badge = target.badge();

    // The scheduler stays locked from the receiver's lookup to the switch: each locking is a
    // few translation blocks under TCG.
    let (receiver, mut scheduler) = match target.kind() {
        CapType::Start => {
            if descriptor.kind == Kind::Call && !target.may_call() {
                return Err(InvocationError::NoCall);
            }
            let scheduler = SCHEDULER.lock();
            let receiver = scheduler
                .index_of(target.object())
                .ok_or(InvocationError::Void)?;
            let available = scheduler.processes[receiver].state == ProcessState::Available;
            // Returning to oneself: the invoker is about to become available.
            let returning_to_self = receiver == invoker && descriptor.kind == Kind::Return;
            if !available && !returning_to_self {
                drop(scheduler);
                drop(objects);
                stall(invoker, receiver, registers)
            }
            if available && kept_for_another(&scheduler, receiver, invoker) {
                drop(scheduler);
                drop(objects);
                yield_to_first_come(invoker, registers)
            }
            (receiver, scheduler)
        }
        CapType::Resume => {
            let scheduler = SCHEDULER.lock();
            let waiting = scheduler.index_of(target.object()).filter(|&caller| {
                scheduler.processes[caller].state == ProcessState::WaitingForReply
            });
            match waiting {
                Some(caller) if objects.cache.consume_resume(&target).is_ok() => {
                    message.badge = 0;
                    (caller, scheduler)
                }
                // Not consumed. A live resume capability whose caller does not wait is
                // refused; a revoked one is void, as it would have been before the match.
                _ if waiting.is_none() && objects.cache.check(&target).is_ok() => {
                    return Err(InvocationError::Void);
                }
                _ if descriptor.kind == Kind::Return => {
                    drop(scheduler);
                    drop(objects);
                    become_available_and_switch(invoker, registers)
                }
                _ => return Err(InvocationError::Void),
            }
        }
        CapType::Void if descriptor.kind == Kind::Return => {
            // Returning to nothing: just wait for the next message.
            drop(objects);
            become_available_and_switch(invoker, registers)
        }
        CapType::Void => return Err(InvocationError::Void),
        CapType::Checkpoint | CapType::Journal | CapType::Control | CapType::NetworkDevice => {
            let outcome = services::invoke(&mut objects, target, &message);
            let mut reply = match outcome {
                services::Outcome::Reply(reply) => reply,
                services::Outcome::WaitForInput => {
                    drop(objects);
                    let mut registers = *registers;
                    // Back over the two-byte `syscall`: the read runs again once input has
                    // arrived, and nothing of this one remains.
                    registers.rip -= 2;
                    process::wait_current(ProcessState::WaitingForInput, &registers)
                }
                services::Outcome::WaitUntilDurable(ticket) => {
                    drop(objects);
                    process::wait_current(ProcessState::WaitingForJournal { ticket }, registers)
                }
            };
            if descriptor.kind == Kind::Return {
                drop(objects);
                become_available_and_switch(invoker, registers)
            }
            deliver(&mut objects, &root, registers, Some(&descriptor), &mut reply);
            return Ok(());
        }
        _ => {
            let mut reply = methods::invoke(&mut objects, target, &message);
            // The method may have stopped the invoker (through its process capability).
            // The object cache stays locked for the reply unless the invoker goes.
            if methods::INVOKER_STOPPED.swap(false, core::sync::atomic::Ordering::Relaxed) {
                drop(objects);
                process::switch_to_next()
            }
            if descriptor.kind == Kind::Return {
                drop(objects);
                become_available_and_switch(invoker, registers)
            }
            // Most replies are words only, for an invoker that takes no capability: what
            // `deliver` would write, without its call and tests.
            // (One test of ORed lengths: the compiler makes a branch of each `&&` or `&`.)
            let not_words_only = reply.capabilities.len()
                | reply.string.len()
                | descriptor.receive.len()
                | usize::from(descriptor.resume.is_some());
            if not_words_only == 0 {
                receive(registers, reply.code, reply.words, reply.badge, 0);
            } else {
                deliver(&mut objects, &root, registers, Some(&descriptor), &mut reply);
            }
            return Ok(());
        }
    };

    if descriptor.kind == Kind::Call {
        message.resume = objects
            .cache
            .node_capability(CapType::Resume, root.object());
    }
    // Whatever a process sends a server, by a call, a send or a return, the server does on
    // the sender's meter and in its turns: a tenant that sends work to a shared server
    // rather than calls it gets no more time for it. (Read before a return makes the
    // invoker available, which ends its own serving.)
    let sender = scheduler.processes[invoker].as_caller();
    match descriptor.kind {
        Kind::Call => {
            let process = &mut scheduler.processes[invoker];
            process.registers.copy_from(registers);
            process.state = ProcessState::WaitingForReply;
        }
        Kind::Return => {
            scheduler.processes[invoker].registers.copy_from(registers);
            make_available(&mut scheduler, invoker);
        }
        Kind::Send => registers.rax = 0,
    }
    if target.kind() == CapType::Start && receiver != invoker {
        scheduler.processes[receiver].serve(sender);
    }
    let next = wake_with(&mut objects, &mut scheduler, receiver, &mut message);
    drop(objects);
    match descriptor.kind {
        // Hand the CPU straight to the receiver: the invoker waits anyway. The scheduler
        // stays locked from the message to the switch.
        Kind::Call | Kind::Return => enter_or_switch(scheduler, next),
        Kind::Send => Ok(()),
    }
}

/// Enters process `next`, or the next runnable one if it is [`process::NO_PROCESS`].
fn enter_or_switch(scheduler: spin::MutexGuard<'static, process::Scheduler>, next: usize) -> ! {
    if next == process::NO_PROCESS {
        drop(scheduler);
        process::switch_to_next()
    }
    process::enter(scheduler, next)
}

/// The common calls and returns, done with as few tests as the general path allows (L4's
/// and seL4's fast path, for the same reason: most IPC is a client calling a server and the
/// server replying, words only; under TCG each test ends a translation block).
///
/// A call of a start capability `held` (from the invoker's registers, not forwarded) whose
/// process is available: the invoker waits for the reply, and the receiver gets the
/// words, the badge and `resume`, the invoker's resume capability; its receive registers
/// are left void. The invoker sends no string, and capabilities (`sends`) only to a
/// receiver that takes none. `None`, with nothing changed, whenever the general path would
/// do anything else (refuse, stall, deliver capabilities, or deliver through a keeper).
#[allow(clippy::too_many_arguments)] // what the general path has at hand, unpacked
fn fast_call(
    objects: &mut Objects,
    scheduler: &mut process::Scheduler,
    registers: &UserRegisters,
    invoker: usize,
    held: Capability,
    resume: Capability,
    sends: bool,
) -> Option<usize> {
    if !held.may_call() {
        return None;
    }
    let receiver = scheduler.index_of(held.object())?;
    let waiting = &scheduler.processes[receiver];
    // The resume capability goes into the root node through `held`, where `deliver` writes
    // through the process's root capability: the same node, and the same version checked.
    if (waiting.state != ProcessState::Available)
        | waiting.waiting_for_keeper
        | (waiting.root.version() != held.version())
        | ((waiting.kept_for != process::NO_PROCESS) & (waiting.kept_for != invoker))
    {
        return None;
    }
    // What the receiver's `invoke` asked for, as `deliver` reads it.
    let receives = Descriptor::decode(waiting.registers.rdi).ok();
    let takes_capabilities = receives.is_some_and(|receives| !receives.receive.is_empty());
    if sends & takes_capabilities {
        return None;
    }
    match receives.and_then(|receives| receives.resume.map(|index| (index, receives.receive))) {
        Some((index, receive)) => {
            // Checks that `held` is live and gives the receiver's root node: the last test.
            let (node, translated_slots) = objects.cache.node_mut_translated(&held).ok()?;
            // Words only: every receive register is left void, as `deliver` leaves those a
            // message does not fill; then the resume register, as there (it may be one).
            let mut stale = false;
            for index in receive.iter() {
                clear_register(node, index);
                stale |= register_translated(translated_slots, index);
            }
            node.swap(register_slot(index), resume);
            stale |= register_translated(translated_slots, index);
            if stale {
                process::translations_stale();
            }
        }
        // Rare (capabilities taken, but no resume capability): the general path voids them.
        None if takes_capabilities => return None,
        None => objects.cache.check(&held).ok()?,
    }
    let caller = &mut scheduler.processes[invoker];
    caller.registers.copy_from(registers);
    caller.state = ProcessState::WaitingForReply;
    let caller = caller.as_caller();
    let receiving = &mut scheduler.processes[receiver];
    receive_words(&mut receiving.registers, registers, held.badge());
    receiving.state = ProcessState::Runnable;
    receiving.serve(caller);
    Some(receiver)
}

/// A return through a resume capability `held` (from the invoker's registers) to a process
/// waiting for it that asked for no resume capability of its own: the invoker becomes
/// available, the caller runs on with the words. Only to a caller that takes no
/// capabilities (what the reply sends is dropped), and `None` with nothing changed for
/// anything else.
fn fast_return(
    objects: &mut Objects,
    scheduler: &mut process::Scheduler,
    registers: &UserRegisters,
    invoker: usize,
    held: Capability,
) -> Option<usize> {
    let caller = scheduler.index_of(held.object())?;
    let waiting = &scheduler.processes[caller];
    // The caller's descriptor, as raw bits: a caller that asked for a resume capability has
    // that register set to void by a reply (`deliver`).
    let asked = waiting.registers.rdi;
    if (waiting.state != ProcessState::WaitingForReply)
        | waiting.waiting_for_keeper
        // Its meter ran out while it was served: `wake_with` settles that.
        | waiting.ran_out_while_served
        | (asked & descriptor::RECEIVES_RESUME != 0)
        // A caller that takes capabilities: the general path delivers them, or voids its
        // receive registers for a reply of words only.
        | (asked & descriptor::RECEIVE_COUNT != 0)
    {
        return None;
    }
    // Checks that `held` is live and uses it up: the last test.
    objects.cache.consume_resume(&held).ok()?;
    scheduler.processes[invoker].registers.copy_from(registers);
    make_available(scheduler, invoker);
    let receiving = &mut scheduler.processes[caller];
    receive_words(&mut receiving.registers, registers, 0);
    receiving.state = ProcessState::Runnable;
    Some(caller)
}

/// The receiving side of a message of words only, sent with the registers `sender`.
fn receive_words(receiver: &mut UserRegisters, sender: &UserRegisters, badge: u64) {
    let words = [sender.rdx, sender.r10, sender.r8, sender.r9];
    receive(receiver, sender.rsi, words, badge, 0);
}

/// What a receiver's registers get: the order (or reply) code, the words, the badge of the
/// capability invoked and the length of the string delivered.
fn receive(registers: &mut UserRegisters, code: u64, words: [u64; 4], badge: u64, string_length: u64) {
    registers.rax = code;
    [registers.rdx, registers.r10, registers.r8, registers.r9] = words;
    registers.r12 = badge;
    registers.r13 = string_length;
}

/// Makes the waiting process `receiver` runnable with `message` as the result of its
/// pending `invoke`. A keeper's reply restarts the process from its registers as they are
/// now (the keeper may have changed them); any other message is delivered into them.
/// Returns the process to run next for it: `receiver`, or see [`settle_time`].
fn wake_with(
    objects: &mut Objects,
    scheduler: &mut process::Scheduler,
    receiver: usize,
    message: &mut Message,
) -> usize {
    let process = &mut scheduler.processes[receiver];
    if !core::mem::take(&mut process.waiting_for_keeper) {
        // The receiver's descriptor was checked when it invoked; a process that never
        // invoked (or whose saved rdi is not a descriptor) receives no capabilities.
        let descriptor = Descriptor::decode(process.registers.rdi).ok();
        let root = process.root;
        deliver(
            objects,
            &root,
            &mut process.registers,
            descriptor.as_ref(),
            message,
        );
    }
    process.state = ProcessState::Runnable;
    if process.ran_out_while_served {
        return settle_time(objects, scheduler, receiver);
    }
    receiver
}

/// Process `index`, just given its reply, ran out of time while a server worked for it:
/// what its own timer tick would have done happens now. It runs on if its meters have time
/// again; otherwise it waits for time ([`process::NO_PROCESS`] is returned: nothing of its
/// to run), or its meter's keeper is told ([`hand_to_keeper`]).
fn settle_time(objects: &mut Objects, scheduler: &mut process::Scheduler, index: usize) -> usize {
    let process = &mut scheduler.processes[index];
    process.ran_out_while_served = false;
    let root = process.root;
    match process::settle_ran_out(objects, &root) {
        process::Settled::Runs => index,
        process::Settled::OutOfTime => {
            process.state = ProcessState::OutOfTime;
            process::NO_PROCESS
        }
        process::Settled::Keeper(keeper) => {
            let message = KeeperMessage { code: abi::keeper::METER_EXHAUSTED, words: [0; 4] };
            let next = hand_to_keeper(objects, scheduler, index, keeper, message);
            // A busy keeper: the process waits on it and, if it runs on servers only
            // meanwhile, settles again at its next reply.
            let process = &mut scheduler.processes[index];
            process.ran_out_while_served = process.state == ProcessState::Stalled;
            next
        }
    }
}

/// Process `index`, its registers saved, is to wait for its keeper `keeper` (a start
/// capability) to answer `keeper_message`. Returns the process to run next for it: the
/// keeper, given the message; or [`process::NO_PROCESS`] if the keeper is busy (the process
/// stalls on it and runs from its registers when the keeper becomes available: a fault
/// faults again) or not in the table (the process is stopped).
fn hand_to_keeper(
    objects: &mut Objects,
    scheduler: &mut process::Scheduler,
    index: usize,
    keeper: Capability,
    keeper_message: KeeperMessage,
) -> usize {
    let Some(keeper_index) = scheduler.index_of(keeper.object()) else {
        scheduler.processes[index].state = ProcessState::Stopped { exit_code: u64::MAX };
        return process::NO_PROCESS;
    };
    if scheduler.processes[keeper_index].state != ProcessState::Available {
        scheduler.processes[index].state = ProcessState::Stalled;
        scheduler.processes[keeper_index].stalled.push_back(index);
        return process::NO_PROCESS;
    }
    let root = scheduler.processes[index].root;
    let for_its_meter = keeper_message.code == abi::keeper::METER_EXHAUSTED;
    let mut message = message_for_keeper(objects, keeper, keeper_message, root);
    let process = &mut scheduler.processes[index];
    process.state = ProcessState::WaitingForReply;
    process.waiting_for_keeper = true;
    // A keeper works for the process (a virtual copy's keeper copying its page, say), on
    // its meter; except when its meter ran out, which the keeper is told about.
    if !for_its_meter {
        let caller = process.as_caller();
        scheduler.processes[keeper_index].serve(caller);
    }
    wake_with(objects, scheduler, keeper_index, &mut message)
}

/// What keeper `keeper` is sent about the process `root`: its process capability, and the
/// resume capability that restarts it.
fn message_for_keeper(objects: &Objects, keeper: Capability, keeper_message: KeeperMessage, root: Capability) -> Message {
    Message {
        code: keeper_message.code,
        words: keeper_message.words,
        string: MessageString::EMPTY,
        capabilities: [root].into_iter().collect(),
        badge: keeper.badge(),
        resume: objects.cache.node_capability(CapType::Resume, root.object()),
    }
}

/// The target is busy: the invoker waits on its queue and will run its `syscall` again.
fn stall(invoker: usize, target: usize, registers: &UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let process = &mut scheduler.processes[invoker];
        process.registers.copy_from(registers);
        // Back over the two-byte `syscall`, so that the invocation restarts from scratch.
        process.registers.rip -= 2;
        process.state = ProcessState::Stalled;
        scheduler.processes[target].stalled.push_back(invoker);
    }
    process::switch_to_next()
}

/// Marks `index` available and lets every process stalled on it try again, keeping it for
/// the first of them for [`KEPT_TICKS`]: without that the caller just answered, which runs
/// first (the return switches to it), called again at once, and a client that called in a
/// loop held a shared server for its whole time slice while the others stalled.
fn make_available(scheduler: &mut process::Scheduler, index: usize) {
    let server = &mut scheduler.processes[index];
    server.state = ProcessState::Available;
    server.kept_for = process::NO_PROCESS;
    server.serve_none();
    server.ran_out_while_served = false;
    // Usually nobody waits: a test inline rather than a call of `pop_front`.
    if server.stalled.is_empty() {
        return;
    }
    let mut first = process::NO_PROCESS;
    while let Some(stalled) = scheduler.processes[index].stalled.pop_front() {
        if scheduler.processes[stalled].state == ProcessState::Stalled {
            scheduler.processes[stalled].state = ProcessState::Runnable;
            if first == process::NO_PROCESS {
                first = stalled;
            }
        }
    }
    let server = &mut scheduler.processes[index];
    server.kept_for = first;
    server.kept_until_tick = timer::ticks() + KEPT_TICKS;
}

/// How long at most a process that became available is kept for the first of those
/// stalled on it: long enough for it to have its turn (the ticks of a round of two or three
/// runnable groups; with more, the keeping may end first and the first come tries again as
/// one of all), short enough that one that runs on without trying again holds nobody up for
/// long.
const KEPT_TICKS: u64 = 3;

/// Whether the available process `server` is kept for a process other than `invoker`: one
/// still waiting for its turn to try again (runnable; not one that went on to wait for
/// something else, ran out of time, was stopped or destroyed).
fn kept_for_another(scheduler: &process::Scheduler, server: usize, invoker: usize) -> bool {
    let kept_for = scheduler.processes[server].kept_for;
    kept_for != process::NO_PROCESS
        && kept_for != invoker
        && scheduler.processes[kept_for].state == ProcessState::Runnable
        && timer::ticks() < scheduler.processes[server].kept_until_tick
}

/// The target is kept for the first of those that stalled on it: the invoker lets it go
/// first and runs its `syscall` again at its next turn (not queued on the target: if the
/// first never comes, the keeping ends by itself and nobody is left stalled).
fn yield_to_first_come(invoker: usize, registers: &UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let process = &mut scheduler.processes[invoker];
        process.registers.copy_from(registers);
        process.registers.rip -= 2;
        process.state = ProcessState::Runnable;
    }
    process::switch_to_next()
}

fn become_available_and_switch(invoker: usize, registers: &UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        scheduler.processes[invoker].registers.copy_from(registers);
        make_available(&mut scheduler, invoker);
    }
    // The network service waiting again is the moment its pending notification can go.
    if network::has_pending() {
        network_notify();
    }
    process::switch_to_next()
}

/// The current process faulted (its `registers` at the faulting instruction) and `keeper`,
/// a start capability, is to handle it: the process waits for the keeper's reply, which
/// restarts it. If the keeper is busy, the process stalls at the faulting instruction and
/// faults again when the keeper becomes available.
pub fn invoke_keeper(
    keeper: Capability,
    keeper_message: KeeperMessage,
    registers: &UserRegisters,
) -> ! {
    let mut objects = OBJECTS.lock();
    let mut scheduler = SCHEDULER.lock();
    let faulter = scheduler.current();
    scheduler.processes[faulter].registers.copy_from(registers);
    let next = hand_to_keeper(&mut objects, &mut scheduler, faulter, keeper, keeper_message);
    drop(objects);
    enter_or_switch(scheduler, next)
}

/// Journal commits up to `ticket` are durable: their processes get the reply and run on.
pub fn journal_durable(objects: &mut Objects, ticket: u64) {
    for process in SCHEDULER.lock().processes.iter_mut() {
        if let ProcessState::WaitingForJournal { ticket: waiting } = process.state
            && waiting <= ticket
        {
            let descriptor = abi::descriptor::Descriptor::decode(process.registers.rdi).ok();
            let mut reply = Message::reply(0, [waiting, 0, 0, 0]);
            deliver(objects, &process.root, &mut process.registers, descriptor.as_ref(), &mut reply);
            process.state = ProcessState::Runnable;
        }
    }
}

/// Fires the network device's armed notification if its time has come, and delivers every
/// pending one whose target is available (as a send: no resume capability); the others stay
/// pending. Called where no lock is held: the idle loop, ring 3's timer and the device's
/// interrupt in ring 3, and a process becoming available.
pub fn network_notify() {
    network::check_events();
    if !network::has_pending() {
        return;
    }
    let mut objects = OBJECTS.lock();
    let mut scheduler = SCHEDULER.lock();
    for (target, reason) in network::take_pending() {
        let live = objects.cache.live_or_void(target);
        // A revoked target, or a process no longer in the table, takes nothing.
        if live.kind() != CapType::Start {
            continue;
        }
        let Some(receiver) = scheduler.index_of(live.object()) else {
            continue;
        };
        if scheduler.processes[receiver].state != ProcessState::Available {
            network::put_back((target, reason));
            continue;
        }
        let mut message = Message {
            code: abi::network_notification::ORDER,
            words: [reason, persistence::boot_count(), 0, 0],
            string: MessageString::EMPTY,
            capabilities: ArrayVec::new(),
            badge: live.badge(),
            resume: None,
        };
        wake_with(&mut objects, &mut scheduler, receiver, &mut message);
    }
}

/// The system was restored from its store: each process holding the network device in a
/// capability register gets a `restarted` notice (through a start capability the kernel
/// makes, badge `network_notification::RESTART_BADGE`), since what it had armed is gone.
pub fn network_restarted() {
    let objects = OBJECTS.lock();
    let roots: alloc::vec::Vec<Capability> = SCHEDULER.lock().processes.iter().map(|process| process.root).collect();
    for root in roots {
        let holds = objects.cache.node(&root).is_ok_and(|node| {
            (0..abi::CAPABILITY_REGISTER_COUNT as u8)
                .any(|index| node.get(register_slot(index)).kind() == CapType::NetworkDevice)
        });
        if let (true, Some(start)) = (holds, objects.cache.node_capability(CapType::Start, root.object())) {
            network::restart_notice(start.with_badge(abi::network_notification::RESTART_BADGE));
        }
    }
}
