//! The TP1 (DebitCredit, TPC-B) database as the TP1 service keeps it: one region of pages in
//! its address space, changed only through guarded journal writes.
//!
//! Why guarded: a restart restores a process as the last checkpoint caught it, but its
//! journaled pages as they were last committed, which may be later. A service that went on
//! computing from what it read before that checkpoint would apply those transactions a
//! second time. So the service never writes the region itself: it turns a batch of
//! transactions into pieces (address, bytes) and asks the kernel's journal `write` to write
//! and commit them only if the batch number in the header (the guard) is still the one the
//! batch was computed from. A batch computed from a stale view is refused as `changed`, and
//! the service computes it again from the region as it now is, where the transactions it
//! had already committed are found by id and answered with their first result.
//!
//! Layout (offsets from the region's start; [`region_bytes`] of the scale in all, at most
//! [`REGION_BYTES`]):
//!
//! | offset | what |
//! |---|---|
//! | 0 | header: magic `u64`, 8 reserved, batch `u64` (the guard), scale `u64`, history count `u64` |
//! | 4 KiB | branches: [`ROW_BYTES`] each, balance `i64` first |
//! | 8 KiB | tellers, likewise (10 per branch) |
//! | [`HISTORY_OFFSET`] (20 KiB) | history: [`HISTORY_RECORD_BYTES`] each, [`HISTORY_CAPACITY`] of them |
//! | [`ACCOUNTS_OFFSET`] | accounts, likewise (100,000 per branch) |
//!
//! Rows are as TPC-B sizes them; their filler stays zero. A fresh region is all zeros: not
//! loaded (no magic), batch 0. The accounts come last so that a region for a scale is one
//! run of pages from the start, as long as the scale needs: the service buys that many
//! from its bank, and a view of them ([`Ledger::new`]) covers nothing it does not hold.
#![no_std]

#[cfg(test)]
extern crate std;

#[cfg(test)]
mod tests;
pub mod counters;
pub mod instance;
pub mod tokens;

pub const PAGE_BYTES: usize = 4096;
/// A branch, teller or account row (TPC-B's 100 bytes): the balance, then filler.
pub const ROW_BYTES: u64 = 100;
/// A history record: id 16, account 4, teller 4, branch 4, delta 4 (`i32`), balance 8
/// (the account's, after the delta: a repeated id is answered from it), time 8, 2 zero.
pub const HISTORY_RECORD_BYTES: u64 = 50;
pub const SCALE_MAX: u32 = 10;
pub const TELLERS_PER_BRANCH: u32 = 10;
pub const ACCOUNTS_PER_BRANCH: u32 = 100_000;
/// TPC-B's deltas are at most 999,999 in magnitude, which a history record's `i32` holds.
pub const DELTA_MAX: i64 = 999_999;
/// History records the region holds: at 1,000 transactions a second, nearly nine minutes.
pub const HISTORY_CAPACITY: u64 = 1 << 19;
/// The most pages and bytes of pieces one journal `write` takes (holdfast-abi's
/// `JOURNAL_WRITE_PAGES_MAX` and `INVOCATION_STRING_BYTES_MAX`; a test checks they agree).
pub const WRITE_PAGES_MAX: usize = 64;
pub const WRITE_BYTES_MAX: usize = 4096;

/// The layout's version is in the magic's last byte: 2 since the accounts moved after the
/// history.
const MAGIC: u64 = u64::from_le_bytes(*b"HFTP1DB2");
const MAGIC_OFFSET: u64 = 0;
/// The guard: the number of batches committed.
pub const BATCH_OFFSET: u64 = 16;
const SCALE_OFFSET: u64 = 24;
const HISTORY_COUNT_OFFSET: u64 = 32;
const HEADER_END: u64 = 40;
const BRANCHES_OFFSET: u64 = 4096;
const TELLERS_OFFSET: u64 = 2 * 4096;
pub const HISTORY_OFFSET: u64 = 5 * 4096;
pub const ACCOUNTS_OFFSET: u64 = page_round(HISTORY_OFFSET + HISTORY_CAPACITY * HISTORY_RECORD_BYTES);
/// The largest region: the one at [`SCALE_MAX`].
pub const REGION_BYTES: u64 = region_bytes(SCALE_MAX);

/// The bytes of a region that holds `scale` (whole pages; `scale` at most [`SCALE_MAX`]).
pub const fn region_bytes(scale: u32) -> u64 {
    page_round(ACCOUNTS_OFFSET + scale as u64 * ACCOUNTS_PER_BRANCH as u64 * ROW_BYTES)
}
/// A piece's header in a journal `write`: address `u64`, length `u16`.
const PIECE_HEADER_BYTES: usize = 10;

const _: () = assert!(TELLERS_OFFSET + (SCALE_MAX * TELLERS_PER_BRANCH) as u64 * ROW_BYTES <= HISTORY_OFFSET);
const _: () = assert!(BRANCHES_OFFSET + SCALE_MAX as u64 * ROW_BYTES <= TELLERS_OFFSET);

const fn page_round(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_BYTES as u64) * PAGE_BYTES as u64
}

fn page_of(offset: u64) -> u32 {
    (offset / PAGE_BYTES as u64) as u32
}

/// One TP1 transaction as a client sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transaction {
    pub id: [u8; 16],
    pub branch: u32,
    pub teller: u32,
    pub account: u32,
    pub delta: i64,
}

/// What a transaction's client is told: the account's balance after its delta and where its
/// history record is. A repeated id gets its first outcome again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub balance: i64,
    pub history_index: u64,
}

/// Why a transaction or a load is refused; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    NotLoaded,
    /// A branch, teller or account out of range for the scale, or a delta beyond
    /// [`DELTA_MAX`]; for a load, a scale out of `1..=SCALE_MAX`.
    BadArgument,
    /// The history is full, or a load was asked of a loaded database.
    Busy,
}

/// A history record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRecord {
    pub id: [u8; 16],
    pub account: u32,
    pub teller: u32,
    pub branch: u32,
    pub delta: i64,
    pub balance: i64,
    pub time_us: u64,
}

impl HistoryRecord {
    pub fn encode(&self) -> [u8; HISTORY_RECORD_BYTES as usize] {
        let mut bytes = [0; HISTORY_RECORD_BYTES as usize];
        bytes[0..16].copy_from_slice(&self.id);
        bytes[16..20].copy_from_slice(&self.account.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.teller.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.branch.to_le_bytes());
        // In range: `Batch::add` refuses a delta beyond DELTA_MAX.
        bytes[28..32].copy_from_slice(&(self.delta as i32).to_le_bytes());
        bytes[32..40].copy_from_slice(&self.balance.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.time_us.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; HISTORY_RECORD_BYTES as usize]) -> Self {
        let word = |range: core::ops::Range<usize>| -> [u8; 4] { bytes[range].try_into().expect("4 bytes") };
        let long = |range: core::ops::Range<usize>| -> [u8; 8] { bytes[range].try_into().expect("8 bytes") };
        Self {
            id: bytes[0..16].try_into().expect("16 bytes"),
            account: u32::from_le_bytes(word(16..20)),
            teller: u32::from_le_bytes(word(20..24)),
            branch: u32::from_le_bytes(word(24..28)),
            delta: i64::from(i32::from_le_bytes(word(28..32))),
            balance: i64::from_le_bytes(long(32..40)),
            time_us: u64::from_le_bytes(long(40..48)),
        }
    }

    fn outcome(&self, history_index: u64) -> Outcome {
        Outcome { balance: self.balance, history_index }
    }
}

/// Which table a row is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Branches,
    Tellers,
    Accounts,
}

fn row_offset(table: Table, row: u32) -> u64 {
    let base = match table {
        Table::Branches => BRANCHES_OFFSET,
        Table::Tellers => TELLERS_OFFSET,
        Table::Accounts => ACCOUNTS_OFFSET,
    };
    base + u64::from(row) * ROW_BYTES
}

fn history_offset(index: u64) -> u64 {
    HISTORY_OFFSET + index * HISTORY_RECORD_BYTES
}

/// A read-only view of the region (the service maps it; tests hold it in a vector).
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    bytes: &'a [u8],
}

impl<'a> Ledger<'a> {
    /// `bytes` is the region's start, as much as holds: at least [`region_bytes`]`(0)`
    /// (header, branches, tellers and history), and a loaded scale counts only if they
    /// hold its accounts too.
    pub fn new(bytes: &'a [u8]) -> Self {
        assert!(bytes.len() as u64 >= region_bytes(0), "a TP1 region holds at least its history");
        Self { bytes }
    }

    /// The largest scale the bytes hold.
    pub fn scale_held(&self) -> u32 {
        (0..=SCALE_MAX).rev().find(|&scale| region_bytes(scale) <= self.bytes.len() as u64).unwrap_or(0)
    }

    fn word(&self, offset: u64) -> u64 {
        let at = offset as usize;
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The guard: how many batches (and loads) have been committed.
    pub fn batch(&self) -> u64 {
        self.word(BATCH_OFFSET)
    }

    /// The guard, for a write computed from what is read after it. A restart can come
    /// between any two instructions and bring back the region as committed later than the
    /// program's own state (its registers, its index); whatever the write is computed from
    /// must be read after the guard, so that such a restart either comes before all of it
    /// or makes the write `changed`. The read is volatile and fenced because the compiler,
    /// which takes the region for unchanging while a view lives, could otherwise move later
    /// reads of it before this one.
    pub fn guard(&self) -> Guard {
        let at = BATCH_OFFSET as usize;
        let bytes = &self.bytes[at..at + 8];
        // SAFETY: `bytes` is 8 readable bytes of the view, and `[u8; 8]` has alignment 1.
        let value = unsafe { core::ptr::read_volatile(bytes.as_ptr().cast::<[u8; 8]>()) };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        Guard(u64::from_le_bytes(value))
    }

    /// The scale loaded, 0 if none. A region whose header is damaged, or says a scale whose
    /// accounts the view does not hold, reads as not loaded.
    pub fn scale(&self) -> u32 {
        let scale = self.word(SCALE_OFFSET);
        if self.word(MAGIC_OFFSET) != MAGIC || scale > u64::from(self.scale_held()) {
            return 0;
        }
        scale as u32
    }

    /// History records written, never more than [`HISTORY_CAPACITY`].
    pub fn history_count(&self) -> u64 {
        self.word(HISTORY_COUNT_OFFSET).min(HISTORY_CAPACITY)
    }

    pub fn balance(&self, table: Table, row: u32) -> i64 {
        self.word(row_offset(table, row)) as i64
    }

    /// Record `index`, which must be below [`Ledger::history_count`].
    pub fn history(&self, index: u64) -> HistoryRecord {
        let at = history_offset(index) as usize;
        HistoryRecord::decode(self.bytes[at..at + HISTORY_RECORD_BYTES as usize].try_into().expect("a record"))
    }

    /// History record `index`'s transaction id (its first 16 bytes), without decoding the
    /// rest: what a search of the history compares.
    fn history_id(&self, index: u64) -> &[u8] {
        let at = history_offset(index) as usize;
        &self.bytes[at..at + 16]
    }

    /// Rows per table at the loaded scale: branches, tellers, accounts.
    pub fn rows(&self) -> (u32, u32, u32) {
        let scale = self.scale();
        (scale, scale * TELLERS_PER_BRANCH, scale * ACCOUNTS_PER_BRANCH)
    }

    /// Per branch: Σ its accounts, Σ its tellers, its balance, Σ the history deltas of
    /// transactions through it and of transactions on its accounts. What `summary` replies;
    /// the invariant is that the branch's balance, its tellers and its history agree, and
    /// its accounts with the history of its accounts (15 % of transactions move money from
    /// one branch's teller to another branch's account), so all agree in total.
    pub fn summary(&self) -> [BranchSums; SCALE_MAX as usize] {
        let mut sums = [BranchSums::default(); SCALE_MAX as usize];
        let (branches, tellers, accounts) = self.rows();
        for branch in 0..branches {
            sums[branch as usize].branch = self.balance(Table::Branches, branch);
        }
        for teller in 0..tellers {
            sums[(teller / TELLERS_PER_BRANCH) as usize].tellers += self.balance(Table::Tellers, teller);
        }
        for account in 0..accounts {
            sums[(account / ACCOUNTS_PER_BRANCH) as usize].accounts += self.balance(Table::Accounts, account);
        }
        for index in 0..self.history_count() {
            let record = self.history(index);
            if let Some(branch) = sums.get_mut(record.branch as usize) {
                branch.history += record.delta;
            }
            if let Some(branch) = sums.get_mut((record.account / ACCOUNTS_PER_BRANCH) as usize) {
                branch.account_history += record.delta;
            }
        }
        sums
    }
}

/// One branch's sums (see [`Ledger::summary`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchSums {
    pub accounts: i64,
    pub tellers: i64,
    pub branch: i64,
    /// Σ deltas of the transactions through the branch (its tellers).
    pub history: i64,
    /// Σ deltas of the transactions on the branch's accounts.
    pub account_history: i64,
}

/// Pieces for one journal `write`: addresses are the region's start plus the offsets above.
pub struct Write {
    pub bytes: [u8; WRITE_BYTES_MAX],
    pub length: usize,
    /// The guard's offset in the region and the batch number it must still hold.
    pub guard_offset: u64,
    pub guard_expected: u64,
}

impl Write {
    fn new(guard_expected: u64) -> Self {
        Self { bytes: [0; WRITE_BYTES_MAX], length: 0, guard_offset: BATCH_OFFSET, guard_expected }
    }

    fn piece(&mut self, region_address: u64, offset: u64, data: &[u8]) {
        let end = self.length + PIECE_HEADER_BYTES + data.len();
        assert!(end <= WRITE_BYTES_MAX, "the batch sized its pieces to fit");
        let bytes = &mut self.bytes[self.length..end];
        bytes[..8].copy_from_slice(&(region_address + offset).to_le_bytes());
        bytes[8..10].copy_from_slice(&(data.len() as u16).to_le_bytes());
        bytes[10..].copy_from_slice(data);
        self.length = end;
    }

    pub fn pieces(&self) -> &[u8] {
        &self.bytes[..self.length]
    }
}

/// The guard's value as read by [`Ledger::guard`], before what a write is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard(u64);

/// The write that loads a fresh region at `scale`: its rows are zero already, so only the
/// header is written (the region's pages are fresh from the service's bank: zero). The view
/// must hold the scale's accounts.
pub fn load(ledger: &Ledger<'_>, scale: u32, region_address: u64) -> Result<Write, Refusal> {
    if !(1..=SCALE_MAX).contains(&scale) || scale > ledger.scale_held() {
        return Err(Refusal::BadArgument);
    }
    // Before the scale: a load that found the region empty must not reset a region that
    // a restart brought back loaded and in use.
    let guard = ledger.guard();
    if ledger.scale() != 0 {
        return Err(Refusal::Busy);
    }
    let mut write = Write::new(guard.0);
    let mut header = [0u8; HEADER_END as usize];
    header[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[16..24].copy_from_slice(&(guard.0 + 1).to_le_bytes());
    header[24..32].copy_from_slice(&u64::from(scale).to_le_bytes());
    write.piece(region_address, 0, &header);
    Ok(write)
}

/// How [`Batch::add`] took a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// Applied in this batch: its outcome holds once the batch is committed.
    Applied(Outcome),
    /// Its id is already in this batch: the first one's outcome.
    Repeated(Outcome),
    /// This batch has no room for it: commit the batch and add it to the next.
    Full,
}

const BATCH_RECORDS_MAX: usize = 64;
const BATCH_ROWS_MAX: usize = 3 * BATCH_RECORDS_MAX;

/// Transactions applied to a view of the region, to be committed as one guarded write.
pub struct Batch {
    /// The batch number of the view the batch was computed from (the guard's value).
    base: u64,
    scale: u32,
    history_start: u64,
    /// Rows changed, by offset, with their new balance.
    rows: [(u64, i64); BATCH_ROWS_MAX],
    row_count: usize,
    pages: [u32; WRITE_PAGES_MAX],
    page_count: usize,
    records: [HistoryRecord; BATCH_RECORDS_MAX],
    record_count: usize,
    time_us: u64,
}

impl Batch {
    /// An empty batch on `ledger`'s view, guarded by `guard`: the one [`Index::catch_up`]
    /// returned, so that the index the caller looks transactions up in is covered by the
    /// guard too. Records get `time_us`.
    pub fn new(ledger: &Ledger<'_>, guard: Guard, time_us: u64) -> Self {
        let empty = HistoryRecord { id: [0; 16], account: 0, teller: 0, branch: 0, delta: 0, balance: 0, time_us: 0 };
        let mut batch = Self {
            base: guard.0,
            scale: ledger.scale(),
            history_start: ledger.history_count(),
            rows: [(0, 0); BATCH_ROWS_MAX],
            row_count: 0,
            pages: [0; WRITE_PAGES_MAX],
            page_count: 0,
            records: [empty; BATCH_RECORDS_MAX],
            record_count: 0,
            time_us,
        };
        batch.pages[0] = page_of(BATCH_OFFSET);
        batch.page_count = 1;
        batch
    }

    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    pub fn len(&self) -> usize {
        self.record_count
    }

    /// The bytes of pieces the batch's write takes now: the header's, the history's (one
    /// piece, records being consecutive) and one per row.
    fn write_bytes(&self, records: usize, rows: usize) -> usize {
        let header = PIECE_HEADER_BYTES + (HEADER_END - BATCH_OFFSET) as usize;
        let history = PIECE_HEADER_BYTES + records * HISTORY_RECORD_BYTES as usize;
        header + history + rows * (PIECE_HEADER_BYTES + 8)
    }

    fn row_balance(&self, ledger: &Ledger<'_>, offset: u64) -> i64 {
        match self.rows[..self.row_count].iter().find(|(row, _)| *row == offset) {
            Some(&(_, balance)) => balance,
            None => ledger.word(offset) as i64,
        }
    }

    /// Adds `transaction` if it fits (rows, pages and bytes of one write), checking it
    /// against the loaded scale. A transaction already in the region is not this batch's
    /// business: the caller looks it up in the [`Index`] first.
    pub fn add(&mut self, ledger: &Ledger<'_>, transaction: &Transaction) -> Result<Added, Refusal> {
        let (branches, tellers, accounts) = ledger.rows();
        if branches == 0 {
            return Err(Refusal::NotLoaded);
        }
        if transaction.branch >= branches
            || transaction.teller >= tellers
            || transaction.account >= accounts
            || transaction.delta.abs() > DELTA_MAX
        {
            return Err(Refusal::BadArgument);
        }
        if let Some(position) = self.records[..self.record_count].iter().position(|record| record.id == transaction.id) {
            return Ok(Added::Repeated(self.records[position].outcome(self.history_start + position as u64)));
        }
        let history_index = self.history_start + self.record_count as u64;
        if history_index >= HISTORY_CAPACITY {
            return Err(Refusal::Busy);
        }
        if self.record_count == BATCH_RECORDS_MAX {
            return Ok(Added::Full);
        }
        let offsets = [
            row_offset(Table::Accounts, transaction.account),
            row_offset(Table::Tellers, transaction.teller),
            row_offset(Table::Branches, transaction.branch),
        ];
        let new_rows: usize = offsets
            .iter()
            .filter(|offset| !self.rows[..self.row_count].iter().any(|(row, _)| row == *offset))
            .count();
        let record_offset = history_offset(history_index);
        let touched = [
            page_of(offsets[0]),
            page_of(offsets[0] + ROW_BYTES - 1),
            page_of(offsets[1]),
            page_of(offsets[1] + ROW_BYTES - 1),
            page_of(offsets[2]),
            page_of(offsets[2] + ROW_BYTES - 1),
            page_of(record_offset),
            page_of(record_offset + HISTORY_RECORD_BYTES - 1),
        ];
        let mut new_pages = [0u32; 8];
        let mut new_page_count = 0;
        for page in touched {
            if !self.pages[..self.page_count].contains(&page) && !new_pages[..new_page_count].contains(&page) {
                new_pages[new_page_count] = page;
                new_page_count += 1;
            }
        }
        if self.page_count + new_page_count > WRITE_PAGES_MAX
            || self.write_bytes(self.record_count + 1, self.row_count + new_rows) > WRITE_BYTES_MAX
        {
            return Ok(Added::Full);
        }

        let mut balances = [0i64; 3];
        for (balance, offset) in balances.iter_mut().zip(offsets) {
            *balance = self.row_balance(ledger, offset).checked_add(transaction.delta).ok_or(Refusal::BadArgument)?;
        }
        for (balance, offset) in balances.into_iter().zip(offsets) {
            match self.rows[..self.row_count].iter_mut().find(|(row, _)| *row == offset) {
                Some(row) => row.1 = balance,
                None => {
                    self.rows[self.row_count] = (offset, balance);
                    self.row_count += 1;
                }
            }
        }
        self.pages[self.page_count..self.page_count + new_page_count].copy_from_slice(&new_pages[..new_page_count]);
        self.page_count += new_page_count;
        let record = HistoryRecord {
            id: transaction.id,
            account: transaction.account,
            teller: transaction.teller,
            branch: transaction.branch,
            delta: transaction.delta,
            balance: balances[0],
            time_us: self.time_us,
        };
        self.records[self.record_count] = record;
        self.record_count += 1;
        Ok(Added::Applied(record.outcome(history_index)))
    }

    /// The batch as one guarded write into the region at `region_address`: the header
    /// (batch number, scale, history count), the history records, then each row changed.
    pub fn write(&self, region_address: u64) -> Write {
        let mut write = Write::new(self.base);
        let mut header = [0u8; (HEADER_END - BATCH_OFFSET) as usize];
        header[0..8].copy_from_slice(&(self.base + 1).to_le_bytes());
        header[8..16].copy_from_slice(&u64::from(self.scale).to_le_bytes());
        header[16..24].copy_from_slice(&(self.history_start + self.record_count as u64).to_le_bytes());
        write.piece(region_address, BATCH_OFFSET, &header);
        let mut history = [0u8; BATCH_RECORDS_MAX * HISTORY_RECORD_BYTES as usize];
        let record_bytes = HISTORY_RECORD_BYTES as usize;
        for (bytes, record) in history.chunks_exact_mut(record_bytes).zip(&self.records[..self.record_count]) {
            bytes.copy_from_slice(&record.encode());
        }
        write.piece(region_address, history_offset(self.history_start), &history[..self.record_count * record_bytes]);
        for &(offset, balance) in &self.rows[..self.row_count] {
            write.piece(region_address, offset, &balance.to_le_bytes());
        }
        write
    }
}

/// Slots of the id index: twice the history's capacity, so probes stay short.
pub const INDEX_SLOTS: usize = 2 * HISTORY_CAPACITY as usize;
/// History records whose ids share one of the index's tables ([`Index`]): consecutive ones,
/// so that inserts dirty only the newest table.
pub const INDEX_TABLE_RECORDS: u64 = 1 << 16;
/// Slots of one table: twice its records, as for the whole index.
const INDEX_TABLE_SLOTS: usize = 2 * INDEX_TABLE_RECORDS as usize;
const _: () = assert!(HISTORY_CAPACITY.is_multiple_of(INDEX_TABLE_RECORDS), "the tables cover the history exactly");

/// History records [`Index::catch_up`] adds to the tables at most per call: a full batch
/// and a quarter, so that the tables gain on a backlog while batches keep adding to the
/// history, and a restart's first batches, whose table pages are all still on disk, load
/// few of them before they reply (twice a batch made the first reply after a failover
/// wait 104 ms for its catch-up under TCG).
pub const CATCH_UP_RECORDS_MAX: u64 = BATCH_RECORDS_MAX as u64 + BATCH_RECORDS_MAX as u64 / 4;

/// Which history record holds each transaction id: open-addressing tables over the
/// service's own (checkpointed, not journaled) memory. It is derived from the history alone
/// and [`Index::catch_up`] brings it towards the region before each use; the records it
/// does not cover yet are searched one by one ([`Index::find`]).
///
/// Why not all at once: a restart brings back the tables as the last checkpoint left them,
/// with the history the journal committed since, and their pages are not in memory then.
/// Each record added touches a page of a table at random, so catching up 1,274 records at
/// once took 788 ms in a failover drill under TCG (two pages each then), in which no client
/// got a reply. Their history is contiguous: a few dozen pages in order.
///
/// Why [`INDEX_TABLE_RECORDS`] to a table, by history position, rather than one table: a
/// page of the index dirtied since the last checkpoint is written by the next one, and the
/// index is checkpointed, not journaled. One 4 MiB table took an insert on a random page of
/// all 1,024, and under TP1 load every checkpoint wrote all of them (1,024 of its ~1,270
/// pages). Inserts now go to the newest table only: 128 pages. A lookup probes every table
/// that holds records (up to eight); it only reads them.
pub struct Index<'a> {
    /// `INDEX_SLOTS / INDEX_TABLE_SLOTS` tables of [`INDEX_TABLE_SLOTS`] each, table `t`
    /// holding the ids of history records `t * INDEX_TABLE_RECORDS` up to `(t + 1) *
    /// INDEX_TABLE_RECORDS`. Per slot, 0 if empty, else a tag from the id's hash (the high
    /// [`TAG_BITS`], never 0) and the history index it leads to (the low
    /// [`POSITION_BITS`]): one 4-byte word, so that a probe or an insert touches one page
    /// of a table. A tag matches another id's once in 8,192 probes; the history record's
    /// id decides.
    slots: &'a mut [u32],
    /// History records `0..covered` are in the tables.
    covered: &'a mut u64,
    /// History records `covered..tail_end` are not in the tables yet; the region held
    /// `tail_end` records at the last catch-up.
    tail_end: u64,
    /// The hash's secret key, chosen when the service was made.
    key: [u64; 2],
}

impl Index<'_> {
    /// Where `id`'s probe starts within a table, and its tag (never 0).
    fn slot_and_tag(&self, id: &[u8; 16]) -> (usize, u32) {
        use core::hash::Hasher;
        // Keyed: a client chooses its ids, and with a known hash could make them all collide
        // and every lookup walk the whole table.
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(self.key[0], self.key[1]);
        hasher.write(id);
        let hash = hasher.finish();
        (hash as usize & (INDEX_TABLE_SLOTS - 1), ((hash >> 32) as u32 >> POSITION_BITS).max(1))
    }
}

/// A slot's low bits: a history index, which they hold whole.
const POSITION_BITS: u32 = HISTORY_CAPACITY.trailing_zeros();
const _: () = assert!(HISTORY_CAPACITY == 1 << POSITION_BITS, "every history index fits POSITION_BITS");
/// A slot's high bits: the tag.
const TAG_BITS: u32 = u32::BITS - POSITION_BITS;
const _: () = assert!(TAG_BITS >= 12, "a tag tells most ids apart without reading their records");

impl<'a> Index<'a> {
    /// `slots` is [`INDEX_SLOTS`] long; `covered` is the count of records it holds (both
    /// zero for a new index); `key` is secret and stays the same for as long as they are
    /// kept.
    pub fn new(slots: &'a mut [u32], covered: &'a mut u64, key: [u64; 2]) -> Self {
        assert!(slots.len() == INDEX_SLOTS);
        let tail_end = *covered;
        Self { slots, covered, tail_end, key }
    }

    pub fn covered(&self) -> u64 {
        *self.covered
    }

    /// Adds up to [`CATCH_UP_RECORDS_MAX`] of the records the region has and the tables not
    /// yet, and notes how many the region has, so that [`Index::find`] searches the rest;
    /// starts again from nothing if the region has fewer than the tables (it was loaded
    /// anew). Returns the guard, read first, for the [`Batch`] computed with the index: a
    /// restart after this brought back records the index lacks, and a batch guarded by an
    /// older read is refused (the TP1 kill test found transactions applied twice when the
    /// guard was read after this).
    pub fn catch_up(&mut self, ledger: &Ledger<'_>) -> Guard {
        let guard = ledger.guard();
        let count = ledger.history_count();
        if *self.covered > count {
            self.slots.fill(0);
            *self.covered = 0;
        }
        self.tail_end = count;
        let count = count.min(*self.covered + CATCH_UP_RECORDS_MAX);
        for index in *self.covered..count {
            let (mut slot, tag) = self.slot_and_tag(&ledger.history(index).id);
            let table = self.table_mut((index / INDEX_TABLE_RECORDS) as usize);
            while table[slot] != 0 {
                slot = (slot + 1) & (INDEX_TABLE_SLOTS - 1);
            }
            table[slot] = tag << POSITION_BITS | index as u32;
        }
        *self.covered = count;
        guard
    }

    /// The outcome of transaction `id` if the region holds it (after [`Index::catch_up`]):
    /// from the tables, else from the records it does not cover yet.
    pub fn find(&self, ledger: &Ledger<'_>, id: &[u8; 16]) -> Option<Outcome> {
        self.find_in_table(ledger, id).or_else(|| {
            (*self.covered..self.tail_end)
                .find(|&index| ledger.history_id(index) == id)
                .map(|index| ledger.history(index).outcome(index))
        })
    }

    /// Probes the tables that hold records, newest first: a repeated id is mostly a
    /// client's retry of a recent transaction.
    fn find_in_table(&self, ledger: &Ledger<'_>, id: &[u8; 16]) -> Option<Outcome> {
        let (start, tag) = self.slot_and_tag(id);
        let tables_used = self.covered.div_ceil(INDEX_TABLE_RECORDS) as usize;
        (0..tables_used).rev().find_map(|table| {
            let table = self.table(table);
            let mut slot = start;
            while table[slot] != 0 {
                let index = u64::from(table[slot] & ((1 << POSITION_BITS) - 1));
                if table[slot] >> POSITION_BITS == tag && index < *self.covered && ledger.history_id(index) == id {
                    return Some(ledger.history(index).outcome(index));
                }
                slot = (slot + 1) & (INDEX_TABLE_SLOTS - 1);
            }
            None
        })
    }

    fn table(&self, table: usize) -> &[u32] {
        &self.slots[table * INDEX_TABLE_SLOTS..][..INDEX_TABLE_SLOTS]
    }

    fn table_mut(&mut self, table: usize) -> &mut [u32] {
        &mut self.slots[table * INDEX_TABLE_SLOTS..][..INDEX_TABLE_SLOTS]
    }
}

/// The guard no longer held the value expected (the journal's `changed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changed;

/// What the kernel's journal `write` does to the region, for tests and simulations on the
/// host: the guard checked, then the pieces written.
pub fn apply(region: &mut [u8], write: &Write, region_address: u64) -> Result<(), Changed> {
    let guard = write.guard_offset as usize;
    if u64::from_le_bytes(region[guard..guard + 8].try_into().expect("8 bytes")) != write.guard_expected {
        return Err(Changed);
    }
    let mut rest = write.pieces();
    while !rest.is_empty() {
        let address = u64::from_le_bytes(rest[..8].try_into().expect("a piece header"));
        let length = usize::from(u16::from_le_bytes(rest[8..10].try_into().expect("a piece header")));
        let at = (address - region_address) as usize;
        region[at..at + length].copy_from_slice(&rest[10..10 + length]);
        rest = &rest[10 + length..];
    }
    Ok(())
}
