//! What a restart reads from the disk, checked as if a ring-3 program had handed it over.
//!
//! The store's checksums say a block is the one that was written, not that what was written
//! is sane: a kernel bug, a foreign tool or a deliberate edit with the checksum recomputed
//! can put anything there. So every number a restart takes from the checkpoint is checked
//! here before the kernel uses it: the directory's next object ids against the store's
//! geometry (they size the object tables, [`crate::ObjectCache::know_stored_pages`]), each
//! process's root id against those ids, and each root node's run state and registers with
//! the checks `process.write_registers` makes ([`user_registers`]). An error names the
//! object; nothing here panics or allocates by a count it has not bounded. One exception
//! is not an error: a rip or rsp outside the user half, which a ring-3 program can leave in
//! its own registers, restores that process faulted ([`ProcessRoot::contained`]).

use alloc::collections::BTreeMap;
use core::fmt;

use crate::directory::Directory;
use crate::node::process_root;
use crate::{Node, ObjectId, Slot};

/// Words of the register file: rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15, rip, rsp,
/// rflags (the order of `process.read_registers`).
pub const REGISTER_COUNT: usize = 18;
const RIP: usize = 15;
const RSP: usize = 16;
const RFLAGS: usize = 17;

/// The flags a process may set: CF PF AF ZF SF TF DF OF.
const USER_FLAGS: u64 = 0x0000_0cd5;
/// Interrupts on and the always-one bit 1: what every process runs with.
const INTERRUPTS_ON: u64 = 0x202;
const IO_PRIVILEGE_MASK: u64 = 3 << 12;
const VIRTUAL_8086_FLAG: u64 = 1 << 17;
/// The fault a process restored with registers outside the user half is recorded with.
const GENERAL_PROTECTION_VECTOR: u8 = 13;

/// Why a register file cannot be a process's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// rip is a kernel or non-canonical address.
    Rip(u64),
    /// rsp is beyond the user half.
    Rsp(u64),
    /// rflags no ring-3 program can hold (I/O privilege, virtual-8086).
    Flags(u64),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rip(rip) => write!(f, "rip {rip:#x} is not a user address"),
            Self::Rsp(rsp) => write!(f, "rsp {rsp:#x} is not a user address"),
            Self::Flags(flags) => write!(f, "rflags {flags:#x} are not a ring-3 program's"),
        }
    }
}

/// The register file `process.write_registers` accepts: `rip` and `rsp` user addresses, and
/// only the arithmetic, direction and trap flags taken; interrupts stay on and I/O
/// privilege 0, or a process could stop the clock or reach the hardware.
pub fn user_registers(mut words: [u64; REGISTER_COUNT]) -> Result<[u64; REGISTER_COUNT], RegisterError> {
    let user_end = holdfast_abi::USER_ADDRESS_END;
    if words[RIP] >= user_end {
        return Err(RegisterError::Rip(words[RIP]));
    }
    if words[RSP] > user_end {
        return Err(RegisterError::Rsp(words[RSP]));
    }
    words[RFLAGS] = (words[RFLAGS] & USER_FLAGS) | INTERRUPTS_ON;
    Ok(words)
}

/// A register file read back from a root node: what [`user_registers`] accepts, and flags
/// the kernel can have saved. A process cannot raise its I/O privilege or enter virtual-8086
/// mode, so a disk that says it did is not telling what the kernel wrote. (Interrupts off
/// is not refused: a process made by `node.make_process` and never started has all
/// registers zero; the flags are then taken as `write_registers` takes them.)
pub fn restored_registers(words: [u64; REGISTER_COUNT]) -> Result<[u64; REGISTER_COUNT], RegisterError> {
    let flags = words[RFLAGS];
    if flags & (IO_PRIVILEGE_MASK | VIRTUAL_8086_FLAG) != 0 {
        return Err(RegisterError::Flags(flags));
    }
    user_registers(words)
}

/// The run state in a root node's status slot: a number whose first word holds a code,
/// flags and a fault's vector (`interface.toml` lays them out), and whose second word holds
/// the exit code or the fault's rip. The register slots hold the 18 user registers, then a
/// fault's error code and address, then the invocation count.
pub use holdfast_abi::run_state as status;

/// Every bit of the status word the kernel writes; any other is not its.
const STATUS_KNOWN_BITS: u64 = status::CODE_MASK
    | status::WAITING_FOR_KEEPER
    | status::FAULT_HAS_ERROR_CODE
    | status::FAULT_HAS_ADDRESS
    | 0xff << status::FAULT_VECTOR_SHIFT;

/// A process's run state as its root node records it (a process stalled at the snapshot
/// runs again: its registers point at the `syscall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Runnable,
    Available,
    WaitingForReply,
    OutOfTime,
    Stopped { exit_code: u64 },
    Faulted { vector: u8, error_code: Option<u64>, rip: u64, address: Option<u64> },
}

/// What a restart takes from a process's root node, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessRoot {
    pub state: RunState,
    pub registers: [u64; REGISTER_COUNT],
    pub waiting_for_keeper: bool,
    pub invocation_count: u64,
    /// Why the process was restored faulted rather than in its recorded state: a rip or
    /// rsp outside the user half. A ring-3 program can leave them so itself (a jump into
    /// the kernel half faults there; rsp is its own register), so this does not refuse the
    /// restart, which one program could then stop: the process is contained instead, never
    /// resumed with them unless `process.write_registers` replaces them.
    pub contained: Option<RegisterError>,
}

/// Why a root node cannot restart a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootError {
    /// A status or register slot that is not a number.
    NotANumber(Slot),
    RunState(u64),
    Registers(RegisterError),
}

impl fmt::Display for RootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotANumber(slot) => write!(f, "slot {} is not a number", slot.index()),
            Self::RunState(code) => write!(f, "unknown run state {code:#x}"),
            Self::Registers(error) => error.fmt(f),
        }
    }
}

/// The root node slot holding register words `2 pair` and `2 pair + 1`.
pub fn register_words_slot(pair: usize) -> Slot {
    Slot::new((process_root::REGISTERS_FIRST.index() + pair) as u64).expect("slots 20..=31")
}

/// Reads and checks a process's run state and registers from its root node.
pub fn read_process_root(node: &Node) -> Result<ProcessRoot, RootError> {
    let number = |slot: Slot| node.get(slot).number_words().ok_or(RootError::NotANumber(slot));
    let [code, detail] = number(process_root::STATUS)?;
    let mut words = [0u64; process_root::REGISTER_WORDS];
    for (index, pair) in words.chunks_exact_mut(2).enumerate() {
        pair.copy_from_slice(&number(register_words_slot(index))?);
    }
    if code & !STATUS_KNOWN_BITS != 0 {
        return Err(RootError::RunState(code));
    }
    let state = match code & status::CODE_MASK {
        status::RUNNABLE | status::STALLED => RunState::Runnable,
        status::AVAILABLE => RunState::Available,
        status::WAITING_FOR_REPLY => RunState::WaitingForReply,
        status::OUT_OF_TIME => RunState::OutOfTime,
        status::STOPPED => RunState::Stopped { exit_code: detail },
        status::FAULTED => RunState::Faulted {
            vector: (code >> status::FAULT_VECTOR_SHIFT) as u8,
            error_code: (code & status::FAULT_HAS_ERROR_CODE != 0).then_some(words[REGISTER_COUNT]),
            rip: detail,
            address: (code & status::FAULT_HAS_ADDRESS != 0).then_some(words[REGISTER_COUNT + 1]),
        },
        _ => return Err(RootError::RunState(code)),
    };
    let mut registers = [0u64; REGISTER_COUNT];
    registers.copy_from_slice(&words[..REGISTER_COUNT]);
    let (state, registers, contained) = match restored_registers(registers) {
        Ok(checked) => (state, checked, None),
        Err(error @ (RegisterError::Rip(_) | RegisterError::Rsp(_))) => {
            registers[RFLAGS] = (registers[RFLAGS] & USER_FLAGS) | INTERRUPTS_ON;
            let faulted = RunState::Faulted {
                vector: GENERAL_PROTECTION_VECTOR,
                error_code: Some(0),
                rip: registers[RIP],
                address: None,
            };
            (faulted, registers, Some(error))
        }
        Err(error) => return Err(RootError::Registers(error)),
    };
    Ok(ProcessRoot {
        state,
        registers,
        waiting_for_keeper: code & status::WAITING_FOR_KEEPER != 0,
        invocation_count: words[REGISTER_COUNT + 2],
        contained,
    })
}

/// How many objects the store can hold: ids run from 1 to one less than each count (the
/// store's geometry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreBounds {
    pub node_count: u64,
    pub page_count: u64,
}

/// Why a checkpoint cannot be restarted, naming the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartError {
    /// A next-object-id counter of the directory outside `1..=limit`.
    NextId { what: &'static str, found: u64, limit: u64 },
    /// A process whose root node id was never allocated.
    RootId { name: alloc::string::String, root: ObjectId, next_node_id: u64 },
    /// Two processes with one root node.
    SharedRoot { name: alloc::string::String, root: ObjectId, first: alloc::string::String },
    /// A root node whose contents cannot restart its process.
    Root { name: alloc::string::String, root: ObjectId, error: RootError },
}

impl fmt::Display for RestartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NextId { what, found, limit } => write!(
                f,
                "checkpoint directory: next {what} id {found} is outside the store's geometry (1..={limit})"
            ),
            Self::RootId { name, root, next_node_id } => write!(
                f,
                "process {name}: root node {} was never allocated (next node id {next_node_id})",
                root.0
            ),
            Self::SharedRoot { name, root, first } => {
                write!(f, "process {name}: root node {} is process {first}'s too", root.0)
            }
            Self::Root { name, root, error } => write!(f, "process {name}: root node {}: {error}", root.0),
        }
    }
}

/// Checks a decoded checkpoint directory against the store it was read from: the next ids
/// within the geometry (they size the kernel's object tables), and every process's root a
/// node id allocated before the checkpoint, named once.
pub fn check_directory(directory: &Directory, bounds: StoreBounds) -> Result<(), RestartError> {
    let counters = [
        ("node", directory.next_node_id, bounds.node_count),
        ("page", directory.next_page_id, bounds.page_count),
    ];
    for (what, found, limit) in counters {
        if !(1..=limit).contains(&found) {
            return Err(RestartError::NextId { what, found, limit });
        }
    }
    let mut roots = BTreeMap::new();
    for process in &directory.processes {
        let root = process.root;
        if !(1..directory.next_node_id).contains(&root.0) {
            let name = process.name.clone();
            return Err(RestartError::RootId { name, root, next_node_id: directory.next_node_id });
        }
        if let Some(first) = roots.insert(root, &process.name) {
            return Err(RestartError::SharedRoot { name: process.name.clone(), root, first: first.clone() });
        }
    }
    Ok(())
}

/// [`read_process_root`], its error naming the process and its root node.
pub fn read_named_process_root(name: &str, root: ObjectId, node: &Node) -> Result<ProcessRoot, RestartError> {
    read_process_root(node).map_err(|error| RestartError::Root { name: name.into(), root, error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Capability;
    use crate::directory::{DirectoryProcess, DirectoryReader};
    use crate::image::NODE_IMAGE_BYTES;
    use crate::Version;
    use alloc::string::ToString;

    const BOUNDS: StoreBounds = StoreBounds { node_count: 1024, page_count: 8192 };

    fn directory(next_node_id: u64, next_page_id: u64, roots: &[u64]) -> Directory {
        let processes = roots
            .iter()
            .enumerate()
            .map(|(index, &root)| DirectoryProcess { root: ObjectId(root), name: alloc::format!("p{index}") })
            .collect();
        // Through its block, as a restart reads it: the format takes these values.
        let blocks = Directory { next_node_id, next_page_id, processes }.encode(&[]).unwrap();
        DirectoryReader::new(&blocks[0], BOUNDS.page_count).unwrap().finish().unwrap().0
    }

    #[test]
    fn a_directory_within_the_geometry_is_accepted() {
        assert_eq!(check_directory(&directory(40, 900, &[1, 7, 39]), BOUNDS), Ok(()));
        assert_eq!(check_directory(&directory(1024, 8192, &[]), BOUNDS), Ok(()));
    }

    #[test]
    fn next_ids_past_the_geometry_are_refused_naming_the_counter() {
        let error = check_directory(&directory(1 << 60, 900, &[]), BOUNDS).unwrap_err();
        assert_eq!(error, RestartError::NextId { what: "node", found: 1 << 60, limit: 1024 });
        assert_eq!(
            error.to_string(),
            "checkpoint directory: next node id 1152921504606846976 is outside the store's geometry (1..=1024)"
        );
        let error = check_directory(&directory(40, 8193, &[]), BOUNDS).unwrap_err();
        assert_eq!(error, RestartError::NextId { what: "page", found: 8193, limit: 8192 });
        let error = check_directory(&directory(0, 900, &[]), BOUNDS).unwrap_err();
        assert!(matches!(error, RestartError::NextId { what: "node", found: 0, .. }));
    }

    #[test]
    fn roots_never_allocated_or_shared_are_refused_naming_the_process() {
        let error = check_directory(&directory(40, 900, &[1, 40]), BOUNDS).unwrap_err();
        assert_eq!(error.to_string(), "process p1: root node 40 was never allocated (next node id 40)");
        let error = check_directory(&directory(40, 900, &[0]), BOUNDS).unwrap_err();
        assert!(matches!(error, RestartError::RootId { root: ObjectId(0), .. }));
        let error = check_directory(&directory(40, 900, &[3, 5, 3]), BOUNDS).unwrap_err();
        assert_eq!(error.to_string(), "process p2: root node 3 is process p0's too");
    }

    /// A root node as the kernel's write-back leaves it, through its store image (whose
    /// decoding checks every field), with `registers` and status `code`.
    fn root(registers: [u64; REGISTER_COUNT], code: u64) -> Node {
        let mut words = [0u64; process_root::REGISTER_WORDS];
        words[..REGISTER_COUNT].copy_from_slice(&registers);
        words[REGISTER_COUNT + 2] = 77;
        let mut node = Node::default();
        node.swap(process_root::STATUS, Capability::number([code, 0]));
        for (index, pair) in words.chunks_exact(2).enumerate() {
            node.swap(register_words_slot(index), Capability::number([pair[0], pair[1]]));
        }
        let image: [u8; NODE_IMAGE_BYTES] = node.encode(Version(3));
        Node::decode(&image).unwrap().0
    }

    fn registers(rip: u64, rsp: u64, rflags: u64) -> [u64; REGISTER_COUNT] {
        let mut words = [5u64; REGISTER_COUNT];
        (words[RIP], words[RSP], words[RFLAGS]) = (rip, rsp, rflags);
        words
    }

    #[test]
    fn a_root_node_the_kernel_wrote_restarts_its_process() {
        let node = root(registers(0x40_1000, holdfast_abi::USER_STACK_TOP, 0x246), status::RUNNABLE | status::WAITING_FOR_KEEPER);
        let process = read_process_root(&node).unwrap();
        assert_eq!(process.state, RunState::Runnable);
        assert_eq!(process.registers, registers(0x40_1000, holdfast_abi::USER_STACK_TOP, 0x246));
        assert!(process.waiting_for_keeper);
        assert_eq!(process.invocation_count, 77);
        assert_eq!(process.contained, None);
        let faulted = status::FAULTED | 14 << status::FAULT_VECTOR_SHIFT | status::FAULT_HAS_ADDRESS;
        let process = read_process_root(&root(registers(0, 0, 0x202), faulted)).unwrap();
        assert!(matches!(process.state, RunState::Faulted { vector: 14, error_code: None, address: Some(_), .. }));
    }

    #[test]
    fn kernel_addresses_in_a_root_node_restore_the_process_faulted_and_kernel_flags_are_refused() {
        let kernel_rip = root(registers(0xffff_ffff_8010_0000, 0x7000, 0x202), status::RUNNABLE);
        let process = read_named_process_root("counter", ObjectId(9), &kernel_rip).unwrap();
        assert_eq!(process.contained, Some(RegisterError::Rip(0xffff_ffff_8010_0000)));
        assert_eq!(process.contained.unwrap().to_string(), "rip 0xffffffff80100000 is not a user address");
        assert!(matches!(process.state, RunState::Faulted { vector: 13, rip: 0xffff_ffff_8010_0000, .. }));
        let non_canonical = root(registers(0x1000, 0x0000_8000_0000_1000, 0x202), status::AVAILABLE);
        let process = read_process_root(&non_canonical).unwrap();
        assert_eq!(process.contained, Some(RegisterError::Rsp(0x0000_8000_0000_1000)));
        assert!(matches!(process.state, RunState::Faulted { .. }));
        for flags in [0x1202, 0x3202, 0x2_0202] {
            let node = root(registers(0x1000, 0x7000, flags), status::RUNNABLE);
            assert_eq!(read_process_root(&node), Err(RootError::Registers(RegisterError::Flags(flags))));
        }
        let error = read_named_process_root("counter", ObjectId(9), &root(registers(0x1000, 0x7000, 0x3202), status::RUNNABLE));
        assert_eq!(error.unwrap_err().to_string(), "process counter: root node 9: rflags 0x3202 are not a ring-3 program's");
        // Bits a process may not keep are dropped, as `write_registers` drops them.
        let nested = root(registers(0x1000, 0x7000, 0x4202 | 1 << 18), status::RUNNABLE);
        assert_eq!(read_process_root(&nested).unwrap().registers[RFLAGS], 0x202);
        // A process made and never started: every register zero, its flags made sane.
        let made = root([0; REGISTER_COUNT], status::STOPPED);
        assert_eq!(read_process_root(&made).unwrap().registers[RFLAGS], 0x202);
    }

    #[test]
    fn unknown_run_states_and_non_number_slots_are_refused() {
        let good = registers(0x1000, 0x7000, 0x202);
        assert_eq!(read_process_root(&root(good, 0)), Err(RootError::RunState(0)));
        assert_eq!(read_process_root(&root(good, 8)), Err(RootError::RunState(8)));
        assert_eq!(read_process_root(&root(good, status::RUNNABLE | 1 << 40)), Err(RootError::RunState(1 | 1 << 40)));
        let mut node = root(good, status::RUNNABLE);
        node.swap(register_words_slot(3), Capability::VOID);
        assert_eq!(read_process_root(&node), Err(RootError::NotANumber(register_words_slot(3))));
    }

    #[test]
    fn write_registers_takes_user_flags_only() {
        let words = user_registers(registers(0x1000, 0x7000, 0xffff_ffff)).unwrap();
        assert_eq!(words[RFLAGS], USER_FLAGS | INTERRUPTS_ON);
        assert_eq!(user_registers(registers(holdfast_abi::USER_ADDRESS_END, 0, 0)), Err(RegisterError::Rip(holdfast_abi::USER_ADDRESS_END)));
    }
}
