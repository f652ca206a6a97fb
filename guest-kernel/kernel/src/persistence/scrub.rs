//! The scrub's cadence: after every boot the home blocks are read and checked, a group at a
//! step, when the store has nothing more urgent to do.

use holdfast_store::CheckpointPhase;

use crate::println;
use super::Persistence;

/// While processes run, the scrub takes a step at one timer tick in this many.
const SCRUB_TICKS_APART: u32 = 10;

impl Persistence {
    /// A scrub step, if one is due at this step of checkpoint work (`worked`: the step did
    /// something already); returns whether it scrubbed.
    pub(super) fn scrub_if_due(&mut self, idle: bool, worked: bool) -> bool {
        // The scrub is what the store does when it has nothing else to do. It yields to
        // stabilization, which delays the checkpoint's durability (a scrub step beside every
        // stabilization step made a 64 MiB checkpoint a fifth slower); to migration, which
        // frees the log (a 1 GiB scrub beside it made a migration seven times longer); and
        // to the journal's committers, woken by this step's journal write but run only once
        // the step is over; and
        // to the processes: while they run it takes one tick in SCRUB_TICKS_APART (a step at
        // every tick took most of the CPU from a program dirtying a 1 GiB array).
        let migrating = matches!(self.store.checkpoint_phase(), CheckpointPhase::Migrating { .. });
        if self.stabilization.is_none() && !migrating && !worked {
            self.ticks_since_scrub += 1;
            if idle || self.ticks_since_scrub >= SCRUB_TICKS_APART {
                self.ticks_since_scrub = 0;
                return self.scrub_step();
            }
        }
        false
    }

    /// Scrubs one group of home blocks, if a scrub is under way; a block bad on every
    /// mirror is reported and the scrub goes on (what reads it gets the error).
    fn scrub_step(&mut self) -> bool {
        let Some(cursor) = self.scrub.as_mut() else {
            return false;
        };
        match self.store.scrub_step(cursor) {
            Ok(true) => {}
            Ok(false) => {
                println!("holdfast: store: scrubbed {} home blocks", cursor.blocks_checked);
                self.scrub = None;
            }
            Err(error) => println!("holdfast: store: scrub: {error}"),
        }
        true
    }
}
