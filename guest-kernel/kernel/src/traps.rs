//! What ring 3's interrupts and exceptions do, as the handlers `arch::idt` calls
//! ([`crate::arch::idt::UserModeHandlers`], registered at boot): the timer ends a time slice
//! (background work, then the meter is charged and its keeper told when it runs out); a
//! page fault the space tree resolves is mapped (through the checkpoint's copy on write);
//! any other fault goes to the process's keeper, or stops the process.

use holdfast_abi::keeper;
use holdfast_objects::node::process_root;
use holdfast_objects::space::{Walk, walk};
use holdfast_objects::{CapType, Capability};

use crate::arch::idt::FaultReport;
use crate::arch::syscall::UserRegisters;
use crate::message::KeeperMessage;
use crate::objects::OBJECTS;
use crate::process::{
    Charged, ProcessState, SCHEDULER, charge_meter, meter_keeper, switch_after_slice, enter, stop_current, switch_to_next,
};
use crate::{ipc, persistence, space};

/// The timer interrupted ring 3: the time slice is over; save the registers, go on with
/// the next runnable process.
pub fn timer_in_user_mode(registers: UserRegisters) -> ! {
    let (root, payer, group) = {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        let process = &mut scheduler.processes[current];
        process.registers = registers;
        (process.root, process.payer, process.turn_group)
    };
    // With no process running, this is the moment for background work.
    crate::control::wake_readers();
    ipc::network_notify();
    persistence::step(false);
    crate::process::meter_period_wake();
    match charge_meter(&root, &payer) {
        Charged::InTime => {}
        Charged::RanOut(meter) => {
            let keeper = meter_keeper(&OBJECTS.lock(), &meter);
            if let Some(keeper) = keeper {
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
        Charged::PayerRanOut => {
            // The server goes on with the request, into its caller's debt: stopping it would
            // stop every other caller queued on it too. A caller waiting for the reply
            // settles when it comes; one running (it sent) runs out at its own next tick.
            let mut scheduler = SCHEDULER.lock();
            let caller = scheduler.index_of(payer.object()).filter(|&caller| {
                scheduler.processes[caller].root == payer
                    && scheduler.processes[caller].state == ProcessState::WaitingForReply
            });
            if let Some(caller) = caller {
                scheduler.processes[caller].ran_out_while_served = true;
            }
        }
    }
    // The next turn goes to another group than the one whose slice ends, if any is
    // runnable: a tenant's processes, and the servers working for them, take one slice a
    // turn between them.
    switch_after_slice(group)
}

/// The network device interrupted ring 3: a frame came. Its notification goes out now (the
/// service may be waiting for it), then the next runnable process goes on.
pub fn network_in_user_mode(registers: UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        scheduler.processes[current].registers = registers;
    }
    ipc::network_notify();
    switch_to_next()
}

/// Page-fault error code bits (Intel SDM vol. 3, 4.7).
const PAGE_FAULT_WRITE: u64 = 1 << 1;
const PAGE_FAULT_INSTRUCTION_FETCH: u64 = 1 << 4;

/// How a page found in the space tree is mapped for the access that faulted, or `None` if
/// the access is not allowed (a write to a read-only page, a fetch from a page that may not
/// be executed: the process faults). Writable only for a write: a page mapped writable is
/// dirty (see `persistence::checkpoint`), and most pages are only ever read. Never
/// writable and executable at once, whatever the capabilities allow.
fn page_access(error_code: u64, writable: bool, executable: bool) -> Option<space::Access> {
    if error_code & PAGE_FAULT_INSTRUCTION_FETCH != 0 {
        executable.then_some(space::Access::Execute)
    } else if error_code & PAGE_FAULT_WRITE != 0 {
        writable.then_some(space::Access::Write)
    } else if executable {
        // Code and the read-only data linked into its pages: one fault, not two.
        Some(space::Access::Execute)
    } else {
        Some(space::Access::Read)
    }
}

/// How a page fault's walk ended, when it found anything.
enum Resolved {
    /// The page's frame, and how the access may map it (`None`: it may not).
    Map(x86_64::structures::paging::PhysFrame, Option<space::Access>),
    /// Nothing mapped: the tree changed under the fault (see below).
    Again,
    /// An access for the keeper on the path.
    Keeper(Capability),
}

/// An exception in ring 3. A page fault that the space tree resolves is mapped and the
/// process resumes; anything else is reported and stops the process.
pub fn fault_in_user_mode(report: FaultReport, registers: UserRegisters) -> ! {
    let (root, translator) = {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current();
        // Saved before the fault is resolved: loading the page or limiting the dirty pages
        // may take a whole checkpoint now, which writes this process's registers from the
        // table, and it must find these (the faulting instruction, run again after a
        // restart), not older ones with newer memory (the TP1 kill test applied a batch
        // twice from such a checkpoint).
        scheduler.processes[current].registers = registers;
        (scheduler.processes[current].root, crate::process::translator(current))
    };
    let mut space_keeper = None;
    let fault_started = crate::arch::read_tsc();
    if let (14, Some(address), Some(error_code)) =
        (report.vector, report.address, report.error_code)
    {
        let found = {
            let mut objects = OBJECTS.lock();
            // The root node holds the space capability: changing it changes the
            // translation too.
            let write = error_code & PAGE_FAULT_WRITE != 0;
            let walk_marking = |objects: &crate::objects::Objects| {
                let space = objects
                    .cache
                    .node_for_translation(&root, process_root::SPACE, translator)
                    .map(|node| node.get(process_root::SPACE));
                space.map(|space| walk(&objects.cache, space, address, write, translator))
            };
            let epoch = objects.cache.translation_epoch();
            match walk_marking(&objects) {
                Ok(Walk::Page { page, writable, keeper }) => 'page: {
                    let access = page_access(error_code, writable, page.may_execute());
                    if let (None, Some(keeper)) = (access, keeper) {
                        // An access the path does not allow, under a keeper: its business
                        // (a write to a virtual copy's shared read-only page).
                        break 'page Some(Resolved::Keeper(keeper));
                    }
                    if let Err(error) = objects.ensure_resident(&[page.object()], true) {
                        crate::println!("holdfast: page {} cannot be loaded: {}", page.object().0, error.0);
                        break 'page None;
                    }
                    if access == Some(space::Access::Write) {
                        persistence::limit_dirty_pages(&mut objects);
                        persistence::before_page_write(&objects.cache, page.object());
                    }
                    // Loading the page or limiting the dirty pages may have taken a
                    // checkpoint or evicted pages, which dropped every translation and
                    // forgot the marks this walk left: mapped now, the page would have none,
                    // and no later change to its path or rescinding of it would drop it.
                    // The walk again marks them anew. It finds the same page (neither
                    // changes a node); if it did not, the instruction faults again.
                    if objects.cache.translation_epoch() != epoch
                        && !matches!(walk_marking(&objects), Ok(Walk::Page { page: again, .. }) if again == page)
                    {
                        break 'page Some(Resolved::Again);
                    }
                    let frame = objects.cache.page(&page).ok().map(|frame| frame.physical());
                    frame.map(|frame| Resolved::Map(frame, access))
                }
                Ok(Walk::Missing { keeper }) => keeper.map(Resolved::Keeper),
                Err(_) => None,
            }
        };
        match found {
            Some(Resolved::Map(frame, Some(access))) => {
                let mut scheduler = SCHEDULER.lock();
                let current = scheduler.current();
                let running = scheduler.installed() == current;
                scheduler.processes[current].tables.map_page(address, frame, access, running);
                persistence::PAGE_FAULTS.add_since(fault_started);
                enter(scheduler, current)
            }
            // The instruction runs again and faults again.
            Some(Resolved::Again) => {
                let scheduler = SCHEDULER.lock();
                let current = scheduler.current();
                enter(scheduler, current)
            }
            Some(Resolved::Keeper(keeper)) => space_keeper = Some(keeper),
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
