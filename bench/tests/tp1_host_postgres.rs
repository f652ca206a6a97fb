//! `holdfast bench tp1`'s PostgreSQL-on-host column, end to end and quickly: a private
//! cluster is made, loaded, driven closed and open loop by the load generator, its WAL
//! syncs counted, and the table printed with the columns that did not run saying so. (The
//! guest column boots QEMU for a minute and more: ci/test.sh runs `holdfast bench tp1
//! --quick`, which has it.) Needs PostgreSQL 15 (ci/setup.sh installs it).

use std::time::Duration;

use holdfast_bench::tp1::{GuestPeer, HoldfastSide, Outcome, Tp1BenchOptions, measure_tp1, table};

#[test]
fn the_host_postgres_column_is_measured_and_the_others_say_why_not() {
    let run_dir =
        std::env::temp_dir().join(format!("holdfast-bench-tp1-test-{}", std::process::id()));
    let mut options = Tp1BenchOptions::quick(
        HoldfastSide::Unavailable("not in this test".into()),
        run_dir.join("images"),
    );
    options.guest = GuestPeer::Skip("not in this test".into());
    options.closed_clients = vec![1, 4];
    options.duration = Duration::from_secs(1);
    options.drain = Duration::from_secs(10);
    options.run_dir = run_dir.clone();
    let report = measure_tp1(&options).expect("the benchmark runs");
    let Outcome::Measured(host) = &report.host_postgres else {
        panic!("PostgreSQL on the host: {:?}", report.host_postgres);
    };
    assert!(matches!(report.holdfast, Outcome::NotRun(_)));
    assert!(matches!(report.guest_postgres, Outcome::NotRun(_)));
    assert_eq!(host.closed.len(), 2);
    for run in &host.closed {
        assert_eq!(run.report.mode, "closed");
        assert!(run.report.acknowledged > 0, "{:?}", run.report);
        assert_eq!(
            run.report.failed + run.report.unfinished,
            0,
            "{:?}",
            run.report
        );
        // fsync=on: every commit is flushed by some WAL sync, and a sync flushes at
        // least one commit (the generator's are the only transactions).
        let flushes = run.flushes.expect("pg_stat_wal counts WAL syncs");
        assert!(
            flushes >= 1 && flushes <= run.report.acknowledged + 5,
            "{flushes} flushes for {:?}",
            run.report
        );
    }
    let best = host
        .closed
        .iter()
        .max_by(|a, b| {
            a.report
                .accepted_per_second
                .total_cmp(&b.report.accepted_per_second)
        })
        .unwrap();
    assert_eq!(host.open.report.mode, "open");
    assert_eq!(host.open.report.clients, best.report.clients);
    let offered = host.open.report.offered_per_second;
    assert!(
        (offered - 0.8 * best.report.accepted_per_second).abs() < 1e-6,
        "offered {offered}"
    );
    let text = table::render(&options, &report);
    assert!(
        text.contains("note: Holdfast not run: not in this test"),
        "{text}"
    );
    assert!(
        text.contains("note: PostgreSQL (guest) not run: not in this test"),
        "{text}"
    );
    assert!(
        text.contains("note: PostgreSQL (host): postgres (PostgreSQL) 15."),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&run_dir);
}
