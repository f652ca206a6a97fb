//! The reference model: what the kernel holds in memory, and what the store must give back
//! after a crash — the newest acknowledged checkpoint (or the one whose commit was in
//! flight), plus every acknowledged journal commit made after its snapshot, plus a prefix
//! of the commits whose write was in flight.

use std::collections::BTreeSet;

use holdfast_store::{BLOCK_SIZE, NODE_SIZE};

use crate::rng::Rng;

/// An object as the model knows it: its version and the stamp its contents are made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Object {
    pub version: u64,
    pub stamp: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub nodes: Vec<Object>,
    pub pages: Vec<Object>,
}

impl State {
    pub fn new(node_count: usize, page_count: usize) -> Self {
        Self {
            nodes: vec![Object::default(); node_count],
            pages: vec![Object::default(); page_count],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStatus {
    /// `journal_write` was called and did not return: any prefix may be durable.
    InFlight,
    Acknowledged,
}

#[derive(Clone, Debug)]
pub struct JournalCommit {
    pub ticket: u64,
    /// The store's snapshot generation when the commit was made.
    pub generation: u64,
    pub pages: Vec<(usize, Object)>,
    pub status: CommitStatus,
}

/// A checkpoint being written: its snapshot and the dirty objects still to write.
#[derive(Clone, Debug)]
pub struct Stabilizing {
    pub generation: u64,
    pub snapshot: State,
    pub nodes_to_write: Vec<usize>,
    pub pages_to_write: Vec<usize>,
}

pub struct Model {
    pub current: State,
    pub dirty_nodes: BTreeSet<usize>,
    pub dirty_pages: BTreeSet<usize>,
    /// The newest durable checkpoint (or recovered state) and its generation.
    pub base: (u64, State),
    /// A checkpoint whose commit was called but did not return.
    pub checkpoint_in_flight: Option<(u64, State)>,
    pub journal: Vec<JournalCommit>,
    pub stabilizing: Option<Stabilizing>,
    stamp_next: u64,
}

impl Model {
    pub fn new(node_count: usize, page_count: usize, seed: u64) -> Self {
        let empty = State::new(node_count, page_count);
        Self {
            current: empty.clone(),
            dirty_nodes: BTreeSet::new(),
            dirty_pages: BTreeSet::new(),
            base: (0, empty),
            checkpoint_in_flight: None,
            journal: Vec::new(),
            stabilizing: None,
            // Stamps differ between seeds so that content from one run never matches another.
            stamp_next: (seed << 24) | 1,
        }
    }

    pub fn next_stamp(&mut self) -> u64 {
        self.stamp_next += 1;
        self.stamp_next
    }

    /// Every state the store may legitimately recover to.
    pub fn candidates(&self) -> Vec<State> {
        let mut bases = vec![&self.base];
        if let Some(in_flight) = &self.checkpoint_in_flight {
            bases.push(in_flight);
        }
        let in_flight_count = self
            .journal
            .iter()
            .filter(|commit| commit.status == CommitStatus::InFlight)
            .count();
        let mut candidates = Vec::new();
        for (generation, state) in bases {
            for prefix in 0..=in_flight_count {
                let mut candidate = state.clone();
                let mut in_flight_seen = 0;
                for commit in &self.journal {
                    if commit.status == CommitStatus::InFlight {
                        in_flight_seen += 1;
                        if in_flight_seen > prefix {
                            continue;
                        }
                    }
                    if commit.generation < *generation {
                        // The snapshot of `generation` already holds it (or newer).
                        continue;
                    }
                    for (id, object) in &commit.pages {
                        candidate.pages[*id] = *object;
                    }
                }
                candidates.push(candidate);
            }
        }
        candidates
    }

    /// After a restart: the recovered state is the new base and nothing is dirty.
    pub fn restarted(&mut self, recovered: State, generation: u64) {
        self.current = recovered.clone();
        self.base = (generation, recovered);
        self.checkpoint_in_flight = None;
        self.journal.clear();
        self.stabilizing = None;
        self.dirty_nodes.clear();
        self.dirty_pages.clear();
    }
}

/// Fills an object image from its stamp: the stamp itself, then bytes derived from it, so
/// that a read can tell which version it got and whether it is intact. Stamp 0 is zeros.
pub fn fill(stamp: u64, out: &mut [u8]) {
    if stamp == 0 {
        out.fill(0);
        return;
    }
    out[..8].copy_from_slice(&stamp.to_le_bytes());
    let mut rng = Rng::new(stamp);
    for chunk in out[8..].chunks_mut(8) {
        let bytes = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// The stamp an image was made from, or `None` if the image is not one `fill` makes.
pub fn stamp_of(image: &[u8]) -> Option<u64> {
    if image.iter().all(|byte| *byte == 0) {
        return Some(0);
    }
    let mut stamp_bytes = [0u8; 8];
    stamp_bytes.copy_from_slice(&image[..8]);
    let stamp = u64::from_le_bytes(stamp_bytes);
    let mut expected = vec![0u8; image.len()];
    fill(stamp, &mut expected);
    (expected == image).then_some(stamp)
}

pub fn node_image(stamp: u64) -> [u8; NODE_SIZE] {
    let mut image = [0u8; NODE_SIZE];
    fill(stamp, &mut image);
    image
}

pub fn page_image(stamp: u64) -> Box<[u8; BLOCK_SIZE]> {
    let mut image = Box::new([0u8; BLOCK_SIZE]);
    fill(stamp, &mut image[..]);
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_carry_their_stamp_and_damage_shows() {
        let mut image = page_image(77);
        assert_eq!(stamp_of(&image[..]), Some(77));
        image[1000] ^= 1;
        assert_eq!(stamp_of(&image[..]), None);
        assert_eq!(stamp_of(&node_image(0)), Some(0));
    }

    #[test]
    fn journal_commits_apply_only_on_top_of_older_snapshots() {
        let mut model = Model::new(4, 4, 1);
        let object = Object {
            version: 1,
            stamp: 9,
        };
        model.journal.push(JournalCommit {
            ticket: 1,
            generation: 0,
            pages: vec![(2, object)],
            status: CommitStatus::Acknowledged,
        });
        model.journal.push(JournalCommit {
            ticket: 2,
            generation: 0,
            pages: vec![(3, object)],
            status: CommitStatus::InFlight,
        });
        let candidates = model.candidates();
        assert_eq!(candidates.len(), 2);
        assert_eq!(candidates[0].pages[2], object);
        assert_eq!(candidates[0].pages[3], Object::default());
        assert_eq!(candidates[1].pages[3], object);
        model.checkpoint_in_flight = Some((1, State::new(4, 4)));
        let candidates = model.candidates();
        assert_eq!(candidates.len(), 4);
        assert_eq!(candidates[2].pages[2], Object::default());
    }
}
