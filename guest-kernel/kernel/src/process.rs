//! Ring-3 processes: each is a root node (DESIGN.md; slots in
//! `holdfast_objects::node::process_root`) holding its capability registers and its address
//! space, a tree of nodes and pages. It runs at CPL 3 and enters the kernel only through
//! `syscall` (invocation) or by faulting. A fault the space tree cannot resolve stops the
//! faulting process and the kernel goes on with the next one.
//!
//! The process table here is a cache: capability registers and the space are read from the
//! root node at each use, and page tables are filled lazily from the space tree (see
//! [`crate::space`]). Registers and the run state are cached here and written back to the
//! root node at each snapshot ([`write_back`]); a restart rebuilds the table from the root
//! nodes ([`restore`]).

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use holdfast_abi as abi;
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, ObjectId, Rights, Slot};
use spin::Mutex;
use x86_64::registers::control::Cr3;

use crate::arch::idt::FaultReport;
use crate::arch::syscall::{UserRegisters, enter_user};
use crate::memory::PAGE_BYTES;
use crate::{checkpoint, ipc};
use crate::objects::{OBJECTS, Objects};
use crate::space;
use holdfast_abi::keeper;
use holdfast_objects::space::{Walk, slot_for, walk};

/// The height of every program's space: 4 KiB × 32^7 covers the whole 2^47-byte user half.
const SPACE_HEIGHT: u8 = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessState {
    Runnable,
    /// Waiting for a message: it returned (or waited) and anyone may invoke it.
    Available,
    /// In a call, until its resume capability is invoked.
    WaitingForReply,
    /// Its invocation found the target busy. It is queued on the target and runs its
    /// `syscall` again when the target becomes available: nothing is buffered in the kernel.
    Stalled,
    /// Its meter ran out and has no keeper; it runs again when the meter is refilled.
    OutOfTime,
    /// Its control-channel `read` found nothing; it runs the `read` again once input has
    /// arrived ([`crate::control`]).
    WaitingForInput,
    /// Its journal commit is queued; it gets the reply and runs on once commit `ticket` is
    /// durable ([`crate::checkpoint`]). Its registers are those of the `invoke`.
    WaitingForJournal { ticket: u64 },
    Stopped {
        exit_code: u64,
    },
    Faulted(FaultReport),
}

pub struct Process {
    pub name: &'static str,
    /// The root node, as a process capability.
    pub root: Capability,
    /// A cache of the space tree; emptied whenever a translation it holds may be stale.
    pub tables: space::UserTables,
    /// The user registers, saved whenever the process is not running. While it waits in an
    /// invocation they still hold its `invoke` arguments, which say where a message for it
    /// goes (receive registers and buffer).
    pub registers: UserRegisters,
    pub state: ProcessState,
    /// Processes stalled invoking this one, first come first served.
    pub stalled: VecDeque<usize>,
    /// Waiting for its keeper: the reply restarts it from its registers (which the keeper
    /// may have changed) instead of being delivered into them.
    pub waiting_for_keeper: bool,
    pub invocation_count: u64,
}

pub struct Scheduler {
    pub processes: Vec<Process>,
    /// The running process, or [`NO_PROCESS`]. This and `installed` are plain indices, as
    /// every invocation and switch reads them: an `Option` costs a test more than the
    /// bounds check of the indexing (each a translation block under TCG).
    current: usize,
    /// The process whose user half the live root holds (see [`space::switch`]), or
    /// [`NO_PROCESS`].
    installed: usize,
    /// Called when no process is runnable any more.
    on_all_done: Option<fn() -> !>,
    /// Where [`Self::index_of`] last found a root node, by the node's id modulo
    /// [`INDEX_HINTS`]: only a guess, checked before use.
    index_hints: [core::cell::Cell<usize>; INDEX_HINTS],
}

/// No process: an index that [`Scheduler::processes`] never reaches.
const NO_PROCESS: usize = usize::MAX;

/// How many guesses [`Scheduler::index_of`] keeps: every IPC looks its receiver up, and a
/// search of the table is a few translation blocks per process under TCG.
const INDEX_HINTS: usize = 16;

impl Scheduler {
    /// The process whose root node is `root`.
    #[unsafe(link_section = ".text.ipc")] // see linker.ld
    pub fn index_of(&self, root: ObjectId) -> Option<usize> {
        let hint = &self.index_hints[root.0 as usize % INDEX_HINTS];
        let guess = hint.get();
        if self
            .processes
            .get(guess)
            .is_some_and(|process| process.root.object() == root)
        {
            return Some(guess);
        }
        let found = self
            .processes
            .iter()
            .position(|process| process.root.object() == root)?;
        hint.set(found);
        Some(found)
    }

    /// The running process; indexing `processes` with it panics if none runs.
    pub fn current(&self) -> usize {
        self.current
    }

    pub fn running(&self) -> Option<usize> {
        (self.current != NO_PROCESS).then_some(self.current)
    }
}

pub static SCHEDULER: Mutex<Scheduler> = Mutex::new(Scheduler {
    processes: Vec::new(),
    current: NO_PROCESS,
    installed: NO_PROCESS,
    on_all_done: None,
    index_hints: [const { core::cell::Cell::new(0) }; INDEX_HINTS],
});

/// Why a program could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    NotElf,
    NotStaticExecutable,
    SegmentOutsideUserSpace {
        virtual_address: u64,
    },
    SegmentOutsideFile,
    /// No Holdfast ABI note: not built with `holdfast-userlib`.
    NoAbiNote,
    AbiVersion {
        found: u32,
    },
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotElf => write!(f, "not an ELF file"),
            Self::NotStaticExecutable => write!(f, "not a statically linked executable"),
            Self::SegmentOutsideUserSpace { virtual_address } => {
                write!(
                    f,
                    "segment at {virtual_address:#x} lies outside the user half"
                )
            }
            Self::SegmentOutsideFile => write!(f, "segment data lies outside the file"),
            Self::NoAbiNote => write!(f, "no Holdfast ABI note (not built with holdfast-userlib)"),
            Self::AbiVersion { found } => write!(
                f,
                "built for ABI version {found}, this kernel has version {}",
                abi::ABI_VERSION
            ),
        }
    }
}

/// Finds the program's ABI version note (see `holdfast_abi::note`).
fn abi_version_of(file: &elf::ElfBytes<elf::endian::LittleEndian>) -> Option<u32> {
    let segments = file.segments()?;
    segments
        .iter()
        .filter(|segment| segment.p_type == elf::abi::PT_NOTE)
        .filter_map(|segment| file.segment_data_as_notes(&segment).ok())
        .flatten()
        .find_map(|note| match note {
            elf::note::Note::Unknown(any)
                if any.n_type == abi::note::TYPE_ABI_VERSION as u64
                    && any.name == abi::note::NAME =>
            {
                Some(u32::from_le_bytes(any.desc.get(..4)?.try_into().ok()?))
            }
            _ => None,
        })
}

/// Puts `page` at `address` in the space tree `space`, making the nodes on the way.
fn place_page(objects: &mut Objects, space: Capability, address: u64, page: Capability) {
    let mut level = space;
    for height in (1..=SPACE_HEIGHT).rev() {
        let slot = slot_for(height, address);
        if height == 1 {
            objects
                .cache
                .node_mut(&level)
                .expect("a live space")
                .swap(slot, page);
            return;
        }
        let existing = objects.cache.node(&level).expect("a live space").get(slot);
        level = if existing.kind() == CapType::Space {
            existing
        } else {
            let node = objects.create_node(CapType::Node);
            let child = Capability::space(node.object(), node.version(), height - 1, false)
                .expect("height below the maximum");
            objects
                .cache
                .node_mut(&level)
                .expect("a live space")
                .swap(slot, child);
            child
        };
    }
}

/// Fills `[start, end)` of `space` with `contents` then zeros, in fresh pages (read-only
/// where `writable` is false). A page an earlier segment already filled (two segments
/// sharing a page, as a linker may lay out .rodata and .got) is filled in place, keeping
/// that segment's bytes, and is writable if either segment is.
fn fill_range(
    objects: &mut Objects,
    space: Capability,
    (start, end): (u64, u64),
    contents: &[u8],
    writable: bool,
) {
    let page_bytes = PAGE_BYTES as u64;
    let mut page_address = start & !(page_bytes - 1);
    while page_address < end {
        // The loader's trees restrict no node, so the page found carries its own rights.
        let earlier = match walk(&objects.cache, space, page_address) {
            Walk::Page { page, .. } => Some(page),
            Walk::Missing { .. } => None,
        };
        let page = match earlier {
            Some(earlier) => objects
                .cache
                .page_capability(earlier.object())
                .expect("in the tree"),
            // Written below: made here rather than read back from the store as zeros.
            None => objects
                .create_resident_page()
                .unwrap_or_else(|error| panic!("making a program's page: {}", error.0)),
        };
        objects
            .ensure_resident(&[page.object()], true)
            .unwrap_or_else(|error| panic!("loading a program's page: {}", error.0));
        let bytes = objects.cache.page_mut(&page).expect("live").bytes_mut();
        // Only this segment's part of the page: its file bytes, then zeros (bss). Slices,
        // not a byte loop: a large bss is hundreds of thousands of pages.
        let segment_start = page_address.max(start);
        let segment_end = (page_address + page_bytes).min(end);
        let part = &mut bytes[(segment_start - page_address) as usize..(segment_end - page_address) as usize];
        let file_part = contents.get((segment_start - start) as usize..).unwrap_or(&[]);
        let file_bytes = file_part.len().min(part.len());
        part[..file_bytes].copy_from_slice(&file_part[..file_bytes]);
        part[file_bytes..].fill(0);
        let writable = writable
            || earlier.is_some_and(|earlier| !earlier.rights().contains(Rights::READ_ONLY));
        let page = if writable {
            page
        } else {
            page.restricted(Rights::READ_ONLY)
        };
        place_page(objects, space, page_address, page);
        page_address += page_bytes;
    }
}

/// Loads a statically linked ELF executable as a new, runnable process: a root node whose
/// space is a tree holding the program's segments and stack. Returns its process
/// capability; the caller fills its capability registers.
pub fn load(name: &'static str, elf_bytes: &[u8]) -> Result<Capability, LoadError> {
    use elf::abi::{ET_EXEC, PF_W, PT_LOAD};
    let file = elf::ElfBytes::<elf::endian::LittleEndian>::minimal_parse(elf_bytes)
        .map_err(|_| LoadError::NotElf)?;
    if file.ehdr.e_type != ET_EXEC {
        return Err(LoadError::NotStaticExecutable);
    }
    match abi_version_of(&file) {
        None => return Err(LoadError::NoAbiNote),
        Some(abi::ABI_VERSION) => {}
        Some(found) => return Err(LoadError::AbiVersion { found }),
    }
    let segments = file.segments().ok_or(LoadError::NotStaticExecutable)?;
    let mut loads = Vec::new();
    for segment in segments.iter().filter(|segment| segment.p_type == PT_LOAD) {
        let start = segment.p_vaddr;
        let end = start.saturating_add(segment.p_memsz);
        if start < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END || segment.p_memsz == 0 {
            return Err(LoadError::SegmentOutsideUserSpace {
                virtual_address: start,
            });
        }
        let file_range = segment.p_offset as usize..(segment.p_offset + segment.p_filesz) as usize;
        let contents = elf_bytes
            .get(file_range)
            .ok_or(LoadError::SegmentOutsideFile)?;
        loads.push(((start, end), contents, segment.p_flags & PF_W != 0));
    }

    let mut objects = OBJECTS.lock();
    let root = objects.create_node(CapType::Process);
    let space_node = objects.create_node(CapType::Node);
    let space = Capability::space(
        space_node.object(),
        space_node.version(),
        SPACE_HEIGHT,
        false,
    )
    .expect("height within the maximum");
    for (range, contents, writable) in loads {
        fill_range(&mut objects, space, range, contents, writable);
    }
    let stack = (
        abi::USER_STACK_TOP - abi::USER_STACK_BYTES,
        abi::USER_STACK_TOP,
    );
    fill_range(&mut objects, space, stack, &[], true);
    let root_node = objects.cache.node_mut(&root).expect("just made");
    root_node.swap(process_root::SPACE, space);
    drop(objects);

    let registers = UserRegisters {
        rip: file.ehdr.e_entry,
        rsp: abi::USER_STACK_TOP,
        rflags: 0x202, // interrupts on
        ..UserRegisters::default()
    };
    space::init_live_root(Cr3::read().0);
    SCHEDULER.lock().processes.push(Process {
        name,
        root,
        tables: space::UserTables::new(),
        registers,
        state: ProcessState::Runnable,
        stalled: VecDeque::new(),
        waiting_for_keeper: false,
        invocation_count: 0,
    });
    Ok(root)
}

/// Runs the loaded processes, each until it stops or faults, then calls `on_all_done`.
pub fn run(on_all_done: fn() -> !) -> ! {
    // The kernel runs with interrupts off from here on (ring 3 runs with them on):
    // `enter` relies on it.
    x86_64::instructions::interrupts::disable();
    SCHEDULER.lock().on_all_done = Some(on_all_done);
    switch_to_next()
}

/// Chooses the next runnable process after the current one (round robin) and enters it;
/// never returns.
pub fn switch_to_next() -> ! {
    let mut scheduler = SCHEDULER.lock();
    let count = scheduler.processes.len();
    let after = scheduler.running().map_or(0, |current| current + 1);
    let next = (0..count)
        .map(|offset| (after + offset) % count)
        .find(|&index| matches!(scheduler.processes[index].state, ProcessState::Runnable));
    let Some(index) = next else {
        let done = scheduler.on_all_done.expect("run() set it");
        scheduler.current = NO_PROCESS;
        drop(scheduler);
        done()
    };
    enter(scheduler, index)
}

/// Input arrived on the control channel: every process waiting for it runs its `read` again.
pub fn input_arrived() {
    for process in SCHEDULER.lock().processes.iter_mut() {
        if process.state == ProcessState::WaitingForInput {
            process.state = ProcessState::Runnable;
        }
    }
}

/// Journal commits up to `ticket` are durable: their processes get the reply and run on.
pub fn journal_durable(objects: &mut Objects, ticket: u64) {
    for process in SCHEDULER.lock().processes.iter_mut() {
        if let ProcessState::WaitingForJournal { ticket: waiting } = process.state
            && waiting <= ticket
        {
            let descriptor = abi::descriptor::Descriptor::decode(process.registers.rdi).ok();
            let mut reply = ipc::Message::reply(0, [waiting, 0, 0, 0]);
            ipc::deliver(objects, &process.root, &mut process.registers, descriptor.as_ref(), &mut reply);
            process.state = ProcessState::Runnable;
        }
    }
}

/// Makes the current process wait in `state` with `registers` (already holding its reply,
/// or pointing back at its `syscall`), and goes on with the next process.
pub fn wait_current(state: ProcessState, registers: &UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        scheduler.processes[current].registers = *registers;
        scheduler.processes[current].state = state;
    }
    switch_to_next()
}

pub fn any_runnable() -> bool {
    SCHEDULER
        .lock()
        .processes
        .iter()
        .any(|process| process.state == ProcessState::Runnable)
}

/// Whether a process other than the current one could run now.
pub fn others_runnable() -> bool {
    let scheduler = SCHEDULER.lock();
    let current = scheduler.current();
    scheduler
        .processes
        .iter()
        .enumerate()
        .any(|(index, process)| index != current && process.state == ProcessState::Runnable)
}

/// Makes process `index` the current one and enters it.
pub fn switch_to(index: usize) -> ! {
    enter(SCHEDULER.lock(), index)
}

/// Makes process `current` the current one and enters it, with its user half in the live
/// root: [`switch_to`] with the scheduler already locked, as the invocation path holds it.
#[unsafe(link_section = ".text.ipc")] // see linker.ld
pub fn enter(mut guard: spin::MutexGuard<'_, Scheduler>, current: usize) -> ! {
    let scheduler: &mut Scheduler = &mut guard;
    scheduler.current = current;
    flush_tables_if_stale(scheduler);
    // One bounds check serves the switch and the registers.
    let incoming = &scheduler.processes[current];
    // Entered from where it is kept: copying 144 bytes is a loop of 18 translation blocks
    // under TCG.
    let registers: *const UserRegisters = &incoming.registers;
    if scheduler.installed != current {
        let outgoing = scheduler
            .processes
            .get(scheduler.installed)
            .map(|process| &process.tables);
        space::switch(outgoing, &incoming.tables);
        scheduler.installed = current;
    }
    drop(guard);
    // SAFETY: the live root holds this process's user half and maps the kernel, so this
    // code and its stack stay mapped; `registers` hold the process's user rip and rsp and
    // stay where they are until `enter_user` has loaded them: interrupts are off and this
    // is the only CPU, so nothing changes the process table in between.
    unsafe { enter_user(registers) }
}

/// Whether the process whose root node is `root` is in the table.
pub fn is_adopted(root: ObjectId) -> bool {
    SCHEDULER.lock().index_of(root).is_some()
}

/// Adds the process whose root node `root` names to the table, stopped, if it is not
/// there: `node.make_process` made it, and `process.start` will run it.
pub fn adopt(root: Capability) {
    let mut scheduler = SCHEDULER.lock();
    if scheduler.index_of(root.object()).is_some() {
        return;
    }
    scheduler.processes.push(Process {
        name: "(made)",
        root,
        tables: space::UserTables::new(),
        registers: UserRegisters::default(),
        state: ProcessState::Stopped { exit_code: 0 },
        stalled: VecDeque::new(),
        waiting_for_keeper: false,
        invocation_count: 0,
    });
}

/// A slot a translation read changed where the scheduler may be held (a message delivered
/// into capability registers): every process's mappings are dropped before ring 3 runs
/// again ([`enter`], [`flush_if_stale`]).
static TRANSLATIONS_STALE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

pub fn translations_stale() {
    TRANSLATIONS_STALE.store(true, core::sync::atomic::Ordering::Relaxed);
}

/// Drops every process's mappings if [`translations_stale`] asked for it. The nodes stay
/// marked as translated, which only makes later changes flush too.
#[inline]
pub fn flush_if_stale() {
    if TRANSLATIONS_STALE.load(core::sync::atomic::Ordering::Relaxed) {
        flush_tables_if_stale(&mut SCHEDULER.lock());
    }
}

fn flush_tables_if_stale(scheduler: &mut Scheduler) {
    if TRANSLATIONS_STALE.swap(false, core::sync::atomic::Ordering::Relaxed) {
        scheduler.installed = NO_PROCESS;
        space::flush_live_user_half();
        for process in &mut scheduler.processes {
            process.tables.clear();
        }
    }
}

/// Slot `slot` of node `node` changed: if a cached translation read it, drop every
/// process's user mappings, so that each sees the change at its next access.
pub fn node_changed(objects: &mut Objects, node: ObjectId, slot: Slot) {
    if objects.cache.is_translated(node, slot) {
        drop_all_translations(objects);
    }
}

/// Calls `with` on each process, in load order.
pub fn for_each_process(mut with: impl FnMut(&Process)) {
    for process in SCHEDULER.lock().processes.iter() {
        with(process);
    }
}

/// Unmaps the last process, for code that runs after it (its user half stays mapped
/// otherwise).
pub fn restore_kernel_address_space() {
    SCHEDULER.lock().installed = NO_PROCESS;
    space::flush_live_user_half();
}

pub fn stop_current(state: ProcessState) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.running().expect("a process was running");
        scheduler.processes[current].state = state;
    }
    switch_to_next()
}

/// The timer interrupted ring 3: the time slice is over; save the registers, go on with
/// the next runnable process.
pub fn timer_in_user_mode(registers: UserRegisters) -> ! {
    let root = {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        scheduler.processes[current].registers = registers;
        scheduler.processes[current].root
    };
    // With no process running, this is the moment for background work.
    crate::control::wake_readers();
    checkpoint::step(false);
    if let Some(meter) = charge_meter(&root) {
        let keeper = {
            let objects = OBJECTS.lock();
            let held = objects
                .cache
                .node(&meter)
                .map(|node| node.get(METER_KEEPER_SLOT));
            held.map(|keeper| objects.cache.live_or_void(keeper))
                .unwrap_or(Capability::VOID)
        };
        if keeper.kind() == CapType::Start {
            let message = KeeperMessage {
                code: keeper::METER_EXHAUSTED,
                words: [0; 4],
            };
            ipc::invoke_keeper(keeper, message, &registers)
        }
        // No keeper: the process waits until someone refills its meter.
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        scheduler.processes[current].state = ProcessState::OutOfTime;
    }
    switch_to_next()
}

/// The microseconds a meter holds are a number in slot 0 of its node; its keeper is in
/// slot 1.
const METER_TIME_SLOT: Slot = Slot::constant(0);
const METER_KEEPER_SLOT: Slot = Slot::constant(1);

/// Charges one timer period to the meter of the process `root`, if it has one. Returns the
/// meter if it has run out.
fn charge_meter(root: &Capability) -> Option<Capability> {
    const PERIOD_MICROSECONDS: u64 = 1_000_000 / crate::arch::timer::TIMER_HZ;
    let mut objects = OBJECTS.lock();
    let meter = objects.cache.node(root).ok()?.get(process_root::METER);
    let meter = objects.cache.live_or_void(meter);
    if meter.kind() != CapType::Meter {
        return None;
    }
    let node = objects.cache.node_mut(&meter).ok()?;
    let left = node
        .get(METER_TIME_SLOT)
        .number_words()
        .map_or(0, |[left, _]| left);
    let left = left.saturating_sub(PERIOD_MICROSECONDS);
    node.swap(METER_TIME_SLOT, Capability::number([left, 0]));
    node_changed(&mut objects, meter.object(), METER_TIME_SLOT);
    (left == 0).then_some(meter)
}

/// Meter `meter` (a node) was refilled: every process that ran out of time on it runs again.
pub fn meter_refilled(objects: &Objects, meter: ObjectId) {
    let mut scheduler = SCHEDULER.lock();
    for process in scheduler.processes.iter_mut() {
        let on_meter = objects
            .cache
            .node(&process.root)
            .map(|node| node.get(process_root::METER).object() == meter);
        if process.state == ProcessState::OutOfTime && on_meter == Ok(true) {
            process.state = ProcessState::Runnable;
        }
    }
}

/// Page-fault error code bits (Intel SDM vol. 3, 4.7).
const PAGE_FAULT_WRITE: u64 = 1 << 1;

/// An exception in ring 3. A page fault that the space tree resolves is mapped and the
/// process resumes; anything else is reported and stops the process.
pub fn fault_in_user_mode(report: FaultReport, registers: UserRegisters) -> ! {
    let root = {
        let scheduler = SCHEDULER.lock();
        scheduler.processes[scheduler.current()].root
    };
    let mut space_keeper = None;
    if let (14, Some(address), Some(error_code)) =
        (report.vector, report.address, report.error_code)
    {
        let found = {
            let mut objects = OBJECTS.lock();
            // The root node holds the space capability: changing it changes the
            // translation too.
            let space = objects
                .cache
                .node_for_translation(&root, process_root::SPACE)
                .map(|node| node.get(process_root::SPACE));
            match space.map(|space| walk(&objects.cache, space, address)) {
                Ok(Walk::Page { page, writable }) => {
                    if let Err(error) = objects.ensure_resident(&[page.object()], true) {
                        crate::println!("holdfast: page {} cannot be loaded: {}", page.object().0, error.0);
                    }
                    // Writable only for a write: a page mapped writable is dirty (see
                    // `checkpoint`), and most pages are only ever read.
                    let writing = writable && error_code & PAGE_FAULT_WRITE != 0;
                    if writing {
                        checkpoint::limit_dirty_pages(&mut objects);
                        checkpoint::before_page_write(&objects.cache, page.object());
                    }
                    let frame = objects.cache.page(&page).ok().map(|frame| frame.physical());
                    frame.map(|frame| Ok((frame, writable, writing)))
                }
                Ok(Walk::Missing { keeper }) => keeper.map(Err),
                Err(_) => None,
            }
        };
        match found {
            Some(Ok((frame, writable, writing))) if writable || error_code & PAGE_FAULT_WRITE == 0 => {
                let mut scheduler = SCHEDULER.lock();
                let current = scheduler.current();
                let running = scheduler.installed == current;
                let process = &mut scheduler.processes[current];
                process.registers = registers;
                process.tables.map_page(address, frame, writing, running);
                enter(scheduler, current)
            }
            Some(Err(keeper)) => space_keeper = Some(keeper),
            _ => {}
        }
    }
    let keeper_message = KeeperMessage {
        code: if space_keeper.is_some() {
            keeper::SPACE_FAULT
        } else {
            keeper::EXCEPTION
        },
        words: [
            u64::from(report.vector),
            report.error_code.unwrap_or(u64::MAX),
            report.rip,
            report.address.unwrap_or(0),
        ],
    };
    let process_keeper = || {
        let objects = OBJECTS.lock();
        let held = objects
            .cache
            .node(&root)
            .map(|node| node.get(process_root::KEEPER));
        held.ok().map(|keeper| objects.cache.live_or_void(keeper))
    };
    if let Some(keeper) = space_keeper
        .or_else(process_keeper)
        .filter(|k| k.kind() == CapType::Start)
    {
        ipc::invoke_keeper(keeper, keeper_message, &registers)
    }
    let name = {
        let scheduler = SCHEDULER.lock();
        scheduler
            .running()
            .map(|index| scheduler.processes[index].name)
            .unwrap_or("?")
    };
    crate::println!("holdfast: process {name} faulted: {report}; process stopped");
    stop_current(ProcessState::Faulted(report))
}

/// What a keeper is told: why (a [`keeper`] code) and four words of detail.
pub struct KeeperMessage {
    pub code: u64,
    pub words: [u64; 4],
}

/// The run state in a root node's status slot: a number whose first word holds a code
/// (bits 0..8), flags (bits 8..16) and a fault's vector (bits 16..24), and whose second word
/// holds the exit code or the fault's rip. The register slots hold the 18 user registers in
/// `UserRegisters` order, then a fault's error code and address, then the invocation count.
mod status {
    pub const RUNNABLE: u64 = 1;
    pub const AVAILABLE: u64 = 2;
    pub const WAITING_FOR_REPLY: u64 = 3;
    pub const STALLED: u64 = 4;
    pub const OUT_OF_TIME: u64 = 5;
    pub const STOPPED: u64 = 6;
    pub const FAULTED: u64 = 7;
    pub const WAITING_FOR_KEEPER: u64 = 1 << 8;
    pub const FAULT_HAS_ERROR_CODE: u64 = 1 << 9;
    pub const FAULT_HAS_ADDRESS: u64 = 1 << 10;
    pub const FAULT_VECTOR_SHIFT: u32 = 16;
}

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

/// Drops every translation and every process's page tables: after a snapshot, a page may be
/// written only after a fault that marks it dirty and preserves its snapshot copy.
pub fn drop_all_translations(objects: &mut Objects) {
    objects.cache.forget_translations();
    let mut scheduler = SCHEDULER.lock();
    // Unhook and flush first: the tables' frames go back to the heap, which writes into
    // them, and no walk may see them then.
    scheduler.installed = NO_PROCESS;
    space::flush_live_user_half();
    for process in &mut scheduler.processes {
        process.tables.clear();
    }
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
        let state = match code & 0xff {
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

/// Each process's root node id and name, in table order (for the checkpoint directory).
pub fn roots_and_names() -> Vec<(ObjectId, &'static str)> {
    SCHEDULER
        .lock()
        .processes
        .iter()
        .map(|process| (process.root.object(), process.name))
        .collect()
}
