//! The Holdfast QEMU launcher: everything the host needs to run a Holdfast guest.
//!
//! - [`binary`]: find `qemu-system-x86_64` (or the `HOLDFAST_QEMU` override) and its version.
//! - [`child`]: wait for QEMU's process with a deadline; keep the start of its stderr.
//! - [`command_line`]: what a VM is ([`VmSpec`]) and the QEMU arguments that make it.
//! - [`accel`]: choose KVM or TCG; KVM only where a timed probe shows it is fast.
//! - [`vm`]: run a VM with its serial console on a pipe, watch for the kernel's markers,
//!   map QEMU's exit status to the guest's verdict.
//! - [`qmp`]: control a running VM over its QMP socket (status, pause, resume, quit).
//! - [`events`]: follow QEMU's events on a monitor of their own (host I/O errors on disks).
//!
//! The CLI (`holdfast run`, `holdfast vm`, `holdfast accel`) and the benchmarks use this crate;
//! nothing here prints, so callers decide what the user sees.

pub mod accel;
pub mod binary;
pub mod child;
pub mod command_line;
pub mod events;
pub mod qmp;
pub mod serial;
pub mod vm;

pub use accel::{AccelCache, AccelChoice, AccelDecision, AccelVerdict, Accelerator, VerdictSource};
pub use binary::{QemuBinary, QemuNotFound};
pub use command_line::{Boot, LinkConnect, NetConnect, VmSpec};
pub use qmp::{QmpClient, QmpError, RunStatus};
pub use serial::{LineSplitter, ReadyMarker, SelftestVerdict, SerialLine};
pub use vm::{RunningVm, VmEnding, VmReport};
