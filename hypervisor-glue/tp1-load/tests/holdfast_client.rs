//! The Holdfast target's client side (pipelining, replies in any order, reconnect and retry
//! by transaction id, `history` paging for `check`) against a small reference TP1 server
//! written here with the protocol crate. It is not the Holdfast TP1 service (that runs in
//! the guest and is tested there): it is a second implementation of the same protocol that
//! answers in shuffled order, drops connections after applying a transaction but before
//! replying, and can be told to apply a retry twice, so that the client and `check` are
//! shown to notice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_tp1_load::check::check;
use holdfast_tp1_load::holdfast::HoldfastTarget;
use holdfast_tp1_load::ledger::{Ledger, LedgerContents};
use holdfast_tp1_load::run::{RunOptions, RunReport, run};
use holdfast_tp1_load::target::Target;
use holdfast_tp1_protocol::{
    ACCOUNTS_PER_BRANCH, BranchSums, HistoryRecord, Operation, REPLY_FRAME_BYTES_MAX, Reply,
    ReplyPayload, Request, RequestFrameDecoder, Status, SummaryTotals, TELLERS_PER_BRANCH, Token,
    TransactionId, TransactionResult, account_exists, branch_of_account, token_index_constant_time,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const CLIENT_TOKEN: Token = Token([0x11; 16]);
const ADMIN_TOKEN: Token = Token([0x22; 16]);

#[derive(Default)]
struct Data {
    scale: u32,
    accounts: Vec<i64>,
    tellers: Vec<i64>,
    branches: Vec<i64>,
    history: Vec<HistoryRecord>,
    applied: HashMap<TransactionId, TransactionResult>,
}

/// How the reference server misbehaves.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// Close the connection instead of replying to every n-th transaction (after applying it).
    drop_reply_every: Option<u64>,
    /// Apply a retried transaction id again (the bug `check` must catch).
    apply_retries_again: bool,
    /// Once this many transactions are applied, stall the connection that brings the next
    /// request for this long (a pause such as a slow journal flush).
    stall: Option<(u64, Duration)>,
}

struct ReferenceServer {
    data: Mutex<Option<Data>>,
    faults: Faults,
    transactions: AtomicU64,
    stalled: std::sync::atomic::AtomicBool,
}

impl ReferenceServer {
    /// The reply frame for one request body, and whether to close the connection instead of
    /// sending it.
    fn answer(&self, body: &[u8]) -> (Vec<u8>, bool) {
        let mut frame = vec![0u8; REPLY_FRAME_BYTES_MAX];
        let (request_id, payload_owned, close) = match Request::decode(body) {
            Err(error) => (error.request_id, Owned::Error(error.status), false),
            Ok(request) => {
                let valid = if request.admin_token {
                    [ADMIN_TOKEN]
                } else {
                    [CLIENT_TOKEN]
                };
                if token_index_constant_time(&request.token, &valid).is_none() {
                    (request.request_id, Owned::Error(Status::BadToken), false)
                } else {
                    let (payload, close) = self.carry_out(&request);
                    (request.request_id, payload, close)
                }
            }
        };
        let length = match &payload_owned {
            Owned::Error(status) => {
                Reply::encode(&mut frame, request_id, &ReplyPayload::Error(*status))
            }
            Owned::Transaction(result) => {
                Reply::encode(&mut frame, request_id, &ReplyPayload::Transaction(*result))
            }
            Owned::Balance(balance) => Reply::encode(
                &mut frame,
                request_id,
                &ReplyPayload::Balance { balance: *balance },
            ),
            Owned::Summary(totals, branches) => Reply::encode(
                &mut frame,
                request_id,
                &ReplyPayload::Summary {
                    totals: *totals,
                    branches,
                },
            ),
            Owned::History(records) => {
                Reply::encode(&mut frame, request_id, &ReplyPayload::History { records })
            }
            Owned::Loaded => Reply::encode(&mut frame, request_id, &ReplyPayload::Loaded),
        }
        .expect("the buffer holds any reply");
        frame.truncate(length);
        (frame, close)
    }

    fn carry_out(&self, request: &Request) -> (Owned, bool) {
        let mut guard = self.data.lock().unwrap();
        if let Operation::Load { scale, replace } = request.operation {
            if guard.is_some() && !replace {
                return (Owned::Error(Status::Busy), false);
            }
            if !request.admin_token {
                return (Owned::Error(Status::BadToken), false);
            }
            *guard = Some(Data {
                scale,
                accounts: vec![0; (scale * ACCOUNTS_PER_BRANCH) as usize],
                tellers: vec![0; (scale * TELLERS_PER_BRANCH) as usize],
                branches: vec![0; scale as usize],
                ..Data::default()
            });
            return (Owned::Loaded, false);
        }
        let Some(data) = guard.as_mut() else {
            return (Owned::Error(Status::NotLoaded), false);
        };
        match request.operation {
            Operation::Transaction(transaction) => {
                if let Err(status) = transaction.check_range(data.scale) {
                    return (Owned::Error(status), false);
                }
                if let Some(first) = data.applied.get(&transaction.transaction_id)
                    && !self.faults.apply_retries_again
                {
                    return (Owned::Transaction(*first), false);
                }
                data.accounts[transaction.account as usize] += transaction.delta;
                data.tellers[transaction.teller as usize] += transaction.delta;
                data.branches[transaction.branch as usize] += transaction.delta;
                let result = TransactionResult {
                    account_balance: data.accounts[transaction.account as usize],
                    history_index: data.history.len() as u64,
                };
                data.history.push(HistoryRecord {
                    transaction_id: transaction.transaction_id,
                    branch: transaction.branch,
                    teller: transaction.teller,
                    account: transaction.account,
                    delta: transaction.delta,
                    time_us: 0,
                });
                data.applied
                    .entry(transaction.transaction_id)
                    .or_insert(result);
                let count = self.transactions.fetch_add(1, Ordering::Relaxed) + 1;
                let close = self
                    .faults
                    .drop_reply_every
                    .is_some_and(|every| count.is_multiple_of(every));
                (Owned::Transaction(result), close)
            }
            Operation::Balance { account } => {
                if !account_exists(account, data.scale) {
                    return (Owned::Error(Status::BadArgument), false);
                }
                (Owned::Balance(data.accounts[account as usize]), false)
            }
            Operation::Summary => {
                let mut branches = vec![BranchSums::default(); data.scale as usize];
                for (account, balance) in data.accounts.iter().enumerate() {
                    branches[branch_of_account(account as u32) as usize].accounts += balance;
                }
                for (teller, balance) in data.tellers.iter().enumerate() {
                    branches[teller / TELLERS_PER_BRANCH as usize].tellers += balance;
                }
                for (branch, balance) in data.branches.iter().enumerate() {
                    branches[branch].branch += balance;
                }
                for record in &data.history {
                    branches[record.branch as usize].history += record.delta;
                }
                let totals = SummaryTotals {
                    history_count: data.history.len() as u64,
                    accounts_total: branches.iter().map(|sums| sums.accounts).sum(),
                    tellers_total: branches.iter().map(|sums| sums.tellers).sum(),
                    branches_total: branches.iter().map(|sums| sums.branch).sum(),
                    history_total: branches.iter().map(|sums| sums.history).sum(),
                };
                (Owned::Summary(totals, branches), false)
            }
            Operation::History {
                from_index,
                count_max,
            } => {
                let start = usize::try_from(from_index)
                    .unwrap_or(usize::MAX)
                    .min(data.history.len());
                let end = (start + count_max as usize).min(data.history.len());
                (Owned::History(data.history[start..end].to_vec()), false)
            }
            Operation::Load { .. } => unreachable!("handled above"),
        }
    }

    /// Changes one account behind the protocol's back.
    fn corrupt_account(&self, account: usize) {
        self.data.lock().unwrap().as_mut().expect("loaded").accounts[account] += 1;
    }
}

enum Owned {
    Error(Status),
    Transaction(TransactionResult),
    Balance(i64),
    Summary(SummaryTotals, Vec<BranchSums>),
    History(Vec<HistoryRecord>),
    Loaded,
}

/// Starts the server on 127.0.0.1 at a free port; it runs until the runtime ends.
async fn start(faults: Faults) -> (std::net::SocketAddr, Arc<ReferenceServer>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let server = Arc::new(ReferenceServer {
        data: Mutex::new(None),
        faults,
        transactions: AtomicU64::new(0),
        stalled: std::sync::atomic::AtomicBool::new(false),
    });
    let serving = Arc::clone(&server);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let server = Arc::clone(&serving);
            tokio::spawn(async move {
                let (mut reader, writer) = stream.into_split();
                let writer = Arc::new(tokio::sync::Mutex::new(writer));
                let mut decoder = RequestFrameDecoder::for_requests();
                let mut buffer = [0u8; 4096];
                let mut shuffle = 0x9e37_79b9_7f4a_7c15u64;
                loop {
                    let Ok(received) = reader.read(&mut buffer).await else {
                        return;
                    };
                    if received == 0 {
                        return;
                    }
                    let mut input = &buffer[..received];
                    while let Ok(Some(body)) = decoder.decode(&mut input) {
                        if let Some((after, pause)) = server.faults.stall
                            && server.transactions.load(Ordering::Relaxed) >= after
                            && !server.stalled.swap(true, Ordering::Relaxed)
                        {
                            tokio::time::sleep(pause).await;
                        }
                        let (frame, close) = server.answer(body);
                        if close {
                            // Applied, never acknowledged: the client must retry the id.
                            let _ = writer.lock().await.shutdown().await;
                            return;
                        }
                        // Each reply after its own short delay, so that pipelined replies
                        // overtake each other.
                        shuffle ^= shuffle << 13;
                        shuffle ^= shuffle >> 7;
                        shuffle ^= shuffle << 17;
                        let delay = Duration::from_micros(shuffle % 3000);
                        let writer = Arc::clone(&writer);
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = writer.lock().await.write_all(&frame).await;
                        });
                    }
                    if decoder.has_failed() {
                        return;
                    }
                }
            });
        }
    });
    (address, server)
}

fn options(clients: u32, pipeline: u32, rate_per_second: Option<f64>, seed: u64) -> RunOptions {
    RunOptions {
        clients,
        rate_per_second,
        pipeline,
        duration: Duration::from_millis(1500),
        drain: Duration::from_secs(10),
        seed,
        progress: false,
    }
}

struct Fixture {
    target: Arc<HoldfastTarget>,
    server: Arc<ReferenceServer>,
    ledger_dir: std::path::PathBuf,
}

async fn loaded(name: &str, faults: Faults) -> Fixture {
    let (address, server) = start(faults).await;
    let target = Arc::new(HoldfastTarget::new(address, ADMIN_TOKEN).expect("loopback"));
    target.load(2, false).await.expect("load");
    let error = target
        .load(2, false)
        .await
        .expect_err("a second load without replace");
    assert!(error.to_string().contains("busy"), "{error}");
    let ledger_dir =
        std::env::temp_dir().join(format!("holdfast-tp1-client-{name}-{}", std::process::id()));
    Ledger::reset(&ledger_dir).expect("ledger");
    // Transactions with the client token.
    let target = Arc::new(HoldfastTarget::new(address, CLIENT_TOKEN).expect("loopback"));
    Fixture {
        target,
        server,
        ledger_dir,
    }
}

impl Fixture {
    async fn run(&self, options: RunOptions) -> RunReport {
        let ledger = Arc::new(Ledger::open(&self.ledger_dir).expect("ledger"));
        run(Arc::clone(&self.target), ledger, options)
            .await
            .expect("run")
    }

    async fn check(&self) -> holdfast_tp1_load::check::CheckReport {
        let snapshot = self.target.snapshot().await.expect("snapshot");
        let ledger = LedgerContents::read(&self.ledger_dir).expect("ledger");
        check(self.target.describe(), &snapshot, &ledger)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn pipelined_closed_and_open_loops_pass_check() {
    runtime().block_on(async {
        let fixture = loaded("loops", Faults::default()).await;
        let closed = fixture.run(options(3, 8, None, 1)).await;
        assert!(closed.acknowledged > 100, "{}", closed.render());
        assert_eq!(closed.sent, closed.acknowledged, "{}", closed.render());
        assert_eq!(closed.mode, "closed");
        let open = fixture.run(options(2, 4, Some(400.0), 2)).await;
        assert_eq!(open.mode, "open");
        // 400/s for 1.5 s: 600 intended sends, all made (the server keeps up).
        assert_eq!(open.sent + open.not_sent, 600, "{}", open.render());
        assert_eq!(open.acknowledged, open.sent, "{}", open.render());
        assert!(open.latency.count == open.acknowledged);
        let report = fixture.check().await;
        assert!(report.passed(), "{}", report.render());
        assert_eq!(
            report.history_records as u64,
            closed.acknowledged + open.acknowledged
        );
        // History was read in pages of 64, in flight 16 at a time, from a shuffling server.
        assert!(report.history_records > 64 * 16);
    });
}

#[test]
fn lost_replies_are_retried_by_id_and_applied_once() {
    runtime().block_on(async {
        let faults = Faults {
            drop_reply_every: Some(25),
            ..Faults::default()
        };
        let fixture = loaded("retries", faults).await;
        let report = fixture.run(options(4, 2, None, 3)).await;
        assert!(
            report.reconnects > 0 && report.retries > 0,
            "{}",
            report.render()
        );
        assert_eq!(report.sent, report.acknowledged, "{}", report.render());
        let check = fixture.check().await;
        assert!(check.passed(), "{}", check.render());
    });
}

#[test]
fn check_catches_a_server_that_applies_retries_again_and_a_changed_account() {
    runtime().block_on(async {
        let faults = Faults {
            drop_reply_every: Some(25),
            apply_retries_again: true,
            ..Faults::default()
        };
        let fixture = loaded("twice", faults).await;
        let report = fixture.run(options(2, 1, None, 4)).await;
        assert!(report.retries > 0, "{}", report.render());
        let check = fixture.check().await;
        let kinds: Vec<_> = check
            .differences
            .iter()
            .map(|difference| difference.kind)
            .collect();
        assert!(
            kinds.contains(&"ids applied more than once"),
            "{}",
            check.render()
        );

        let fixture = loaded("changed", Faults::default()).await;
        fixture.run(options(2, 1, None, 5)).await;
        fixture.server.corrupt_account(150_000);
        let check = fixture.check().await;
        let text = check.render();
        assert!(text.contains("branch 1: accounts sum to"), "{text}");
        assert!(text.contains("DIFFERS: totals are not equal"), "{text}");
    });
}

#[test]
fn open_loop_latency_counts_a_stall_from_each_intended_send_time() {
    // A half-second stall after 50 transactions, one client, one in flight.
    let stall = Some((50, Duration::from_millis(500)));
    runtime().block_on(async {
        // Open loop at 200/s: about 100 intended sends fall in the stall, and each one's
        // latency runs from its intended time, so a tenth of all samples exceed 250 ms.
        let fixture = loaded(
            "stall-open",
            Faults {
                stall,
                ..Faults::default()
            },
        )
        .await;
        let open = fixture.run(options(1, 1, Some(200.0), 6)).await;
        assert!(open.latency.p90_us > 250_000, "{}", open.render());
        assert!(open.latency.max_us >= 450_000, "{}", open.render());
        // Closed loop through the same stall: one transaction waits, the rest are not
        // sent meanwhile, so only one sample is slow (the view coordinated omission gives).
        let fixture = loaded(
            "stall-closed",
            Faults {
                stall,
                ..Faults::default()
            },
        )
        .await;
        let closed = fixture.run(options(1, 1, None, 7)).await;
        assert!(closed.latency.max_us >= 450_000, "{}", closed.render());
        assert!(closed.latency.p99_us < 100_000, "{}", closed.render());
    });
}

#[test]
fn a_wrong_token_is_refused_before_the_run() {
    runtime().block_on(async {
        let (address, _server) = start(Faults::default()).await;
        let admin = HoldfastTarget::new(address, ADMIN_TOKEN).expect("loopback");
        admin.load(1, false).await.expect("load");
        let client = HoldfastTarget::new(address, CLIENT_TOKEN).expect("loopback");
        let error = client
            .load(1, true)
            .await
            .expect_err("a client token cannot load");
        assert!(error.to_string().contains("admin token"), "{error}");
        let stranger = Arc::new(HoldfastTarget::new(address, Token([0x33; 16])).expect("loopback"));
        let error = stranger.scale().await.expect_err("a wrong token");
        assert!(error.to_string().contains("bad_token"), "{error}");
    });
}
