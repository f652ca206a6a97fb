//! Kernel objects' methods: what invoking a capability other than a start or resume
//! capability does.
//!
//! Each type's invocation is decoded by the `Request` enum generated from the interface
//! description (`holdfast_abi::interface`), which checks the argument ranges it names; what
//! needs the object (rights, types of capability arguments) is checked here. A method's
//! result goes back to the invoker as a [`Message`]: code 0 with result words, a string and
//! capabilities on success, an object error code otherwise. Each method checks everything
//! before it changes anything, so a refused invocation leaves no trace.

use alloc::vec::Vec;
use holdfast_abi::interface::{
    ObjectError, clock, console, meter, node, number, page, process, space,
};
use holdfast_abi::methods::space_flags;
use holdfast_objects::node::process_root;
use holdfast_objects::restart;
use holdfast_objects::{CapType, Capability, Rights, Slot};

use crate::arch::syscall::UserRegisters;
use crate::arch::{self, timer};
use crate::persistence;
use crate::message::Message;
use crate::objects::Objects;
use crate::process::{ProcessState, SCHEDULER};

type MethodResult = Result<Message, ObjectError>;

fn ok(words: [u64; 4]) -> MethodResult {
    Ok(Message::reply(0, words))
}

fn ok_capability(capability: Capability) -> MethodResult {
    let mut reply = Message::reply(0, [0; 4]);
    reply.capabilities.push(capability);
    Ok(reply)
}

/// Set when a method stopped the process invoking it (`process.stop` on itself), which then
/// gets no reply: one flag for the invocation path to test, where looking the invoker up
/// again would cost a lock and a few tests on every invocation. A method that changes the
/// invoker's state in any other way must set it too.
pub static INVOKER_STOPPED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Runs `message.code` as an order on the kernel object `target` (already checked live).
pub fn invoke(objects: &mut Objects, target: Capability, message: &Message) -> Message {
    let header = message.header();
    let identify = || ok(identity(&target));
    let result = match target.kind() {
        CapType::Number => match number::Request::decode(&header) {
            Ok(number::Request::Identify) => identify(),
            Ok(number::Request::Value) => {
                let [first, second] = target.number_words().expect("a number capability");
                ok([first, second, 0, 0])
            }
            Err(error) => Err(error),
        },
        CapType::Page => match page::Request::decode(&header) {
            Ok(page::Request::Identify) => identify(),
            Ok(request) => page_method(objects, target, request, message),
            Err(error) => Err(error),
        },
        CapType::Node => match node::Request::decode(&header) {
            Ok(node::Request::Identify) => identify(),
            Ok(request) => node_method(objects, target, request, message),
            Err(error) => Err(error),
        },
        CapType::Space => match space::Request::decode(&header) {
            Ok(space::Request::Identify) => identify(),
            Ok(request) => space_method(objects, target, request, message),
            Err(error) => Err(error),
        },
        CapType::Process => match process::Request::decode(&header) {
            Ok(process::Request::Identify) => identify(),
            Ok(request) => process_method(objects, target, request, message),
            Err(error) => Err(error),
        },
        CapType::Meter => match meter::Request::decode(&header) {
            Ok(meter::Request::Identify) => identify(),
            Ok(request) => meter_method(objects, target, request, message),
            Err(error) => Err(error),
        },
        CapType::Console => match console::Request::decode(&header) {
            Ok(console::Request::Identify) => identify(),
            Ok(console::Request::Write) => {
                crate::console::write_bytes(&message.string);
                ok([message.string.len() as u64, 0, 0, 0])
            }
            Err(error) => Err(error),
        },
        CapType::Clock => match clock::Request::decode(&header) {
            Ok(clock::Request::Identify) => identify(),
            // Since this boot: a restart starts the clock again, and counts a boot.
            Ok(clock::Request::Now) => ok([
                timer::tsc_to_nanoseconds(arch::read_tsc() - arch::boot::tsc_at_entry()),
                persistence::boot_count(),
                0,
                0,
            ]),
            Err(error) => Err(error),
        },
        CapType::Range => {
            let mut invoker_destroyed = false;
            let result = crate::range::invoke(objects, target, message, &mut invoker_destroyed);
            if invoker_destroyed {
                INVOKER_STOPPED.store(true, core::sync::atomic::Ordering::Relaxed);
            }
            result
        }
        // Start, resume and indirector capabilities never reach here (the IPC path takes
        // them); void fails before.
        _ => Err(ObjectError::InvalidOrder),
    };
    result.unwrap_or_else(|error| Message::reply(error as u64, [0; 4]))
}

/// What `identify` answers for any capability: its type code and rights.
pub fn identity(target: &Capability) -> [u64; 4] {
    [target.kind() as u64, u64::from(target.rights().bits()), 0, 0]
}

pub fn writable(target: &Capability) -> Result<(), ObjectError> {
    if target.may_write() {
        Ok(())
    } else {
        Err(ObjectError::ReadOnly)
    }
}

/// The first capability sent: a method's capability argument (void if none was sent).
fn argument(message: &Message) -> Capability {
    message
        .capabilities
        .first()
        .copied()
        .unwrap_or(Capability::VOID)
}

fn page_method(
    objects: &mut Objects,
    target: Capability,
    request: page::Request,
    message: &Message,
) -> MethodResult {
    objects
        .ensure_resident(&[target.object()], true)
        .map_err(|_| ObjectError::Unavailable)?;
    let frame = objects
        .cache
        .page(&target)
        .map_err(|_| ObjectError::InvalidOrder)?;
    match request {
        // The decoder checked `offset + length <= 4096`.
        page::Request::Read { offset, length } => {
            let mut reply = Message::reply(0, [length, 0, 0, 0]);
            let range = offset as usize..(offset + length) as usize;
            reply.string = frame.bytes()[range].to_vec().into();
            Ok(reply)
        }
        page::Request::Write { offset } => {
            let range = offset as usize..offset as usize + message.string.len();
            page_for_writing(objects, &target)?[range].copy_from_slice(&message.string);
            ok([message.string.len() as u64, 0, 0, 0])
        }
        page::Request::Zero => {
            page_for_writing(objects, &target)?.fill(0);
            ok([0; 4])
        }
        page::Request::CopyFrom => {
            let source = argument(message);
            // Both kept: making room for the source alone could evict the target loaded above.
            objects
                .ensure_resident(&[target.object(), source.object()], true)
                .map_err(|_| ObjectError::Unavailable)?;
            // A copy on the kernel stack (128 KiB, empty at each entry): the two pages may
            // be one, and the cache lends one frame at a time.
            let bytes = *objects.cache.page(&source).map_err(|_| ObjectError::WrongType)?.bytes();
            page_for_writing(objects, &target)?.copy_from_slice(&bytes);
            ok([0; 4])
        }
        page::Request::Weaken => ok_capability(target.restricted(Rights::READ_ONLY)),
        page::Request::Identify => unreachable!("answered by the caller"),
    }
}

/// A live page's bytes for a write through `target`: marks the page dirty (only a write
/// may make the next checkpoint store it) and keeps a checkpoint's copy of it first.
fn page_for_writing<'a>(
    objects: &'a mut Objects,
    target: &Capability,
) -> Result<&'a mut [u8; crate::memory::PAGE_BYTES], ObjectError> {
    writable(target)?;
    persistence::before_page_write(&objects.cache, target.object());
    let frame = objects.cache.page_mut(target).map_err(|_| ObjectError::InvalidOrder)?;
    Ok(frame.bytes_mut())
}

fn slot(word: u64) -> Result<Slot, ObjectError> {
    Slot::new(word).ok_or(ObjectError::InvalidSlot)
}

/// Swaps `capability` into `slot` of the node `target` names and returns the old one, after
/// dropping any cached translation that went through the node.
fn swap_slot(
    objects: &mut Objects,
    target: &Capability,
    slot: Slot,
    capability: Capability,
) -> Result<Capability, ObjectError> {
    writable(target)?;
    let node = objects
        .cache
        .node_mut(target)
        .map_err(|_| ObjectError::InvalidOrder)?;
    let old = node.swap(slot, capability);
    crate::process::node_changed(objects, target.object(), slot);
    Ok(objects.cache.live_or_void(old))
}

fn fetch_slot(objects: &Objects, target: &Capability, index: u64) -> MethodResult {
    let fetched = objects.cache.fetch(target, slot(index)?);
    ok_capability(fetched.map_err(|_| ObjectError::InvalidOrder)?)
}

fn node_method(
    objects: &mut Objects,
    target: Capability,
    request: node::Request,
    message: &Message,
) -> MethodResult {
    let made_from_node = |objects: &Objects, kind| {
        writable(&target)?;
        let made = objects.cache.node_capability(kind, target.object());
        made.ok_or(ObjectError::InvalidOrder)
    };
    match request {
        node::Request::Fetch { slot: index } => fetch_slot(objects, &target, index),
        node::Request::Swap { slot: index } => ok_capability(swap_slot(
            objects,
            &target,
            slot(index)?,
            argument(message),
        )?),
        node::Request::Clear { slot: index } => {
            swap_slot(objects, &target, slot(index)?, Capability::VOID)?;
            ok([0; 4])
        }
        node::Request::Weaken => ok_capability(target.weakened()),
        node::Request::MakeSpace { height, flags } => {
            writable(&target)?;
            let keeper_node = flags & space_flags::KEEPER != 0;
            let space =
                Capability::space(target.object(), target.version(), height as u8, keeper_node);
            ok_capability(space.ok_or(ObjectError::OutOfRange)?)
        }
        node::Request::MakeIndirector { badge } => {
            ok_capability(made_from_node(objects, CapType::Indirector)?.with_badge(badge))
        }
        node::Request::MakeMeter => {
            // Below a live meter only: a meter made at run time never escapes the tree.
            let parent = argument(message);
            let meter = made_from_node(objects, CapType::Meter)?;
            if parent.kind() != CapType::Meter || objects.cache.check(&parent).is_err() {
                return Err(ObjectError::WrongType);
            }
            swap_slot(objects, &target, crate::process::METER_PARENT_SLOT, parent)?;
            ok_capability(meter)
        }
        node::Request::MakeProcess => {
            writable(&target)?;
            // The limits on processes: memory for their tables, and page ids on the store
            // for the checkpoint directory that names them (a checkpoint takes any number).
            // Refused here, not a heap exhausted or a checkpoint failing later. Room is
            // made first: it may evict nodes, this one too, which the lookup below loads
            // again (a process's root node, once it is one, stays).
            let room = |objects: &mut Objects| {
                persistence::room_for_process(objects)
                    && persistence::directory_room_for_process(objects, crate::process::table_length())
            };
            if !crate::process::is_adopted(target.object()) && !room(objects) {
                return Err(ObjectError::Exhausted);
            }
            let process = made_from_node(objects, CapType::Process)?;
            crate::process::adopt(process);
            ok_capability(process)
        }
        node::Request::Sense { slot: index } => {
            // Described, never invoked: the capability's own type, not its target's.
            let held = objects.cache.node(&target).map_err(|_| ObjectError::InvalidOrder)?.get(slot(index)?);
            ok(identity(&objects.cache.live_or_void(held)))
        }
        node::Request::Occupied => occupied(objects, &target),
        node::Request::Identify => unreachable!("answered by the caller"),
    }
}

/// `node.occupied` and `space.occupied`: which slots of the node hold a live capability.
fn occupied(objects: &Objects, target: &Capability) -> MethodResult {
    let node = objects.cache.node(target).map_err(|_| ObjectError::InvalidOrder)?;
    let occupied = (0..holdfast_objects::NODE_SLOT_COUNT as u64)
        .filter_map(|index| Slot::new(index).map(|at| (index, node.get(at))))
        .filter(|(_, held)| objects.cache.live_or_void(*held).kind() != CapType::Void)
        .fold(0u64, |slots, (index, _)| slots | 1 << index);
    ok([occupied, 0, 0, 0])
}

fn space_method(
    objects: &mut Objects,
    target: Capability,
    request: space::Request,
    message: &Message,
) -> MethodResult {
    match request {
        space::Request::Fetch { slot: index } => fetch_slot(objects, &target, index),
        space::Request::Swap { slot: index } => {
            let stored = argument(message);
            if !matches!(
                stored.kind(),
                CapType::Void | CapType::Page | CapType::Space
            ) {
                return Err(ObjectError::WrongType);
            }
            ok_capability(swap_slot(objects, &target, slot(index)?, stored)?)
        }
        space::Request::Info => {
            let (height, keeper_node) = target.space_shape().expect("a space capability");
            let flags = if keeper_node { space_flags::KEEPER } else { 0 };
            ok([u64::from(height), flags, 0, 0])
        }
        space::Request::Weaken => ok_capability(target.restricted(Rights::READ_ONLY)),
        space::Request::Occupied => occupied(objects, &target),
        space::Request::Identify => unreachable!("answered by the caller"),
    }
}

/// The register file as `read_registers` returns it: 18 little-endian words in the order
/// of [`UserRegisters`] (rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15, rip, rsp, rflags).
fn registers_to_bytes(registers: &UserRegisters) -> Vec<u8> {
    let words = registers_as_words(registers);
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

fn registers_as_words(registers: &UserRegisters) -> [u64; 18] {
    let r = registers;
    [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13,
        r.r14, r.r15, r.rip, r.rsp, r.rflags,
    ]
}

/// Registers from `write_registers`' string, checked by [`restart::user_registers`] (the
/// checks a restart makes on a root node's registers too).
fn registers_from_bytes(bytes: &[u8]) -> Result<UserRegisters, ObjectError> {
    let mut words = [0u64; restart::REGISTER_COUNT];
    if bytes.len() != words.len() * 8 {
        return Err(ObjectError::OutOfRange);
    }
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    }
    let [rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rip, rsp, rflags] =
        restart::user_registers(words).map_err(|_| ObjectError::OutOfRange)?;
    Ok(UserRegisters {
        rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rip, rsp, rflags,
    })
}

fn process_method(
    objects: &mut Objects,
    target: Capability,
    request: process::Request,
    message: &Message,
) -> MethodResult {
    let index = SCHEDULER.lock().index_of(target.object());
    let index = index.ok_or(ObjectError::InvalidOrder)?;
    // What a slot of the process's root node holds, void if revoked.
    let root_slot = |objects: &Objects, slot: Slot| {
        let node = objects
            .cache
            .node(&target)
            .map_err(|_| ObjectError::InvalidOrder)?;
        Ok(objects.cache.live_or_void(node.get(slot)))
    };
    let set_slot = |objects: &mut Objects, slot: Slot, expected: CapType| {
        let stored = argument(message);
        if !stored.is_void() && stored.kind() != expected {
            return Err(ObjectError::WrongType);
        }
        let node = objects
            .cache
            .node_mut(&target)
            .map_err(|_| ObjectError::InvalidOrder)?;
        node.swap(slot, stored);
        crate::process::node_changed(objects, target.object(), slot);
        ok([0; 4])
    };
    match request {
        process::Request::ReadRegisters => {
            let registers = SCHEDULER.lock().processes[index].registers;
            let mut reply = Message::reply(0, [0; 4]);
            reply.string = registers_to_bytes(&registers).into();
            Ok(reply)
        }
        process::Request::WriteRegisters => {
            let registers = registers_from_bytes(&message.string)?;
            let mut scheduler = SCHEDULER.lock();
            if scheduler.current() == index {
                // The invoker's own registers are about to be overwritten by the reply.
                return Err(ObjectError::NoRight);
            }
            scheduler.processes[index].registers = registers;
            ok([0; 4])
        }
        process::Request::FetchRegister { index: register } => {
            let register =
                process_root::capability_register(register).ok_or(ObjectError::InvalidSlot)?;
            ok_capability(root_slot(objects, register)?)
        }
        process::Request::SwapRegister { index: register } => {
            let register =
                process_root::capability_register(register).ok_or(ObjectError::InvalidSlot)?;
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            let old = node.swap(register, argument(message));
            // The root node may also be part of a space tree.
            crate::process::node_changed(objects, target.object(), register);
            ok_capability(objects.cache.live_or_void(old))
        }
        process::Request::FetchSpace => ok_capability(root_slot(objects, process_root::SPACE)?),
        process::Request::SetSpace => set_slot(objects, process_root::SPACE, CapType::Space),
        process::Request::SetKeeper => set_slot(objects, process_root::KEEPER, CapType::Start),
        process::Request::SetMeter => {
            let set = set_slot(objects, process_root::METER, CapType::Meter)?;
            crate::process::regroup(objects, index);
            Ok(set)
        }
        process::Request::MakeStart { badge } => {
            let start = objects
                .cache
                .node_capability(CapType::Start, target.object());
            ok_capability(start.ok_or(ObjectError::InvalidOrder)?.with_badge(badge))
        }
        process::Request::StartBadge => {
            // The decoder checked the type; a start capability to another process tells
            // this one's holder nothing.
            let start = objects.cache.live_or_void(argument(message));
            if start.kind() != CapType::Start || start.object() != target.object() {
                return Err(ObjectError::WrongType);
            }
            ok([start.badge(), 0, 0, 0])
        }
        process::Request::Start => {
            // Only the initial system's processes run unmetered (the kernel starts those).
            if root_slot(objects, process_root::METER)?.kind() != CapType::Meter {
                return Err(ObjectError::NoRight);
            }
            crate::process::regroup(objects, index);
            let mut scheduler = SCHEDULER.lock();
            let process = &mut scheduler.processes[index];
            if matches!(
                process.state,
                ProcessState::Stopped { .. } | ProcessState::Faulted(_)
            ) {
                // Whatever it served when it stopped, it now runs for itself.
                process.serve_none();
                process.state = ProcessState::Runnable;
            }
            ok([0; 4])
        }
        process::Request::Stop { exit_code } => {
            let mut scheduler = SCHEDULER.lock();
            scheduler.processes[index].state = ProcessState::Stopped { exit_code };
            if scheduler.current() == index {
                INVOKER_STOPPED.store(true, core::sync::atomic::Ordering::Relaxed);
            }
            ok([0; 4])
        }
        process::Request::Identify => unreachable!("answered by the caller"),
    }
}

/// A meter is a node: slot 0 a number holding the microseconds left, slot 1 the keeper,
/// slot 2 the parent, slot 3 the share (`process::meters`).
fn meter_method(
    objects: &mut Objects,
    target: Capability,
    request: meter::Request,
    message: &Message,
) -> MethodResult {
    match request {
        meter::Request::Remaining => {
            let node = objects
                .cache
                .node(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            // A debt (negative, `process::meters`) is no time left.
            let left = node
                .get(slot(0)?)
                .number_words()
                .map_or(0, |[left, _]| (left as i64).max(0) as u64);
            ok([left, 0, 0, 0])
        }
        meter::Request::Refill { microseconds } => {
            writable(&target)?;
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            // Stored as a signed number (a debt is negative).
            let microseconds = microseconds.min(i64::MAX as u64);
            node.swap(slot(0)?, Capability::number([microseconds, 0]));
            // A meter node may also be part of a space tree.
            crate::process::node_changed(objects, target.object(), slot(0)?);
            crate::process::meter_refilled(objects, target.object());
            ok([0; 4])
        }
        meter::Request::SetShare { microseconds } => {
            writable(&target)?;
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            let share = crate::process::METER_SHARE_SLOT;
            node.swap(share, Capability::number([microseconds, 0]));
            crate::process::node_changed(objects, target.object(), share);
            crate::process::meter_refilled(objects, target.object());
            ok([0; 4])
        }
        meter::Request::Weaken => ok_capability(target.restricted(Rights::READ_ONLY)),
        meter::Request::SetKeeper => {
            writable(&target)?;
            let keeper = argument(message);
            if !keeper.is_void() && keeper.kind() != CapType::Start {
                return Err(ObjectError::WrongType);
            }
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            node.swap(slot(1)?, keeper);
            crate::process::node_changed(objects, target.object(), slot(1)?);
            ok([0; 4])
        }
        meter::Request::Identify => unreachable!("answered by the caller"),
    }
}
