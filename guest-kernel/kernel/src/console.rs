//! The serial console (COM1). Everything the kernel says goes here; the host reads it.

use core::fmt::{self, Write};
use spin::Mutex;
use uart_16550::{Config, Uart16550, backend::PioBackend};

static COM1: Mutex<Option<Uart16550<PioBackend>>> = Mutex::new(None);

pub fn init() {
    // SAFETY: 0x3f8..0x3ff is COM1 on every PC-compatible machine QEMU models, and this
    // is the only place that makes a UART for it.
    let mut uart = unsafe { Uart16550::new_port(0x3f8) }.expect("COM1 port range is valid");
    // Initialisation fails only if no UART answers; then there is nobody to tell.
    if uart.init(Config::default()).is_ok() {
        *COM1.lock() = Some(uart);
    }
}

struct Console;

impl Write for Console {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_bytes(text.as_bytes());
        Ok(())
    }
}

pub fn write_bytes(bytes: &[u8]) {
    if let Some(uart) = COM1.lock().as_mut() {
        uart.send_bytes_exact(bytes);
    }
}

#[doc(hidden)]
pub fn print_arguments(arguments: fmt::Arguments) {
    // Interrupt handlers print too: keep them out while we hold the lock.
    x86_64::instructions::interrupts::without_interrupts(|| {
        let _ = Console.write_fmt(arguments);
    });
}

#[macro_export]
macro_rules! println {
    () => { $crate::console::print_arguments(format_args!("\n")) };
    ($($argument:tt)*) => {
        $crate::console::print_arguments(format_args!("{}\n", format_args!($($argument)*)))
    };
}
