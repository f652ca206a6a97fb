// Generated from guest-kernel/abi/interface.toml by holdfast-interface-gen; do not edit.
// Change the description and regenerate: `cargo run -p holdfast-interface-gen`.

//! The kernel interface, ABI version 9: capability types, order codes, errors, and the
//! decoding of each invocation of a kernel object into a request (see
//! `docs/interface.md`). Requests are plain data; the kernel matches on them.

//! Which register carries what in and out of the `invoke` system call (entered with
//! `syscall`); a register not listed is kept. Ring 3's `syscall` is generated from the
//! same table (`holdfast_userlib::interface::system_call`).
//!
//! | register | in | out |
//! |---|---|---|
//! | `rdi` | The descriptor (below): the target capability register, the kind, the capabilities sent and where those received go. | kept |
//! | `rsi` | The order code of a call or send; the reply code of a return. | kept |
//! | `rax` | — | The result code: 0 for success, an object or invocation error (below), or the code a server replied with. A process that receives a call or send (a return that waits) gets the order code here. |
//! | `rdx` | Word 0 sent. | Word 0 received. |
//! | `r10` | Word 1 sent. | Word 1 received. |
//! | `r8` | Word 2 sent. | Word 2 received. |
//! | `r9` | Word 3 sent. | Word 3 received. |
//! | `r12` | The address of the string sent. | The badge of the capability the process was invoked through (a server receiving a call or send); 0 for a reply. |
//! | `r13` | The length of the string sent, at most 4096 bytes; 0: no string. | The length of the string received into the buffer (never more than its capacity: the rest is dropped). |
//! | `r14` | The address of the buffer that receives a string. | kept |
//! | `r15` | The capacity of that buffer in bytes; 0: no string is received. | kept |
//! | `rcx` | — | Clobbered by the `syscall` instruction (it holds the return address). |
//! | `r11` | — | Clobbered by the `syscall` instruction (it holds rflags). |

/// The ABI version: the kernel prints it at boot and loads only programs whose ELF note
/// names it.
pub const ABI_VERSION: u32 = 9;

/// Where the register of each role of `invoke` lies in the register file (the order of
/// `process.read_registers`), in words: the kernel checks its register file against
/// these at build time.
pub mod register_file_index {
    /// `rdi`.
    pub const IN_DESCRIPTOR: usize = 5;
    /// `rsi`.
    pub const IN_CODE: usize = 4;
    /// `rax`.
    pub const OUT_RESULT: usize = 0;
    /// `rdx`.
    pub const IN_WORD0: usize = 3;
    /// `rdx`.
    pub const OUT_WORD0: usize = 3;
    /// `r10`.
    pub const IN_WORD1: usize = 9;
    /// `r10`.
    pub const OUT_WORD1: usize = 9;
    /// `r8`.
    pub const IN_WORD2: usize = 7;
    /// `r8`.
    pub const OUT_WORD2: usize = 7;
    /// `r9`.
    pub const IN_WORD3: usize = 8;
    /// `r9`.
    pub const OUT_WORD3: usize = 8;
    /// `r12`.
    pub const IN_STRING_ADDRESS: usize = 11;
    /// `r12`.
    pub const OUT_BADGE: usize = 11;
    /// `r13`.
    pub const IN_STRING_LENGTH: usize = 12;
    /// `r13`.
    pub const OUT_RECEIVED_LENGTH: usize = 12;
    /// `r14`.
    pub const IN_BUFFER_ADDRESS: usize = 13;
    /// `r15`.
    pub const IN_BUFFER_CAPACITY: usize = 14;
}

/// Where each field of the descriptor (`rdi`) lies: `*_SHIFT` is its lowest bit, `*_MASK`
/// its mask once shifted down.
pub mod descriptor_field {
    /// Bits 0..=3: The capability register invoked.
    pub const TARGET_SHIFT: u32 = 0;
    pub const TARGET_MASK: u64 = 0xf;
    /// Bits 4..=5: 0 call, 1 return, 2 send (the invocation kinds above); 3 is malformed.
    pub const KIND_SHIFT: u32 = 4;
    pub const KIND_MASK: u64 = 0x3;
    /// Bits 8..=23: The capability registers sent, 4 bits each, the first in the lowest 4 bits. Those beyond `send_count` must be zero.
    pub const SEND_REGISTERS_SHIFT: u32 = 8;
    pub const SEND_REGISTERS_MASK: u64 = 0xffff;
    /// Bits 24..=26: How many capabilities are sent, 0..=4; more is malformed.
    pub const SEND_COUNT_SHIFT: u32 = 24;
    pub const SEND_COUNT_MASK: u64 = 0x7;
    /// Bits 32..=47: The capability registers that receive the capabilities of the message that comes back (a reply, or the next call or send), 4 bits each, the first in the lowest 4 bits. Those beyond `receive_count` must be zero. Each gets the message's next capability, or void once the message has no more: a server cannot mistake a capability an earlier caller sent for one this caller sent (ABI 8; before it, a register the message did not fill kept what it held).
    pub const RECEIVE_REGISTERS_SHIFT: u32 = 32;
    pub const RECEIVE_REGISTERS_MASK: u64 = 0xffff;
    /// Bits 48..=50: How many capability registers receive, 0..=4; more is malformed.
    pub const RECEIVE_COUNT_SHIFT: u32 = 48;
    pub const RECEIVE_COUNT_MASK: u64 = 0x7;
    /// Bits 52..=55: The capability register that receives the resume capability of a call received, when `receives_resume` is set; must be zero when it is clear.
    pub const RESUME_REGISTER_SHIFT: u32 = 52;
    pub const RESUME_REGISTER_MASK: u64 = 0xf;
    /// Bits 56..=56: Set: the message that comes back puts the caller's resume capability in `resume_register` (void if the message is no call, so that an old one cannot be mistaken for the current caller). Clear: no resume capability is received, and a server cannot reply to a call.
    pub const RECEIVES_RESUME_SHIFT: u32 = 56;
    pub const RECEIVES_RESUME_MASK: u64 = 0x1;
    /// Every bit a field covers; a descriptor with any other bit set is malformed.
    pub const DEFINED_BITS: u64 = 0x01f7_ffff_07ff_ff3f;
}

/// Values of the descriptor's `kind` field.
pub mod invocation_kind {
    /// Invoke, then wait for the reply, which comes through a fresh resume capability the target receives.
    pub const CALL: u64 = 0;
    /// Invoke (usually a resume capability, to reply), then wait for the next call or send; a void target just waits.
    pub const RETURN: u64 = 1;
    /// Invoke and go on without waiting; no resume capability is made.
    pub const SEND: u64 = 2;
}

/// What keepers receive: the order code of the call says why, the words say where.
pub mod keeper {
    /// A CPU exception, or a page fault that no space keeper takes. The first capability is the process; replying to the resume capability restarts it from its registers (as the keeper may have changed them).
    ///
    /// - word 0: The exception vector.
    /// - word 1: The error code, or 2^64-1 if the exception has none.
    /// - word 2: The rip of the faulting instruction.
    /// - word 3: The faulting address (page faults), else 0.
    pub const EXCEPTION: u64 = 1;
    /// A page fault the space tree could not resolve, sent to the keeper of the innermost keeper space on the path. The first capability is the process; replying restarts it.
    ///
    /// - word 0: The exception vector (14).
    /// - word 1: The page fault's error code.
    /// - word 2: The rip of the faulting instruction.
    /// - word 3: The faulting address.
    pub const SPACE_FAULT: u64 = 2;
    /// The process's meter ran out. The first capability is the process; the keeper refills the meter (or not) and replies to restart it.
    pub const METER_EXHAUSTED: u64 = 3;
}

/// The run state in a process's root node (slot 19, a number): its first word holds
/// the code (bits 0..=7), flags (bits 8..=15) and a fault's vector (bits 16..=23).
pub mod run_state {
    /// The code's bits of the first word, shifted down.
    pub const CODE_MASK: u64 = 0xff;
    pub const CODE_SHIFT: u32 = 0;
    /// Where a fault's vector lies in the first word.
    pub const FAULT_VECTOR_SHIFT: u32 = 16;
    /// Ready to run, or running.
    pub const RUNNABLE: u64 = 1;
    /// Waiting for a call or send (it returned, or never ran).
    pub const AVAILABLE: u64 = 2;
    /// Called, and waiting for the reply.
    pub const WAITING_FOR_REPLY: u64 = 3;
    /// Waiting to invoke again a process that was not available, or for input or a journal commit: a restart runs the invocation again.
    pub const STALLED: u64 = 4;
    /// Its meter ran out, and no keeper has refilled it.
    pub const OUT_OF_TIME: u64 = 5;
    /// Stopped (`process.stop`); the second word holds the exit code.
    pub const STOPPED: u64 = 6;
    /// Stopped by a fault no keeper resolved; the second word holds the rip, the flags say which of the error code and address the register slots hold.
    pub const FAULTED: u64 = 7;
    /// Flag (bit 8): Its keeper was called on its behalf: a reply restarts it from its registers.
    pub const WAITING_FOR_KEEPER: u64 = 1 << 8;
    /// Flag (bit 9): Faulted: the word after the 18 registers holds the fault's error code.
    pub const FAULT_HAS_ERROR_CODE: u64 = 1 << 9;
    /// Flag (bit 10): Faulted: the word after that holds the faulting address.
    pub const FAULT_HAS_ADDRESS: u64 = 1 << 10;
}

/// Capability types.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// No object: an empty slot or register, or a capability whose object was revoked. Invoking it fails with `void`.
    Void = 0,
    /// Two words of data held in the capability itself.
    Number = 1,
    /// 4 KiB of data.
    Page = 2,
    /// 32 capability slots, numbered 0..=31.
    Node = 3,
    /// An address-space tree of height h covering 4 KiB × 32^h; slot i covers the i-th 4 KiB × 32^(h-1) part.
    Space = 4,
    /// A process: registers, 16 capability registers, an address space, a keeper and a meter.
    Process = 5,
    /// Entry to a process: invoking it calls or sends to the process with any order, and the process sees the capability's badge.
    Start = 6,
    /// Reply to a waiting caller: invoking it returns to the caller, whose result code is the order. It works at most once.
    Resume = 7,
    /// CPU time that processes run on, charged one timer tick (10 ms) at a time to the meter and every meter above it (its parent, set when it was made). A process serving a message (a call, a send or a return to its start capability, or a fault for its keeper) runs on the sender's meters instead (the sender's own payer, down a chain of calls) until it waits again, unless the sender has none; if they run out meanwhile it goes on, the time their debt (a negative time left, which the next shares pay first; `remaining` says 0), and a caller runs out of time when its call returns. A process runs out of time when any of them has none left: its keeper (or, without one, the meter's refill or next share) lets it run again. A meter with a share is given that much time by the kernel at the start of every 100 ms period: a tree of shares (the meter keeper, services/meter-keeper, and the reference monitor, services/keysafe, set tenants' shares).
    Meter = 8,
    /// A revocable forwarder: every invocation goes to the capability in slot 0 of its node, and fails with `void` once that slot is void.
    Indirector = 9,
    /// The serial console.
    Console = 10,
    /// The time since boot.
    Clock = 11,
    /// Control of the single-level store's checkpoints: their interval, a checkpoint now, and the store's counters.
    Checkpoint = 12,
    /// Synchronous commits of chosen pages to the store's log: once a commit is acknowledged, a restart brings the pages back as committed, whatever crash comes. The rest of the program comes back as the last checkpoint caught it, which may be before commits it went on to make: a program must not write a journaled page from what it read before that checkpoint (after a restart, read the page again; or make every write one that a replay repeats harmlessly, as services/selftest/src/journal_writer.rs does).
    Journal = 13,
    /// The control channel: a serial line on which the host's `holdfast` sends requests and reads replies.
    Control = 14,
    /// The virtio-net device, raw Ethernet frames in and out; held only by the network service. Its interrupts become messages (`notify`). After a restart from the store the device is fresh: every method's last result word, `boot`, says which start of the system this device belongs to (the clock's `boot`), so a holder that sees it change knows its old connections are gone; the kernel also sends one `restarted` notification to each process holding this capability in a capability register once it restores the system, through nothing but its own registers: as a send with order `holdfast_abi::network_notification::ORDER`, badge 2^64-1.
    NetworkDevice = 15,
    /// The authority to make and destroy pages and nodes (KeyKOS's prime range key): held only by the space bank (`services/space-bank`), which every other program buys storage from. Object ids are handed out once by `create_page` and `create_node`; a destroyed object keeps its id, at a new version, for `reissue`. With a store the objects live there, and their number is bounded by its size.
    Range = 16,
}

impl Type {
    pub const fn code(self) -> u64 {
        self as u64
    }

    pub const fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => Self::Void,
            1 => Self::Number,
            2 => Self::Page,
            3 => Self::Node,
            4 => Self::Space,
            5 => Self::Process,
            6 => Self::Start,
            7 => Self::Resume,
            8 => Self::Meter,
            9 => Self::Indirector,
            10 => Self::Console,
            11 => Self::Clock,
            12 => Self::Checkpoint,
            13 => Self::Journal,
            14 => Self::Control,
            15 => Self::NetworkDevice,
            16 => Self::Range,
            _ => return None,
        })
    }

    /// Its name in the interface description.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Void => "void",
            Self::Number => "number",
            Self::Page => "page",
            Self::Node => "node",
            Self::Space => "space",
            Self::Process => "process",
            Self::Start => "start",
            Self::Resume => "resume",
            Self::Meter => "meter",
            Self::Indirector => "indirector",
            Self::Console => "console",
            Self::Clock => "clock",
            Self::Checkpoint => "checkpoint",
            Self::Journal => "journal",
            Self::Control => "control",
            Self::NetworkDevice => "network_device",
            Self::Range => "range",
        }
    }
}

/// Codes of invocation errors start here, so that they never collide with a server's
/// reply codes.
pub const INVOCATION_ERROR_CODE_MIN: u64 = 0x8000_0000_0000_0000;

/// Kernel errors about an invocation itself, whatever its target.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvocationError {
    /// The target capability is void, or was revoked (its object's version changed).
    Void = 0x8000_0000_0000_0000,
    /// The descriptor (`rdi`) has an undefined bit set or counts more than four capabilities.
    MalformedDescriptor = 0x8000_0000_0000_0001,
    /// The string sent is longer than 4096 bytes.
    StringTooLong = 0x8000_0000_0000_0002,
    /// The string sent is not mapped in the invoker's address space.
    BadAddress = 0x8000_0000_0000_0003,
    /// A call through a start capability without the right to call (a send is allowed).
    NoCall = 0x8000_0000_0000_0004,
}

impl InvocationError {
    pub const fn code(self) -> u64 {
        self as u64
    }

    pub const fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0x8000_0000_0000_0000 => Self::Void,
            0x8000_0000_0000_0001 => Self::MalformedDescriptor,
            0x8000_0000_0000_0002 => Self::StringTooLong,
            0x8000_0000_0000_0003 => Self::BadAddress,
            0x8000_0000_0000_0004 => Self::NoCall,
            _ => return None,
        })
    }

    /// What the error means.
    pub const fn description(self) -> &'static str {
        match self {
            Self::Void => {
                "The target capability is void, or was revoked (its object's version changed)."
            }
            Self::MalformedDescriptor => {
                "The descriptor (`rdi`) has an undefined bit set or counts more than four capabilities."
            }
            Self::StringTooLong => "The string sent is longer than 4096 bytes.",
            Self::BadAddress => "The string sent is not mapped in the invoker's address space.",
            Self::NoCall => {
                "A call through a start capability without the right to call (a send is allowed)."
            }
        }
    }
}

/// Errors returned by kernel objects.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectError {
    /// The object has no method with this order code.
    InvalidOrder = 1,
    /// The slot index is out of range (0..=31).
    InvalidSlot = 2,
    /// The method changes the object, and the capability is read-only.
    ReadOnly = 3,
    /// An argument capability is not of a type the method accepts.
    WrongType = 4,
    /// An offset, length, height, index or number is out of range.
    OutOfRange = 5,
    /// The capability lacks a right the method needs (a call through a no-call capability).
    NoRight = 6,
    /// The kernel service has nothing to act on here: no store on this system, or no control channel.
    Unavailable = 7,
    /// The kernel has no memory left for what the method would add (a process's tables) beyond the reserve it keeps for loading pages: nothing was made. Every other limit grows with the system.
    Exhausted = 8,
    /// The guard word of a journal `write` no longer holds the value expected: nothing was written or committed.
    Changed = 9,
}

impl ObjectError {
    pub const fn code(self) -> u64 {
        self as u64
    }

    pub const fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            1 => Self::InvalidOrder,
            2 => Self::InvalidSlot,
            3 => Self::ReadOnly,
            4 => Self::WrongType,
            5 => Self::OutOfRange,
            6 => Self::NoRight,
            7 => Self::Unavailable,
            8 => Self::Exhausted,
            9 => Self::Changed,
            _ => return None,
        })
    }

    /// What the error means.
    pub const fn description(self) -> &'static str {
        match self {
            Self::InvalidOrder => "The object has no method with this order code.",
            Self::InvalidSlot => "The slot index is out of range (0..=31).",
            Self::ReadOnly => "The method changes the object, and the capability is read-only.",
            Self::WrongType => "An argument capability is not of a type the method accepts.",
            Self::OutOfRange => "An offset, length, height, index or number is out of range.",
            Self::NoRight => {
                "The capability lacks a right the method needs (a call through a no-call capability)."
            }
            Self::Unavailable => {
                "The kernel service has nothing to act on here: no store on this system, or no control channel."
            }
            Self::Exhausted => {
                "The kernel has no memory left for what the method would add (a process's tables) beyond the reserve it keeps for loading pages: nothing was made. Every other limit grows with the system."
            }
            Self::Changed => {
                "The guard word of a journal `write` no longer holds the value expected: nothing was written or committed."
            }
        }
    }
}

/// What the decoders look at in an invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// The order code.
    pub order: u64,
    /// Words 0..=3.
    pub words: [u64; 4],
    /// Length of the string sent, in bytes (0: none).
    pub string_length: u64,
    /// Number of capabilities sent (0..=4); a capability argument not sent is void.
    pub capability_count: u64,
}

/// Order codes of the methods every type with a module below has.
pub mod common_order {
    /// Says what the capability is.
    pub const IDENTIFY: u64 = 0;
}

/// Two words of data held in the capability itself.
pub mod number {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns the two words.
        pub const VALUE: u64 = 1;
    }

    /// An invocation of a number capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns the two words.
        Value,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::VALUE => Ok(Self::Value),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// 4 KiB of data.
pub mod page {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Reads `length` bytes from `offset`.
        pub const READ: u64 = 1;
        /// Writes the string at `offset`.
        pub const WRITE: u64 = 2;
        /// Sets every byte of the page to zero.
        pub const ZERO: u64 = 3;
        /// Returns a read-only capability to the same page.
        pub const WEAKEN: u64 = 4;
        /// Copies every byte of page `source` into this page (no string passes through ring 3).
        pub const COPY_FROM: u64 = 5;
    }

    /// An invocation of a page capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Reads `length` bytes from `offset`.
        Read {
            /// First byte read.
            offset: u64,
            /// Bytes read; `offset + length` is at most 4096.
            length: u64,
        },
        /// Writes the string at `offset`.
        Write {
            /// First byte written; `offset` plus the string's length is at most 4096.
            offset: u64,
        },
        /// Sets every byte of the page to zero.
        Zero,
        /// Returns a read-only capability to the same page.
        Weaken,
        /// Copies every byte of page `source` into this page (no string passes through ring 3).
        CopyFrom,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::READ => {
                    let offset = message.words[0];
                    let length = message.words[1];
                    if offset > 4096 {
                        return Err(ObjectError::OutOfRange);
                    }
                    if length > 4096 {
                        return Err(ObjectError::OutOfRange);
                    }
                    if offset.checked_add(length).is_none_or(|sum| sum > 4096) {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::Read { offset, length })
                }
                order::WRITE => {
                    let offset = message.words[0];
                    if offset > 4096 {
                        return Err(ObjectError::OutOfRange);
                    }
                    if offset
                        .checked_add(message.string_length)
                        .is_none_or(|sum| sum > 4096)
                    {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::Write { offset })
                }
                order::ZERO => Ok(Self::Zero),
                order::WEAKEN => Ok(Self::Weaken),
                order::COPY_FROM => {
                    // `source` must be a page; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::CopyFrom)
                }
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// 32 capability slots, numbered 0..=31.
pub mod node {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns a copy of the capability in a slot (weakened if the node capability is weak).
        pub const FETCH: u64 = 1;
        /// Stores a capability in a slot and returns the one it replaces.
        pub const SWAP: u64 = 2;
        /// Stores void in a slot.
        pub const CLEAR: u64 = 3;
        /// Returns a read-only, weak capability to the same node: what is fetched through it is weakened too.
        pub const WEAKEN: u64 = 4;
        /// Returns a space capability of this node: an address-space tree of height `height`, covering 4 KiB × 32^height.
        pub const MAKE_SPACE: u64 = 5;
        /// Returns an indirector capability of this node, which forwards every invocation to the capability in slot 0.
        pub const MAKE_INDIRECTOR: u64 = 6;
        /// Returns a meter capability of this node, below `parent`: the time processes use on the new meter is charged to the parent and every meter above it too, so a meter made at run time never gives more than the meters above it (top meters come only from the initial system). The node's slots become the meter's: 0 the time left, 1 the keeper, 2 the parent, 3 the share.
        pub const MAKE_METER: u64 = 7;
        /// Returns a process capability of this node, the process's root, and adds the process (stopped) to the kernel's table if it is not there; every process is in each checkpoint, however many there are.
        pub const MAKE_PROCESS: u64 = 8;
        /// Says what the capability in a slot is, its type code and rights as `identify` gives them (void once revoked), without invoking it: a start, resume or indirector capability is described, not called (KeyKOS's discrim). A reference monitor classifies what it is handed this way, so that a capability to a process that never answers cannot hold it up.
        pub const SENSE: u64 = 9;
        /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation, as `space.occupied` does: a constructor gives a process only the components it has.
        pub const OCCUPIED: u64 = 10;
    }

    /// An invocation of a node capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns a copy of the capability in a slot (weakened if the node capability is weak).
        Fetch {
            /// The slot.
            slot: u64,
        },
        /// Stores a capability in a slot and returns the one it replaces.
        Swap {
            /// The slot.
            slot: u64,
        },
        /// Stores void in a slot.
        Clear {
            /// The slot.
            slot: u64,
        },
        /// Returns a read-only, weak capability to the same node: what is fetched through it is weakened too.
        Weaken,
        /// Returns a space capability of this node: an address-space tree of height `height`, covering 4 KiB × 32^height.
        MakeSpace {
            /// The space's height.
            height: u64,
            /// Bit 0, keeper: slot 0 holds the inner space and slot 1 its keeper (a start capability). No other bit is defined.
            flags: u64,
        },
        /// Returns an indirector capability of this node, which forwards every invocation to the capability in slot 0.
        MakeIndirector {
            /// The badge of the indirector capability.
            badge: u64,
        },
        /// Returns a meter capability of this node, below `parent`: the time processes use on the new meter is charged to the parent and every meter above it too, so a meter made at run time never gives more than the meters above it (top meters come only from the initial system). The node's slots become the meter's: 0 the time left, 1 the keeper, 2 the parent, 3 the share.
        MakeMeter,
        /// Returns a process capability of this node, the process's root, and adds the process (stopped) to the kernel's table if it is not there; every process is in each checkpoint, however many there are.
        MakeProcess,
        /// Says what the capability in a slot is, its type code and rights as `identify` gives them (void once revoked), without invoking it: a start, resume or indirector capability is described, not called (KeyKOS's discrim). A reference monitor classifies what it is handed this way, so that a capability to a process that never answers cannot hold it up.
        Sense {
            /// The slot.
            slot: u64,
        },
        /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation, as `space.occupied` does: a constructor gives a process only the components it has.
        Occupied,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::FETCH => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Fetch { slot })
                }
                order::SWAP => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Swap { slot })
                }
                order::CLEAR => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Clear { slot })
                }
                order::WEAKEN => Ok(Self::Weaken),
                order::MAKE_SPACE => {
                    let height = message.words[0];
                    let flags = message.words[1];
                    if height > 7 {
                        return Err(ObjectError::OutOfRange);
                    }
                    if flags > 1 {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::MakeSpace { height, flags })
                }
                order::MAKE_INDIRECTOR => {
                    let badge = message.words[0];
                    Ok(Self::MakeIndirector { badge })
                }
                order::MAKE_METER => {
                    // `parent` must be a meter; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::MakeMeter)
                }
                order::MAKE_PROCESS => Ok(Self::MakeProcess),
                order::SENSE => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Sense { slot })
                }
                order::OCCUPIED => Ok(Self::Occupied),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// An address-space tree of height h covering 4 KiB × 32^h; slot i covers the i-th 4 KiB × 32^(h-1) part.
pub mod space {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns a copy of the capability in a slot, weakened if the space capability is read-only: nothing fetched through a read-only space can write what it maps.
        pub const FETCH: u64 = 1;
        /// Stores a page or space capability in a slot and returns the one it replaces.
        pub const SWAP: u64 = 2;
        /// Returns the space's height and flags.
        pub const INFO: u64 = 3;
        /// Returns a read-only capability to the same space: it maps every page below it read-only, and what is fetched through it is weakened.
        pub const WEAKEN: u64 = 4;
        /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation: a walk of a space tree visits only those slots.
        pub const OCCUPIED: u64 = 5;
    }

    /// An invocation of a space capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns a copy of the capability in a slot, weakened if the space capability is read-only: nothing fetched through a read-only space can write what it maps.
        Fetch {
            /// The slot.
            slot: u64,
        },
        /// Stores a page or space capability in a slot and returns the one it replaces.
        Swap {
            /// The slot.
            slot: u64,
        },
        /// Returns the space's height and flags.
        Info,
        /// Returns a read-only capability to the same space: it maps every page below it read-only, and what is fetched through it is weakened.
        Weaken,
        /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation: a walk of a space tree visits only those slots.
        Occupied,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::FETCH => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Fetch { slot })
                }
                order::SWAP => {
                    let slot = message.words[0];
                    if slot > 31 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::Swap { slot })
                }
                order::INFO => Ok(Self::Info),
                order::WEAKEN => Ok(Self::Weaken),
                order::OCCUPIED => Ok(Self::Occupied),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// A process: registers, 16 capability registers, an address space, a keeper and a meter.
pub mod process {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns the register file: 18 little-endian words, rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15, rip, rsp, rflags.
        pub const READ_REGISTERS: u64 = 1;
        /// Replaces the register file of a process other than the invoker. Only the arithmetic, direction and trap flags of rflags are taken: interrupts stay on and I/O privilege 0.
        pub const WRITE_REGISTERS: u64 = 2;
        /// Returns a copy of the capability in one of the process's capability registers.
        pub const FETCH_REGISTER: u64 = 3;
        /// Stores a capability in one of the process's capability registers and returns the one it replaces.
        pub const SWAP_REGISTER: u64 = 4;
        /// Sets the process's address space.
        pub const SET_SPACE: u64 = 5;
        /// Sets the process's keeper, which receives its exceptions; void removes it.
        pub const SET_KEEPER: u64 = 6;
        /// Sets the meter the process runs on.
        pub const SET_METER: u64 = 7;
        /// Returns a start capability to the process, through which it is called.
        pub const MAKE_START: u64 = 8;
        /// Makes the process runnable. A process with no meter is refused: only the initial system's processes run unmetered.
        pub const START: u64 = 9;
        /// Stops the process; the kernel reports the exit code.
        pub const STOP: u64 = 10;
        /// Returns the process's space capability.
        pub const FETCH_SPACE: u64 = 11;
        /// Returns the badge of a start capability to this process: a server given one of its own start capabilities (a listener handed back by a client, say) learns which it is, where the badge otherwise shows only to an invocation through it. Only through the process capability: holding a start capability tells nothing of its badge.
        pub const START_BADGE: u64 = 12;
    }

    /// An invocation of a process capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns the register file: 18 little-endian words, rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15, rip, rsp, rflags.
        ReadRegisters,
        /// Replaces the register file of a process other than the invoker. Only the arithmetic, direction and trap flags of rflags are taken: interrupts stay on and I/O privilege 0.
        WriteRegisters,
        /// Returns a copy of the capability in one of the process's capability registers.
        FetchRegister {
            /// The capability register.
            index: u64,
        },
        /// Stores a capability in one of the process's capability registers and returns the one it replaces.
        SwapRegister {
            /// The capability register.
            index: u64,
        },
        /// Sets the process's address space.
        SetSpace,
        /// Sets the process's keeper, which receives its exceptions; void removes it.
        SetKeeper,
        /// Sets the meter the process runs on.
        SetMeter,
        /// Returns a start capability to the process, through which it is called.
        MakeStart {
            /// The badge the process sees when invoked through the start capability.
            badge: u64,
        },
        /// Makes the process runnable. A process with no meter is refused: only the initial system's processes run unmetered.
        Start,
        /// Stops the process; the kernel reports the exit code.
        Stop {
            /// The exit code.
            exit_code: u64,
        },
        /// Returns the process's space capability.
        FetchSpace,
        /// Returns the badge of a start capability to this process: a server given one of its own start capabilities (a listener handed back by a client, say) learns which it is, where the badge otherwise shows only to an invocation through it. Only through the process capability: holding a start capability tells nothing of its badge.
        StartBadge,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::READ_REGISTERS => Ok(Self::ReadRegisters),
                order::WRITE_REGISTERS => Ok(Self::WriteRegisters),
                order::FETCH_REGISTER => {
                    let index = message.words[0];
                    if index > 15 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::FetchRegister { index })
                }
                order::SWAP_REGISTER => {
                    let index = message.words[0];
                    if index > 15 {
                        return Err(ObjectError::InvalidSlot);
                    }
                    Ok(Self::SwapRegister { index })
                }
                order::SET_SPACE => {
                    // `space` must be a space; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::SetSpace)
                }
                order::SET_KEEPER => Ok(Self::SetKeeper),
                order::SET_METER => {
                    // `meter` must be a meter; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::SetMeter)
                }
                order::MAKE_START => {
                    let badge = message.words[0];
                    Ok(Self::MakeStart { badge })
                }
                order::START => Ok(Self::Start),
                order::STOP => {
                    let exit_code = message.words[0];
                    Ok(Self::Stop { exit_code })
                }
                order::FETCH_SPACE => Ok(Self::FetchSpace),
                order::START_BADGE => {
                    // `start` must be a start; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::StartBadge)
                }
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// CPU time that processes run on, charged one timer tick (10 ms) at a time to the meter and every meter above it (its parent, set when it was made). A process serving a message (a call, a send or a return to its start capability, or a fault for its keeper) runs on the sender's meters instead (the sender's own payer, down a chain of calls) until it waits again, unless the sender has none; if they run out meanwhile it goes on, the time their debt (a negative time left, which the next shares pay first; `remaining` says 0), and a caller runs out of time when its call returns. A process runs out of time when any of them has none left: its keeper (or, without one, the meter's refill or next share) lets it run again. A meter with a share is given that much time by the kernel at the start of every 100 ms period: a tree of shares (the meter keeper, services/meter-keeper, and the reference monitor, services/keysafe, set tenants' shares).
pub mod meter {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns the time left on the meter.
        pub const REMAINING: u64 = 1;
        /// Sets the time left on the meter.
        pub const REFILL: u64 = 2;
        /// Sets the meter's keeper, which is invoked when the meter runs out; void removes it.
        pub const SET_KEEPER: u64 = 3;
        /// Sets the meter's share: the microseconds of CPU time the kernel gives it at the start of every 100 ms period (what was left is not carried over); 0: none, the meter gets time only from `refill`.
        pub const SET_SHARE: u64 = 4;
        /// Returns a read-only capability to the same meter: processes may run on it (`process.set_meter`) and meters be made below it (`node.make_meter`), but its holder can neither refill it, nor set its keeper or share. A tenant gets its meter so: it cannot raise its own CPU quota.
        pub const WEAKEN: u64 = 5;
    }

    /// An invocation of a meter capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns the time left on the meter.
        Remaining,
        /// Sets the time left on the meter.
        Refill {
            /// Microseconds left.
            microseconds: u64,
        },
        /// Sets the meter's keeper, which is invoked when the meter runs out; void removes it.
        SetKeeper,
        /// Sets the meter's share: the microseconds of CPU time the kernel gives it at the start of every 100 ms period (what was left is not carried over); 0: none, the meter gets time only from `refill`.
        SetShare {
            /// Microseconds per 100 ms period.
            microseconds: u64,
        },
        /// Returns a read-only capability to the same meter: processes may run on it (`process.set_meter`) and meters be made below it (`node.make_meter`), but its holder can neither refill it, nor set its keeper or share. A tenant gets its meter so: it cannot raise its own CPU quota.
        Weaken,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::REMAINING => Ok(Self::Remaining),
                order::REFILL => {
                    let microseconds = message.words[0];
                    Ok(Self::Refill { microseconds })
                }
                order::SET_KEEPER => Ok(Self::SetKeeper),
                order::SET_SHARE => {
                    let microseconds = message.words[0];
                    if microseconds > 100000 {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::SetShare { microseconds })
                }
                order::WEAKEN => Ok(Self::Weaken),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// The serial console.
pub mod console {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Writes the string to the console.
        pub const WRITE: u64 = 1;
    }

    /// An invocation of a console capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Writes the string to the console.
        Write,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::WRITE => Ok(Self::Write),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// The time since boot.
pub mod clock {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Returns the time since boot.
        pub const NOW: u64 = 1;
    }

    /// An invocation of a clock capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Returns the time since boot.
        Now,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::NOW => Ok(Self::Now),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// Control of the single-level store's checkpoints: their interval, a checkpoint now, and the store's counters.
pub mod checkpoint {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Sets how often a checkpoint is taken (one is taken early whenever the log is 65 % full).
        pub const SET_INTERVAL: u64 = 1;
        /// Says how the store stands.
        pub const STATUS: u64 = 2;
        /// Asks for a checkpoint now rather than at the end of the interval, and returns at once: `status` shows its commit.
        pub const TAKE: u64 = 3;
        /// The store's counters in the Prometheus text format, in base units, `_total` for counters, `_bucket`, `_sum` and `_count` for histograms: one `name value` line each, grouped in families (a metric's lines: all of a histogram's). The text is longer than one invocation's string, so it comes in pages of whole families: the first from family 0, each next from the `next_family` the one before returned, until `next_family` reaches `family_count`. A page is never cut inside a line or a family; its values are read at once (pages read one after another may be from moments apart).
        pub const COUNTERS: u64 = 4;
        /// Says whether checkpoints are failing. A failed checkpoint is retried at the next interval; while `since_commit` is not 0, nothing done since the last committed checkpoint is persisted but the journal's commits. (A store that can no longer be written stops the system instead.)
        pub const FAILURES: u64 = 5;
    }

    /// An invocation of a checkpoint capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Sets how often a checkpoint is taken (one is taken early whenever the log is 65 % full).
        SetInterval {
            /// The interval.
            milliseconds: u64,
        },
        /// Says how the store stands.
        Status,
        /// Asks for a checkpoint now rather than at the end of the interval, and returns at once: `status` shows its commit.
        Take,
        /// The store's counters in the Prometheus text format, in base units, `_total` for counters, `_bucket`, `_sum` and `_count` for histograms: one `name value` line each, grouped in families (a metric's lines: all of a histogram's). The text is longer than one invocation's string, so it comes in pages of whole families: the first from family 0, each next from the `next_family` the one before returned, until `next_family` reaches `family_count`. A page is never cut inside a line or a family; its values are read at once (pages read one after another may be from moments apart).
        Counters {
            /// The first family returned: 0, then the `next_family` of the page before. One at or beyond `family_count` returns an empty page.
            first_family: u64,
        },
        /// Says whether checkpoints are failing. A failed checkpoint is retried at the next interval; while `since_commit` is not 0, nothing done since the last committed checkpoint is persisted but the journal's commits. (A store that can no longer be written stops the system instead.)
        Failures,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::SET_INTERVAL => {
                    let milliseconds = message.words[0];
                    if !(10..=86400000).contains(&milliseconds) {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::SetInterval { milliseconds })
                }
                order::STATUS => Ok(Self::Status),
                order::TAKE => Ok(Self::Take),
                order::COUNTERS => {
                    let first_family = message.words[0];
                    Ok(Self::Counters { first_family })
                }
                order::FAILURES => Ok(Self::Failures),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// Synchronous commits of chosen pages to the store's log: once a commit is acknowledged, a restart brings the pages back as committed, whatever crash comes. The rest of the program comes back as the last checkpoint caught it, which may be before commits it went on to make: a program must not write a journaled page from what it read before that checkpoint (after a restart, read the page again; or make every write one that a replay repeats harmlessly, as services/selftest/src/journal_writer.rs does).
pub mod journal {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Commits the pages sent, as they are now, and returns once they are on disk; commits made meanwhile share the disk write (group commit).
        pub const COMMIT: u64 = 1;
        /// Writes pieces into the pages of `space` and commits those pages, as `commit` does, but only if the word at `guard_address` still holds `guard_expected`; the check, the writes and the commit happen while no checkpoint can come between them. A program whose journaled data changes only this way, each write moving a counter the guard checks, never applies a change twice after a restart, however late the checkpoint it resumes from (services/tp1). A page changed only this way (not written otherwise, nor mapped writable, since the last checkpoint's snapshot) costs one disk write: once its commit is durable, the next checkpoint leaves it out, and migration moves the commit's copy home. The string is a sequence of pieces: a little-endian u64 address, a little-endian u16 length, then that many bytes. The pieces may touch at most 64 pages. Without a store, or while the journal's queue is full, it is refused as `unavailable` with nothing written.
        pub const WRITE: u64 = 2;
    }

    /// An invocation of a journal capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Commits the pages sent, as they are now, and returns once they are on disk; commits made meanwhile share the disk write (group commit).
        Commit,
        /// Writes pieces into the pages of `space` and commits those pages, as `commit` does, but only if the word at `guard_address` still holds `guard_expected`; the check, the writes and the commit happen while no checkpoint can come between them. A program whose journaled data changes only this way, each write moving a counter the guard checks, never applies a change twice after a restart, however late the checkpoint it resumes from (services/tp1). A page changed only this way (not written otherwise, nor mapped writable, since the last checkpoint's snapshot) costs one disk write: once its commit is durable, the next checkpoint leaves it out, and migration moves the commit's copy home. The string is a sequence of pieces: a little-endian u64 address, a little-endian u16 length, then that many bytes. The pieces may touch at most 64 pages. Without a store, or while the journal's queue is full, it is refused as `unavailable` with nothing written.
        Write {
            /// The address of the guard: a little-endian word, 8-byte aligned, in `space`.
            guard_address: u64,
            /// What the guard must hold for anything to be written.
            guard_expected: u64,
        },
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::COMMIT => {
                    // `page0` must be a page; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::Commit)
                }
                order::WRITE => {
                    let guard_address = message.words[0];
                    let guard_expected = message.words[1];
                    // `space` must be a space; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::Write {
                        guard_address,
                        guard_expected,
                    })
                }
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// The control channel: a serial line on which the host's `holdfast` sends requests and reads replies.
pub mod control {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Waits until the host has sent at least one byte, then returns what has arrived, up to `length` bytes.
        pub const READ: u64 = 1;
        /// Sends the string to the host.
        pub const WRITE: u64 = 2;
    }

    /// An invocation of a control capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Waits until the host has sent at least one byte, then returns what has arrived, up to `length` bytes.
        Read {
            /// The most bytes returned.
            length: u64,
        },
        /// Sends the string to the host.
        Write,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::READ => {
                    let length = message.words[0];
                    if !(1..=4096).contains(&length) {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::Read { length })
                }
                order::WRITE => Ok(Self::Write),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// The virtio-net device, raw Ethernet frames in and out; held only by the network service. Its interrupts become messages (`notify`). After a restart from the store the device is fresh: every method's last result word, `boot`, says which start of the system this device belongs to (the clock's `boot`), so a holder that sees it change knows its old connections are gone; the kernel also sends one `restarted` notification to each process holding this capability in a capability register once it restores the system, through nothing but its own registers: as a send with order `holdfast_abi::network_notification::ORDER`, badge 2^64-1.
pub mod network_device {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Queues one Ethernet frame (without FCS) for transmission. Transmissions still in flight are collected first; if all the device's transmit buffers stay busy for 10 ms the frame is refused with `exhausted` (the holder's protocol retransmits).
        pub const SEND: u64 = 1;
        /// Returns the oldest frame received and not yet returned, or an empty string when none is waiting: it never waits.
        pub const RECEIVE: u64 = 2;
        /// Returns the device's MAC address.
        pub const MAC_ADDRESS: u64 = 3;
        /// Arms one notification: the kernel sends one message through `target` (a send: order `holdfast_abi::network_notification::ORDER`, word 0 the reason — 1 a frame arrived, 2 the deadline passed, 3 the system restarted — word 1 `boot`) as soon as a frame is waiting or the clock passes `deadline_us`, whichever comes first; then it is disarmed until `notify` is called again. A frame already waiting fires it at once. If the target process is busy, the message waits in the kernel (one per device, never more) and is delivered when the process is next available. A later `notify` replaces an armed one.
        pub const NOTIFY: u64 = 4;
    }

    /// An invocation of a network_device capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Queues one Ethernet frame (without FCS) for transmission. Transmissions still in flight are collected first; if all the device's transmit buffers stay busy for 10 ms the frame is refused with `exhausted` (the holder's protocol retransmits).
        Send,
        /// Returns the oldest frame received and not yet returned, or an empty string when none is waiting: it never waits.
        Receive,
        /// Returns the device's MAC address.
        MacAddress,
        /// Arms one notification: the kernel sends one message through `target` (a send: order `holdfast_abi::network_notification::ORDER`, word 0 the reason — 1 a frame arrived, 2 the deadline passed, 3 the system restarted — word 1 `boot`) as soon as a frame is waiting or the clock passes `deadline_us`, whichever comes first; then it is disarmed until `notify` is called again. A frame already waiting fires it at once. If the target process is busy, the message waits in the kernel (one per device, never more) and is delivered when the process is next available. A later `notify` replaces an armed one.
        Notify {
            /// Microseconds since this boot (the clock's `now` / 1000); 2^64-1: no deadline.
            deadline_us: u64,
        },
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::SEND => Ok(Self::Send),
                order::RECEIVE => Ok(Self::Receive),
                order::MAC_ADDRESS => Ok(Self::MacAddress),
                order::NOTIFY => {
                    let deadline_us = message.words[0];
                    // `target` must be a start; one not sent is void.
                    if message.capability_count < 1 {
                        return Err(ObjectError::WrongType);
                    }
                    Ok(Self::Notify { deadline_us })
                }
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}

/// The authority to make and destroy pages and nodes (KeyKOS's prime range key): held only by the space bank (`services/space-bank`), which every other program buys storage from. Object ids are handed out once by `create_page` and `create_node`; a destroyed object keeps its id, at a new version, for `reissue`. With a store the objects live there, and their number is bounded by its size.
pub mod range {
    use super::{Message, ObjectError};

    /// Order codes.
    pub mod order {
        /// Says what the capability is.
        pub const IDENTIFY: u64 = 0;
        /// Makes a new zeroed page.
        pub const CREATE_PAGE: u64 = 1;
        /// Makes a new node, every slot void.
        pub const CREATE_NODE: u64 = 2;
        /// Destroys an object: its version moves on, so every capability to it, however many and wherever held, is void at once; a page is zeroed and a node's slots made void. A node that is a process's root destroys the process too: it never runs again, and is in no later checkpoint.
        pub const RESCIND: u64 = 3;
        /// Returns a page or node capability to object `id` at its current version: the way a destroyed object's id is used again (the bank keeps the ids it destroyed).
        pub const REISSUE: u64 = 4;
        /// Says which object a live capability names (a page, or any capability to a node: node, space, process, start, meter, indirector), so that the bank can check that what it is given back is its own.
        pub const OBJECT_ID: u64 = 5;
        /// How many more pages and nodes `create_page` and `create_node` can make: the store's room beyond the ids handed out (2^64-1 without a store, where memory is the bound and `exhausted` the refusal).
        pub const CAPACITY: u64 = 6;
    }

    /// An invocation of a range capability, decoded and with its arguments checked
    /// against the ranges the interface names. Capability arguments are the
    /// capabilities sent, in order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Request {
        /// Says what the capability is.
        Identify,
        /// Makes a new zeroed page.
        CreatePage,
        /// Makes a new node, every slot void.
        CreateNode,
        /// Destroys an object: its version moves on, so every capability to it, however many and wherever held, is void at once; a page is zeroed and a node's slots made void. A node that is a process's root destroys the process too: it never runs again, and is in no later checkpoint.
        Rescind {
            /// 0 a page, 1 a node.
            kind: u64,
            /// The object's id.
            id: u64,
        },
        /// Returns a page or node capability to object `id` at its current version: the way a destroyed object's id is used again (the bank keeps the ids it destroyed).
        Reissue {
            /// 0 a page, 1 a node.
            kind: u64,
            /// The object's id.
            id: u64,
        },
        /// Says which object a live capability names (a page, or any capability to a node: node, space, process, start, meter, indirector), so that the bank can check that what it is given back is its own.
        ObjectId,
        /// How many more pages and nodes `create_page` and `create_node` can make: the store's room beyond the ids handed out (2^64-1 without a store, where memory is the bound and `exhausted` the refusal).
        Capacity,
    }

    impl Request {
        /// Decodes `message`, or says which object error the invoker gets.
        pub fn decode(message: &Message) -> Result<Self, ObjectError> {
            match message.order {
                order::IDENTIFY => Ok(Self::Identify),
                order::CREATE_PAGE => Ok(Self::CreatePage),
                order::CREATE_NODE => Ok(Self::CreateNode),
                order::RESCIND => {
                    let kind = message.words[0];
                    let id = message.words[1];
                    if kind > 1 {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::Rescind { kind, id })
                }
                order::REISSUE => {
                    let kind = message.words[0];
                    let id = message.words[1];
                    if kind > 1 {
                        return Err(ObjectError::OutOfRange);
                    }
                    Ok(Self::Reissue { kind, id })
                }
                order::OBJECT_ID => Ok(Self::ObjectId),
                order::CAPACITY => Ok(Self::Capacity),
                _ => Err(ObjectError::InvalidOrder),
            }
        }
    }
}
