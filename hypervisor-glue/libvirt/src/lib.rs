//! Holdfast under libvirtd, the second runner beside the embedded QEMU launcher
//! (`holdfast-qemu`): `holdfast run --libvirt URI`.
//!
//! - [`domain`]: what a Holdfast VM is ([`DomainSpec`]) and its libvirt domain XML, written
//!   from Rust structs with quick-xml's serde support.
//! - [`runner`]: connect to libvirtd with libvirt's client library (the `virt` crate), start
//!   the domain transient and auto-destroyed (or, for a pair's VMs, defined and auto-destroyed), follow its serial console through libvirt's
//!   console stream, stop it.
//!
//! Nothing here prints: the CLI decides what the user sees.

pub mod domain;
pub mod runner;

pub use domain::{DomainSpec, DomainXmlError};
pub use runner::{ConnectError, DomainHandle, Hypervisor, LibvirtError, RunningDomain, Stopped};
