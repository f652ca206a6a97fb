//! The scheduler and the switch: the choice of the next runnable process, by turns of
//! groups ([`switch_to_next`]), taking the current one off the processor ([`wait_current`],
//! [`stop_current`]), entering a process ([`enter`], on the IPC path), and the page tables
//! it installs: the live root's user half, dropped whenever a translation may be stale
//! ([`node_changed`], [`drop_translations`], [`translations_stale`],
//! [`drop_all_translations`]).

use holdfast_objects::{ObjectId, Slot, Translators};

use crate::arch::syscall::{UserRegisters, enter_user};
use crate::objects::Objects;
use crate::space;
use super::table::{NO_PROCESS, ProcessState, SCHEDULER, Scheduler};

/// Runs the loaded processes, each until it stops or faults, then calls `on_all_done`.
pub fn run(on_all_done: fn() -> !) -> ! {
    // The kernel runs with interrupts off from here on (ring 3 runs with them on):
    // `enter` relies on it.
    x86_64::instructions::interrupts::disable();
    super::regroup_all(&crate::objects::OBJECTS.lock());
    SCHEDULER.lock().on_all_done = Some(on_all_done);
    switch_to_next()
}

/// Chooses the next runnable process and enters it; never returns.
pub fn switch_to_next() -> ! {
    switch_skipping(None)
}

/// [`switch_to_next`] after the timer ended the time slice of group `group`
/// ([`super::Process::turn_group`]): the next turn goes to another group if one is runnable.
pub fn switch_after_slice(group: ObjectId) -> ! {
    switch_skipping(Some(group))
}

/// Turns by groups ([`super::group_of`]): of the runnable processes, one not of group
/// `skipped` if any; of those, one of the group whose last turn is oldest; of its members,
/// the one whose last turn is oldest; of equals, the first in the table after the current
/// one. So a tenant's processes (and the servers serving them) take one turn together:
/// another tenant waits one slice for them, not one for each; and each runnable group has
/// one turn in a round of them all, however its members sit in the table (round robin over
/// the table gave A B A C).
fn switch_skipping(skipped: Option<ObjectId>) -> ! {
    let mut scheduler = SCHEDULER.lock();
    let count = scheduler.processes.len();
    let after = scheduler.running().map_or(0, |current| current + 1);
    let next = (0..count)
        .map(|offset| (after + offset) % count)
        .filter(|&index| scheduler.processes[index].state == ProcessState::Runnable)
        .min_by_key(|&index| {
            let process = &scheduler.processes[index];
            (Some(process.turn_group) == skipped, scheduler.group_turn(process.turn_group), process.last_turn)
        });
    let Some(next) = next else {
        let done = scheduler.on_all_done.expect("run() set it");
        scheduler.current = NO_PROCESS;
        drop(scheduler);
        done()
    };
    scheduler.turns += 1;
    let (turns, group) = (scheduler.turns, scheduler.processes[next].turn_group);
    scheduler.processes[next].last_turn = turns;
    scheduler.note_group_turn(group, turns);
    enter(scheduler, next)
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

pub fn stop_current(state: ProcessState) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.running().expect("a process was running");
        scheduler.processes[current].state = state;
    }
    switch_to_next()
}

/// Makes process `current` the current one and enters it, with its user half in the live
/// root; the scheduler is locked by the caller, as the invocation path holds it.
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

/// Slot `slot` of node `node` changed: the processes whose cached translations read it
/// drop their user mappings, so that each sees the change at its next access.
pub fn node_changed(objects: &mut Objects, node: ObjectId, slot: Slot) {
    let translators = objects.cache.slot_translators(node, slot);
    drop_translations(objects, translators);
}

/// The process in slot `index` of the process table, as one of a set of [`Translators`].
pub fn translator(index: usize) -> Translators {
    1 << (index % Translators::BITS as usize)
}

/// Drops the page tables of `translators`: the processes whose translations may depend on
/// an object that changed or went. Only theirs: a virtual copy's write fault and a bank's
/// destruction of a process's objects each dropped every process's tables before, and
/// every service then faulted its pages in again (under TCG, a fifth of a constructor's
/// process cycle). Their marks on the cache's objects stop counting, so that changing what
/// they translated through before does not drop their new tables.
pub fn drop_translations(objects: &mut Objects, translators: Translators) {
    if translators == 0 {
        return;
    }
    objects.cache.forget_translations_of(translators);
    let mut scheduler = SCHEDULER.lock();
    // Unhook and flush first, as `drop_all_translations` does.
    let installed = scheduler.installed;
    if installed != NO_PROCESS && translators & translator(installed) != 0 {
        scheduler.installed = NO_PROCESS;
        space::flush_live_user_half();
    }
    // Only the slots of the set's bits (usually one): the table may hold thousands.
    let count = scheduler.processes.len();
    for bit in (0..Translators::BITS as usize).filter(|&bit| translators & 1 << bit != 0) {
        for index in (bit..count).step_by(Translators::BITS as usize) {
            scheduler.processes[index].tables.clear();
        }
    }
}

/// Unmaps the last process, for code that runs after it (its user half stays mapped
/// otherwise).
pub fn restore_kernel_address_space() {
    SCHEDULER.lock().installed = NO_PROCESS;
    space::flush_live_user_half();
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
