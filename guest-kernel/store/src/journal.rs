//! The journal: a process commits chosen pages synchronously between checkpoints. Commits
//! are queued by [`Store::journal_submit`]; [`Store::journal_write`] appends every queued
//! commit (many per record, consecutive records in one device write: group commit), flushes,
//! and only then reports them durable. A commit never spans records, so a record that did
//! not reach the disk whole loses only commits that were never acknowledged.

use alloc::boxed::Box;
use alloc::vec::Vec;

use holdfast_objects::{ObjectId, Version};

use crate::device::BlockDevice;
use crate::error::StoreError;
use crate::format::log_record::{
    BlockKind, CommitSummary, LOG_RECORD_DATA_BLOCKS_MAX, LogEntry, RecordKind,
};
use crate::format::{Block, checksum};
use crate::log::RecordRun;
use crate::store::{Order, SOURCE_JOURNAL, Store};

/// Pages one commit may hold: one log record's worth.
pub const JOURNAL_COMMIT_PAGES_MAX: usize = LOG_RECORD_DATA_BLOCKS_MAX;
/// Pages that may wait in the queue; a bound so that a busy caller cannot exhaust memory.
pub const JOURNAL_QUEUE_PAGES_MAX: usize = 16 * LOG_RECORD_DATA_BLOCKS_MAX;

/// One page of a journal commit.
#[derive(Clone, Copy, Debug)]
pub struct JournalPage<'a> {
    pub id: ObjectId,
    pub version: Version,
    pub data: &'a Block,
}

/// Names a journal commit; tickets grow in commit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalTicket(pub u64);

struct QueuedCommit {
    ticket: u64,
    /// The snapshot generation when the commit was made: the commit is newer than that
    /// snapshot and older than the next, however late it is written.
    generation: u64,
    pages: Vec<(u64, u64, Box<Block>)>,
}

pub(crate) struct JournalQueue {
    commits: Vec<QueuedCommit>,
    queued_pages: usize,
    pub(crate) ticket_next: u64,
}

impl JournalQueue {
    pub(crate) fn new(ticket_next: u64) -> Self {
        Self {
            commits: Vec::new(),
            queued_pages: 0,
            ticket_next,
        }
    }

    pub(crate) fn queued_commits(&self) -> usize {
        self.commits.len()
    }
}

impl<D: BlockDevice> Store<D> {
    /// Queues a commit of `pages` (copied) and returns its ticket. It is durable once
    /// [`Store::journal_write`] has returned a ticket at least as large.
    pub fn journal_submit(
        &mut self,
        pages: &[JournalPage<'_>],
    ) -> Result<JournalTicket, StoreError> {
        if pages.len() > JOURNAL_COMMIT_PAGES_MAX {
            return Err(StoreError::CommitTooLarge {
                pages: pages.len(),
                pages_max: JOURNAL_COMMIT_PAGES_MAX,
            });
        }
        if self.journal.queued_pages + pages.len() > JOURNAL_QUEUE_PAGES_MAX {
            return Err(StoreError::JournalQueueFull);
        }
        if let Some(page) = pages
            .iter()
            .find(|page| page.id.0 >= self.geometry.page_count)
        {
            return Err(StoreError::ObjectOutOfRange { id: page.id.0 });
        }
        let ticket = self.journal.ticket_next;
        self.journal.ticket_next += 1;
        self.journal.queued_pages += pages.len();
        self.journal.commits.push(QueuedCommit {
            ticket,
            generation: self.snapshot_generation,
            pages: pages
                .iter()
                .map(|page| (page.id.0, page.version.0, Box::new(*page.data)))
                .collect(),
        });
        Ok(JournalTicket(ticket))
    }

    /// Whether [`Store::journal_submit`] would queue a commit of `pages` pages now: a caller
    /// that changes the pages first asks, so that a refusal leaves them as they were.
    pub fn journal_would_take(&self, pages: usize) -> bool {
        pages <= JOURNAL_COMMIT_PAGES_MAX
            && self.journal.queued_pages + pages <= JOURNAL_QUEUE_PAGES_MAX
    }

    pub fn journal_queued_commits(&self) -> usize {
        self.journal.queued_commits()
    }

    /// Group commit: appends every queued commit, flushes, and returns the newest ticket now
    /// durable (every earlier one is durable too), or `None` if nothing was queued.
    pub fn journal_write(&mut self) -> Result<Option<JournalTicket>, StoreError> {
        let Some(last) = self.journal.commits.last() else {
            return Ok(None);
        };
        let last_ticket = last.ticket;
        let mut run = RecordRun::new();
        // Room for every block at once (at most a header per commit): a run that grows
        // copies the blocks it holds again, which under emulation costs as much as
        // checksumming them.
        run.reserve_blocks(self.journal.queued_pages + self.journal.commits.len());
        let mut run_generations = Vec::new();
        for commit in &self.journal.commits {
            if commit.pages.is_empty() {
                // Every page was void: durable with the others, nothing to write.
                continue;
            }
            // A record holds whole commits of one snapshot generation.
            if run.last_record_room() < commit.pages.len()
                || run_generations.last() != Some(&commit.generation)
            {
                run.begin_record(RecordKind::Journal, commit.generation, CommitSummary::default());
                run_generations.push(commit.generation);
            }
            for (id, version, block) in &commit.pages {
                let entry = LogEntry {
                    checksum: checksum(&block[..]),
                    kind: BlockKind::Page,
                    index: *id,
                    journal_ticket: commit.ticket,
                    versions: [*version, 0, 0, 0],
                };
                run.push_block(entry, block);
            }
        }
        let placed = self.append_run(&mut run)?;
        self.flush()?;
        for (record_index, (place, generation)) in placed.iter().zip(run_generations).enumerate() {
            let order = Order::record(generation, SOURCE_JOURNAL, place.sequence);
            let home_generation = self.superblock.home_generation;
            let entries = run.entries(record_index);
            self.directory.enter_record(home_generation, place.position + 1, order, entries);
        }
        self.totals.journal_commits += self.journal.commits.len() as u64;
        self.journal.commits.clear();
        self.journal.queued_pages = 0;
        Ok(Some(JournalTicket(last_ticket)))
    }
}
