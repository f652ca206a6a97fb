//! The idle loop: what the kernel does when no process can run. Background work (input on
//! the control channel, then a step of checkpoint work), else it waits for the timer.

use crate::{control, persistence, process};

/// Runs whenever no process is runnable (`process::run`'s `on_all_done` once the store is
/// attached); never returns.
pub fn idle() -> ! {
    loop {
        control::wake_readers();
        crate::ipc::network_notify();
        process::meter_period_wake();
        if process::any_runnable() {
            process::switch_to_next()
        }
        if !persistence::step(true) {
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
    }
}
