//! Journal commits: pages made durable at once, outside the checkpoints (group commit: a
//! commit waits for a step while other processes can run, and is written at once on its
//! invoker's path otherwise, [`journal_commit`]).

use alloc::vec::Vec;
use holdfast_objects::{ObjectCache, ObjectId};

use crate::arch::{self, timer};
use crate::objects::{Frame, Objects};
use crate::{println, process};
use super::failure::Failure;
use super::{PERSISTENCE, Persistence};

/// The log fill above which journal commits wait for the forced checkpoint's migration to
/// free the log: what is left is for the checkpoint itself.
const JOURNAL_LOG_FILL_MAX: f64 = 0.8;

// A journal `write` (interface.toml) is one commit, which one log record must hold.
const _: () = assert!(holdfast_abi::JOURNAL_WRITE_PAGES_MAX <= holdfast_store::JOURNAL_COMMIT_PAGES_MAX);

/// A journal commit made and not yet acknowledged ([`Persistence::journal_submitted`]).
pub(super) struct SubmittedCommit {
    tsc: u64,
    pages: Vec<ObjectId>,
}

/// Where a journal commit stands when its invocation returns.
pub enum JournalCommit {
    /// On disk, flushed: the invoker gets its reply at once.
    Durable(u64),
    /// Queued: the invoker waits until a [`step`] has written commit `ticket`.
    Queued(u64),
}

/// Commits `pages` (live page capabilities, void ones skipped) through the journal. `None`
/// without a store, or when the commit was refused.
///
/// When no other process can run, the commit (with any queued before it) is written and
/// flushed at once, on the invoker's path: nothing could join its group before the next
/// step, and the detour through the idle loop only added that step's other work (a scrub
/// step, about 130 us under TCG, more with a cold host cache) to the commit's latency.
/// Otherwise it waits for a step, so that the processes that run meanwhile can share the
/// disk write (group commit).
pub fn journal_commit(objects: &mut Objects, pages: &[holdfast_objects::Capability]) -> Option<JournalCommit> {
    let mut guard = PERSISTENCE.lock();
    let persistence = guard.as_mut()?;
    let ticket = persistence.journal_submit(&objects.cache, pages)?;
    if process::others_runnable() || !persistence.journal_may_write() {
        return Some(JournalCommit::Queued(ticket));
    }
    match persistence.journal_write(objects) {
        Ok(Some(durable)) if durable >= ticket => Some(JournalCommit::Durable(ticket)),
        // Not known to be on disk, so not acknowledged: it stays queued and waits like any
        // other, for the write a later step retries.
        Ok(_) => Some(JournalCommit::Queued(ticket)),
        Err(failure) => {
            persistence.failed(objects, failure);
            Some(JournalCommit::Queued(ticket))
        }
    }
}

/// Whether a commit of `pages` pages would be taken now (a store, and room in its queue):
/// the journal's `write` asks before it changes anything, so that a refused commit never
/// leaves pages changed in memory but not durable.
pub fn journal_would_take(pages: usize) -> bool {
    PERSISTENCE.lock().as_ref().is_some_and(|persistence| persistence.store.journal_would_take(pages))
}

impl Persistence {
    /// Queues a commit of `pages`, skipping void ones, and returns its ticket; `None` when
    /// refused.
    fn journal_submit(&mut self, cache: &ObjectCache<Frame>, pages: &[holdfast_objects::Capability]) -> Option<u64> {
        let frames: Vec<holdfast_store::JournalPage<'_>> = pages
            .iter()
            .filter_map(|page| {
                let frame = cache.page(page).ok()?;
                Some(holdfast_store::JournalPage { id: page.object(), version: page.version(), data: frame.bytes() })
            })
            .collect();
        match self.store.journal_submit(&frames) {
            Ok(ticket) => {
                let pages: Vec<ObjectId> = frames.iter().map(|page| page.id).collect();
                for &id in &pages {
                    self.journal_newest_ticket.insert(id, ticket.0);
                }
                self.journal_submitted.insert(ticket.0, SubmittedCommit { tsc: arch::read_tsc(), pages });
                Some(ticket.0)
            }
            // Hundreds of commits waiting (one per process at most), or a page the store has
            // no room for: this commit is refused; nothing was written, the store is fine.
            Err(error) => {
                println!("holdfast: journal commit refused: {error}");
                None
            }
        }
    }

    /// Whether queued commits may be written now: not while the log is nearly full, where
    /// the checkpoint forced at 65 % needs the rest and its migration frees the log.
    pub(super) fn journal_may_write(&self) -> bool {
        self.store.journal_queued_commits() > 0 && self.store.log_fill_ratio() < JOURNAL_LOG_FILL_MAX
    }

    /// Writes every queued journal commit in one group and lets its processes run on;
    /// returns the newest ticket now acknowledged, `None` if nothing was queued or, in a
    /// pair, the group waits for the standby ([`Persistence::journal_release`]).
    pub(super) fn journal_write(&mut self, objects: &mut Objects) -> Result<Option<u64>, Failure> {
        let Some(durable) = self.store.journal_write()? else {
            return Ok(None);
        };
        self.kernel_counters.journal_writes_total += 1;
        if let Some(position) = crate::pair::primary::last_flush()
            && !crate::pair::primary::flush_arrived(position)
        {
            // Durable here, not yet there: the processes run on meanwhile, and the next
            // groups are written beside it.
            self.journal_awaiting_standby.push_back((durable.0, position));
            return Ok(None);
        }
        Ok(Some(self.journal_acknowledge(objects, durable.0)))
    }

    /// Acknowledges the groups whose flush the standby now has, oldest first; returns
    /// whether any was.
    pub(super) fn journal_release(&mut self, objects: &mut Objects) -> bool {
        let mut released = false;
        while let Some(&(ticket, position)) = self.journal_awaiting_standby.front() {
            if !crate::pair::primary::flush_arrived(position) {
                break;
            }
            self.journal_awaiting_standby.pop_front();
            self.journal_acknowledge(objects, ticket);
            released = true;
        }
        released
    }

    /// Wakes the processes waiting for commits up to `durable` and counts their latency.
    fn journal_acknowledge(&mut self, objects: &mut Objects, durable: u64) -> u64 {
        let now = arch::read_tsc();
        let counters = &mut self.kernel_counters;
        while let Some(entry) = self.journal_submitted.first_entry()
            && *entry.key() <= durable
        {
            let (ticket, submitted) = entry.remove_entry();
            counters.journal_commit_seconds.observe(timer::tsc_to_nanoseconds(now - submitted.tsc) as f64 / 1e9);
            for id in submitted.pages {
                if self.journal_newest_ticket.get(&id) == Some(&ticket) {
                    self.journal_newest_ticket.remove(&id);
                    objects.cache.page_journal_durable(id);
                }
            }
        }
        (self.on_journal_durable)(objects, durable);
        durable
    }
}
