//! Meters: the CPU time a process may use, charged one timer period at a time, and
//! refilled by whoever holds the meter.

use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, ObjectId, Slot};

use crate::objects::{OBJECTS, Objects};
use super::switch::node_changed;
use super::table::{ProcessState, SCHEDULER};

/// The microseconds a meter holds are a number in slot 0 of its node; its keeper is in
/// slot 1.
const METER_TIME_SLOT: Slot = Slot::constant(0);

pub const METER_KEEPER_SLOT: Slot = Slot::constant(1);

/// Charges one timer period to the meter of the process `root`, if it has one. Returns the
/// meter if it has run out.
pub fn charge_meter(root: &Capability) -> Option<Capability> {
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
