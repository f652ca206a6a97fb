//! The control channel (COM2): a serial line to the host's `holdfast`, which sends requests
//! on it and reads the replies (`holdfast checkpoint`, `holdfast store counters`). The
//! kernel only moves bytes; a ring-3 service holding the control capability reads the
//! requests and acts on them with the capabilities it holds (services/admin).
//!
//! Input is polled, at each timer tick and in the idle loop ([`crate::idle`], [`crate::traps`]):
//! a process whose `read` finds nothing waits (`ProcessState::WaitingForInput`) and runs
//! its `read` again once bytes have arrived.

use spin::Mutex;
use uart_16550::{Config, Uart16550, backend::PioBackend};

static COM2: Mutex<Option<Uart16550<PioBackend>>> = Mutex::new(None);

/// Finds COM2; without one (the host attached no control channel) the control capability
/// answers `unavailable`.
pub fn init() {
    // SAFETY: 0x2f8..0x2ff is COM2 on every PC-compatible machine QEMU models, and this is
    // the only place that makes a UART for it.
    let mut uart = unsafe { Uart16550::new_port(0x2f8) }.expect("COM2 port range is valid");
    if uart.init(Config::default()).is_ok() {
        *COM2.lock() = Some(uart);
    }
}

pub fn present() -> bool {
    COM2.lock().is_some()
}

/// The bytes that have arrived, up to `buffer.len()`; never waits.
pub fn read(buffer: &mut [u8]) -> usize {
    COM2.lock().as_mut().map_or(0, |uart| uart.receive_bytes(buffer))
}

pub fn has_input() -> bool {
    COM2.lock().as_mut().is_some_and(|uart| uart.lsr().contains(uart_16550::spec::registers::LSR::DATA_READY))
}

pub fn write(bytes: &[u8]) {
    if let Some(uart) = COM2.lock().as_mut() {
        uart.send_bytes_exact(bytes);
    }
}

/// Lets processes waiting for input run their `read` again, if input has arrived.
pub fn wake_readers() {
    if has_input() {
        crate::process::input_arrived();
    }
}
