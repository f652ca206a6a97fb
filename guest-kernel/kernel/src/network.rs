//! The kernel side of the `network_device` capability: the virtio-net driver
//! ([`crate::drivers::Net`]) once the boot is done with it, and its interrupts turned into
//! messages (Pebble's "interrupts as messages"). The network service in ring 3 arms one
//! notification at a time ([`arm`]): a start capability and a deadline. When a frame is
//! waiting or the deadline has passed, the notification becomes pending; the invocation
//! path delivers it as a send once its target is available (`ipc::network_notify`), never
//! dropping it and never blocking the interrupt, which only records that it came
//! (`arch::idt::take_network_interrupt`).
//!
//! None of this is on the store: after a restart the device is fresh and nothing is armed.
//! `ipc::network_restarted` then queues a `restarted` notice for each holder of the
//! capability ([`restart_notice`]), so that a service that was waiting hears of it.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use holdfast_abi::network_notification as notification;
use holdfast_objects::Capability;
use spin::Mutex;

use crate::arch::{self, timer};
use crate::drivers::{Net, SendError};

static DEVICE: Mutex<Option<Net>> = Mutex::new(None);

struct Notifications {
    /// The armed notification: where it goes and its deadline (microseconds since boot).
    armed: Option<(Capability, u64)>,
    /// Fired and not delivered yet (the target was busy): target and reason, oldest first.
    pending: VecDeque<(Capability, u64)>,
}

static NOTIFICATIONS: Mutex<Notifications> = Mutex::new(Notifications {
    armed: None,
    pending: VecDeque::new(),
});

/// Whether [`Notifications::pending`] holds anything: read on the invocation path without a
/// lock.
static PENDING: AtomicBool = AtomicBool::new(false);

/// Pending notifications kept at most: one armed notification fires at a time, so only
/// restart notices (one per holder) add to it.
const PENDING_MAX: usize = 16;

/// Takes over the driver after the boot's self-test.
pub fn install(net: Net) {
    *DEVICE.lock() = Some(net);
}

/// Whether there is a device (else the capability answers `unavailable`).
pub fn present() -> bool {
    DEVICE.lock().is_some()
}

/// Microseconds since this boot: the clock capability's time, in the unit of deadlines.
pub fn now_us() -> u64 {
    timer::tsc_to_nanoseconds(arch::read_tsc() - arch::boot::tsc_at_entry()) / 1000
}

/// Queues one frame for transmission; `None` without a device.
pub fn send(frame: &[u8]) -> Option<Result<(), SendError>> {
    DEVICE.lock().as_mut().map(|net| net.send(frame))
}

/// The oldest frame received, if one is waiting; `None` without a device.
pub fn receive() -> Option<Result<Option<Vec<u8>>, alloc::string::String>> {
    DEVICE.lock().as_mut().map(|net| net.poll(<[u8]>::to_vec))
}

pub fn mac_address() -> Option<[u8; 6]> {
    DEVICE.lock().as_ref().map(Net::mac_address)
}

/// Arms the notification (replacing one armed before); it fires at once if a frame is
/// already waiting.
pub fn arm(target: Capability, deadline_us: u64) {
    NOTIFICATIONS.lock().armed = Some((target, deadline_us));
    check_events();
}

/// Fires the armed notification if a frame is waiting or its deadline has passed.
pub fn check_events() {
    // The interrupt only woke us: the receive queue itself says whether a frame waits.
    arch::idt::take_network_interrupt();
    let mut notifications = NOTIFICATIONS.lock();
    let Some((target, deadline_us)) = notifications.armed else {
        return;
    };
    let frame_waiting = DEVICE.lock().as_ref().is_some_and(Net::has_frame);
    let reason = if frame_waiting {
        notification::REASON_FRAME
    } else if now_us() >= deadline_us {
        notification::REASON_DEADLINE
    } else {
        return;
    };
    notifications.armed = None;
    push_pending(&mut notifications, (target, reason));
}

fn push_pending(notifications: &mut Notifications, entry: (Capability, u64)) {
    if notifications.pending.len() < PENDING_MAX {
        notifications.pending.push_back(entry);
    }
    PENDING.store(true, Ordering::Relaxed);
}

/// Queues the notice of a restart for `target` (a start capability to a holder).
pub fn restart_notice(target: Capability) {
    push_pending(&mut NOTIFICATIONS.lock(), (target, notification::REASON_RESTARTED));
}

/// Whether a notification waits for delivery.
#[inline]
pub fn has_pending() -> bool {
    PENDING.load(Ordering::Relaxed)
}

/// Takes every pending notification, oldest first; [`put_back`] returns those whose target
/// was busy.
pub fn take_pending() -> VecDeque<(Capability, u64)> {
    let mut notifications = NOTIFICATIONS.lock();
    PENDING.store(false, Ordering::Relaxed);
    core::mem::take(&mut notifications.pending)
}

/// Keeps `entry` pending, after those already pending.
pub fn put_back(entry: (Capability, u64)) {
    push_pending(&mut NOTIFICATIONS.lock(), entry);
}
