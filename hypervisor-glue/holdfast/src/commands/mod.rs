//! One module per verb. Each returns the process's exit code or a [`crate::failure::Failure`].

pub mod accel;
pub mod bench;
pub mod checkpoint;
pub mod control;
pub mod endpoint;
pub mod exporter;
pub mod image;
pub mod monitor;
pub mod pair;
pub mod run;
pub mod run_libvirt;
pub mod snapshot;
pub mod store;
pub mod tenant;
pub mod tp1;
pub mod vm;
