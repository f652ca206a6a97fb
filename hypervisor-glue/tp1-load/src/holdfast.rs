//! The Holdfast TP1 service as a [`Target`]: its wire protocol (docs/tp1-protocol.md) over
//! TCP to 127.0.0.1, pipelined: a session writes each request as it comes and a reader task
//! hands each reply to whoever waits for its request id, in whatever order replies arrive.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use holdfast_tp1_protocol::{
    HISTORY_COUNT_MAX, Operation, REQUEST_FRAME_BYTES_MAX, Reply, ReplyFrameDecoder, Request,
    Status, SummaryTotals, Token, Transaction, TransactionResult,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::target::{HistoryEntry, Session, Snapshot, Target, TransactionError, require_loopback};

/// How long a connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `load` may take: scale 10 must load in under a minute; this leaves room for a
/// slow TCG guest.
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// How long one `summary` or `history` request may take during `check`.
const CHECK_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// `history` requests in flight at once while `check` reads the whole history (their
/// replies, 3.2 KB each, are more than the network service's 4 KiB send buffer for a
/// connection holds: the TP1 service sends the rest on its `writable` events).
const HISTORY_REQUESTS_IN_FLIGHT: usize = 8;

/// The TP1 service at `address` (127.0.0.1 only), with the token every request carries.
pub struct HoldfastTarget {
    address: SocketAddr,
    token: Token,
}

impl HoldfastTarget {
    pub fn new(address: SocketAddr, token: Token) -> anyhow::Result<Self> {
        require_loopback(&address)?;
        Ok(HoldfastTarget { address, token })
    }

    /// The scale of the data the appliance holds; `None` if it holds none yet.
    pub async fn loaded_scale(&self) -> anyhow::Result<Option<u32>> {
        let body = self
            .request_once(Operation::Summary, false, CHECK_REQUEST_TIMEOUT)
            .await?;
        let reply = Reply::decode(&body).map_err(|error| anyhow::anyhow!("summary: {error}"))?;
        if reply.status == Status::NotLoaded {
            return Ok(None);
        }
        let summary = reply
            .summary()
            .map_err(|error| anyhow::anyhow!("summary: {error}"))?;
        Ok(Some(summary.scale))
    }

    /// A TCP connection to the service, not yet known to be answered.
    async fn open(&self) -> anyhow::Result<HoldfastSession> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(self.address))
            .await
            .with_context(|| {
                format!(
                    "connecting to {}: no answer in {CONNECT_TIMEOUT:?}",
                    self.address
                )
            })?
            .with_context(|| format!("connecting to {}", self.address))?;
        // Requests are small and each is waited for: Nagle's delay would only add latency.
        stream.set_nodelay(true)?;
        Ok(HoldfastSession::new(stream, self.token))
    }

    async fn request_once(
        &self,
        operation: Operation,
        admin_token: bool,
        time_limit: Duration,
    ) -> anyhow::Result<Vec<u8>> {
        let session = self.open().await?;
        let body = tokio::time::timeout(time_limit, session.request(operation, admin_token))
            .await
            .with_context(|| format!("no reply from {} within {time_limit:?}", self.address))?
            .map_err(|error| anyhow::anyhow!("{} {error}", self.address))?;
        Ok(body)
    }
}

impl Target for HoldfastTarget {
    type Session = HoldfastSession;

    fn describe(&self) -> String {
        format!("holdfast {}", self.address)
    }

    fn pipelines(&self) -> bool {
        true
    }

    /// A session is ready once the service has answered on it, as a PostgreSQL session is
    /// once its statements are prepared: a TCP connection alone may be accepted by a port
    /// forward long before the service sees it, and that wait must not be counted as the
    /// first transaction's latency. One balance read is the probe; a refused token ends
    /// here, before the clock starts, instead of in every transaction.
    async fn connect(&self) -> anyhow::Result<HoldfastSession> {
        let session = self.open().await?;
        let body = tokio::time::timeout(
            CONNECT_TIMEOUT,
            session.request(Operation::Balance { account: 0 }, false),
        )
        .await
        .with_context(|| {
            format!(
                "{}: connected, but no answer in {CONNECT_TIMEOUT:?}",
                self.address
            )
        })?
        .map_err(|error| anyhow::anyhow!("{}: {error}", self.address))?;
        let reply = Reply::decode(&body).map_err(|error| anyhow::anyhow!("balance: {error}"))?;
        match reply.status {
            Status::Ok => Ok(session),
            Status::BadToken => bail!("{}: the token was refused", self.address),
            Status::NotLoaded => bail!(
                "{}: no TP1 data loaded (run holdfast tp1 load first)",
                self.address
            ),
            status => bail!("{}: reading a balance was refused: {status}", self.address),
        }
    }

    async fn load(&self, scale: u32, replace: bool) -> anyhow::Result<()> {
        let body = self
            .request_once(Operation::Load { scale, replace }, true, LOAD_TIMEOUT)
            .await?;
        let reply = Reply::decode(&body).map_err(|error| anyhow::anyhow!("load: {error}"))?;
        match reply.status {
            Status::Busy => bail!(
                "load refused (busy): data exists (give --replace to load anew) or a load is running"
            ),
            Status::BadToken => bail!("load refused (bad_token): load needs an admin token"),
            Status::NoSpace => bail!(
                "load refused (no_space): the TP1 service's space bank cannot hold scale {scale} (its limit is bank 2 in services/tp1-manifest.toml; a smaller scale may fit)"
            ),
            _ => reply
                .loaded()
                .map_err(|error| anyhow::anyhow!("load: {error}")),
        }
    }

    async fn scale(&self) -> anyhow::Result<u32> {
        match self.loaded_scale().await? {
            Some(scale) => Ok(scale),
            None => bail!(
                "{}: no TP1 data loaded (run holdfast tp1 load first)",
                self.address
            ),
        }
    }

    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let session = self.open().await?;
        let session = &session;
        let body = tokio::time::timeout(
            CHECK_REQUEST_TIMEOUT,
            session.request(Operation::Summary, false),
        )
        .await
        .context("summary: no reply")?
        .map_err(|error| anyhow::anyhow!("summary: {error}"))?;
        let reply = Reply::decode(&body).map_err(|error| anyhow::anyhow!("summary: {error}"))?;
        if reply.status == Status::NotLoaded {
            bail!("{}: no TP1 data loaded", self.address);
        }
        let summary = reply
            .summary()
            .map_err(|error| anyhow::anyhow!("summary: {error}"))?;
        let (scale, totals): (u32, SummaryTotals) = (summary.scale, summary.totals);
        let branches = summary.branches().collect();
        let history_count = totals.history_count;
        let pages = history_count.div_ceil(u64::from(HISTORY_COUNT_MAX));
        let mut history = Vec::with_capacity(usize::try_from(history_count).unwrap_or(0));
        let mut replies = stream::iter(0..pages)
            .map(|page| async move {
                let from_index = page * u64::from(HISTORY_COUNT_MAX);
                let operation = Operation::History {
                    from_index,
                    count_max: HISTORY_COUNT_MAX,
                };
                let body =
                    tokio::time::timeout(CHECK_REQUEST_TIMEOUT, session.request(operation, false))
                        .await
                        .with_context(|| format!("history from {from_index}: no reply"))?
                        .map_err(|error| anyhow::anyhow!("history from {from_index}: {error}"))?;
                anyhow::Ok((from_index, body))
            })
            .buffered(HISTORY_REQUESTS_IN_FLIGHT);
        while let Some(page) = replies.next().await {
            let (from_index, body) = page?;
            let reply = Reply::decode(&body)
                .map_err(|error| anyhow::anyhow!("history from {from_index}: {error}"))?;
            let records = reply
                .history()
                .map_err(|error| anyhow::anyhow!("history from {from_index}: {error}"))?;
            let expected = (history_count - from_index).min(u64::from(HISTORY_COUNT_MAX));
            if records.count() as u64 != expected {
                bail!(
                    "history from {from_index}: {} records where the summary's count {history_count} means {expected}",
                    records.count()
                );
            }
            for (offset, record) in records.records().enumerate() {
                history.push(HistoryEntry {
                    index: from_index + offset as u64,
                    transaction_id: Some(record.transaction_id),
                    branch: record.branch,
                    teller: record.teller,
                    account: record.account,
                    delta: record.delta,
                });
            }
        }
        Ok(Snapshot {
            scale,
            totals,
            branches,
            history,
        })
    }
}

/// Replies waited for on one connection, by request id; once the connection has failed,
/// why (and nothing waits any more).
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Result<Vec<u8>, String>>>,
    failed: Option<String>,
}

impl Pending {
    fn fail(&mut self, why: String) {
        for (_, waiter) in self.waiting.drain() {
            let _ = waiter.send(Err(why.clone()));
        }
        self.failed.get_or_insert(why);
    }
}

/// One TCP connection to the TP1 service.
pub struct HoldfastSession {
    token: Token,
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Arc<Mutex<Pending>>,
    next_request_id: AtomicU64,
    reader: JoinHandle<()>,
}

impl HoldfastSession {
    fn new(stream: TcpStream, token: Token) -> Self {
        let (read_half, write_half) = stream.into_split();
        let pending = Arc::new(Mutex::new(Pending::default()));
        let reader = tokio::spawn(read_replies(read_half, Arc::clone(&pending)));
        HoldfastSession {
            token,
            writer: tokio::sync::Mutex::new(write_half),
            pending,
            // 0 is what the service puts in a reply to a frame it could not read.
            next_request_id: AtomicU64::new(1),
            reader,
        }
    }

    /// Sends one request and waits for its reply body.
    async fn request(
        &self,
        operation: Operation,
        admin_token: bool,
    ) -> Result<Vec<u8>, TransactionError> {
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if let Some(why) = &pending.failed {
                return Err(TransactionError::Disconnected(why.clone()));
            }
            pending.waiting.insert(request_id, sender);
        }
        let request = Request {
            request_id,
            token: self.token,
            admin_token,
            operation,
        };
        let mut frame = [0u8; REQUEST_FRAME_BYTES_MAX];
        let length = request
            .encode(&mut frame)
            .map_err(|error| TransactionError::Retryable(error.to_string()))?;
        let written = self.writer.lock().await.write_all(&frame[..length]).await;
        if let Err(error) = written {
            let why = format!("sending: {error}");
            lock(&self.pending).fail(why.clone());
            return Err(TransactionError::Disconnected(why));
        }
        match receiver.await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(why)) => Err(TransactionError::Disconnected(why)),
            Err(_) => Err(TransactionError::Disconnected("reader ended".into())),
        }
    }
}

impl Drop for HoldfastSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Session for HoldfastSession {
    async fn transaction(
        &self,
        transaction: &Transaction,
    ) -> Result<TransactionResult, TransactionError> {
        let body = self
            .request(Operation::Transaction(*transaction), false)
            .await?;
        let reply =
            Reply::decode(&body).map_err(|error| TransactionError::Retryable(error.to_string()))?;
        match reply.status {
            Status::Ok => reply
                .transaction()
                .map_err(|error| TransactionError::Retryable(error.to_string())),
            Status::Internal => Err(TransactionError::Retryable(
                "the service replied internal".into(),
            )),
            status => Err(TransactionError::Refused(status)),
        }
    }
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    // A panic while holding the lock leaves plain data behind: carry on with it.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads reply frames until the connection ends and hands each to its waiter; a reply
/// that cannot be read or matched ends the connection (the peer does not speak TP1 v1).
async fn read_replies(mut read_half: OwnedReadHalf, pending: Arc<Mutex<Pending>>) {
    let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
    let mut buffer = vec![0u8; 64 * 1024];
    let why = loop {
        let received = match read_half.read(&mut buffer).await {
            Ok(0) => break "the service closed the connection".to_string(),
            Ok(received) => received,
            Err(error) => break format!("receiving: {error}"),
        };
        let mut input = &buffer[..received];
        let failure = loop {
            match decoder.decode(&mut input) {
                Ok(Some(body)) => {
                    let reply = match Reply::decode(body) {
                        Ok(reply) => reply,
                        Err(error) => break Some(format!("unreadable reply: {error}")),
                    };
                    let waiter = lock(&pending).waiting.remove(&reply.request_id);
                    match waiter {
                        Some(waiter) => {
                            let _ = waiter.send(Ok(body.to_vec()));
                        }
                        None => {
                            break Some(format!(
                                "reply ({}) to request {} that is not waiting",
                                reply.status, reply.request_id
                            ));
                        }
                    }
                }
                Ok(None) => break None,
                Err(error) => break Some(format!("bad reply frame: {error}")),
            }
        };
        if let Some(why) = failure {
            break why;
        }
    };
    lock(&pending).fail(why);
}
