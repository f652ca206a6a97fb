//! A process's registers and run state in its root node: written back at each snapshot
//! ([`write_back`], after the [`check_consistency`] that precedes it) and read at a restart
//! ([`restore`]). The root nodes alone hold everything a restart needs (EROS: the process
//! table is a cache).

use alloc::collections::VecDeque;
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, ObjectId, Slot};
use x86_64::registers::control::Cr3;

use crate::arch::idt::FaultReport;
use crate::arch::syscall::UserRegisters;
use crate::objects::Objects;
use crate::space;
use super::table::{Process, ProcessState, SCHEDULER};

// The run state in a root node's status slot: a number whose first word holds a code,
// flags and a fault's vector (`interface.toml` lays them out), and whose second word holds
// the exit code or the fault's rip. The register slots hold the 18 user registers in
// `UserRegisters` order, then a fault's error code and address, then the invocation count.
use holdfast_abi::run_state as status;

const REGISTER_COUNT: usize = 18;

/// The root node slot holding register words `2 pair` and `2 pair + 1`.
fn register_words_slot(pair: usize) -> Slot {
    Slot::new((process_root::REGISTERS_FIRST.index() + pair) as u64).expect("slots 20..=31")
}

fn register_words(registers: &UserRegisters) -> [u64; REGISTER_COUNT] {
    let r = registers;
    [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip, r.rsp, r.rflags,
    ]
}

fn registers_from(words: &[u64; REGISTER_COUNT]) -> UserRegisters {
    let [rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rip, rsp, rflags] =
        *words;
    UserRegisters {
        rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rip, rsp, rflags,
    }
}

/// Writes every process's registers and run state into its root node, so that the nodes
/// alone hold everything a restart needs (EROS: the process table is a cache).
pub fn write_back(objects: &mut Objects) {
    let scheduler = SCHEDULER.lock();
    for process in &scheduler.processes {
        let mut registers = process.registers;
        if let ProcessState::WaitingForJournal { .. } = process.state {
            // Not acknowledged, so not promised: after a restart it commits again.
            registers.rip -= 2;
        }
        let mut words = [0u64; process_root::REGISTER_WORDS];
        words[..REGISTER_COUNT].copy_from_slice(&register_words(&registers));
        let mut code = match process.state {
            ProcessState::Runnable => status::RUNNABLE,
            ProcessState::Available => status::AVAILABLE,
            ProcessState::WaitingForReply => status::WAITING_FOR_REPLY,
            ProcessState::Stalled => status::STALLED,
            ProcessState::OutOfTime => status::OUT_OF_TIME,
            // Its registers point at the `read`, which waits again after a restart.
            ProcessState::WaitingForInput => status::STALLED,
            ProcessState::WaitingForJournal { .. } => status::STALLED,
            ProcessState::Stopped { .. } => status::STOPPED,
            ProcessState::Faulted(report) => {
                words[REGISTER_COUNT] = report.error_code.unwrap_or(0);
                words[REGISTER_COUNT + 1] = report.address.unwrap_or(0);
                status::FAULTED
                    | u64::from(report.vector) << status::FAULT_VECTOR_SHIFT
                    | if report.error_code.is_some() { status::FAULT_HAS_ERROR_CODE } else { 0 }
                    | if report.address.is_some() { status::FAULT_HAS_ADDRESS } else { 0 }
            }
        };
        if process.waiting_for_keeper {
            code |= status::WAITING_FOR_KEEPER;
        }
        let detail = match process.state {
            ProcessState::Stopped { exit_code } => exit_code,
            ProcessState::Faulted(report) => report.rip,
            _ => 0,
        };
        words[REGISTER_COUNT + 2] = process.invocation_count;
        let Ok(node) = objects.cache.node_mut(&process.root) else {
            continue; // A rescinded root: the process is gone with it.
        };
        node.swap(process_root::STATUS, Capability::number([code, detail]));
        for (index, pair) in words.chunks_exact(2).enumerate() {
            let slot = register_words_slot(index);
            node.swap(slot, Capability::number([pair[0], pair[1]]));
        }
    }
}

/// The snapshot's consistency check (EROS runs one before every checkpoint): every process
/// in the table has a live root node, and every queue names processes that exist. A
/// failure means kernel state that would not restart; the checkpoint is not taken.
pub fn check_consistency(objects: &Objects) -> Result<(), alloc::string::String> {
    let scheduler = SCHEDULER.lock();
    let count = scheduler.processes.len();
    for process in &scheduler.processes {
        if process.root.kind() != CapType::Process || objects.cache.node(&process.root).is_err() {
            return Err(alloc::format!("process {}: its root node is gone", process.name));
        }
        if process.stalled.iter().any(|&index| index >= count) {
            return Err(alloc::format!("process {}: its queue names a process that does not exist", process.name));
        }
    }
    Ok(())
}

/// Rebuilds the process table from the root nodes a checkpoint names, in its order. A
/// process stalled at the snapshot runs its invocation again (its registers point at the
/// `syscall`); nothing else changes state.
pub fn restore(objects: &Objects, processes: &[(ObjectId, &'static str)]) -> Result<(), alloc::string::String> {
    space::init_live_root(Cr3::read().0);
    let mut scheduler = SCHEDULER.lock();
    for &(root_id, name) in processes {
        let root = objects
            .cache
            .node_capability(CapType::Process, root_id)
            .ok_or_else(|| alloc::format!("process {name}: root node {} is not in the checkpoint", root_id.0))?;
        let node = objects.cache.node(&root).expect("just looked up");
        let number = |slot: Slot| node.get(slot).number_words().unwrap_or([0, 0]);
        let [code, detail] = number(process_root::STATUS);
        let mut words = [0u64; process_root::REGISTER_WORDS];
        for (index, pair) in words.chunks_exact_mut(2).enumerate() {
            let slot = register_words_slot(index);
            pair.copy_from_slice(&number(slot));
        }
        let state = match code & status::CODE_MASK {
            status::RUNNABLE | status::STALLED => ProcessState::Runnable,
            status::AVAILABLE => ProcessState::Available,
            status::WAITING_FOR_REPLY => ProcessState::WaitingForReply,
            status::OUT_OF_TIME => ProcessState::OutOfTime,
            status::STOPPED => ProcessState::Stopped { exit_code: detail },
            status::FAULTED => ProcessState::Faulted(FaultReport {
                vector: (code >> status::FAULT_VECTOR_SHIFT) as u8,
                error_code: (code & status::FAULT_HAS_ERROR_CODE != 0).then_some(words[REGISTER_COUNT]),
                rip: detail,
                address: (code & status::FAULT_HAS_ADDRESS != 0).then_some(words[REGISTER_COUNT + 1]),
            }),
            other => return Err(alloc::format!("process {name}: unknown run state {other}")),
        };
        let mut registers = [0u64; REGISTER_COUNT];
        registers.copy_from_slice(&words[..REGISTER_COUNT]);
        scheduler.processes.push(Process {
            name,
            root,
            tables: space::UserTables::new(),
            registers: registers_from(&registers),
            state,
            stalled: VecDeque::new(),
            waiting_for_keeper: code & status::WAITING_FOR_KEEPER != 0,
            invocation_count: words[REGISTER_COUNT + 2],
        });
    }
    Ok(())
}
