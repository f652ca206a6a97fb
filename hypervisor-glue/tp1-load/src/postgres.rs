//! PostgreSQL as a [`Target`], with pgbench's TPC-B tables and SQL (its built-in
//! "tpcb-like" script, in prepared mode), so that the comparison is like with like.
//!
//! Additions, all needed for exactly-once and `check`, and none of which changes pgbench's
//! statements against its four tables:
//! - `pgbench_history` gains `tp1_hid bigserial` (the history index), `tp1_txid bytea`
//!   (unique: the transaction id) and `tp1_abalance bigint` (the balance that transaction
//!   left, returned again on a retry). Its INSERT ends in `ON CONFLICT (tp1_txid) DO NOTHING
//!   RETURNING tp1_hid`: a retried id inserts nothing, the transaction is rolled back and
//!   the first attempt's result is read back, so it is never applied twice.
//! - Balances are `bigint` where pgbench has `int`: a branch balance is a random walk of
//!   ±999,999 steps and leaves `int`'s range after some millions of transactions.
//!
//! Ids are pgbench's, from 1; the wire protocol's are from 0: `aid = account + 1`.

use std::net::IpAddr;
use std::str::FromStr;

use anyhow::{Context, bail};
use holdfast_tp1_protocol::{
    ACCOUNTS_PER_BRANCH, BranchSums, SummaryTotals, TELLERS_PER_BRANCH, Transaction, TransactionId,
    TransactionResult,
};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::target::{
    HistoryEntry, Session, Snapshot, Target, TransactionError, require_loopback_ip,
};

/// PostgreSQL reached by a libpq-style URL or key=value string, on this machine only.
pub struct PostgresTarget {
    config: Config,
    description: String,
}

impl PostgresTarget {
    /// Parses `url` and refuses a host that is not 127.0.0.1, ::1, `localhost` or a Unix
    /// socket directory.
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let config = Config::from_str(url).with_context(|| format!("--pg {url:?}"))?;
        let hosts = config.get_hosts();
        if hosts.is_empty() {
            bail!(
                "--pg {url:?} names no host: give host=127.0.0.1 (holdfast tp1 connects to 127.0.0.1 only)"
            );
        }
        for host in hosts {
            if let Host::Tcp(name) = host
                && name != "localhost"
            {
                let ip = IpAddr::from_str(name).with_context(|| {
                    format!("--pg host {name:?} is not an IP address or localhost")
                })?;
                require_loopback_ip(ip)?;
            }
        }
        for ip in config.get_hostaddrs() {
            require_loopback_ip(*ip)?;
        }
        let host = match &hosts[0] {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("postgres");
        let description = format!("postgres {host}:{port}/{database}");
        Ok(PostgresTarget {
            config,
            description,
        })
    }

    async fn client(&self) -> anyhow::Result<Client> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .with_context(|| format!("connecting to {}", self.description))?;
        // The connection does the socket I/O; it ends when the client is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

const TABLES: &str = "pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers";

impl Target for PostgresTarget {
    type Session = PostgresSession;

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn pipelines(&self) -> bool {
        false
    }

    async fn connect(&self) -> anyhow::Result<PostgresSession> {
        let client = self.client().await?;
        let prepare = |sql: &'static str| client.prepare(sql);
        let statements = Statements {
            update_account: prepare(
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
            )
            .await?,
            select_account: prepare("SELECT abalance FROM pgbench_accounts WHERE aid = $1").await?,
            update_teller: prepare(
                "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
            )
            .await?,
            update_branch: prepare(
                "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
            )
            .await?,
            insert_history: prepare(
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, tp1_txid, tp1_abalance) \
                 VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP, $5, $6) \
                 ON CONFLICT (tp1_txid) DO NOTHING RETURNING tp1_hid",
            )
            .await?,
            select_first_result: prepare(
                "SELECT tp1_abalance, tp1_hid FROM pgbench_history WHERE tp1_txid = $1",
            )
            .await?,
        };
        Ok(PostgresSession {
            client: tokio::sync::Mutex::new(client),
            statements,
        })
    }

    async fn load(&self, scale: u32, replace: bool) -> anyhow::Result<()> {
        let client = self.client().await?;
        let existing: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() \
                 AND tablename IN ('pgbench_accounts', 'pgbench_branches', 'pgbench_history', 'pgbench_tellers')",
                &[],
            )
            .await?
            .get(0);
        if existing > 0 && !replace {
            bail!(
                "{}: pgbench tables exist (give --replace to load anew)",
                self.description
            );
        }
        let scale = i32::try_from(scale)?;
        let accounts = scale * ACCOUNTS_PER_BRANCH as i32;
        let tellers = scale * TELLERS_PER_BRANCH as i32;
        // pgbench -i's tables (fillfactor 100, as its default) and data generated on the
        // server (its -I G step), with the additions described above.
        let script = format!(
            "DROP TABLE IF EXISTS {TABLES};
             CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22),
                 tp1_hid bigserial, tp1_txid bytea, tp1_abalance bigint);
             CREATE TABLE pgbench_tellers (tid int NOT NULL, bid int, tbalance bigint, filler char(84)) WITH (fillfactor = 100);
             CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance bigint, filler char(84)) WITH (fillfactor = 100);
             CREATE TABLE pgbench_branches (bid int NOT NULL, bbalance bigint, filler char(88)) WITH (fillfactor = 100);
             INSERT INTO pgbench_branches (bid, bbalance) SELECT bid, 0 FROM generate_series(1, {scale}) AS bid;
             INSERT INTO pgbench_tellers (tid, bid, tbalance)
                 SELECT tid, (tid - 1) / {TELLERS_PER_BRANCH} + 1, 0 FROM generate_series(1, {tellers}) AS tid;
             INSERT INTO pgbench_accounts (aid, bid, abalance, filler)
                 SELECT aid, (aid - 1) / {ACCOUNTS_PER_BRANCH} + 1, 0, '' FROM generate_series(1, {accounts}) AS aid;
             ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid);
             ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid);
             ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid);
             CREATE UNIQUE INDEX pgbench_history_tp1_txid ON pgbench_history (tp1_txid);"
        );
        client.batch_execute(&script).await.context("loading")?;
        client
            .batch_execute(&format!("VACUUM ANALYZE {TABLES}"))
            .await
            .context("vacuum")?;
        Ok(())
    }

    async fn scale(&self) -> anyhow::Result<u32> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM pgbench_branches", &[])
            .await
            .with_context(|| {
                format!(
                    "{}: no TP1 data loaded (run holdfast tp1 load first)",
                    self.description
                )
            })?;
        let branches: i64 = row.get(0);
        if branches == 0 {
            bail!("{}: pgbench_branches is empty", self.description);
        }
        Ok(u32::try_from(branches)?)
    }

    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut client = self.client().await?;
        // One snapshot of the database for every query below.
        let transaction = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let scale = {
            let branches: i64 = transaction
                .query_one("SELECT count(*) FROM pgbench_branches", &[])
                .await?
                .get(0);
            u32::try_from(branches)?
        };
        let mut branches = vec![BranchSums::default(); scale as usize];
        // (bid - 1) / ... keeps every row, even one whose bid is out of range; those show as
        // branches beyond the scale and are reported.
        let sums = [
            "SELECT bid, sum(abalance)::bigint FROM pgbench_accounts GROUP BY bid",
            "SELECT bid, sum(tbalance)::bigint FROM pgbench_tellers GROUP BY bid",
            "SELECT bid, sum(bbalance)::bigint FROM pgbench_branches GROUP BY bid",
            "SELECT bid, sum(delta)::bigint FROM pgbench_history GROUP BY bid",
        ];
        for (column, sql) in sums.iter().enumerate() {
            for row in transaction.query(*sql, &[]).await? {
                let bid: Option<i32> = row.get(0);
                let sum: Option<i64> = row.get(1);
                let Some(branch) = bid
                    .and_then(|bid| usize::try_from(bid - 1).ok())
                    .filter(|&b| b < branches.len())
                else {
                    bail!("{sql}: a row with branch id {bid:?}, outside 1..={scale}");
                };
                let sums = &mut branches[branch];
                let slot = match column {
                    0 => &mut sums.accounts,
                    1 => &mut sums.tellers,
                    2 => &mut sums.branch,
                    _ => &mut sums.history,
                };
                *slot = sum.unwrap_or(0);
            }
        }
        let mut history = Vec::new();
        let rows = transaction
            .query(
                "SELECT tp1_hid, tp1_txid, bid, tid, aid, delta FROM pgbench_history ORDER BY tp1_hid",
                &[],
            )
            .await?;
        for row in rows {
            let index: i64 = row.get(0);
            let id: Option<Vec<u8>> = row.get(1);
            let transaction_id = id
                .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
                .map(TransactionId);
            let to_wire_id =
                |pgbench_id: Option<i32>| pgbench_id.map_or(u32::MAX, |id| (id - 1) as u32);
            let delta: Option<i32> = row.get(5);
            history.push(HistoryEntry {
                index: index as u64,
                transaction_id,
                branch: to_wire_id(row.get(2)),
                teller: to_wire_id(row.get(3)),
                account: to_wire_id(row.get(4)),
                delta: i64::from(delta.unwrap_or(0)),
            });
        }
        transaction.commit().await?;
        let mut totals = SummaryTotals {
            history_count: history.len() as u64,
            ..Default::default()
        };
        for sums in &branches {
            totals.accounts_total += sums.accounts;
            totals.tellers_total += sums.tellers;
            totals.branches_total += sums.branch;
            totals.history_total += sums.history;
        }
        Ok(Snapshot {
            scale,
            totals,
            branches,
            history,
        })
    }
}

struct Statements {
    update_account: Statement,
    select_account: Statement,
    update_teller: Statement,
    update_branch: Statement,
    insert_history: Statement,
    select_first_result: Statement,
}

/// One PostgreSQL connection: one transaction at a time (a SQL transaction holds its
/// connection), so a second caller waits for the first.
pub struct PostgresSession {
    client: tokio::sync::Mutex<Client>,
    statements: Statements,
}

impl Session for PostgresSession {
    async fn transaction(
        &self,
        transaction: &Transaction,
    ) -> Result<TransactionResult, TransactionError> {
        let mut client = self.client.lock().await;
        run_transaction(&mut client, &self.statements, transaction)
            .await
            .map_err(classify)
    }
}

/// pgbench's tpcb-like script, with the history insert that detects a retried id.
async fn run_transaction(
    client: &mut Client,
    statements: &Statements,
    transaction: &Transaction,
) -> Result<TransactionResult, tokio_postgres::Error> {
    let aid = (transaction.account + 1) as i32;
    let tid = (transaction.teller + 1) as i32;
    let bid = (transaction.branch + 1) as i32;
    // Within ±999,999, so it fits pgbench's int delta.
    let delta = transaction.delta as i32;
    let delta_wide = transaction.delta;
    let id = &transaction.transaction_id.0[..];
    let sql = client.transaction().await?;
    sql.execute(&statements.update_account, &[&delta_wide, &aid])
        .await?;
    let balance: i64 = sql
        .query_one(&statements.select_account, &[&aid])
        .await?
        .get(0);
    sql.execute(&statements.update_teller, &[&delta_wide, &tid])
        .await?;
    sql.execute(&statements.update_branch, &[&delta_wide, &bid])
        .await?;
    let inserted = sql
        .query_opt(
            &statements.insert_history,
            &[&tid, &bid, &aid, &delta, &id, &balance],
        )
        .await?;
    match inserted {
        Some(row) => {
            let history_index: i64 = row.get(0);
            sql.commit().await?;
            Ok(TransactionResult {
                account_balance: balance,
                history_index: history_index as u64,
            })
        }
        None => {
            // Seen before: undo this attempt and return the first one's result.
            sql.rollback().await?;
            let row = client
                .query_one(&statements.select_first_result, &[&id])
                .await?;
            let balance: Option<i64> = row.get(0);
            let history_index: i64 = row.get(1);
            Ok(TransactionResult {
                account_balance: balance.unwrap_or(0),
                history_index: history_index as u64,
            })
        }
    }
}

fn classify(error: tokio_postgres::Error) -> TransactionError {
    if error.is_closed() {
        return TransactionError::Disconnected(error.to_string());
    }
    match error.code() {
        Some(code)
            if *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            TransactionError::Retryable(error.to_string())
        }
        Some(code) if code.code().starts_with("08") || code.code().starts_with("57") => {
            // Connection exceptions and operator intervention (a server shutting down).
            TransactionError::Disconnected(error.to_string())
        }
        None => TransactionError::Disconnected(error.to_string()),
        Some(_) => TransactionError::Retryable(error.to_string()),
    }
}
