//! Kernel objects' methods: what invoking a capability other than a start or resume
//! capability does.
//!
//! Order codes and errors are the ABI's (`holdfast_abi::methods`). A method's result goes
//! back to the invoker as a [`Message`]: code 0 with result words, a string and capabilities
//! on success, an object error code otherwise. Each method checks everything before it
//! changes anything, so a refused invocation leaves no trace.

use alloc::vec::Vec;
use holdfast_abi::methods::{self as orders, ObjectError};
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, Rights, Slot};

use crate::arch::syscall::UserRegisters;
use crate::arch::{self, timer};
use crate::ipc::Message;
use crate::memory::PAGE_BYTES;
use crate::objects::Objects;
use crate::process::{self, ProcessState, SCHEDULER};

type MethodResult = Result<Message, ObjectError>;

fn ok(words: [u64; 4]) -> MethodResult {
    Ok(Message::reply(0, words))
}

fn ok_capability(capability: Capability) -> MethodResult {
    let mut reply = Message::reply(0, [0; 4]);
    reply.capabilities.push(capability);
    Ok(reply)
}

/// Runs `message.code` as an order on the kernel object `target` (already checked live).
pub fn invoke(objects: &mut Objects, target: Capability, message: Message) -> Message {
    let result = match target.kind() {
        _ if message.code == orders::IDENTIFY => ok([
            target.kind() as u64,
            u64::from(target.rights().bits()),
            0,
            0,
        ]),
        CapType::Number => number(target, &message),
        CapType::Page => page(objects, target, &message),
        CapType::Node => node(objects, target, &message),
        CapType::Space => space(objects, target, &message),
        CapType::Process => process_method(objects, target, &message),
        CapType::Meter => meter(objects, target, &message),
        CapType::Console => console(&message),
        CapType::Clock => clock(&message),
        _ => Err(ObjectError::InvalidOrder),
    };
    result.unwrap_or_else(|error| Message::reply(error as u64, [0; 4]))
}

fn number(target: Capability, message: &Message) -> MethodResult {
    match message.code {
        orders::number::VALUE => {
            let [first, second] = target.number_words().expect("a number capability");
            ok([first, second, 0, 0])
        }
        _ => Err(ObjectError::InvalidOrder),
    }
}

fn console(message: &Message) -> MethodResult {
    match message.code {
        orders::console::WRITE => {
            crate::console::write_bytes(&message.string);
            ok([message.string.len() as u64, 0, 0, 0])
        }
        _ => Err(ObjectError::InvalidOrder),
    }
}

fn clock(message: &Message) -> MethodResult {
    match message.code {
        orders::clock::NOW => ok([timer::tsc_to_nanoseconds(arch::read_tsc()), 0, 0, 0]),
        _ => Err(ObjectError::InvalidOrder),
    }
}

fn writable(target: &Capability) -> Result<(), ObjectError> {
    if target.may_write() {
        Ok(())
    } else {
        Err(ObjectError::ReadOnly)
    }
}

fn page(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    let [offset, length, ..] = message.words;
    let in_page = |offset: u64, length: u64| {
        offset
            .checked_add(length)
            .is_some_and(|end| end <= PAGE_BYTES as u64)
    };
    match message.code {
        orders::page::READ => {
            if !in_page(offset, length) {
                return Err(ObjectError::OutOfRange);
            }
            let frame = objects
                .cache
                .page_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            let mut reply = Message::reply(0, [length, 0, 0, 0]);
            reply.string = frame.bytes_mut()[offset as usize..(offset + length) as usize].to_vec();
            Ok(reply)
        }
        orders::page::WRITE => {
            writable(&target)?;
            let length = message.string.len() as u64;
            if !in_page(offset, length) {
                return Err(ObjectError::OutOfRange);
            }
            let frame = objects
                .cache
                .page_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            frame.bytes_mut()[offset as usize..(offset + length) as usize]
                .copy_from_slice(&message.string);
            ok([length, 0, 0, 0])
        }
        orders::page::ZERO => {
            writable(&target)?;
            let frame = objects
                .cache
                .page_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            frame.bytes_mut().fill(0);
            ok([0; 4])
        }
        orders::page::WEAKEN => ok_capability(target.restricted(Rights::READ_ONLY)),
        _ => Err(ObjectError::InvalidOrder),
    }
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
    process::node_changed(target.object());
    Ok(objects.cache.live_or_void(old))
}

/// The methods node and space capabilities share: fetch, swap, clear.
fn slot_method(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    let argument = message
        .capabilities
        .first()
        .copied()
        .unwrap_or(Capability::VOID);
    match message.code {
        orders::node::FETCH => ok_capability(
            objects
                .cache
                .fetch(&target, slot(message.words[0])?)
                .map_err(|_| ObjectError::InvalidOrder)?,
        ),
        orders::node::SWAP => ok_capability(swap_slot(
            objects,
            &target,
            slot(message.words[0])?,
            argument,
        )?),
        orders::node::CLEAR => {
            swap_slot(objects, &target, slot(message.words[0])?, Capability::VOID)?;
            ok([0; 4])
        }
        orders::node::WEAKEN => ok_capability(target.weakened()),
        _ => Err(ObjectError::InvalidOrder),
    }
}

fn node(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    let made_from_node = |kind| {
        writable(&target)?;
        let made = objects.cache.node_capability(kind, target.object());
        made.ok_or(ObjectError::InvalidOrder)
    };
    match message.code {
        orders::node::MAKE_SPACE => {
            let [height, flags, ..] = message.words;
            let keeper_node = match flags {
                0 => false,
                orders::node::SPACE_FLAG_KEEPER => true,
                _ => return Err(ObjectError::OutOfRange),
            };
            let height = u8::try_from(height).map_err(|_| ObjectError::OutOfRange)?;
            writable(&target)?;
            let space = Capability::space(target.object(), target.version(), height, keeper_node);
            ok_capability(space.ok_or(ObjectError::OutOfRange)?)
        }
        orders::node::MAKE_INDIRECTOR => {
            ok_capability(made_from_node(CapType::Indirector)?.with_badge(message.words[0]))
        }
        orders::node::MAKE_METER => ok_capability(made_from_node(CapType::Meter)?),
        orders::node::MAKE_PROCESS => {
            let process = made_from_node(CapType::Process)?;
            process::adopt(process);
            ok_capability(process)
        }
        _ => slot_method(objects, target, message),
    }
}

fn space(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    match message.code {
        orders::space::INFO => {
            let (height, keeper_node) = target.space_shape().expect("a space capability");
            let flags = if keeper_node {
                orders::node::SPACE_FLAG_KEEPER
            } else {
                0
            };
            ok([u64::from(height), flags, 0, 0])
        }
        orders::node::FETCH | orders::node::SWAP | orders::node::CLEAR | orders::node::WEAKEN => {
            slot_method(objects, target, message)
        }
        _ => Err(ObjectError::InvalidOrder),
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

/// Registers from `write_registers`' string; `rip` and `rsp` must be user addresses, and
/// only the arithmetic flags, direction and trap flags come from the caller: interrupts stay
/// on and I/O privilege stays 0, or a process could stop the clock or reach the hardware.
fn registers_from_bytes(bytes: &[u8]) -> Result<UserRegisters, ObjectError> {
    if bytes.len() != 18 * 8 {
        return Err(ObjectError::OutOfRange);
    }
    let mut words = [0u64; 18];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    }
    let user = holdfast_abi::USER_ADDRESS_END;
    if words[15] >= user || words[16] > user {
        return Err(ObjectError::OutOfRange);
    }
    const USER_FLAGS: u64 = 0x0000_0cd5; // CF PF AF ZF SF TF DF OF
    const INTERRUPTS_ON: u64 = 0x202;
    let [
        rax,
        rbx,
        rcx,
        rdx,
        rsi,
        rdi,
        rbp,
        r8,
        r9,
        r10,
        r11,
        r12,
        r13,
        r14,
        r15,
        rip,
        rsp,
        rflags,
    ] = words;
    Ok(UserRegisters {
        rax,
        rbx,
        rcx,
        rdx,
        rsi,
        rdi,
        rbp,
        r8,
        r9,
        r10,
        r11,
        r12,
        r13,
        r14,
        r15,
        rip,
        rsp,
        rflags: (rflags & USER_FLAGS) | INTERRUPTS_ON,
    })
}

fn process_method(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    let argument = message
        .capabilities
        .first()
        .copied()
        .unwrap_or(Capability::VOID);
    let index = SCHEDULER.lock().index_of(target.object());
    let index = index.ok_or(ObjectError::InvalidOrder)?;
    let set_slot = |objects: &mut Objects, slot: Slot, expected: &[CapType]| {
        if !argument.is_void() && !expected.contains(&argument.kind()) {
            return Err(ObjectError::WrongType);
        }
        let node = objects
            .cache
            .node_mut(&target)
            .map_err(|_| ObjectError::InvalidOrder)?;
        node.swap(slot, argument);
        process::node_changed(target.object());
        ok([0; 4])
    };
    match message.code {
        orders::process::READ_REGISTERS => {
            let registers = SCHEDULER.lock().processes[index].registers;
            let mut reply = Message::reply(0, [0; 4]);
            reply.string = registers_to_bytes(&registers);
            Ok(reply)
        }
        orders::process::WRITE_REGISTERS => {
            let registers = registers_from_bytes(&message.string)?;
            let mut scheduler = SCHEDULER.lock();
            if scheduler.current == Some(index) {
                // The invoker's own registers are about to be overwritten by the reply.
                return Err(ObjectError::NoRight);
            }
            scheduler.processes[index].registers = registers;
            ok([0; 4])
        }
        orders::process::FETCH_REGISTER => {
            let register = process_root::capability_register(message.words[0])
                .ok_or(ObjectError::InvalidSlot)?;
            let node = objects
                .cache
                .node(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            ok_capability(objects.cache.live_or_void(node.get(register)))
        }
        orders::process::SWAP_REGISTER => {
            let register = process_root::capability_register(message.words[0])
                .ok_or(ObjectError::InvalidSlot)?;
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            let old = node.swap(register, argument);
            ok_capability(objects.cache.live_or_void(old))
        }
        orders::process::FETCH_SPACE => {
            let node = objects
                .cache
                .node(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            ok_capability(objects.cache.live_or_void(node.get(process_root::SPACE)))
        }
        orders::process::SET_SPACE => set_slot(objects, process_root::SPACE, &[CapType::Space]),
        orders::process::SET_KEEPER => set_slot(objects, process_root::KEEPER, &[CapType::Start]),
        orders::process::SET_METER => set_slot(objects, process_root::METER, &[CapType::Meter]),
        orders::process::MAKE_START => {
            let start = objects
                .cache
                .node_capability(CapType::Start, target.object());
            ok_capability(
                start
                    .ok_or(ObjectError::InvalidOrder)?
                    .with_badge(message.words[0]),
            )
        }
        orders::process::START => {
            let mut scheduler = SCHEDULER.lock();
            let process = &mut scheduler.processes[index];
            if matches!(
                process.state,
                ProcessState::Stopped { .. } | ProcessState::Faulted(_)
            ) {
                process.state = ProcessState::Runnable;
            }
            ok([0; 4])
        }
        orders::process::STOP => {
            let mut scheduler = SCHEDULER.lock();
            scheduler.processes[index].state = ProcessState::Stopped {
                exit_code: message.words[0],
            };
            ok([0; 4])
        }
        _ => Err(ObjectError::InvalidOrder),
    }
}

/// A meter is a node: slot 0 a number holding the microseconds left, slot 1 the keeper.
fn meter(objects: &mut Objects, target: Capability, message: &Message) -> MethodResult {
    match message.code {
        orders::meter::REMAINING => {
            let node = objects
                .cache
                .node(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            let left = node
                .get(slot(0)?)
                .number_words()
                .map_or(0, |[left, _]| left);
            ok([left, 0, 0, 0])
        }
        orders::meter::REFILL => {
            writable(&target)?;
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            node.swap(slot(0)?, Capability::number([message.words[0], 0]));
            process::meter_refilled(objects, target.object());
            ok([0; 4])
        }
        orders::meter::SET_KEEPER => {
            writable(&target)?;
            let argument = message
                .capabilities
                .first()
                .copied()
                .unwrap_or(Capability::VOID);
            if !argument.is_void() && argument.kind() != CapType::Start {
                return Err(ObjectError::WrongType);
            }
            let node = objects
                .cache
                .node_mut(&target)
                .map_err(|_| ObjectError::InvalidOrder)?;
            node.swap(slot(1)?, argument);
            ok([0; 4])
        }
        _ => Err(ObjectError::InvalidOrder),
    }
}
