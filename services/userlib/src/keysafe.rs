//! The KeySafe reference monitor (`services/keysafe`): the orders of its two capabilities,
//! its refusals, and a call for each.
//!
//! The control capability (badge 0; the admin service's, and a test's) makes compartments,
//! sets the policy, revokes compartments and reads the audit log. A compartment's
//! capability (an indirector the monitor made, void once the compartment is revoked)
//! grants capabilities to another compartment and receives those granted to it: what
//! crosses is always a forwarder the monitor made, never the capability itself, and
//! revoking either compartment voids it.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// The orders of the control capability.
pub mod control_order {
    /// String: the compartment's name (1 to 16 printable characters, no spaces). Words 0
    /// and 1: the page and node limits of its bank (below the monitor's), which pays for
    /// the forwarders granted to and from it, its capability and its inbox (at least 3
    /// nodes: the bank's own forwarder is one), and its meter if it has one (a fourth
    /// node). Word 2: the compartment's CPU share in percent (1 to 100): it gets a meter of
    /// its own, below the meter the monitor was given for all compartments, with that
    /// share of every 100 ms period; 0: no meter (a compartment that runs no programs).
    /// Word 0 back: the compartment's number. Capability back: the compartment's
    /// capability.
    pub const CREATE: u64 = 1;
    /// Words 0 and 1: the compartment numbers from and to; word 2: the kinds `from` may
    /// hand `to`, bit i for the kernel's type code i (`holdfast_abi::interface::Type`),
    /// replacing those allowed before.
    pub const SET_POLICY: u64 = 2;
    /// String: the compartment's name. Destroys its bank: every forwarder granted to or
    /// from it, its inbox and its capability are void at once. Word 0 back: how many
    /// objects went.
    pub const REVOKE: u64 = 3;
    /// String: a compartment's name (live or revoked); word 0: the position to read from.
    /// String back: the records about it from there (`holdfast_keysafe_policy::audit`'s
    /// format, each checked again by the reader), as many as fit; words back: how many
    /// records, the position to ask from next, the log's record count.
    pub const AUDIT: u64 = 4;
    /// String back: an entry of [`super::LIST_ENTRY_BYTES`] per live compartment, by
    /// number: number u8, 3 bytes 0, generation u32, name (16 bytes, zero-padded), then
    /// its bank's pages held, page limit, nodes held, node limit, its grants refused, how
    /// many of those the audit log holds, and its meter's CPU share in percent (0: it has
    /// no meter) (u64 each; all little-endian). Word 0 back: how many.
    pub const LIST: u64 = 5;
    /// String: a live compartment's name. Words 0 and 1: its bank's new page and node
    /// limits (at least 3 nodes, 4 with a meter, as at `CREATE`); word 2: its meter's new
    /// CPU share in percent (1 to 100; 0 for a compartment made without a meter, and
    /// [`super::refusal::NO_METER`] for a share asked of one). A limit below what
    /// the bank holds stops its sales of that kind; nothing it holds is taken back. Not an
    /// audit record: the log records what crosses compartments and what makes and ends
    /// them.
    pub const SET_QUOTA: u64 = 6;
}

/// The bytes of an entry of [`control_order::LIST`]'s reply.
pub const LIST_ENTRY_BYTES: usize = 80;

/// The orders of a compartment's capability.
pub mod order {
    /// Word 0: the recipient's compartment number. Capability sent: what is granted. The
    /// recipient's inbox gets a forwarder to it if the policy allows its kind. Word 0
    /// back: the inbox slot.
    pub const GRANT: u64 = 10;
    /// Capability back: the oldest forwarder in this compartment's inbox, taken out of it.
    /// Words back: its slot, the granter's compartment number.
    pub const RECEIVE: u64 = 11;
    /// Capability back: this compartment's meter, read-only (`meter.weaken`): what its
    /// programs run on, or make their meters below; only the monitor's control capability
    /// changes its share. Refused with [`super::refusal::NO_METER`] for a compartment made
    /// without one.
    pub const METER: u64 = 12;
    /// Capability back: a new bank below this compartment's, without limits of its own
    /// (the compartment's bound it): what its programs buy their storage from. Destroying
    /// it destroys what was bought from it, never what the monitor keeps in the
    /// compartment's bank (its forwarders, its inbox); revoking the compartment destroys
    /// both.
    pub const BANK: u64 = 13;
}

/// What the monitor answers instead of 0 when it refuses (server reply codes).
pub mod refusal {
    /// No live compartment has this number or name, or the badge is of a revoked one.
    pub const NO_SUCH_COMPARTMENT: u64 = 700;
    /// The policy does not let the granter hand the recipient a capability of this kind.
    /// The refusal is in the audit log.
    pub const FORBIDDEN: u64 = 701;
    /// As many compartments exist as the monitor holds (16).
    pub const TOO_MANY_COMPARTMENTS: u64 = 702;
    /// A live compartment already has this name.
    pub const NAME_TAKEN: u64 = 703;
    /// A name is 1 to 16 printable characters without spaces.
    pub const BAD_NAME: u64 = 704;
    /// A compartment's bank refused (its limit reached): the forwarder or inbox was not
    /// bought.
    pub const BANK_REFUSED: u64 = 705;
    /// The recipient's inbox holds 32 forwarders not yet received.
    pub const INBOX_FULL: u64 = 706;
    /// Nothing in this compartment's inbox.
    pub const INBOX_EMPTY: u64 = 707;
    /// The audit log could not be written (full, corrupt, or the journal refused): nothing
    /// is granted or revoked that the log does not hold. The log's last 16 records are kept
    /// for revocations, so every live compartment can be revoked however full it is.
    pub const AUDIT_UNAVAILABLE: u64 = 708;
    /// An order the monitor does not have, through this capability, or bad arguments.
    pub const BAD_REQUEST: u64 = 709;
    /// A CPU share was asked for, but the monitor was given no meter to make compartments'
    /// meters below, or the compartment was made without one; or such a compartment asked
    /// for its meter.
    pub const NO_METER: u64 = 710;
}

/// A compartment's bank limits and CPU share ([`control_order::CREATE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub page_limit: u64,
    pub node_limit: u64,
    /// Percent of every 100 ms period; 0: no meter.
    pub cpu_percent: u64,
}

impl Quota {
    fn words(&self) -> [u64; 4] {
        [self.page_limit, self.node_limit, self.cpu_percent, 0]
    }
}

/// Makes compartment `name` with this quota; its capability into `into`. Returns its
/// number.
pub fn create(control: CapReg, name: &[u8], quota: Quota, into: CapReg) -> Result<u64, Error> {
    let received = invoke(Invocation {
        words: quota.words(),
        string: name,
        receive: &[into],
        ..Invocation::call(control, control_order::CREATE)
    })
    .check()?;
    Ok(received.words[0])
}

/// Sets the limits of compartment `name`'s bank and its meter's share.
pub fn set_quota(control: CapReg, name: &[u8], quota: Quota) -> Result<(), Error> {
    invoke(Invocation { words: quota.words(), string: name, ..Invocation::call(control, control_order::SET_QUOTA) })
        .check()
        .map(|_| ())
}

/// Lets compartment `from` hand `to` the kinds in `kinds` (bit i: type code i).
pub fn set_policy(control: CapReg, from: u64, to: u64, kinds: u64) -> Result<(), Error> {
    invoke(Invocation { words: [from, to, kinds, 0], ..Invocation::call(control, control_order::SET_POLICY) }).check().map(|_| ())
}

/// Revokes compartment `name`; returns how many objects its bank destroyed.
pub fn revoke(control: CapReg, name: &[u8]) -> Result<u64, Error> {
    Ok(invoke(Invocation { string: name, ..Invocation::call(control, control_order::REVOKE) }).check()?.words[0])
}

/// What [`audit`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditPart {
    /// Records in the buffer (each `holdfast_keysafe_policy::audit::RECORD_BYTES`).
    pub records: u64,
    /// Where to read from next.
    pub next: u64,
    /// The log's record count: reading is done when `next` reaches it.
    pub count: u64,
}

/// Reads the records about compartment `name` from position `from` into `buffer`.
pub fn audit(control: CapReg, name: &[u8], from: u64, buffer: &mut [u8]) -> Result<AuditPart, Error> {
    let [records, next, count, _] =
        invoke(Invocation { words: [from, 0, 0, 0], string: name, buffer, ..Invocation::call(control, control_order::AUDIT) })
            .check()?
            .words;
    Ok(AuditPart { records, next, count })
}

/// One live compartment, as [`list`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    pub number: u8,
    pub generation: u32,
    /// Zero-padded.
    pub name: [u8; 16],
    pub bank: crate::bank::Info,
    pub refusals: u64,
    pub refusals_logged: u64,
    /// Its meter's share; 0: no meter.
    pub cpu_percent: u64,
}

impl Listed {
    pub fn decode(entry: &[u8; LIST_ENTRY_BYTES]) -> Self {
        let word = |at: usize| u64::from_le_bytes(entry[at..at + 8].try_into().expect("8 bytes"));
        Self {
            number: entry[0],
            generation: u32::from_le_bytes(entry[4..8].try_into().expect("4 bytes")),
            name: entry[8..24].try_into().expect("16 bytes"),
            bank: crate::bank::Info { pages: word(24), page_limit: word(32), nodes: word(40), node_limit: word(48) },
            refusals: word(56),
            refusals_logged: word(64),
            cpu_percent: word(72),
        }
    }

    pub fn encode(&self) -> [u8; LIST_ENTRY_BYTES] {
        let mut entry = [0; LIST_ENTRY_BYTES];
        entry[0] = self.number;
        entry[4..8].copy_from_slice(&self.generation.to_le_bytes());
        entry[8..24].copy_from_slice(&self.name);
        let words = [
            (24, self.bank.pages),
            (32, self.bank.page_limit),
            (40, self.bank.nodes),
            (48, self.bank.node_limit),
            (56, self.refusals),
            (64, self.refusals_logged),
            (72, self.cpu_percent),
        ];
        for (at, value) in words {
            entry[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        entry
    }

    /// The name without its padding.
    pub fn name(&self) -> &[u8] {
        let length = self.name.iter().position(|&byte| byte == 0).unwrap_or(self.name.len());
        &self.name[..length]
    }
}

/// The live compartments into `buffer` (at least 16 entries' room); returns how many.
pub fn list(control: CapReg, buffer: &mut [u8]) -> Result<usize, Error> {
    let received = invoke(Invocation { buffer, ..Invocation::call(control, control_order::LIST) }).check()?;
    Ok(usize::try_from(received.words[0]).unwrap_or(0).min(received.string_length / LIST_ENTRY_BYTES))
}

/// Compartment capability `compartment`'s meter, read-only, into `into`.
pub fn meter(compartment: CapReg, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { receive: &[into], ..Invocation::call(compartment, order::METER) }).check().map(|_| ())
}

/// A new bank below compartment capability `compartment`'s bank ([`order::BANK`]) into
/// `into`.
pub fn bank(compartment: CapReg, into: CapReg) -> Result<(), Error> {
    invoke(Invocation { receive: &[into], ..Invocation::call(compartment, order::BANK) }).check().map(|_| ())
}

/// Grants `granted` to compartment `to` through compartment capability `compartment`;
/// returns the inbox slot it went to.
pub fn grant(compartment: CapReg, to: u64, granted: CapReg) -> Result<u64, Error> {
    Ok(invoke(Invocation { words: [to, 0, 0, 0], send: &[granted], ..Invocation::call(compartment, order::GRANT) }).check()?.words[0])
}

/// Takes the oldest forwarder granted to this compartment into `into`; returns the
/// granter's compartment number.
pub fn receive(compartment: CapReg, into: CapReg) -> Result<u64, Error> {
    Ok(invoke(Invocation { receive: &[into], ..Invocation::call(compartment, order::RECEIVE) }).check()?.words[1])
}
