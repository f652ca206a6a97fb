//! Meters: the CPU time a process may use, charged one timer period at a time to its meter
//! and every meter above it (a tree: KeyKOS's meters), and refilled by whoever holds a
//! meter or, for a meter with a share, by the kernel at the start of every period
//! ([`METER_PERIOD_TICKS`]): a tenant's meter with a share of 30 ms gets 30 ms of every
//! 100 ms, however much it spins, and the others run meanwhile. A process serving a call
//! is charged to its caller's meters ([`charge_meter`]), so a tenant cannot spin past its
//! share in a shared server either.

use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, Node, ObjectId, Slot};

use crate::arch::timer;
use crate::objects::{OBJECTS, Objects};
use super::switch::node_changed;
use super::table::{ProcessState, SCHEDULER};

/// The microseconds a meter holds are a number in slot 0 of its node, with the period of
/// its last share in word 1; its keeper is in slot 1, its parent meter in slot 2, and its
/// share (microseconds a period, 0: none) a number in slot 3.
const METER_TIME_SLOT: Slot = Slot::constant(0);
const METER_KEEPER_SLOT: Slot = Slot::constant(1);
pub const METER_PARENT_SLOT: Slot = Slot::constant(2);
pub const METER_SHARE_SLOT: Slot = Slot::constant(3);

/// A share is given at the start of every period of this many timer ticks (100 ms).
pub const METER_PERIOD_TICKS: u64 = timer::TIMER_HZ / 10;

/// Meters above a process's own that are charged too: deeper trees are cut there (a cycle
/// of parents, which `make_meter` cannot make but a node's holder could, ends too).
const METER_DEPTH_MAX: usize = 8;

const TICK_MICROSECONDS: u64 = 1_000_000 / timer::TIMER_HZ;

fn period_now() -> u64 {
    timer::ticks() / METER_PERIOD_TICKS
}

/// A meter's time left in period `period`, with the share given if this period has not had
/// it yet; and the period to record with it. Negative: a debt, the time servers spent for
/// the meter's processes after it ran out, or the rest of a tick charged whole (stored as
/// two's complement), which the shares of the periods since pay first: each period's, not
/// only this one's, since a meter out of time is not charged (so not written) meanwhile,
/// and a share smaller than the debt would otherwise never pay it. At most one share is
/// left for a period.
fn time_left(node: &Node, period: u64) -> (i64, u64) {
    let [left, given_in] = node.get(METER_TIME_SLOT).number_words().unwrap_or([0, 0]);
    let left = left as i64;
    let share = node.get(METER_SHARE_SLOT).number_words().map_or(0, |[share, _]| share.min(i64::MAX as u64) as i64);
    if share > 0 && given_in != period {
        // A restart starts the periods again: one share, as for the period after.
        let periods = if period > given_in { period - given_in } else { 1 };
        let paid = share.saturating_mul(i64::try_from(periods).unwrap_or(i64::MAX));
        (left.min(0).saturating_add(paid).min(share), period)
    } else {
        (left, given_in)
    }
}

/// A process's meter and the meters above it, nearest first: a fixed-size list, so that
/// the charge at every timer tick allocates nothing.
struct MeterChain {
    meters: [Capability; METER_DEPTH_MAX],
    length: usize,
}

impl MeterChain {
    const EMPTY: Self = Self { meters: [Capability::VOID; METER_DEPTH_MAX], length: 0 };

    /// The chain of the process `root` (empty without a meter), at most
    /// [`METER_DEPTH_MAX`] meters.
    fn of(objects: &Objects, root: &Capability) -> Self {
        let mut chain = Self::EMPTY;
        let Ok(node) = objects.cache.node(root) else { return chain };
        let mut meter = objects.cache.live_or_void(node.get(process_root::METER));
        while meter.kind() == CapType::Meter && chain.length < METER_DEPTH_MAX {
            chain.meters[chain.length] = meter;
            chain.length += 1;
            let Ok(node) = objects.cache.node(&meter) else { break };
            meter = objects.cache.live_or_void(node.get(METER_PARENT_SLOT));
        }
        chain
    }

    fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.meters[..self.length].iter().copied()
    }

    fn contains(&self, meter: ObjectId) -> bool {
        self.iter().any(|held| held.object() == meter)
    }

    /// The scheduling group of the processes on this chain ([`group_of`]): the meter just
    /// below its top (a tenant's, below the meter of all tenants), or the top if the chain
    /// is that alone; `unmetered` for an empty chain.
    fn group(&self, unmetered: ObjectId) -> ObjectId {
        match self.length {
            0 => unmetered,
            1 => self.meters[0].object(),
            length => self.meters[length - 2].object(),
        }
    }
}

/// The group the process `root` takes turns with ([`super::switch_to_next`]): the processes
/// on one tenant's meter (the meter below the top of their chains, or a top meter itself)
/// are one group, so that a tenant's processes together delay another's by one time slice,
/// however many of them spin. A process on no meter is a group of its own.
pub fn group_of(objects: &Objects, root: &Capability) -> ObjectId {
    MeterChain::of(objects, root).group(root.object())
}

/// Sets every process's group: at the start of a run, the initial or restored system's.
pub fn regroup_all(objects: &Objects) {
    let count = SCHEDULER.lock().processes.len();
    for index in 0..count {
        regroup(objects, index);
    }
}

/// Sets the group of the process in slot `index`: its meter changed, or it starts.
pub fn regroup(objects: &Objects, index: usize) {
    let mut scheduler = SCHEDULER.lock();
    let process = &mut scheduler.processes[index];
    process.group = group_of(objects, &process.root);
    if process.payer.is_void() {
        process.turn_group = process.group;
    }
}

/// Who paid for a timer period ([`charge_meter`]).
pub enum Charged {
    /// Every meter charged has time left.
    InTime,
    /// The process's own meter `0` (the nearest of its chain that did) ran out: the process
    /// may not go on.
    RanOut(Capability),
    /// The meter of the caller it serves ran out: the server goes on, its time the caller's
    /// debt, and the caller waits for time once its call returns.
    PayerRanOut,
}

/// Charges one timer period to the meters of the process `root` and every meter above
/// them, or to its `payer`'s (the caller whose call it serves, void if none) when the
/// payer has a meter: a server's time is its callers', as with seL4 MCS's passive servers,
/// so a tenant that makes shared servers spin gets its share and no more.
pub fn charge_meter(root: &Capability, payer: &Capability) -> Charged {
    let mut objects = OBJECTS.lock();
    let period = period_now();
    let payer_chain = if payer.is_void() { MeterChain::EMPTY } else { MeterChain::of(&objects, payer) };
    let (chain, paid_by_payer) = match payer_chain.length {
        0 => (MeterChain::of(&objects, root), false),
        _ => (payer_chain, true),
    };
    let mut exhausted = None;
    for meter in chain.iter() {
        let Ok(node) = objects.cache.node_mut(&meter) else { continue };
        let (left, given_in) = time_left(node, period);
        // Charged whole, into debt if need be: a server goes on with a request after its
        // caller's meters ran out, and what it spends is still the caller's.
        let left = left.saturating_sub(TICK_MICROSECONDS as i64);
        node.swap(METER_TIME_SLOT, Capability::number([left as u64, given_in]));
        node_changed(&mut objects, meter.object(), METER_TIME_SLOT);
        if left <= 0 && exhausted.is_none() {
            exhausted = Some(meter);
        }
    }
    match exhausted {
        None => Charged::InTime,
        Some(_) if paid_by_payer => Charged::PayerRanOut,
        Some(meter) => Charged::RanOut(meter),
    }
}

/// What a process whose meter ran out while a server worked for it does when its call
/// returns, as if the period had been charged to it: whether it runs on.
pub enum Settled {
    /// Its meters have time again (refilled, or a new period's share).
    Runs,
    /// It waits until its meters are refilled.
    OutOfTime,
    /// The nearest meter out of time has a keeper (a start capability): the keeper is told.
    Keeper(Capability),
}

pub fn settle_ran_out(objects: &Objects, root: &Capability) -> Settled {
    let period = period_now();
    let out_of_time = MeterChain::of(objects, root).iter().find(|meter| {
        objects.cache.node(meter).is_ok_and(|node| time_left(node, period).0 <= 0)
    });
    match out_of_time.map(|meter| meter_keeper(objects, &meter)) {
        None => Settled::Runs,
        Some(Some(keeper)) => Settled::Keeper(keeper),
        Some(None) => Settled::OutOfTime,
    }
}

/// The keeper of `meter`, told when the meter runs out: a live start capability, or none.
pub fn meter_keeper(objects: &Objects, meter: &Capability) -> Option<Capability> {
    let held = objects.cache.node(meter).ok()?.get(METER_KEEPER_SLOT);
    Some(objects.cache.live_or_void(held)).filter(|keeper| keeper.kind() == CapType::Start)
}

/// Whether every meter of the process `root` has time left now (a share not yet given this
/// period counts as given).
fn has_time(objects: &Objects, root: &Capability, period: u64) -> bool {
    MeterChain::of(objects, root).iter().all(|meter| {
        objects.cache.node(&meter).is_ok_and(|node| time_left(node, period).0 > 0)
    })
}

/// Runs again every process out of time whose meters all have time now, among those whose
/// chain `holds` accepts.
fn wake_out_of_time(objects: &Objects, holds: impl Fn(&MeterChain) -> bool) {
    let period = period_now();
    let mut scheduler = SCHEDULER.lock();
    for process in scheduler.processes.iter_mut() {
        if process.state == ProcessState::OutOfTime
            && holds(&MeterChain::of(objects, &process.root))
            && has_time(objects, &process.root, period)
        {
            process.state = ProcessState::Runnable;
        }
    }
}

/// Meter `meter` (a node) was refilled or given a share: every process out of time below it
/// runs again if its other meters allow.
pub fn meter_refilled(objects: &Objects, meter: ObjectId) {
    wake_out_of_time(objects, |chain| chain.contains(meter));
}

/// At the start of each period, processes out of time whose meters get a share run again.
/// Called at every timer tick, from ring 3 and from the idle loop.
pub fn meter_period_wake() {
    static LAST_PERIOD: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let period = period_now();
    if LAST_PERIOD.swap(period, core::sync::atomic::Ordering::Relaxed) == period {
        return;
    }
    let objects = OBJECTS.lock();
    wake_out_of_time(&objects, |_| true);
}

/// Whether some process out of time will run again when the next period gives its meters
/// their shares: every meter of its chain has time left or a share.
pub fn waits_for_a_share() -> bool {
    let objects = OBJECTS.lock();
    let scheduler = SCHEDULER.lock();
    scheduler.processes.iter().filter(|process| process.state == ProcessState::OutOfTime).any(|process| {
        MeterChain::of(&objects, &process.root).iter().all(|meter| {
            objects.cache.node(&meter).is_ok_and(|node| {
                let share = node.get(METER_SHARE_SLOT).number_words().map_or(0, |[share, _]| share);
                share > 0 || time_left(node, period_now()).0 > 0
            })
        })
    })
}
