//! The process table: each process's cached registers and run state (runnable, or waiting:
//! stalled, for a reply, for input, for a journal commit, out of time, stopped, faulted),
//! the running one, and the questions asked of the table.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use holdfast_objects::{Capability, ObjectId};
use spin::Mutex;

use crate::arch::idt::FaultReport;
use crate::arch::syscall::UserRegisters;
use crate::space;

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
    /// durable ([`crate::persistence::journal`]). Its registers are those of the `invoke`.
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
    /// The first of those stalled on this process when it last became available
    /// ([`NO_PROCESS`] if none): until tick `kept_until_tick` no other invoker may take it
    /// (`ipc::make_available`), so that a caller it has just answered cannot call again
    /// before the one that waited.
    pub kept_for: usize,
    pub kept_until_tick: u64,
    /// Waiting for its keeper: the reply restarts it from its registers (which the keeper
    /// may have changed) instead of being delivered into them.
    pub waiting_for_keeper: bool,
    /// Whose meter pays for its time: the root of the process whose call it is serving
    /// (passed down a chain of calls), or void for its own. Set by a call of its start
    /// capability, cleared when it becomes available again; not kept across a restart.
    pub payer: Capability,
    /// Its meter ran out while a server worked for it: the reply that ends its call first
    /// settles that ([`crate::ipc`]'s `wake_with`).
    pub ran_out_while_served: bool,
    /// The processes it takes turns with as one ([`super::switch_to_next`]): a tenant's, or
    /// its root's id if it runs on no meter ([`super::group_of`]).
    pub group: ObjectId,
    /// The group it takes turns in now: `group`, or while it serves a call, its caller's
    /// (set with `payer`), so that a tenant's servers take its turns, not turns of their own.
    pub turn_group: ObjectId,
    /// [`Scheduler::turns`] when it was last chosen: the one of a group that waited longest
    /// goes first.
    pub last_turn: u64,
    pub invocation_count: u64,
}

impl Process {
    /// Whose meter pays for a server this process calls: its own payer's, if it is serving
    /// a call itself, or its own.
    pub fn payer_of_calls(&self) -> Capability {
        if self.payer.is_void() { self.root } else { self.payer }
    }

    /// It now serves a call from `caller`: runs on its payer and takes its turns.
    pub fn serve(&mut self, caller: (Capability, ObjectId)) {
        (self.payer, self.turn_group) = caller;
    }

    /// What [`Self::serve`] takes: this process's payer and turn group.
    pub fn as_caller(&self) -> (Capability, ObjectId) {
        (self.payer_of_calls(), self.turn_group)
    }

    /// It serves no call any more: back on its own meter and turns.
    pub fn serve_none(&mut self) {
        self.payer = Capability::VOID;
        self.turn_group = self.group;
    }
}

pub struct Scheduler {
    pub processes: Vec<Process>,
    /// The running process, or [`NO_PROCESS`]. This and `installed` are plain indices, as
    /// every invocation and switch reads them: an `Option` costs a test more than the
    /// bounds check of the indexing (each a translation block under TCG).
    pub(super) current: usize,
    /// The process whose user half the live root holds (see [`space::switch`]), or
    /// [`NO_PROCESS`].
    pub(super) installed: usize,
    /// Called when no process is runnable any more.
    pub(super) on_all_done: Option<fn() -> !>,
    /// How many times [`super::switch_to_next`] has chosen: a clock for `last_turn`.
    pub(super) turns: u64,
    /// `turns` when a member of each group ([`Process::turn_group`]) was last chosen: the
    /// group that waited longest goes first. Groups no process is in any more are dropped
    /// when the map holds more than twice as many as there are processes, and
    /// [`GROUP_TURNS_SLACK`] more.
    group_turns: BTreeMap<ObjectId, u64>,
    /// Where [`Self::index_of`] last found a root node, by the node's id modulo
    /// [`INDEX_HINTS`]: only a guess, checked before use.
    index_hints: [core::cell::Cell<usize>; INDEX_HINTS],
}

/// How many more groups than twice the processes [`Scheduler::group_turns`] may hold
/// before those of no process are dropped: enough that a table of a few processes does
/// not sweep at every turn.
const GROUP_TURNS_SLACK: usize = 64;

/// No process: an index that [`Scheduler::processes`] never reaches.
pub const NO_PROCESS: usize = usize::MAX;

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

    /// The process whose user half the live root holds, or [`NO_PROCESS`].
    pub fn installed(&self) -> usize {
        self.installed
    }

    pub fn running(&self) -> Option<usize> {
        (self.current != NO_PROCESS).then_some(self.current)
    }

    /// `turns` when a member of `group` was last chosen; 0 if none has been.
    pub(super) fn group_turn(&self, group: ObjectId) -> u64 {
        self.group_turns.get(&group).copied().unwrap_or(0)
    }

    pub(super) fn note_group_turn(&mut self, group: ObjectId, turn: u64) {
        self.group_turns.insert(group, turn);
        if self.group_turns.len() > 2 * self.processes.len() + GROUP_TURNS_SLACK {
            // A server serving another group's call keeps its own group's turn for after.
            let groups: BTreeSet<ObjectId> =
                self.processes.iter().flat_map(|process| [process.group, process.turn_group]).collect();
            self.group_turns.retain(|group, _| groups.contains(group));
        }
    }
}

pub static SCHEDULER: Mutex<Scheduler> = Mutex::new(Scheduler {
    processes: Vec::new(),
    current: NO_PROCESS,
    installed: NO_PROCESS,
    on_all_done: None,
    turns: 0,
    group_turns: BTreeMap::new(),
    index_hints: [const { core::cell::Cell::new(0) }; INDEX_HINTS],
});

/// Input arrived on the control channel: every process waiting for it runs its `read` again.
pub fn input_arrived() {
    for process in SCHEDULER.lock().processes.iter_mut() {
        if process.state == ProcessState::WaitingForInput {
            process.state = ProcessState::Runnable;
        }
    }
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

/// Whether the process whose root node is `root` is in the table.
pub fn is_adopted(root: ObjectId) -> bool {
    SCHEDULER.lock().index_of(root).is_some()
}

/// The table's entries, destroyed processes' among them (taken again by the next
/// `adopt`): at least the processes a checkpoint directory names.
pub fn table_length() -> usize {
    SCHEDULER.lock().processes.len()
}

/// Adds the process whose root node `root` names to the table, stopped, if it is not
/// there: `node.make_process` made it, and `process.start` will run it.
pub fn adopt(root: Capability) {
    let mut scheduler = SCHEDULER.lock();
    if scheduler.index_of(root.object()).is_some() {
        return;
    }
    let process = Process {
        name: "(made)",
        root,
        tables: space::UserTables::new(),
        registers: UserRegisters::default(),
        state: ProcessState::Stopped { exit_code: 0 },
        stalled: VecDeque::new(),
        kept_for: NO_PROCESS,
        kept_until_tick: 0,
        waiting_for_keeper: false,
        payer: Capability::VOID,
        ran_out_while_served: false,
        group: root.object(),
        turn_group: root.object(),
        last_turn: 0,
        invocation_count: 0,
    };
    // A destroyed process's entry is taken again, so that a tenant that makes and destroys
    // processes all day does not grow the table.
    match scheduler.processes.iter().position(|entry| entry.root.is_void()) {
        Some(free) => scheduler.processes[free] = process,
        None => scheduler.processes.push(process),
    }
}

/// Leaves the process whose root node is `root` stopped (a template the initial system
/// makes for a constructor to copy, never run).
pub fn stop_made(root: ObjectId) {
    let mut scheduler = SCHEDULER.lock();
    if let Some(index) = scheduler.index_of(root) {
        scheduler.processes[index].state = ProcessState::Stopped { exit_code: 0 };
    }
}

/// Destroys the process whose root node is `root`, if there is one (its root node was
/// rescinded): it never runs again, callers stalled on it try again and find it void, and
/// its entry (root void) is left out of every checkpoint and taken by the next `adopt`.
/// Entries are never removed: the table's indices are held in queues and in `current`.
/// Returns whether the process destroyed is the one running.
pub fn destroy(root: ObjectId) -> bool {
    let mut scheduler = SCHEDULER.lock();
    let Some(index) = scheduler.index_of(root) else {
        return false;
    };
    let stalled = core::mem::take(&mut scheduler.processes[index].stalled);
    for waiting in stalled {
        if scheduler.processes[waiting].state == ProcessState::Stalled {
            scheduler.processes[waiting].state = ProcessState::Runnable;
        }
    }
    let process = &mut scheduler.processes[index];
    process.root = Capability::VOID;
    process.state = ProcessState::Stopped { exit_code: 0 };
    process.tables.clear();
    process.waiting_for_keeper = false;
    if scheduler.installed == index {
        scheduler.installed = NO_PROCESS;
        space::flush_live_user_half();
    }
    scheduler.current == index
}

/// Calls `with` on each process, in load order.
pub fn for_each_process(mut with: impl FnMut(&Process)) {
    for process in SCHEDULER.lock().processes.iter() {
        with(process);
    }
}

/// Each process's root node id and name, in table order (for the checkpoint directory).
pub fn roots_and_names() -> Vec<(ObjectId, &'static str)> {
    SCHEDULER
        .lock()
        .processes
        .iter()
        .filter(|process| !process.root.is_void())
        .map(|process| (process.root.object(), process.name))
        .collect()
}
