//! `holdfast tp1 check`: compares a target's data with itself and with the generator's
//! ledger. What must hold after any run, crash or restart:
//! - every acknowledged id is in history exactly once (none lost, none applied twice), at
//!   the history index its acknowledgement gave;
//! - every id in history was sent (nothing invented), and no id is there twice;
//! - accounts = tellers = branches = Σ history deltas in total; per branch, tellers =
//!   branch = Σ deltas of its records (by the record's branch), and accounts = Σ deltas of
//!   the records whose account is in it; the target's own history sums and count agree with
//!   its records.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use holdfast_tp1_protocol::{TransactionId, branch_of_account};
use serde::Serialize;

use crate::ledger::LedgerContents;
use crate::target::Snapshot;

/// How many differences of one kind are listed before the rest are only counted.
const LISTED_PER_KIND_MAX: usize = 20;

/// One kind of difference and every instance of it.
#[derive(Debug, Serialize)]
pub struct Difference {
    pub kind: &'static str,
    pub count: usize,
    /// The first [`LISTED_PER_KIND_MAX`] instances, one line each.
    pub examples: Vec<String>,
}

/// What `check` found.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub target: String,
    pub scale: u32,
    pub history_records: usize,
    pub sent: usize,
    pub acknowledged: usize,
    pub accounts_total: i64,
    pub tellers_total: i64,
    pub branches_total: i64,
    pub history_total: i64,
    pub differences: Vec<Difference>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }

    /// The report for people: a summary line, then each difference.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "check {}: scale {}, {} history records, {} sent, {} acknowledged; totals: accounts {}, tellers {}, branches {}, history {}",
            self.target,
            self.scale,
            self.history_records,
            self.sent,
            self.acknowledged,
            self.accounts_total,
            self.tellers_total,
            self.branches_total,
            self.history_total
        );
        if self.passed() {
            let _ = writeln!(
                text,
                "check passed: every acknowledged transaction is in history once, every history id was sent, and the sums agree"
            );
        }
        for difference in &self.differences {
            let _ = writeln!(text, "DIFFERS: {} ({})", difference.kind, difference.count);
            for example in &difference.examples {
                let _ = writeln!(text, "  {example}");
            }
            if difference.count > difference.examples.len() {
                let _ = writeln!(
                    text,
                    "  ... and {} more",
                    difference.count - difference.examples.len()
                );
            }
        }
        text
    }
}

#[derive(Default)]
struct Differences(Vec<Difference>);

impl Differences {
    fn add(&mut self, kind: &'static str, example: impl FnOnce() -> String) {
        let difference = match self
            .0
            .iter_mut()
            .position(|difference| difference.kind == kind)
        {
            Some(position) => &mut self.0[position],
            None => {
                self.0.push(Difference {
                    kind,
                    count: 0,
                    examples: Vec::new(),
                });
                self.0.last_mut().expect("just pushed")
            }
        };
        difference.count += 1;
        if difference.examples.len() < LISTED_PER_KIND_MAX {
            difference.examples.push(example());
        }
    }
}

/// Compares `snapshot` with itself and with `ledger`.
pub fn check(target: String, snapshot: &Snapshot, ledger: &LedgerContents) -> CheckReport {
    let mut differences = Differences::default();
    let totals = &snapshot.totals;

    // Sums, in total.
    let named_totals = [
        ("accounts", totals.accounts_total),
        ("tellers", totals.tellers_total),
        ("branches", totals.branches_total),
        ("history", totals.history_total),
    ];
    if named_totals
        .iter()
        .any(|(_, total)| *total != totals.history_total)
    {
        differences.add("totals are not equal", || {
            named_totals
                .iter()
                .map(|(name, total)| format!("{name} {total}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
    }
    let record_total: i64 = snapshot.history.iter().map(|entry| entry.delta).sum();
    if record_total != totals.history_total {
        differences.add(
            "history records' deltas differ from the history total",
            || {
                format!(
                    "records sum to {record_total}, the target's history total is {}",
                    totals.history_total
                )
            },
        );
    }
    if snapshot.history.len() as u64 != totals.history_count {
        differences.add(
            "history record count differs from the target's count",
            || {
                format!(
                    "{} records read, the target counts {}",
                    snapshot.history.len(),
                    totals.history_count
                )
            },
        );
    }

    // Sums, per branch.
    let scale = snapshot.scale as usize;
    let mut by_record_branch = vec![0i64; scale];
    let mut by_account_branch = vec![0i64; scale];
    for entry in &snapshot.history {
        let record_branch = entry.branch as usize;
        let account_branch = branch_of_account(entry.account) as usize;
        if record_branch >= scale || account_branch >= scale || entry.teller / 10 != entry.branch {
            differences.add("history records with ids outside the data", || {
                format!(
                    "record {}: branch {}, teller {}, account {} at scale {scale}",
                    entry.index, entry.branch, entry.teller, entry.account
                )
            });
            continue;
        }
        by_record_branch[record_branch] += entry.delta;
        by_account_branch[account_branch] += entry.delta;
    }
    if snapshot.branches.len() != scale {
        differences.add("branch count differs from the scale", || {
            format!("{} branches at scale {scale}", snapshot.branches.len())
        });
    }
    for (branch, sums) in snapshot.branches.iter().enumerate().take(scale) {
        let records = by_record_branch[branch];
        let accounts_records = by_account_branch[branch];
        if sums.tellers != sums.branch || sums.branch != sums.history || sums.history != records {
            differences.add("a branch's tellers, branch and history differ", || {
                format!(
                    "branch {branch}: tellers {}, branch {}, history {} (its records sum to {records})",
                    sums.tellers, sums.branch, sums.history
                )
            });
        }
        if sums.accounts != accounts_records {
            differences.add("a branch's accounts differ from its accounts' history", || {
                format!(
                    "branch {branch}: accounts sum to {}, history deltas of its accounts to {accounts_records}",
                    sums.accounts
                )
            });
        }
    }

    // History against the ledger.
    let sent: HashSet<TransactionId> = ledger.sent.iter().copied().collect();
    let mut positions: HashMap<TransactionId, Vec<u64>> =
        HashMap::with_capacity(snapshot.history.len());
    for entry in &snapshot.history {
        match entry.transaction_id {
            Some(id) => positions.entry(id).or_default().push(entry.index),
            None => differences.add("history records without a transaction id", || {
                format!(
                    "record {} (written by something other than holdfast tp1?)",
                    entry.index
                )
            }),
        }
    }
    for entry in &snapshot.history {
        let Some(id) = entry.transaction_id else {
            continue;
        };
        if !sent.contains(&id) {
            differences.add("history ids that were never sent", || {
                format!("{id} at record {}", entry.index)
            });
        }
    }
    for (id, indexes) in &positions {
        if indexes.len() > 1 {
            differences.add("ids applied more than once", || {
                format!("{id} at records {indexes:?}")
            });
        }
    }
    let (acknowledged, disagreements) = ledger.acknowledged_by_id();
    for (id, first, second) in &disagreements {
        differences.add("a retried id got a different reply", || {
            format!(
                "{id}: balance {} index {}, then balance {} index {}",
                first.account_balance,
                first.history_index,
                second.account_balance,
                second.history_index
            )
        });
    }
    let mut acknowledged_sorted: Vec<_> = acknowledged.iter().collect();
    acknowledged_sorted.sort_by_key(|(_, result)| result.history_index);
    for (id, result) in acknowledged_sorted {
        match positions.get(id).map(Vec::as_slice) {
            None | Some([]) => {
                differences.add("acknowledged transactions missing from history", || {
                    format!(
                        "{id} (acknowledged at index {}, balance {})",
                        result.history_index, result.account_balance
                    )
                })
            }
            Some([index]) if *index != result.history_index => {
                differences.add("acknowledged transactions at another history index", || {
                    format!(
                        "{id}: acknowledged at {}, found at {index}",
                        result.history_index
                    )
                });
            }
            _ => {}
        }
        if !sent.contains(id) {
            differences.add("acknowledged ids missing from the sent ledger", || {
                format!("{id}")
            });
        }
    }

    CheckReport {
        target,
        scale: snapshot.scale,
        history_records: snapshot.history.len(),
        sent: sent.len(),
        acknowledged: acknowledged.len(),
        accounts_total: totals.accounts_total,
        tellers_total: totals.tellers_total,
        branches_total: totals.branches_total,
        history_total: totals.history_total,
        differences: differences.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::HistoryEntry;
    use holdfast_tp1_protocol::{BranchSums, SummaryTotals, TransactionResult};

    fn consistent() -> (Snapshot, LedgerContents) {
        let records = [(1u8, 0u32, 3u32, 10i64), (2, 1, 150_000, -4), (3, 12, 5, 7)];
        let mut snapshot = Snapshot {
            scale: 2,
            totals: SummaryTotals::default(),
            branches: vec![BranchSums::default(); 2],
            history: Vec::new(),
        };
        let mut ledger = LedgerContents::default();
        for (index, (id, teller, account, delta)) in records.into_iter().enumerate() {
            let branch = teller / 10;
            let transaction_id = TransactionId([id; 16]);
            snapshot.history.push(HistoryEntry {
                index: index as u64,
                transaction_id: Some(transaction_id),
                branch,
                teller,
                account,
                delta,
            });
            let sums = &mut snapshot.branches[branch as usize];
            sums.tellers += delta;
            sums.branch += delta;
            sums.history += delta;
            snapshot.branches[branch_of_account(account) as usize].accounts += delta;
            snapshot.totals.accounts_total += delta;
            snapshot.totals.tellers_total += delta;
            snapshot.totals.branches_total += delta;
            snapshot.totals.history_total += delta;
            snapshot.totals.history_count += 1;
            ledger.sent.push(transaction_id);
            ledger.acknowledged.push((
                transaction_id,
                TransactionResult {
                    account_balance: delta,
                    history_index: index as u64,
                },
            ));
        }
        (snapshot, ledger)
    }

    fn kinds(report: &CheckReport) -> Vec<&'static str> {
        report
            .differences
            .iter()
            .map(|difference| difference.kind)
            .collect()
    }

    #[test]
    fn consistent_data_passes() {
        let (snapshot, ledger) = consistent();
        let report = check("test".into(), &snapshot, &ledger);
        assert!(report.passed(), "{}", report.render());
        assert!(report.render().contains("check passed"));
    }

    #[test]
    fn a_changed_account_is_named() {
        let (mut snapshot, ledger) = consistent();
        snapshot.branches[1].accounts += 1;
        snapshot.totals.accounts_total += 1;
        let report = check("test".into(), &snapshot, &ledger);
        assert_eq!(
            kinds(&report),
            [
                "totals are not equal",
                "a branch's accounts differ from its accounts' history"
            ]
        );
        let text = report.render();
        assert!(
            text.contains("branch 1: accounts sum to -3, history deltas of its accounts to -4"),
            "{text}"
        );
    }

    #[test]
    fn lost_duplicated_and_invented_transactions_are_named() {
        let (mut snapshot, mut ledger) = consistent();
        // Lost: acknowledged but not in history.
        ledger.acknowledged.push((
            TransactionId([9; 16]),
            TransactionResult {
                account_balance: 0,
                history_index: 3,
            },
        ));
        ledger.sent.push(TransactionId([9; 16]));
        // Invented: in history, never sent; and applied twice.
        let mut invented = snapshot.history[0];
        invented.transaction_id = Some(TransactionId([8; 16]));
        invented.index = 3;
        invented.delta = 0;
        let mut twice = snapshot.history[0];
        twice.index = 4;
        twice.delta = 0;
        snapshot.history.extend([invented, twice]);
        snapshot.totals.history_count += 2;
        let report = check("test".into(), &snapshot, &ledger);
        assert_eq!(
            kinds(&report),
            [
                "history ids that were never sent",
                "ids applied more than once",
                "acknowledged transactions missing from history",
            ]
        );
    }
}
