//! What the generator and the checker need from a system under test, and nothing more:
//! one trait, two implementations (the Holdfast TP1 service over its wire protocol,
//! PostgreSQL with pgbench's SQL), so that both are driven by the same code.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use holdfast_tp1_protocol::{
    BranchSums, Status, SummaryTotals, Transaction, TransactionId, TransactionResult,
};

/// Why one transaction did not come back acknowledged.
#[derive(Debug)]
pub enum TransactionError {
    /// The target answered with a refusal (not applied); retrying is pointless.
    Refused(Status),
    /// The connection broke before the reply: the transaction may or may not have been
    /// applied. The caller reconnects and retries the same transaction id, which the target
    /// applies at most once.
    Disconnected(String),
    /// The target failed in a way that a retry with the same id may get past (PostgreSQL's
    /// deadlock or serialization failure, Holdfast's `internal`).
    Retryable(String),
}

impl std::fmt::Display for TransactionError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransactionError::Refused(status) => write!(formatter, "refused: {status}"),
            TransactionError::Disconnected(why) => write!(formatter, "connection lost: {why}"),
            TransactionError::Retryable(why) => write!(formatter, "failed (retryable): {why}"),
        }
    }
}

/// One history entry as the checker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The target's index for it (Holdfast: the position in history; PostgreSQL: the row's
    /// sequence number, which may have gaps).
    pub index: u64,
    /// `None` for a PostgreSQL history row written by something other than this tool (a
    /// plain pgbench run): such a row is reported, as it cannot be matched.
    pub transaction_id: Option<TransactionId>,
    pub branch: u32,
    pub teller: u32,
    pub account: u32,
    pub delta: i64,
}

/// Everything `check` compares: the target's own sums and its whole history.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub scale: u32,
    pub totals: SummaryTotals,
    /// `branches[b]` is branch `b`'s sums (ids from 0, as in the wire protocol).
    pub branches: Vec<BranchSums>,
    pub history: Vec<HistoryEntry>,
}

/// A system that runs TPC-B transactions.
pub trait Target: Send + Sync + 'static {
    type Session: Session;

    /// A human name for reports: `holdfast 127.0.0.1:7070`, `postgres 127.0.0.1:5432/db`.
    fn describe(&self) -> String;

    /// Whether one session can carry several transactions at once (pipelining).
    fn pipelines(&self) -> bool;

    /// Opens one client session (a connection), ready: the target has answered on it, so
    /// that a run's first transactions do not wait for the connection's set-up.
    fn connect(&self) -> impl Future<Output = anyhow::Result<Self::Session>> + Send;

    /// Makes fresh TPC-B data at `scale`; refused if data exists and not `replace`.
    fn load(&self, scale: u32, replace: bool) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// The loaded scale (an error if nothing is loaded).
    fn scale(&self) -> impl Future<Output = anyhow::Result<u32>> + Send;

    /// The target's sums and its whole history.
    fn snapshot(&self) -> impl Future<Output = anyhow::Result<Snapshot>> + Send;
}

/// One client session. `transaction` takes `&self` so that a session that pipelines can
/// have several in flight; one that does not runs them one after another.
pub trait Session: Send + Sync + 'static {
    fn transaction(
        &self,
        transaction: &Transaction,
    ) -> impl Future<Output = Result<TransactionResult, TransactionError>> + Send;
}

/// Refuses any address that is not on this machine's loopback: the load generator and the
/// checker talk to 127.0.0.1 only.
pub fn require_loopback(address: &SocketAddr) -> anyhow::Result<()> {
    require_loopback_ip(address.ip())
}

pub fn require_loopback_ip(ip: IpAddr) -> anyhow::Result<()> {
    if ip.is_loopback() {
        Ok(())
    } else {
        anyhow::bail!("{ip} is not a loopback address: holdfast tp1 connects to 127.0.0.1 only")
    }
}
