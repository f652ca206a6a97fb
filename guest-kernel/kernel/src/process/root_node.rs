//! A process's registers and run state in its root node: written back at each snapshot
//! ([`write_back`], after the [`check_consistency`] that precedes it) and read at a restart
//! ([`restore`]). The root nodes alone hold everything a restart needs (EROS: the process
//! table is a cache).

use alloc::collections::VecDeque;
use holdfast_objects::node::process_root;
// The root node's layout and its checks are the objects crate's: a restart is checked on
// the host with the same code.
use holdfast_objects::restart::{self, REGISTER_COUNT, RunState, register_words_slot, status};
use holdfast_objects::{CapType, Capability, ObjectId};

use crate::arch::idt::FaultReport;
use crate::arch::syscall::UserRegisters;
use crate::objects::Objects;
use crate::space;
use super::table::{Process, ProcessState, SCHEDULER};

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
    for process in scheduler.processes.iter().filter(|process| !process.root.is_void()) {
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
    let mut scheduler = SCHEDULER.lock();
    for &(root_id, name) in processes {
        let root = objects
            .cache
            .node_capability(CapType::Process, root_id)
            .ok_or_else(|| alloc::format!("process {name}: root node {} is not in the checkpoint", root_id.0))?;
        let node = objects.cache.node(&root).expect("just looked up");
        let restored = restart::read_named_process_root(name, root_id, node).map_err(|error| alloc::string::ToString::to_string(&error))?;
        if let Some(why) = restored.contained {
            crate::println!("holdfast: process {name}: root node {}: {why}; restored faulted, contained", root_id.0);
        }
        let state = match restored.state {
            RunState::Runnable => ProcessState::Runnable,
            RunState::Available => ProcessState::Available,
            RunState::WaitingForReply => ProcessState::WaitingForReply,
            RunState::OutOfTime => ProcessState::OutOfTime,
            RunState::Stopped { exit_code } => ProcessState::Stopped { exit_code },
            RunState::Faulted { vector, error_code, rip, address } => {
                ProcessState::Faulted(FaultReport { vector, error_code, rip, address })
            }
        };
        scheduler.processes.push(Process {
            name,
            root,
            tables: space::UserTables::new(),
            registers: registers_from(&restored.registers),
            state,
            stalled: VecDeque::new(),
            kept_for: super::NO_PROCESS,
            kept_until_tick: 0,
            waiting_for_keeper: restored.waiting_for_keeper,
            payer: Capability::VOID,
            ran_out_while_served: false,
            group: root.object(),
            turn_group: root.object(),
            last_turn: 0,
            invocation_count: restored.invocation_count,
        });
    }
    Ok(())
}
