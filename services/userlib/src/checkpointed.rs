//! Waiting until a committed checkpoint holds what a program did: what the journal does not
//! keep (a page's purchase, say) is durable only then.

use crate::interface::{checkpoint, clock};
use crate::syscall::{CapReg, Error};

/// Why [`wait_until_checkpointed`] gave up.
pub enum WaitError {
    /// No checkpoint committed within the time given.
    TimedOut,
    /// The invocation named failed.
    Failed(&'static [u8], Error),
}

/// Waits until a committed checkpoint holds everything done before this call: two commits
/// after it asks for one, since one under way may have taken its snapshot before. Polls the
/// checkpoint control (register `control`), asking for a checkpoint whenever none is under
/// way, for at most `limit_us` by the clock in register `clock_register`.
pub fn wait_until_checkpointed(control: CapReg, clock_register: CapReg, limit_us: u64) -> Result<(), WaitError> {
    let now_us = || clock::now(clock_register).map(|now| now.nanoseconds / 1000).map_err(|error| WaitError::Failed(b"clock now", error));
    let generation = || {
        checkpoint::status(control).map(|status| status.generation).map_err(|error| WaitError::Failed(b"checkpoint status", error))
    };
    let started_us = now_us()?;
    let first = generation()?;
    let mut asked_for = first;
    loop {
        let newest = generation()?;
        if newest >= first + 2 {
            return Ok(());
        }
        if newest == asked_for {
            checkpoint::take(control).map_err(|error| WaitError::Failed(b"checkpoint take", error))?;
            asked_for = newest + 1;
        }
        if now_us()?.saturating_sub(started_us) > limit_us {
            return Err(WaitError::TimedOut);
        }
    }
}
