//! The deterministic simulator of the Holdfast store (in the manner of TigerBeetle's VOPR):
//! simulated disks with volatile write caches and injected faults ([`disk`]), a reference
//! model of what must survive ([`model`]), and seeded runs that crash at chosen write
//! boundaries and check every restart ([`scenario`]). [`campaign`] runs a seed at every
//! write boundary it has. Every failure prints the command that replays it.

pub mod campaign;
pub mod disk;
pub mod model;
pub mod rng;
pub mod scenario;
