//! The TP1 (TPC-B, DebitCredit) load generator and checker behind `holdfast tp1`.
//!
//! The same code drives two targets through one trait ([`target::Target`]): the Holdfast
//! TP1 service over its wire protocol ([`holdfast::HoldfastTarget`], docs/tp1-protocol.md)
//! and PostgreSQL with pgbench's TPC-B SQL ([`postgres::PostgresTarget`]), so that one
//! command compares like with like. [`run::run`] measures; [`check::check`] proves after
//! any run, crash or restart that nothing acknowledged was lost or applied twice and that
//! the sums agree, against the [`ledger`] of what was sent and acknowledged.
//!
//! Everything connects to 127.0.0.1 (or a local Unix socket for PostgreSQL) only.

pub mod check;
pub mod generator;
pub mod holdfast;
pub mod ledger;
pub mod postgres;
pub mod run;
pub mod target;

/// Runs `future` on a single-threaded runtime: the generator needs one core at the rates
/// it drives and leaves the other to the target on a two-core host.
pub fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future))
}

/// A seed for a run that was given none: from the operating system's entropy.
pub fn random_seed() -> u64 {
    use rand::{RngCore, SeedableRng};
    rand_chacha::ChaCha8Rng::from_os_rng().next_u64()
}

/// `value` as one line of JSON.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    // The reports hold only numbers, strings and maps with string keys: they always serialize.
    serde_json::to_string(value).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
}
