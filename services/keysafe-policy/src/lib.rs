//! The KeySafe reference monitor's state (KeyKOS's KeySAFE; `services/keysafe` serves it).
//!
//! A compartment is a named set of programs whose capabilities leave it only through the
//! monitor. The policy says, for each ordered pair of compartments, which kinds of
//! capability (the kernel's type codes, as `node.sense` reports them) the first may hand
//! to the second. Every grant, refusal and revocation is an audit record ([`audit`]).
//!
//! Everything here is fixed-size ([`COMPARTMENTS_MAX`] compartments): the monitor's memory
//! is its process's pages, which the checkpoints keep. Reaching a bound is a [`Refusal`],
//! never a failure of the monitor.
#![no_std]

pub mod audit;
#[cfg(test)]
mod tests;

/// Compartments that can exist at once. A policy row is a word per compartment.
pub const COMPARTMENTS_MAX: usize = 16;
/// The longest compartment name, in bytes.
pub const NAME_BYTES_MAX: usize = 16;
/// How many of one compartment's refused grants the audit log records (for each
/// generation of it); the rest are only counted ([`Compartment::refusals`]). A refusal costs
/// the refused nothing, so without a bound one compartment could fill the log with them, and
/// then every compartment's grants (never made unless logged) would be refused. All
/// [`COMPARTMENTS_MAX`] compartments' logged refusals take 128 of the log's 495 records
/// that are not kept for revocations.
pub const REFUSALS_LOGGED_MAX: u64 = 8;
/// The bit of a policy mask that allows kind `type_code`; the kernel's type codes are below
/// 32.
pub const fn kind_bit(type_code: u64) -> u32 {
    if type_code < 32 { 1 << type_code } else { 0 }
}

/// Why the monitor refused (its reply codes are `holdfast_userlib::keysafe::refusal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No live compartment has this number or name (never made, or revoked).
    NoSuchCompartment,
    /// The policy does not let the granter hand this kind to the recipient.
    Forbidden,
    /// As many compartments exist as the monitor holds.
    TooManyCompartments,
    /// A live compartment already has this name.
    NameTaken,
    /// A name is 1 to 16 printable ASCII characters without spaces.
    BadName,
}

/// A compartment's name: 1 to [`NAME_BYTES_MAX`] printable ASCII characters, no spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name {
    bytes: [u8; NAME_BYTES_MAX],
    length: u8,
}

impl Name {
    pub const EMPTY: Self = Self { bytes: [0; NAME_BYTES_MAX], length: 0 };

    pub fn parse(text: &[u8]) -> Result<Self, Refusal> {
        if text.is_empty() || text.len() > NAME_BYTES_MAX || !text.iter().all(|&byte| byte.is_ascii_graphic()) {
            return Err(Refusal::BadName);
        }
        let mut bytes = [0; NAME_BYTES_MAX];
        bytes[..text.len()].copy_from_slice(text);
        Ok(Self { bytes, length: text.len() as u8 })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.length)]
    }

    /// Zero-padded, as an audit record holds it.
    pub fn padded(&self) -> [u8; NAME_BYTES_MAX] {
        self.bytes
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compartment {
    pub name: Name,
    pub live: bool,
    /// Moves on each time the entry is made again, so that a badge of a revoked
    /// compartment never names its successor.
    pub generation: u32,
    /// Its grants refused by the policy, and how many of those the audit log records (at
    /// most [`REFUSALS_LOGGED_MAX`]).
    pub refusals: u64,
    pub refusals_logged: u64,
}

/// The compartments and the policy between them.
pub struct Compartments {
    entries: [Compartment; COMPARTMENTS_MAX],
    /// `policy[from][to]`: the kinds `from` may hand to `to`, a bit per type code.
    policy: [[u32; COMPARTMENTS_MAX]; COMPARTMENTS_MAX],
}

impl Default for Compartments {
    fn default() -> Self {
        Self::empty()
    }
}

impl Compartments {
    pub const fn empty() -> Self {
        Self {
            entries: [Compartment { name: Name::EMPTY, live: false, generation: 0, refusals: 0, refusals_logged: 0 };
                COMPARTMENTS_MAX],
            policy: [[0; COMPARTMENTS_MAX]; COMPARTMENTS_MAX],
        }
    }

    pub fn get(&self, index: usize) -> Option<&Compartment> {
        self.entries.get(index).filter(|entry| entry.live)
    }

    pub fn find(&self, name: &Name) -> Option<usize> {
        self.entries.iter().position(|entry| entry.live && entry.name == *name)
    }

    /// The live compartments, by number.
    pub fn live(&self) -> impl Iterator<Item = (usize, &Compartment)> {
        self.entries.iter().enumerate().filter(|(_, entry)| entry.live)
    }

    /// Makes a compartment with no policy to or from it; returns its number.
    pub fn create(&mut self, name: Name) -> Result<usize, Refusal> {
        if self.find(&name).is_some() {
            return Err(Refusal::NameTaken);
        }
        let index = self.entries.iter().position(|entry| !entry.live).ok_or(Refusal::TooManyCompartments)?;
        let entry = &mut self.entries[index];
        *entry = Compartment { name, live: true, generation: entry.generation.wrapping_add(1), refusals: 0, refusals_logged: 0 };
        self.clear_policy(index);
        Ok(index)
    }

    /// Ends a compartment: it and every policy entry naming it are gone. Returns what it
    /// was.
    pub fn revoke(&mut self, index: usize) -> Result<Compartment, Refusal> {
        let entry = *self.get(index).ok_or(Refusal::NoSuchCompartment)?;
        self.entries[index].live = false;
        self.clear_policy(index);
        Ok(entry)
    }

    fn clear_policy(&mut self, index: usize) {
        self.policy[index] = [0; COMPARTMENTS_MAX];
        for row in &mut self.policy {
            row[index] = 0;
        }
    }

    /// The badge of a compartment's capability to the monitor: its generation above its
    /// number + 1 (badge 0 is the monitor's control capability).
    pub fn badge(&self, index: usize) -> u64 {
        u64::from(self.entries[index].generation) << 16 | (index as u64 + 1)
    }

    /// The live compartment a badge names (not one revoked, nor one made again since).
    pub fn from_badge(&self, badge: u64) -> Result<usize, Refusal> {
        let index = (badge & 0xffff).checked_sub(1).ok_or(Refusal::NoSuchCompartment)? as usize;
        let entry = self.get(index).ok_or(Refusal::NoSuchCompartment)?;
        if u64::from(entry.generation) != badge >> 16 {
            return Err(Refusal::NoSuchCompartment);
        }
        Ok(index)
    }

    /// Lets `from` hand `to` the kinds in `kinds` (a bit per type code), instead of those it
    /// could before.
    pub fn set_policy(&mut self, from: usize, to: usize, kinds: u32) -> Result<(), Refusal> {
        self.get(from).and(self.get(to)).ok_or(Refusal::NoSuchCompartment)?;
        self.policy[from][to] = kinds;
        Ok(())
    }

    pub fn policy(&self, from: usize, to: usize) -> u32 {
        self.policy.get(from).and_then(|row| row.get(to)).copied().unwrap_or(0)
    }

    /// Whether a refused grant of live compartment `from` is to be written to the audit log:
    /// only its first [`REFUSALS_LOGGED_MAX`] are.
    pub fn refusal_to_log(&self, from: usize) -> bool {
        self.get(from).is_some_and(|entry| entry.refusals_logged < REFUSALS_LOGGED_MAX)
    }

    /// Counts a refused grant of `from`'s, `logged` if the audit log took its record.
    pub fn count_refusal(&mut self, from: usize, logged: bool) {
        if let Some(entry) = self.entries.get_mut(from).filter(|entry| entry.live) {
            entry.refusals = entry.refusals.saturating_add(1);
            entry.refusals_logged += u64::from(logged);
        }
    }

    /// Whether `from` may hand `to` a capability of type `type_code`.
    pub fn check(&self, from: usize, to: usize, type_code: u64) -> Result<(), Refusal> {
        self.get(from).and(self.get(to)).ok_or(Refusal::NoSuchCompartment)?;
        if self.policy(from, to) & kind_bit(type_code) == 0 {
            return Err(Refusal::Forbidden);
        }
        Ok(())
    }
}
