use super::*;
use std::collections::{HashMap, HashSet};
use std::vec;
use std::vec::Vec;

/// Where the tests pretend the region is mapped.
const REGION_ADDRESS: u64 = 0x1000_0000;

struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn transaction(&mut self, scale: u32) -> Transaction {
        let branch = self.below(u64::from(scale)) as u32;
        let teller = branch * TELLERS_PER_BRANCH + self.below(u64::from(TELLERS_PER_BRANCH)) as u32;
        let account = self.below(u64::from(scale * ACCOUNTS_PER_BRANCH)) as u32;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next().to_le_bytes());
        id[8..].copy_from_slice(&self.next().to_le_bytes());
        let delta = self.below(2 * DELTA_MAX as u64 + 1) as i64 - DELTA_MAX;
        Transaction { id, branch, teller, account, delta }
    }
}

/// A region, its index's memory, and the service's loop reduced to what the ledger does.
struct Service {
    region: Vec<u8>,
    slots: Vec<u32>,
    covered: u64,
}

impl Service {
    fn new() -> Self {
        Self {
            region: vec![0; REGION_BYTES as usize],
            slots: vec![0; INDEX_SLOTS],
            covered: 0,
        }
    }

    fn load(&mut self, scale: u32) -> Result<(), Refusal> {
        let write = load(&Ledger::new(&self.region), scale, REGION_ADDRESS)?;
        apply(&mut self.region, &write, REGION_ADDRESS).expect("nothing else writes");
        Ok(())
    }

    /// Runs `transactions` as the service does: each looked up, else added to a batch that
    /// is committed when full and at the end. Returns each one's outcome.
    fn run(&mut self, transactions: &[Transaction]) -> Vec<Result<Outcome, Refusal>> {
        let mut outcomes = Vec::new();
        let mut pending = transactions;
        while !pending.is_empty() {
            let ledger = Ledger::new(&self.region);
            let mut index = Index::new(&mut self.slots, &mut self.covered, [3, 4]);
            let guard = index.catch_up(&ledger);
            let mut batch = Batch::new(&ledger, guard, 7);
            let mut taken = 0;
            for transaction in pending {
                if let Some(outcome) = index.find(&ledger, &transaction.id) {
                    outcomes.push(Ok(outcome));
                } else {
                    match batch.add(&ledger, transaction) {
                        Ok(Added::Applied(outcome) | Added::Repeated(outcome)) => outcomes.push(Ok(outcome)),
                        Ok(Added::Full) => break,
                        Err(refusal) => outcomes.push(Err(refusal)),
                    }
                }
                taken += 1;
            }
            if batch.is_empty() {
                pending = &pending[taken..];
                continue;
            }
            let write = batch.write(REGION_ADDRESS);
            check_limits(&write);
            apply(&mut self.region, &write, REGION_ADDRESS).expect("the guard holds: nothing else writes");
            pending = &pending[taken..];
        }
        outcomes
    }

    fn ledger(&self) -> Ledger<'_> {
        Ledger::new(&self.region)
    }
}

/// A write fits one journal `write`: its bytes, and the distinct pages its pieces touch.
fn check_limits(write: &Write) {
    assert!(write.length <= WRITE_BYTES_MAX);
    let mut pages = HashSet::new();
    let mut rest = write.pieces();
    while !rest.is_empty() {
        let address = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let length = u16::from_le_bytes(rest[8..10].try_into().unwrap()) as u64;
        for byte in [address, address + length.max(1) - 1] {
            pages.insert(byte / PAGE_BYTES as u64);
        }
        for page in address / 4096..(address + length).div_ceil(4096) {
            pages.insert(page);
        }
        rest = &rest[10 + length as usize..];
    }
    assert!(pages.len() <= WRITE_PAGES_MAX, "{} pages", pages.len());
}

fn assert_invariant(ledger: &Ledger<'_>) {
    let total = |field: fn(&BranchSums) -> i64| ledger.summary().iter().map(field).sum::<i64>();
    assert_eq!(total(|sums| sums.accounts), total(|sums| sums.branch));
    for (branch, sums) in ledger.summary().iter().enumerate() {
        assert_eq!(sums.accounts, sums.account_history, "branch {branch}: {sums:?}");
        assert_eq!(sums.tellers, sums.branch, "branch {branch}: {sums:?}");
        assert_eq!(sums.history, sums.branch, "branch {branch}: {sums:?}");
    }
}

#[test]
fn limits_agree_with_the_kernel() {
    assert_eq!(WRITE_PAGES_MAX, holdfast_abi::JOURNAL_WRITE_PAGES_MAX);
    assert_eq!(WRITE_BYTES_MAX, holdfast_abi::INVOCATION_STRING_BYTES_MAX);
    const { assert!(REGION_BYTES.is_multiple_of(PAGE_BYTES as u64)) };
    const { assert!(ACCOUNTS_OFFSET >= HISTORY_OFFSET + HISTORY_CAPACITY * HISTORY_RECORD_BYTES) };
    const { assert!(REGION_BYTES >= ACCOUNTS_OFFSET + 1_000_000 * 100) };
}

#[test]
fn a_fresh_region_is_not_loaded_and_loads_once() {
    let mut service = Service::new();
    let transaction = Random(1).transaction(1);
    assert_eq!(service.run(&[transaction]), [Err(Refusal::NotLoaded)]);
    assert_eq!(service.load(0), Err(Refusal::BadArgument));
    assert_eq!(service.load(SCALE_MAX + 1), Err(Refusal::BadArgument));
    service.load(2).unwrap();
    assert_eq!(service.ledger().scale(), 2);
    assert_eq!(service.ledger().batch(), 1);
    assert_eq!(service.load(2), Err(Refusal::Busy));
}

/// The service buys only the pages its scale needs: a view of fewer bytes loads no larger
/// scale, and a header saying one reads as not loaded rather than reaching past the view.
#[test]
fn a_region_holds_the_scales_whose_accounts_it_has_bytes_for() {
    assert_eq!(region_bytes(SCALE_MAX), REGION_BYTES);
    assert_eq!(region_bytes(1) - region_bytes(0), (ACCOUNTS_PER_BRANCH as u64 * ROW_BYTES).div_ceil(PAGE_BYTES as u64) * PAGE_BYTES as u64);
    let mut region = vec![0; region_bytes(1) as usize];
    assert_eq!(Ledger::new(&region).scale_held(), 1);
    assert_eq!(load(&Ledger::new(&region), 2, REGION_ADDRESS).err(), Some(Refusal::BadArgument));
    let write = load(&Ledger::new(&region), 1, REGION_ADDRESS).expect("scale 1 fits");
    apply(&mut region, &write, REGION_ADDRESS).expect("nothing else writes");
    assert_eq!(Ledger::new(&region).scale(), 1);
    // A header that says scale 3 (damage, or a region cut short) is not loaded.
    region[24..32].copy_from_slice(&3u64.to_le_bytes());
    assert_eq!(Ledger::new(&region).scale(), 0);
    assert_eq!(Ledger::new(&region[..region_bytes(0) as usize]).scale_held(), 0);
}

#[test]
fn transactions_keep_the_invariant_and_the_balances_a_model_expects() {
    let mut service = Service::new();
    service.load(3).unwrap();
    let mut random = Random(42);
    let transactions: Vec<_> = (0..20_000).map(|_| random.transaction(3)).collect();
    let outcomes = service.run(&transactions);
    let mut model: HashMap<u32, i64> = HashMap::new();
    for (index, (transaction, outcome)) in transactions.iter().zip(&outcomes).enumerate() {
        let balance = model.entry(transaction.account).or_default();
        *balance += transaction.delta;
        assert_eq!(*outcome, Ok(Outcome { balance: *balance, history_index: index as u64 }));
    }
    let ledger = service.ledger();
    assert_eq!(ledger.history_count(), 20_000);
    assert!(ledger.batch() > 20_000 / 64, "batches of at most 64: {}", ledger.batch());
    assert_invariant(&ledger);
    for (&account, &balance) in &model {
        assert_eq!(ledger.balance(Table::Accounts, account), balance);
    }
}

#[test]
fn a_repeated_id_gets_its_first_outcome_in_the_batch_and_after_it() {
    let mut service = Service::new();
    service.load(1).unwrap();
    let mut random = Random(7);
    let first = random.transaction(1);
    let mut changed = first;
    changed.delta = 5; // the same id with other arguments is still the same transaction
    let outcomes = service.run(&[first, changed]);
    assert_eq!(outcomes[0], outcomes[1]);
    let later = service.run(&[changed]);
    assert_eq!(later[0], outcomes[0]);
    assert_eq!(service.ledger().history_count(), 1);
    assert_invariant(&service.ledger());
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let mut service = Service::new();
    service.load(1).unwrap();
    let good = Random(3).transaction(1);
    for bad in [
        Transaction { branch: 1, ..good },
        Transaction { teller: 10, ..good },
        Transaction { account: 100_000, ..good },
        Transaction { delta: DELTA_MAX + 1, ..good },
        Transaction { delta: -DELTA_MAX - 1, ..good },
    ] {
        assert_eq!(service.run(&[bad]), [Err(Refusal::BadArgument)]);
    }
    assert_eq!(service.ledger().history_count(), 0);
}

#[test]
fn a_full_history_refuses_new_transactions_but_answers_old_ones() {
    let mut service = Service::new();
    service.load(1).unwrap();
    let old = Random(5).transaction(1);
    let first = service.run(&[old])[0];
    // Fill the history with distinct ids (the count is the header's).
    for index in 1..HISTORY_CAPACITY {
        let at = (HISTORY_OFFSET + index * HISTORY_RECORD_BYTES) as usize;
        service.region[at..at + 8].copy_from_slice(&index.to_le_bytes());
    }
    let at = 32;
    service.region[at..at + 8].copy_from_slice(&HISTORY_CAPACITY.to_le_bytes());
    let outcomes = service.run(&[Random(6).transaction(1), old]);
    assert_eq!(outcomes, [Err(Refusal::Busy), first]);
}

#[test]
fn a_batch_computed_before_a_restart_is_refused_and_nothing_applies_twice() {
    // The checkpoint catches the service (its index) and the region at one moment; the
    // journal then commits more batches; a crash brings back the old index and the
    // checkpoint's view of the work in hand, with the newer region.
    let mut service = Service::new();
    service.load(1).unwrap();
    let mut random = Random(11);
    let early: Vec<_> = (0..500).map(|_| random.transaction(1)).collect();
    service.run(&early);
    let checkpoint_region = service.region.clone();
    let (checkpoint_slots, checkpoint_covered) = (service.slots.clone(), service.covered);

    // In hand at the checkpoint: these, computed into a batch from the checkpoint's view.
    let in_hand: Vec<_> = (0..40).map(|_| random.transaction(1)).collect();
    let stale_write = {
        let ledger = Ledger::new(&checkpoint_region);
        let mut batch = Batch::new(&ledger, ledger.guard(), 9);
        for transaction in &in_hand {
            assert!(matches!(batch.add(&ledger, transaction), Ok(Added::Applied(_))));
        }
        batch.write(REGION_ADDRESS)
    };
    // After the checkpoint the service committed them, and more.
    let acknowledged = service.run(&in_hand);
    let later: Vec<_> = (0..300).map(|_| random.transaction(1)).collect();
    service.run(&later);
    let history_before = service.ledger().history_count();

    // Restart: old index, newer region; the stale batch's write is refused...
    service.slots = checkpoint_slots;
    service.covered = checkpoint_covered;
    assert_eq!(apply(&mut service.region, &stale_write, REGION_ADDRESS), Err(Changed));
    // ...and computing it again finds every transaction with its first outcome.
    assert_eq!(service.run(&in_hand), acknowledged);
    assert_eq!(service.ledger().history_count(), history_before);
    assert_invariant(&service.ledger());
}

#[test]
fn a_restart_between_the_index_catch_up_and_the_batch_refuses_the_batch() {
    // What the TP1 kill test found applied twice: the checkpoint caught the service just
    // after its index caught up; the journal then committed the transactions it had in
    // hand, and more; the restart brought back that index with the newer region, and the
    // service went on to compute its batch, in which the old index finds none of them.
    let mut service = Service::new();
    service.load(1).unwrap();
    let mut random = Random(12);
    let early: Vec<_> = (0..300).map(|_| random.transaction(1)).collect();
    service.run(&early);
    let in_hand: Vec<_> = (0..7).map(|_| random.transaction(1)).collect();
    let guard = {
        let ledger = Ledger::new(&service.region);
        let mut index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
        index.catch_up(&ledger)
    };
    let checkpoint_index = (service.slots.clone(), service.covered);
    let acknowledged = service.run(&in_hand);
    let later: Vec<_> = (0..100).map(|_| random.transaction(1)).collect();
    service.run(&later);
    let history_before = service.ledger().history_count();

    (service.slots, service.covered) = checkpoint_index;
    let write = {
        let ledger = Ledger::new(&service.region);
        let index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
        let mut batch = Batch::new(&ledger, guard, 9);
        for transaction in &in_hand {
            assert!(index.find(&ledger, &transaction.id).is_none(), "the old index lacks it");
            assert!(matches!(batch.add(&ledger, transaction), Ok(Added::Applied(_))));
        }
        batch.write(REGION_ADDRESS)
    };
    // The guard was read before the catch-up: the batch is refused, and computed again it
    // finds every transaction with its first outcome.
    assert_eq!(apply(&mut service.region, &write, REGION_ADDRESS), Err(Changed));
    assert_eq!(service.run(&in_hand), acknowledged);
    assert_eq!(service.ledger().history_count(), history_before);
    assert_invariant(&service.ledger());
}

#[test]
fn a_restart_backlog_is_searched_until_the_table_has_caught_up() {
    // A restart brings back the table as the last checkpoint left it, beside the history
    // the journal committed since: a backlog the table does not cover.
    let mut service = Service::new();
    service.load(1).unwrap();
    let mut random = Random(21);
    let early: Vec<_> = (0..100).map(|_| random.transaction(1)).collect();
    service.run(&early);
    let checkpoint_index = (service.slots.clone(), service.covered);
    let covered_at_checkpoint = service.covered;
    let backlog: Vec<_> = (0..1000).map(|_| random.transaction(1)).collect();
    let acknowledged = service.run(&backlog);
    (service.slots, service.covered) = checkpoint_index;
    let history = service.ledger().history_count();

    // Every transaction of the backlog, retried, gets its first outcome and none is applied
    // again, though the one catch-up took only its share of the backlog into the table.
    assert_eq!(service.run(&backlog), acknowledged);
    assert_eq!(service.ledger().history_count(), history);
    assert_eq!(service.covered, covered_at_checkpoint + CATCH_UP_RECORDS_MAX);

    // Each batch takes more of the backlog than it adds (one record, which the next
    // catch-up takes): the table catches up, and a retry, adding nothing, takes the last.
    let mut batches = 0;
    while service.covered + 1 < service.ledger().history_count() {
        service.run(&[random.transaction(1)]);
        batches += 1;
        assert!(batches <= 1000 / (CATCH_UP_RECORDS_MAX - 1) + 1, "the table falls behind");
    }
    service.run(&backlog[..1]);
    assert_eq!(service.covered, service.ledger().history_count());
    let ledger = Ledger::new(&service.region);
    let index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
    for (transaction, outcome) in backlog.iter().zip(&acknowledged) {
        assert_eq!(Ok(index.find_in_table(&ledger, &transaction.id).expect("in the table")), *outcome);
    }
    assert_invariant(&ledger);
}

#[test]
fn a_tag_that_matches_another_ids_is_told_apart_by_the_record() {
    // 13-bit tags: an id new to the history meets a slot holding its slot's tag once in
    // 8,192 probes. Put one in its way on purpose: the lookup reads the record, finds
    // another id, and goes on probing.
    let mut service = Service::new();
    service.load(1).unwrap();
    let mut random = Random(31);
    let early: Vec<_> = (0..50).map(|_| random.transaction(1)).collect();
    let outcomes = service.run(&early);
    let newcomer = random.transaction(1);
    let ledger = Ledger::new(&service.region);
    let mut index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
    index.catch_up(&ledger);
    let (slot, tag) = index.slot_and_tag(&newcomer.id);
    assert_eq!(index.slots[slot], 0, "seed 31 puts the newcomer's probe on an empty slot");
    index.slots[slot] = tag << POSITION_BITS | 7;
    assert_eq!(index.find(&ledger, &newcomer.id), None);
    for (transaction, outcome) in early.iter().zip(&outcomes) {
        assert_eq!(Ok(index.find(&ledger, &transaction.id).expect("found")), *outcome);
    }
}

/// Gives history records `records` distinct ids (their index, and a marker byte) and makes
/// the header count them, as batches of transactions would have.
fn write_history_ids(service: &mut Service, records: core::ops::Range<u64>) {
    for index in records.clone() {
        let at = (HISTORY_OFFSET + index * HISTORY_RECORD_BYTES) as usize;
        service.region[at..at + 8].copy_from_slice(&index.to_le_bytes());
        service.region[at + 15] = 0xa5;
    }
    let at = HISTORY_COUNT_OFFSET as usize;
    service.region[at..at + 8].copy_from_slice(&records.end.to_le_bytes());
}

fn catch_up_fully(service: &mut Service) {
    let ledger = Ledger::new(&service.region);
    let mut index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
    while index.covered() < ledger.history_count() {
        index.catch_up(&ledger);
    }
}

#[test]
fn inserts_change_only_the_newest_table_and_lookups_find_ids_in_every_table() {
    // The index is checkpointed: a page it dirties is written by the next checkpoint. Two
    // full tables, then half a third: the first two do not change.
    let mut service = Service::new();
    service.load(1).unwrap();
    let table_slots = 2 * INDEX_TABLE_RECORDS as usize;
    write_history_ids(&mut service, 0..2 * INDEX_TABLE_RECORDS);
    catch_up_fully(&mut service);
    let first_two = service.slots[..2 * table_slots].to_vec();
    assert!(service.slots[2 * table_slots..].iter().all(|&slot| slot == 0));
    let count = 2 * INDEX_TABLE_RECORDS + INDEX_TABLE_RECORDS / 2;
    write_history_ids(&mut service, 2 * INDEX_TABLE_RECORDS..count);
    catch_up_fully(&mut service);
    assert!(service.slots[..2 * table_slots] == first_two[..], "an older table changed");
    assert_eq!(service.slots[2 * table_slots..3 * table_slots].iter().filter(|&&slot| slot != 0).count() as u64, INDEX_TABLE_RECORDS / 2);
    assert!(service.slots[3 * table_slots..].iter().all(|&slot| slot == 0));

    let ledger = Ledger::new(&service.region);
    let index = Index::new(&mut service.slots, &mut service.covered, [3, 4]);
    for history_index in 0..count {
        let id = ledger.history(history_index).id;
        assert_eq!(index.find_in_table(&ledger, &id).map(|outcome| outcome.history_index), Some(history_index));
    }
    let mut unknown = [0u8; 16];
    unknown[..8].copy_from_slice(&count.to_le_bytes());
    unknown[15] = 0xa5;
    assert_eq!(index.find(&ledger, &unknown), None);
}

#[test]
fn history_records_round_trip() {
    let record = HistoryRecord {
        id: [9; 16],
        account: 99_999,
        teller: 9,
        branch: 0,
        delta: -DELTA_MAX,
        balance: -12_345_678_901,
        time_us: 1 << 40,
    };
    assert_eq!(HistoryRecord::decode(&record.encode()), record);
}
