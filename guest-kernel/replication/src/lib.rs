//! The pair's replication link (DESIGN.md, "The pair and failover"; the protocol is
//! written down in `docs/replication.md`).
//!
//! The primary streams every write and flush its store makes to the standby, which makes
//! the same writes and flushes to its own disks in the same order. Because the store
//! survives a crash that keeps any subset of unflushed writes, the standby's disks are at
//! every moment a store the standby can start from, holding at least everything flushed
//! before the last flush it took. A commit (a flush) is acknowledged by the primary once
//! its mode is met: the standby received it, or has it durable, or (asynchronously) lags
//! by no more than a bound.
//!
//! - [`wire`]: the messages, versioned and checksummed;
//! - [`sender`]: the primary's end (window, resend, full copy, modes);
//! - [`receiver`]: the standby's end (order, block assembly, acknowledgements).
//!
//! Portable and without I/O: the kernel moves the messages over a virtio-net device, the
//! host supervisor relays them (and reads the heartbeats) between the VMs, and the tests
//! join the two ends through a lossy link in memory.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod receiver;
pub mod sender;
pub mod wire;

#[cfg(test)]
mod tests;
