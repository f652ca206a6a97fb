//! `holdfast tp1` against a private PostgreSQL 15 cluster: load, a closed-loop run with
//! its progress lines and report, a check that passes; a second run with the same seed
//! (every id it repeats is a retry) still passes; one account changed behind the
//! generator's back makes check fail and name what differs. And through the library: a
//! retried transaction id returns its first result and is applied once.

mod support;

use std::sync::Arc;

use holdfast_tp1_load::ledger::LedgerContents;
use holdfast_tp1_load::postgres::PostgresTarget;
use holdfast_tp1_load::target::{Session, Target};
use holdfast_tp1_protocol::{Transaction, TransactionId};
use holdfast_bench::tp1::host_postgres::{DEBIAN_BIN_DIR, HostPostgres};
use support::{assert_one_line_error, run_holdfast, scratch_dir};

/// A private PostgreSQL 15 cluster (`HOLDFAST_PG_BIN_DIR` holds its programs if they are
/// not where Debian's package puts them).
fn cluster(name: &str) -> HostPostgres {
    let bin_dir = std::env::var_os("HOLDFAST_PG_BIN_DIR").unwrap_or_else(|| DEBIAN_BIN_DIR.into());
    HostPostgres::start(std::path::Path::new(&bin_dir), name).unwrap_or_else(|error| panic!("{error:#}"))
}

fn json_number(json: &str, key: &str) -> u64 {
    let value: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|error| panic!("{error}: {json}"));
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {key} in {json}"))
}

#[test]
fn load_run_and_check_then_a_changed_account_fails_the_check() {
    let cluster = cluster("tp1-check");
    let state = scratch_dir("tp1-postgres");
    let url = cluster.url();
    let state_dir = state.to_str().expect("UTF-8 path");
    let target = [
        "--target",
        "postgres",
        "--pg",
        &url,
        "--state-dir",
        state_dir,
    ];
    let with = |command: &[&str]| {
        let mut arguments = vec!["tp1"];
        arguments.extend_from_slice(command);
        arguments.extend_from_slice(&target);
        run_holdfast(&arguments)
    };

    let load = with(&["load", "--scale", "1"]);
    assert_eq!(load.status, Some(0), "{}", load.transcript());
    assert!(
        load.stdout.contains("loaded scale 1"),
        "{}",
        load.transcript()
    );
    assert_eq!(
        cluster.psql("SELECT count(*) FROM pgbench_accounts").expect("psql"),
        "100000"
    );
    let again = with(&["load", "--scale", "1"]);
    assert_eq!(
        again.status,
        Some(3),
        "a second load without --replace is refused\n{}",
        again.transcript()
    );

    let run = with(&[
        "run",
        "--clients",
        "4",
        "--duration",
        "5s",
        "--seed",
        "7",
        "--json",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let acknowledged = json_number(&run.stdout, "acknowledged");
    assert!(acknowledged > 0, "{}", run.transcript());
    assert_eq!(
        json_number(&run.stdout, "sent"),
        acknowledged,
        "{}",
        run.transcript()
    );
    assert_eq!(
        json_number(&run.stdout, "unfinished"),
        0,
        "{}",
        run.transcript()
    );
    let progress_lines = run
        .stderr
        .lines()
        .filter(|line| line.starts_with("tp1 "))
        .count();
    assert!(
        progress_lines >= 4,
        "a progress line each second\n{}",
        run.transcript()
    );
    let history_rows: u64 = cluster
        .psql("SELECT count(*) FROM pgbench_history")
        .expect("psql")
        .parse()
        .expect("a count");
    assert_eq!(history_rows, acknowledged);

    let check = with(&["check"]);
    assert_eq!(check.status, Some(0), "{}", check.transcript());
    assert!(
        check.stdout.contains("check passed"),
        "{}",
        check.transcript()
    );

    // The same seed again: the ids of the first run come again, and each must return its
    // first result without a second history row.
    let retry_run = with(&[
        "run",
        "--clients",
        "4",
        "--duration",
        "1s",
        "--seed",
        "7",
        "--json",
        "--quiet",
    ]);
    assert_eq!(retry_run.status, Some(0), "{}", retry_run.transcript());
    let ledger = LedgerContents::read(&state).expect("read the ledger");
    let distinct_sent: std::collections::HashSet<_> = ledger.sent.iter().collect();
    assert!(
        ledger.sent.len() > distinct_sent.len(),
        "the second run repeated ids"
    );
    let history_rows: usize = cluster
        .psql("SELECT count(*) FROM pgbench_history")
        .expect("psql")
        .parse()
        .expect("a count");
    assert_eq!(
        history_rows,
        distinct_sent.len(),
        "one history row per distinct id"
    );
    let check = with(&["check"]);
    assert_eq!(check.status, Some(0), "{}", check.transcript());

    // Behind the generator's back: one account gains 1.
    cluster.psql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 100").expect("psql");
    let check = with(&["check", "--json"]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    let check = with(&["check"]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    assert!(
        check.stdout.contains("DIFFERS: totals are not equal"),
        "{}",
        check.transcript()
    );
    assert!(
        check
            .stdout
            .contains("DIFFERS: a branch's accounts differ from its accounts' history"),
        "{}",
        check.transcript()
    );
    assert!(
        check.stdout.contains("branch 0: accounts sum to"),
        "{}",
        check.transcript()
    );
}

#[test]
fn a_retried_transaction_id_returns_its_first_result_and_is_applied_once() {
    let cluster = cluster("tp1-retry");
    let target = Arc::new(PostgresTarget::new(&cluster.url()).expect("a loopback URL"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        target.load(1, false).await.expect("load");
        let session = target.connect().await.expect("connect");
        let first = Transaction {
            transaction_id: TransactionId([0x42; 16]),
            branch: 0,
            teller: 3,
            account: 1234,
            delta: 500,
        };
        let result = session.transaction(&first).await.expect("first attempt");
        assert_eq!(result.account_balance, 500);
        // A retry, from another connection, even with other fields: the first result.
        let other_session = target.connect().await.expect("connect");
        let retry = Transaction {
            delta: -999_999,
            account: 5,
            ..first
        };
        assert_eq!(
            other_session.transaction(&first).await.expect("retry"),
            result
        );
        assert_eq!(
            other_session.transaction(&retry).await.expect("retry"),
            result
        );
        let snapshot = target.snapshot().await.expect("snapshot");
        assert_eq!(snapshot.history.len(), 1);
        assert_eq!(snapshot.totals.accounts_total, 500);
        assert_eq!(snapshot.totals.branches_total, 500);
        assert_eq!(snapshot.branches[0].tellers, 500);
        // A new id on the same account applies.
        let next = Transaction {
            transaction_id: TransactionId([0x43; 16]),
            delta: 1,
            ..first
        };
        assert_eq!(
            session
                .transaction(&next)
                .await
                .expect("next")
                .account_balance,
            501
        );
    });
    assert_eq!(
        cluster.psql("SELECT abalance FROM pgbench_accounts WHERE aid = 1235").expect("psql"),
        "501"
    );
}

#[test]
fn addresses_off_this_machine_are_refused() {
    let run = run_holdfast(&[
        "tp1",
        "check",
        "--target",
        "postgres",
        "--pg",
        "postgresql://postgres@10.1.2.3:5432/postgres",
    ]);
    assert_one_line_error(
        &run,
        2,
        "holdfast: 10.1.2.3 is not a loopback address: holdfast tp1 connects to 127.0.0.1 only",
    );
    let run = run_holdfast(&[
        "tp1",
        "run",
        "--address",
        "192.0.2.1:7070",
        "--token",
        "00112233445566778899aabbccddeeff",
    ]);
    assert_one_line_error(
        &run,
        2,
        "holdfast: 192.0.2.1 is not a loopback address: holdfast tp1 connects to 127.0.0.1 only",
    );
    let run = run_holdfast(&[
        "tp1",
        "run",
        "--address",
        "127.0.0.1:7070",
        "--token",
        "xyz",
    ]);
    assert_one_line_error(&run, 2, "holdfast: --token is not 32 hexadecimal digits");
}
