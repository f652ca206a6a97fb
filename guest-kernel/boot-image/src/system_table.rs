//! The system table (entry kind [`crate::EntryKind::SystemTable`]), format version 2: the
//! objects of the initial system and the capabilities they hold, as the image builder
//! resolved them from its manifest. The programs themselves are the image's
//! [`crate::EntryKind::Program`] entries; a process names its program by its index among
//! them, in image order.
//!
//! All integers are little-endian; every record has a fixed size, so that a reader checks
//! bounds once and never allocates.
//!
//! ```text
//! header (48 bytes)
//!  0  8  magic "HFSYSTEM"
//!  8  4  format version (2; version 1 had no process flags)
//! 12  4  CRC-32C of the whole table, this field taken as zero
//! 16  8  table length in bytes
//! 24  4  program count (Program entries of the image)
//! 28  4  process count     32  4  node count
//! 36  4  page count        40  4  meter count
//! 44  4  reserved, zero
//! then the records, each kind in turn, then the page data:
//! process (472 bytes): 0 name (32 bytes, UTF-8, NUL-padded, non-empty)
//!                     32 program index (u32)   36 flags (u32): bit 0 template (made,
//!                        never started: what a constructor copies); other bits zero
//!                     40 keeper capability     64 meter capability
//!                     88 capability registers 0..=15
//! node (768 bytes):    slots 0..=31
//! page (16 bytes):     0 data offset (u32, from the start of the page data)
//!                      4 data length (u32, at most PAGE_BYTES)
//!                      8 fill byte for the rest of the page; 9..16 reserved, zero
//! meter (16 bytes):    0 microseconds (u64)   8 parent (u32): 0 none (a top meter), else
//!                        1 + the index of an earlier meter   12 reserved (u32, zero)
//!
//! capability (24 bytes)
//!  0  type (u8, the kernel interface's code)   1  rights (u8: 1 read-only, 2 weak, 4 no-call)
//!  2  space height (u8, 0..=7; space only)     3  reserved, zero
//!  4  object index (u32) into the processes (process, start), nodes (node, space,
//!     indirector), pages (page) or meters (meter); zero for other types
//!  8  badge (start, indirector) or number word 0 (u64)
//! 16  number word 1 (u64)
//! ```
//!
//! Type 128 is no kernel type but a boot number: words 0 and 1 hold a key of 1 to 16 bytes
//! (`a-z`, `0-9`, `-`; NUL-padded), and the kernel makes it a number capability of
//! `[value, 1]` when its command line holds `holdfast.<key>=<value>` (a decimal u64), else
//! of `[0, 0]`: how a boot option reaches ring 3, which has only capabilities.
//!
//! A void capability is all zeros; a field a type does not use must be zero. A resume
//! capability (type 7) cannot exist before any process has called, so it is refused.
//! The keeper capability is void or a start capability; the meter capability void or a
//! meter capability.

use core::fmt;

use crate::{read_u32, read_u64};

pub const SYSTEM_TABLE_MAGIC: [u8; 8] = *b"HFSYSTEM";
pub const SYSTEM_TABLE_VERSION: u32 = 2;
/// Process flag: made but never started, a constructor's template.
pub const PROCESS_FLAG_TEMPLATE: u32 = 1;
pub const SYSTEM_HEADER_BYTES: usize = 48;
pub const CAPABILITY_BYTES: usize = 24;
pub const PROCESS_NAME_BYTES: usize = 32;
pub const CAPABILITY_REGISTER_COUNT: usize = 16;
pub const NODE_SLOT_COUNT: usize = 32;
pub const PAGE_BYTES: usize = 4096;
pub const SPACE_HEIGHT_MAX: u8 = 7;
pub const PROCESS_RECORD_BYTES: usize =
    PROCESS_NAME_BYTES + 8 + (2 + CAPABILITY_REGISTER_COUNT) * CAPABILITY_BYTES;
pub const NODE_RECORD_BYTES: usize = NODE_SLOT_COUNT * CAPABILITY_BYTES;
pub const PAGE_RECORD_BYTES: usize = 16;
pub const METER_RECORD_BYTES: usize = 16;

/// Capability type codes of the kernel interface.
pub mod type_code {
    pub const VOID: u8 = 0;
    pub const NUMBER: u8 = 1;
    pub const PAGE: u8 = 2;
    pub const NODE: u8 = 3;
    pub const SPACE: u8 = 4;
    pub const PROCESS: u8 = 5;
    pub const START: u8 = 6;
    pub const METER: u8 = 8;
    pub const INDIRECTOR: u8 = 9;
    pub const CONSOLE: u8 = 10;
    pub const CLOCK: u8 = 11;
    pub const CHECKPOINT: u8 = 12;
    pub const JOURNAL: u8 = 13;
    pub const CONTROL: u8 = 14;
    pub const NETWORK_DEVICE: u8 = 15;
    pub const RANGE: u8 = 16;
    /// Not a kernel type: a number the kernel takes from its command line (see above).
    pub const BOOT_NUMBER: u8 = 128;
}

/// The most bytes a boot number's key has (words 0 and 1).
pub const BOOT_NUMBER_KEY_BYTES_MAX: usize = 16;

/// A boot number's key: 1 to 16 bytes of `a-z`, `0-9` and `-`, NUL-padded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootNumberKey([u8; BOOT_NUMBER_KEY_BYTES_MAX]);

impl BootNumberKey {
    /// The key `name`, if it is one.
    pub fn new(name: &str) -> Option<Self> {
        let allowed = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-';
        if name.is_empty() || name.len() > BOOT_NUMBER_KEY_BYTES_MAX || !name.bytes().all(|byte| allowed(&byte)) {
            return None;
        }
        let mut bytes = [0; BOOT_NUMBER_KEY_BYTES_MAX];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(Self(bytes))
    }

    fn from_words(word0: u64, word1: u64) -> Option<Self> {
        let mut bytes = [0; BOOT_NUMBER_KEY_BYTES_MAX];
        bytes[..8].copy_from_slice(&word0.to_le_bytes());
        bytes[8..].copy_from_slice(&word1.to_le_bytes());
        let length = bytes.iter().position(|&byte| byte == 0).unwrap_or(BOOT_NUMBER_KEY_BYTES_MAX);
        // Padding is NUL to the end: no byte after the first NUL.
        if bytes[length..].iter().any(|&byte| byte != 0) {
            return None;
        }
        Self::new(core::str::from_utf8(&bytes[..length]).ok()?)
    }

    #[cfg(feature = "alloc")]
    fn words(&self) -> (u64, u64) {
        let word = |at: usize| u64::from_le_bytes(self.0[at..at + 8].try_into().expect("8 bytes"));
        (word(0), word(8))
    }

    /// The key, as the command line spells it after `holdfast.`.
    pub fn as_str(&self) -> &str {
        let length = self.0.iter().position(|&byte| byte == 0).unwrap_or(BOOT_NUMBER_KEY_BYTES_MAX);
        core::str::from_utf8(&self.0[..length]).expect("checked when made")
    }
}

/// A capability's rights: a set of restrictions on what it may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rights(pub u8);

impl Rights {
    pub const NONE: Self = Self(0);
    pub const READ_ONLY: Self = Self(1);
    pub const WEAK: Self = Self(2);
    pub const NO_CALL: Self = Self(4);
    const ALL_BITS: u8 = 7;

    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// What a capability designates. Indexes are into the table's list of that kind of object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    #[default]
    Void,
    Number([u64; 2]),
    Page(u32),
    Node(u32),
    Space {
        node: u32,
        height: u8,
    },
    Process(u32),
    Start {
        process: u32,
        badge: u64,
    },
    Meter(u32),
    Indirector {
        node: u32,
        badge: u64,
    },
    Console,
    Clock,
    Checkpoint,
    Journal,
    Control,
    NetworkDevice,
    /// The range: making and destroying pages and nodes (the space bank's alone).
    Range,
    /// A number from the kernel's command line, `holdfast.<key>=<value>`.
    BootNumber(BootNumberKey),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capability {
    pub target: Target,
    pub rights: Rights,
}

impl Capability {
    pub const VOID: Self = Self {
        target: Target::Void,
        rights: Rights::NONE,
    };

    pub fn new(target: Target) -> Self {
        Self {
            target,
            rights: Rights::NONE,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process<'a> {
    pub name: &'a str,
    /// Index among the image's program entries.
    pub program: u32,
    /// Void, or a start capability of the process that handles this one's exceptions.
    pub keeper: Capability,
    /// Void, or the meter this process runs on.
    pub meter: Capability,
    pub registers: [Capability; CAPABILITY_REGISTER_COUNT],
    /// Made but never started: a constructor's template ([`PROCESS_FLAG_TEMPLATE`]).
    pub template: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub slots: [Capability; NODE_SLOT_COUNT],
}

/// A page: its first bytes, then `fill` to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page<'a> {
    pub contents: &'a [u8],
    pub fill: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meter {
    pub microseconds: u64,
    /// The index of the parent meter, always an earlier one (so no cycle); `None`: a top
    /// meter.
    pub parent: Option<u32>,
}

/// Where a capability sits in the table, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapabilityPlace {
    Register { process: usize, register: usize },
    Keeper { process: usize },
    Meter { process: usize },
    Slot { node: usize, slot: usize },
}

impl fmt::Display for CapabilityPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Register { process, register } => {
                write!(f, "process {process} register {register}")
            }
            Self::Keeper { process } => write!(f, "process {process} keeper"),
            Self::Meter { process } => write!(f, "process {process} meter"),
            Self::Slot { node, slot } => write!(f, "node {node} slot {slot}"),
        }
    }
}

/// Why bytes are not a valid system table. Each names the check that failed and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemTableError {
    TooShort {
        length: usize,
    },
    BadMagic,
    UnsupportedVersion {
        version: u32,
    },
    LengthMismatch {
        recorded: u64,
        actual: usize,
    },
    Checksum {
        recorded: u32,
        computed: u32,
    },
    /// The records the counts call for do not fit in the table.
    RecordsOutsideTable,
    ReservedNotZero {
        offset: usize,
    },
    /// A meter's parent is not an earlier meter.
    MeterParent { meter: usize, parent: u32 },
    /// A process's flags have a bit no version defines.
    ProcessFlags { process: usize, flags: u32 },
    ProcessName {
        process: usize,
    },
    ProgramIndex {
        process: usize,
        index: u32,
        program_count: u32,
    },
    CapabilityType {
        place: CapabilityPlace,
        code: u8,
    },
    CapabilityRights {
        place: CapabilityPlace,
        rights: u8,
    },
    /// A boot number whose key is empty, padded with other than NUL, or not `a-z0-9-`.
    BootNumberKey {
        place: CapabilityPlace,
    },
    /// A field the capability's type does not use is not zero.
    CapabilityUnusedField {
        place: CapabilityPlace,
    },
    SpaceHeight {
        place: CapabilityPlace,
        height: u8,
    },
    ObjectIndex {
        place: CapabilityPlace,
        index: u32,
        count: u32,
    },
    /// A keeper that is not a start capability, or a meter that is not a meter capability.
    WrongType {
        place: CapabilityPlace,
        code: u8,
    },
    PageData {
        page: usize,
    },
    /// The table was made for an image with another number of programs.
    ProgramCountMismatch {
        recorded: u32,
        actual: usize,
    },
}

impl fmt::Display for SystemTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TooShort { length } => {
                write!(f, "{length} bytes is too short for a system table header")
            }
            Self::BadMagic => write!(f, "bad magic (not a system table)"),
            Self::UnsupportedVersion { version } => write!(
                f,
                "system table version {version} is not supported (this build reads {SYSTEM_TABLE_VERSION})"
            ),
            Self::LengthMismatch { recorded, actual } => write!(
                f,
                "system table header says {recorded} bytes but it has {actual} (truncated?)"
            ),
            Self::Checksum { recorded, computed } => write!(
                f,
                "system table checksum mismatch (recorded {recorded:#010x}, computed {computed:#010x})"
            ),
            Self::RecordsOutsideTable => {
                write!(f, "system table counts call for more records than it holds")
            }
            Self::ReservedNotZero { offset } => {
                write!(f, "system table byte {offset}: reserved field is not zero")
            }
            Self::ProcessName { process } => {
                write!(f, "process {process}: name is empty or not UTF-8")
            }
            Self::MeterParent { meter, parent } => {
                write!(f, "meter {meter}: parent {parent} is not an earlier meter")
            }
            Self::ProcessFlags { process, flags } => {
                write!(f, "process {process}: flags {flags:#x} have an undefined bit (bit 0, template, is the only one)")
            }
            Self::ProgramIndex {
                process,
                index,
                program_count,
            } => write!(
                f,
                "process {process}: program {index} does not exist (the image has {program_count})"
            ),
            Self::CapabilityType { place, code } => {
                write!(f, "{place}: unknown capability type {code}")
            }
            Self::CapabilityRights { place, rights } => {
                write!(f, "{place}: unknown rights bits {rights:#04x}")
            }
            Self::BootNumberKey { place } => {
                write!(f, "{place}: a boot number's key is 1 to 16 bytes of a-z, 0-9 and -, NUL-padded")
            }
            Self::CapabilityUnusedField { place } => {
                write!(f, "{place}: a field its type does not use is not zero")
            }
            Self::SpaceHeight { place, height } => write!(
                f,
                "{place}: space height {height} is more than {SPACE_HEIGHT_MAX}"
            ),
            Self::ObjectIndex {
                place,
                index,
                count,
            } => write!(
                f,
                "{place}: object {index} does not exist (the table has {count} of its kind)"
            ),
            Self::WrongType { place, code } => {
                write!(f, "{place}: capability type {code} is not allowed here")
            }
            Self::PageData { page } => write!(
                f,
                "page {page}: data lies outside the table or is longer than a page"
            ),
            Self::ProgramCountMismatch { recorded, actual } => write!(
                f,
                "system table was made for {recorded} programs but the image has {actual}"
            ),
        }
    }
}

/// The table's layout, worked out from its header's counts.
#[derive(Clone, Copy, Debug)]
struct Layout {
    program_count: u32,
    process_count: usize,
    node_count: usize,
    page_count: usize,
    meter_count: usize,
    processes_at: usize,
    nodes_at: usize,
    pages_at: usize,
    meters_at: usize,
    page_data_at: usize,
}

impl Layout {
    fn of_counts(program_count: u32, counts: [u32; 4]) -> Option<Self> {
        let [process_count, node_count, page_count, meter_count] = counts.map(|n| n as usize);
        let processes_at = SYSTEM_HEADER_BYTES;
        let nodes_at =
            processes_at.checked_add(process_count.checked_mul(PROCESS_RECORD_BYTES)?)?;
        let pages_at = nodes_at.checked_add(node_count.checked_mul(NODE_RECORD_BYTES)?)?;
        let meters_at = pages_at.checked_add(page_count.checked_mul(PAGE_RECORD_BYTES)?)?;
        let page_data_at = meters_at.checked_add(meter_count.checked_mul(METER_RECORD_BYTES)?)?;
        Some(Self {
            program_count,
            process_count,
            node_count,
            page_count,
            meter_count,
            processes_at,
            nodes_at,
            pages_at,
            meters_at,
            page_data_at,
        })
    }

    /// How many objects of the kind a capability type names, for the index check.
    fn object_count(&self, code: u8) -> u32 {
        let count = match code {
            type_code::PROCESS | type_code::START => self.process_count,
            type_code::NODE | type_code::SPACE | type_code::INDIRECTOR => self.node_count,
            type_code::PAGE => self.page_count,
            type_code::METER => self.meter_count,
            _ => 0,
        };
        count as u32
    }
}

/// A checked view of a system table: everything was verified by [`SystemTable::decode`],
/// so the accessors cannot fail.
#[derive(Clone, Copy, Debug)]
pub struct SystemTable<'a> {
    bytes: &'a [u8],
    layout: Layout,
}

fn table_checksum(bytes: &[u8]) -> u32 {
    let mut digest = crate::Crc32cDigest::new();
    digest.update(&bytes[..12]);
    digest.update(&[0; 4]);
    digest.update(&bytes[16..]);
    digest.finalize()
}

impl<'a> SystemTable<'a> {
    /// Checks the whole table: header, checksum, and every record and capability in it.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, SystemTableError> {
        if bytes.len() < SYSTEM_HEADER_BYTES {
            return Err(SystemTableError::TooShort {
                length: bytes.len(),
            });
        }
        if bytes[..8] != SYSTEM_TABLE_MAGIC {
            return Err(SystemTableError::BadMagic);
        }
        let version = read_u32(bytes, 8);
        if version != SYSTEM_TABLE_VERSION {
            return Err(SystemTableError::UnsupportedVersion { version });
        }
        let recorded_length = read_u64(bytes, 16);
        if recorded_length != bytes.len() as u64 {
            return Err(SystemTableError::LengthMismatch {
                recorded: recorded_length,
                actual: bytes.len(),
            });
        }
        let recorded = read_u32(bytes, 12);
        let computed = table_checksum(bytes);
        if recorded != computed {
            return Err(SystemTableError::Checksum { recorded, computed });
        }
        check_zero(bytes, 44, 4)?;
        let counts = [28, 32, 36, 40].map(|at| read_u32(bytes, at));
        let layout = Layout::of_counts(read_u32(bytes, 24), counts)
            .filter(|layout| layout.page_data_at <= bytes.len())
            .ok_or(SystemTableError::RecordsOutsideTable)?;
        let table = Self { bytes, layout };
        for process in 0..layout.process_count {
            table.process_checked(process)?;
        }
        for node in 0..layout.node_count {
            table.node_checked(node)?;
        }
        for page in 0..layout.page_count {
            table.page_checked(page)?;
        }
        for meter in 0..layout.meter_count {
            table.meter_checked(meter)?;
        }
        Ok(table)
    }

    /// How many program entries the image this table was made for holds.
    pub fn program_count(&self) -> u32 {
        self.layout.program_count
    }

    pub fn processes(&self) -> impl Iterator<Item = Process<'a>> + '_ {
        (0..self.layout.process_count)
            .map(|index| self.process_checked(index).expect("checked by decode"))
    }

    pub fn nodes(&self) -> impl Iterator<Item = Node> + '_ {
        (0..self.layout.node_count)
            .map(|index| self.node_checked(index).expect("checked by decode"))
    }

    pub fn pages(&self) -> impl Iterator<Item = Page<'a>> + '_ {
        (0..self.layout.page_count)
            .map(|index| self.page_checked(index).expect("checked by decode"))
    }

    pub fn meters(&self) -> impl Iterator<Item = Meter> + '_ {
        (0..self.layout.meter_count).map(|index| self.meter_checked(index).expect("checked by decode"))
    }

    fn meter_checked(&self, meter: usize) -> Result<Meter, SystemTableError> {
        let at = self.layout.meters_at + meter * METER_RECORD_BYTES;
        let parent = read_u32(self.bytes, at + 8);
        check_zero(self.bytes, at + 12, 4)?;
        let parent = match parent {
            0 => None,
            above if (above as usize) <= meter => Some(above - 1),
            above => return Err(SystemTableError::MeterParent { meter, parent: above - 1 }),
        };
        Ok(Meter { microseconds: read_u64(self.bytes, at), parent })
    }

    fn process_checked(&self, process: usize) -> Result<Process<'a>, SystemTableError> {
        let bytes = self.bytes;
        let at = self.layout.processes_at + process * PROCESS_RECORD_BYTES;
        let raw_name = &bytes[at..at + PROCESS_NAME_BYTES];
        let name_length = raw_name
            .iter()
            .position(|&byte| byte == 0)
            .unwrap_or(PROCESS_NAME_BYTES);
        let name = core::str::from_utf8(&raw_name[..name_length])
            .ok()
            .filter(|name| !name.is_empty())
            .ok_or(SystemTableError::ProcessName { process })?;
        let program = read_u32(bytes, at + 32);
        if program >= self.layout.program_count {
            return Err(SystemTableError::ProgramIndex {
                process,
                index: program,
                program_count: self.layout.program_count,
            });
        }
        let flags = read_u32(bytes, at + 36);
        if flags & !PROCESS_FLAG_TEMPLATE != 0 {
            return Err(SystemTableError::ProcessFlags { process, flags });
        }
        let keeper_place = CapabilityPlace::Keeper { process };
        let keeper = self.capability_checked(at + 40, keeper_place)?;
        if !matches!(keeper.target, Target::Void | Target::Start { .. }) {
            return Err(SystemTableError::WrongType {
                place: keeper_place,
                code: bytes[at + 40],
            });
        }
        let meter_place = CapabilityPlace::Meter { process };
        let meter = self.capability_checked(at + 64, meter_place)?;
        if !matches!(meter.target, Target::Void | Target::Meter(_)) {
            return Err(SystemTableError::WrongType {
                place: meter_place,
                code: bytes[at + 64],
            });
        }
        let mut registers = [Capability::VOID; CAPABILITY_REGISTER_COUNT];
        for (register, capability) in registers.iter_mut().enumerate() {
            *capability = self.capability_checked(
                at + 88 + register * CAPABILITY_BYTES,
                CapabilityPlace::Register { process, register },
            )?;
        }
        Ok(Process {
            name,
            program,
            keeper,
            meter,
            registers,
            template: flags & PROCESS_FLAG_TEMPLATE != 0,
        })
    }

    fn node_checked(&self, node: usize) -> Result<Node, SystemTableError> {
        let at = self.layout.nodes_at + node * NODE_RECORD_BYTES;
        let mut slots = [Capability::VOID; NODE_SLOT_COUNT];
        for (slot, capability) in slots.iter_mut().enumerate() {
            *capability = self.capability_checked(
                at + slot * CAPABILITY_BYTES,
                CapabilityPlace::Slot { node, slot },
            )?;
        }
        Ok(Node { slots })
    }

    fn page_checked(&self, page: usize) -> Result<Page<'a>, SystemTableError> {
        let bytes = self.bytes;
        let at = self.layout.pages_at + page * PAGE_RECORD_BYTES;
        check_zero(bytes, at + 9, 7)?;
        let offset = read_u32(bytes, at) as usize;
        let length = read_u32(bytes, at + 4) as usize;
        let page_data = &bytes[self.layout.page_data_at..];
        let contents = offset
            .checked_add(length)
            .filter(|_| length <= PAGE_BYTES)
            .and_then(|end| page_data.get(offset..end))
            .ok_or(SystemTableError::PageData { page })?;
        Ok(Page {
            contents,
            fill: bytes[at + 8],
        })
    }

    fn capability_checked(
        &self,
        at: usize,
        place: CapabilityPlace,
    ) -> Result<Capability, SystemTableError> {
        let bytes = self.bytes;
        let code = bytes[at];
        let rights = bytes[at + 1];
        let height = bytes[at + 2];
        let object = read_u32(bytes, at + 4);
        let word0 = read_u64(bytes, at + 8);
        let word1 = read_u64(bytes, at + 16);
        if rights & !Rights::ALL_BITS != 0 {
            return Err(SystemTableError::CapabilityRights { place, rights });
        }
        // Which of object, word 0, word 1 and height each type uses.
        let (uses_object, uses_word0, uses_word1, uses_height) = match code {
            type_code::VOID
            | type_code::CONSOLE
            | type_code::CLOCK
            | type_code::CHECKPOINT
            | type_code::JOURNAL
            | type_code::CONTROL
            | type_code::NETWORK_DEVICE
            | type_code::RANGE => (false, false, false, false),
            type_code::NUMBER | type_code::BOOT_NUMBER => (false, true, true, false),
            type_code::PAGE | type_code::NODE | type_code::PROCESS | type_code::METER => {
                (true, false, false, false)
            }
            type_code::SPACE => (true, false, false, true),
            type_code::START | type_code::INDIRECTOR => (true, true, false, false),
            _ => return Err(SystemTableError::CapabilityType { place, code }),
        };
        let unused_field_set = (!uses_object && object != 0)
            || (!uses_word0 && word0 != 0)
            || (!uses_word1 && word1 != 0)
            || (!uses_height && height != 0)
            || bytes[at + 3] != 0
            || (code == type_code::VOID && rights != 0);
        if unused_field_set {
            return Err(SystemTableError::CapabilityUnusedField { place });
        }
        if uses_object {
            let count = self.layout.object_count(code);
            if object >= count {
                return Err(SystemTableError::ObjectIndex {
                    place,
                    index: object,
                    count,
                });
            }
        }
        if height > SPACE_HEIGHT_MAX {
            return Err(SystemTableError::SpaceHeight { place, height });
        }
        let target = match code {
            type_code::NUMBER => Target::Number([word0, word1]),
            type_code::PAGE => Target::Page(object),
            type_code::NODE => Target::Node(object),
            type_code::SPACE => Target::Space {
                node: object,
                height,
            },
            type_code::PROCESS => Target::Process(object),
            type_code::START => Target::Start {
                process: object,
                badge: word0,
            },
            type_code::METER => Target::Meter(object),
            type_code::INDIRECTOR => Target::Indirector {
                node: object,
                badge: word0,
            },
            type_code::CONSOLE => Target::Console,
            type_code::CLOCK => Target::Clock,
            type_code::CHECKPOINT => Target::Checkpoint,
            type_code::JOURNAL => Target::Journal,
            type_code::CONTROL => Target::Control,
            type_code::NETWORK_DEVICE => Target::NetworkDevice,
            type_code::RANGE => Target::Range,
            type_code::BOOT_NUMBER => Target::BootNumber(
                BootNumberKey::from_words(word0, word1).ok_or(SystemTableError::BootNumberKey { place })?,
            ),
            _ => Target::Void,
        };
        Ok(Capability {
            target,
            rights: Rights(rights),
        })
    }
}

fn check_zero(bytes: &[u8], at: usize, length: usize) -> Result<(), SystemTableError> {
    match bytes[at..at + length].iter().position(|&byte| byte != 0) {
        Some(offset) => Err(SystemTableError::ReservedNotZero {
            offset: at + offset,
        }),
        None => Ok(()),
    }
}

/// A whole system, to be encoded.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct System<'a> {
    pub program_count: u32,
    pub processes: alloc::vec::Vec<Process<'a>>,
    pub nodes: alloc::vec::Vec<Node>,
    pub pages: alloc::vec::Vec<Page<'a>>,
    pub meters: alloc::vec::Vec<Meter>,
}

/// Why a system could not be encoded.
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// A process name that the fixed-size name field cannot hold.
    ProcessNameLength { process: usize },
    /// More objects of one kind than a u32 can count.
    TooManyObjects,
    /// The encoded table fails its own check: a dangling index, a page too long, ...
    Invalid(SystemTableError),
}

#[cfg(feature = "alloc")]
impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ProcessNameLength { process } => write!(
                f,
                "process {process}: name must be 1 to {PROCESS_NAME_BYTES} bytes without NUL"
            ),
            Self::TooManyObjects => write!(f, "more objects of one kind than fit a u32"),
            Self::Invalid(error) => error.fmt(f),
        }
    }
}

#[cfg(feature = "alloc")]
fn encode_capability(capability: &Capability) -> [u8; CAPABILITY_BYTES] {
    let (code, object, height, word0, word1) = match capability.target {
        Target::Void => (type_code::VOID, 0, 0, 0, 0),
        Target::Number([word0, word1]) => (type_code::NUMBER, 0, 0, word0, word1),
        Target::Page(page) => (type_code::PAGE, page, 0, 0, 0),
        Target::Node(node) => (type_code::NODE, node, 0, 0, 0),
        Target::Space { node, height } => (type_code::SPACE, node, height, 0, 0),
        Target::Process(process) => (type_code::PROCESS, process, 0, 0, 0),
        Target::Start { process, badge } => (type_code::START, process, 0, badge, 0),
        Target::Meter(meter) => (type_code::METER, meter, 0, 0, 0),
        Target::Indirector { node, badge } => (type_code::INDIRECTOR, node, 0, badge, 0),
        Target::Console => (type_code::CONSOLE, 0, 0, 0, 0),
        Target::Clock => (type_code::CLOCK, 0, 0, 0, 0),
        Target::Checkpoint => (type_code::CHECKPOINT, 0, 0, 0, 0),
        Target::Journal => (type_code::JOURNAL, 0, 0, 0, 0),
        Target::Control => (type_code::CONTROL, 0, 0, 0, 0),
        Target::NetworkDevice => (type_code::NETWORK_DEVICE, 0, 0, 0, 0),
        Target::Range => (type_code::RANGE, 0, 0, 0, 0),
        Target::BootNumber(key) => {
            let (word0, word1) = key.words();
            (type_code::BOOT_NUMBER, 0, 0, word0, word1)
        }
    };
    let mut bytes = [0u8; CAPABILITY_BYTES];
    bytes[0] = code;
    bytes[1] = capability.rights.0;
    bytes[2] = height;
    bytes[4..8].copy_from_slice(&object.to_le_bytes());
    bytes[8..16].copy_from_slice(&word0.to_le_bytes());
    bytes[16..24].copy_from_slice(&word1.to_le_bytes());
    bytes
}

/// Encodes `system`, then decodes the result: a table that would not pass the kernel's
/// check is refused here, where the builder can say what is wrong.
#[cfg(feature = "alloc")]
pub fn encode(system: &System<'_>) -> Result<alloc::vec::Vec<u8>, EncodeError> {
    let count = |length: usize| u32::try_from(length).map_err(|_| EncodeError::TooManyObjects);
    let mut bytes = alloc::vec![0u8; SYSTEM_HEADER_BYTES];
    bytes[..8].copy_from_slice(&SYSTEM_TABLE_MAGIC);
    bytes[8..12].copy_from_slice(&SYSTEM_TABLE_VERSION.to_le_bytes());
    bytes[24..28].copy_from_slice(&system.program_count.to_le_bytes());
    bytes[28..32].copy_from_slice(&count(system.processes.len())?.to_le_bytes());
    bytes[32..36].copy_from_slice(&count(system.nodes.len())?.to_le_bytes());
    bytes[36..40].copy_from_slice(&count(system.pages.len())?.to_le_bytes());
    bytes[40..44].copy_from_slice(&count(system.meters.len())?.to_le_bytes());
    for (index, process) in system.processes.iter().enumerate() {
        let name = process.name.as_bytes();
        if name.is_empty() || name.len() > PROCESS_NAME_BYTES || name.contains(&0) {
            return Err(EncodeError::ProcessNameLength { process: index });
        }
        let mut record = [0u8; PROCESS_RECORD_BYTES];
        record[..name.len()].copy_from_slice(name);
        record[32..36].copy_from_slice(&process.program.to_le_bytes());
        let flags = if process.template { PROCESS_FLAG_TEMPLATE } else { 0 };
        record[36..40].copy_from_slice(&flags.to_le_bytes());
        record[40..64].copy_from_slice(&encode_capability(&process.keeper));
        record[64..88].copy_from_slice(&encode_capability(&process.meter));
        for (register, capability) in process.registers.iter().enumerate() {
            let at = 88 + register * CAPABILITY_BYTES;
            record[at..at + CAPABILITY_BYTES].copy_from_slice(&encode_capability(capability));
        }
        bytes.extend_from_slice(&record);
    }
    for node in &system.nodes {
        for capability in &node.slots {
            bytes.extend_from_slice(&encode_capability(capability));
        }
    }
    let mut page_data = alloc::vec::Vec::new();
    for page in &system.pages {
        let mut record = [0u8; PAGE_RECORD_BYTES];
        record[..4].copy_from_slice(&count(page_data.len())?.to_le_bytes());
        record[4..8].copy_from_slice(&count(page.contents.len())?.to_le_bytes());
        record[8] = page.fill;
        bytes.extend_from_slice(&record);
        page_data.extend_from_slice(page.contents);
    }
    for meter in &system.meters {
        bytes.extend_from_slice(&meter.microseconds.to_le_bytes());
        bytes.extend_from_slice(&meter.parent.map_or(0, |parent| parent + 1).to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
    }
    bytes.extend_from_slice(&page_data);
    let length = bytes.len() as u64;
    bytes[16..24].copy_from_slice(&length.to_le_bytes());
    let checksum = table_checksum(&bytes);
    bytes[12..16].copy_from_slice(&checksum.to_le_bytes());
    SystemTable::decode(&bytes).map_err(EncodeError::Invalid)?;
    Ok(bytes)
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn sample_system() -> System<'static> {
        let mut registers = [Capability::VOID; CAPABILITY_REGISTER_COUNT];
        registers[0] = Capability::new(Target::Console);
        registers[1] = Capability::new(Target::Process(0));
        registers[2] = Capability {
            target: Target::Node(0),
            rights: Rights::READ_ONLY.union(Rights::WEAK),
        };
        registers[3] = Capability::new(Target::Space { node: 1, height: 2 });
        registers[4] = Capability::new(Target::Number([u64::MAX, 7]));
        registers[5] = Capability::new(Target::Clock);
        registers[6] = Capability::new(Target::BootNumber(BootNumberKey::new("fuzz-seed").expect("a key")));
        registers[15] = Capability::new(Target::Indirector { node: 0, badge: 9 });
        let mut slots = [Capability::VOID; NODE_SLOT_COUNT];
        slots[0] = Capability::new(Target::Page(1));
        slots[31] = Capability {
            target: Target::Start {
                process: 1,
                badge: 7,
            },
            rights: Rights::NO_CALL,
        };
        System {
            program_count: 2,
            processes: vec![
                Process {
                    name: "echo",
                    program: 1,
                    keeper: Capability::new(Target::Start {
                        process: 1,
                        badge: 0,
                    }),
                    meter: Capability::new(Target::Meter(0)),
                    registers,
                    template: false,
                },
                Process {
                    name: "keeper",
                    program: 0,
                    keeper: Capability::VOID,
                    meter: Capability::VOID,
                    registers: [Capability::VOID; CAPABILITY_REGISTER_COUNT],
                    template: true,
                },
            ],
            nodes: vec![
                Node { slots },
                Node {
                    slots: [Capability::VOID; NODE_SLOT_COUNT],
                },
            ],
            pages: vec![
                Page {
                    contents: b"hello",
                    fill: 0,
                },
                Page {
                    contents: &[],
                    fill: 0xa5,
                },
            ],
            meters: vec![
                Meter {
                    microseconds: 10_000,
                    parent: None,
                },
                Meter {
                    microseconds: 5_000,
                    parent: Some(0),
                },
            ],
        }
    }

    /// Rewrites the checksum after a deliberate change, so that the check behind it runs.
    fn reseal(bytes: &mut [u8]) {
        let checksum = table_checksum(bytes);
        bytes[12..16].copy_from_slice(&checksum.to_le_bytes());
    }

    fn offset_of_process(index: usize) -> usize {
        SYSTEM_HEADER_BYTES + index * PROCESS_RECORD_BYTES
    }

    fn offset_of_register(process: usize, register: usize) -> usize {
        offset_of_process(process) + 88 + register * CAPABILITY_BYTES
    }

    #[test]
    fn encoded_system_decodes_to_the_same_system() {
        let system = sample_system();
        let bytes = encode(&system).unwrap();
        let table = SystemTable::decode(&bytes).unwrap();
        assert_eq!(table.program_count(), 2);
        let decoded = System {
            program_count: table.program_count(),
            processes: table.processes().collect(),
            nodes: table.nodes().collect(),
            pages: table.pages().collect(),
            meters: table.meters().collect(),
        };
        assert_eq!(decoded, system);
    }

    #[test]
    fn a_process_flag_no_version_defines_is_refused() {
        let mut bytes = encode(&sample_system()).unwrap();
        bytes[offset_of_process(0) + 36] = 2;
        reseal(&mut bytes);
        assert_eq!(
            SystemTable::decode(&bytes).unwrap_err(),
            SystemTableError::ProcessFlags { process: 0, flags: 2 }
        );
    }

    #[test]
    fn a_meter_whose_parent_is_not_an_earlier_meter_is_refused() {
        let bytes = encode(&sample_system()).unwrap();
        let meters_at = bytes.len() - 5 - 16 * 2;
        for (meter, parent) in [(0, 1), (1, 2), (1, 9)] {
            let mut damaged = bytes.clone();
            let at = meters_at + meter * METER_RECORD_BYTES + 8;
            damaged[at..at + 4].copy_from_slice(&(parent + 1u32).to_le_bytes());
            reseal(&mut damaged);
            assert_eq!(
                SystemTable::decode(&damaged).unwrap_err(),
                SystemTableError::MeterParent { meter, parent },
                "meter {meter} parent {parent}"
            );
        }
    }

    #[test]
    fn an_empty_system_round_trips() {
        let bytes = encode(&System::default()).unwrap();
        assert_eq!(bytes.len(), SYSTEM_HEADER_BYTES);
        let table = SystemTable::decode(&bytes).unwrap();
        assert_eq!(table.processes().count(), 0);
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = encode(&sample_system()).unwrap();
        for length in 0..bytes.len() {
            assert!(SystemTable::decode(&bytes[..length]).is_err(), "{length}");
        }
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let bytes = encode(&sample_system()).unwrap();
        for at in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                assert!(
                    SystemTable::decode(&damaged).is_err(),
                    "flip at {at} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn header_errors_name_the_check() {
        let bytes = encode(&sample_system()).unwrap();
        assert_eq!(
            SystemTable::decode(&bytes[..10]).unwrap_err(),
            SystemTableError::TooShort { length: 10 }
        );
        assert_eq!(
            SystemTable::decode(&[0u8; 64]).unwrap_err(),
            SystemTableError::BadMagic
        );
        let mut wrong_version = bytes.clone();
        wrong_version[8] = 1;
        assert_eq!(
            SystemTable::decode(&wrong_version).unwrap_err(),
            SystemTableError::UnsupportedVersion { version: 1 }
        );
        assert!(matches!(
            SystemTable::decode(&bytes[..bytes.len() - 1]),
            Err(SystemTableError::LengthMismatch { .. })
        ));
        let mut rotted = bytes.clone();
        let last = rotted.len() - 1;
        rotted[last] ^= 1;
        assert!(matches!(
            SystemTable::decode(&rotted),
            Err(SystemTableError::Checksum { .. })
        ));
        let mut too_many_nodes = bytes.clone();
        too_many_nodes[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut too_many_nodes);
        assert_eq!(
            SystemTable::decode(&too_many_nodes).unwrap_err(),
            SystemTableError::RecordsOutsideTable
        );
        let mut reserved = bytes.clone();
        reserved[45] = 1;
        reseal(&mut reserved);
        assert_eq!(
            SystemTable::decode(&reserved).unwrap_err(),
            SystemTableError::ReservedNotZero { offset: 45 }
        );
    }

    #[test]
    fn record_errors_name_the_record() {
        let bytes = encode(&sample_system()).unwrap();
        let damaged = |change: &dyn Fn(&mut Vec<u8>)| {
            let mut copy = bytes.clone();
            change(&mut copy);
            reseal(&mut copy);
            SystemTable::decode(&copy).unwrap_err()
        };
        let register_4 = offset_of_register(0, 4);
        let place = CapabilityPlace::Register {
            process: 0,
            register: 4,
        };
        assert_eq!(
            damaged(&|b| b[offset_of_process(1)] = 0),
            SystemTableError::ProcessName { process: 1 }
        );
        assert_eq!(
            damaged(&|b| b[offset_of_process(0) + 32] = 2),
            SystemTableError::ProgramIndex {
                process: 0,
                index: 2,
                program_count: 2
            }
        );
        assert_eq!(
            damaged(&|b| b[register_4] = 7),
            SystemTableError::CapabilityType { place, code: 7 }
        );
        assert_eq!(
            damaged(&|b| b[register_4 + 1] = 8),
            SystemTableError::CapabilityRights { place, rights: 8 }
        );
        assert_eq!(
            damaged(&|b| b[register_4 + 4] = 1),
            SystemTableError::CapabilityUnusedField { place }
        );
        // A boot number's key: NUL-padded, nothing after the first NUL, a-z0-9- only.
        let boot_number = offset_of_register(0, 6);
        let boot_number_place = CapabilityPlace::Register { process: 0, register: 6 };
        for (at, byte) in [(8 + 10, b'x'), (8, b'A'), (8, 0)] {
            assert_eq!(
                damaged(&|b| b[boot_number + at] = byte),
                SystemTableError::BootNumberKey { place: boot_number_place }
            );
        }
        let space = offset_of_register(0, 3);
        assert_eq!(
            damaged(&|b| b[space + 2] = 8),
            SystemTableError::SpaceHeight {
                place: CapabilityPlace::Register {
                    process: 0,
                    register: 3
                },
                height: 8
            }
        );
        assert_eq!(
            damaged(&|b| b[space + 4] = 2),
            SystemTableError::ObjectIndex {
                place: CapabilityPlace::Register {
                    process: 0,
                    register: 3
                },
                index: 2,
                count: 2
            }
        );
        let keeper = offset_of_process(0) + 40;
        assert_eq!(
            damaged(&|b| b[keeper] = type_code::PROCESS),
            SystemTableError::WrongType {
                place: CapabilityPlace::Keeper { process: 0 },
                code: type_code::PROCESS
            }
        );
        let pages_at = SYSTEM_HEADER_BYTES + 2 * PROCESS_RECORD_BYTES + 2 * NODE_RECORD_BYTES;
        assert_eq!(
            damaged(&|b| b[pages_at + 4] = 200),
            SystemTableError::PageData { page: 0 }
        );
        assert_eq!(
            SystemTableError::ObjectIndex {
                place,
                index: 2,
                count: 2
            }
            .to_string(),
            "process 0 register 4: object 2 does not exist (the table has 2 of its kind)"
        );
    }

    #[test]
    fn boot_number_keys_are_short_and_plain() {
        assert_eq!(BootNumberKey::new("fuzz-seed").map(|key| key.as_str().len()), Some(9));
        assert!(BootNumberKey::new("sixteen-bytes-ok").is_some());
        for bad in ["", "seventeen-bytes-x", "Fuzz", "fuzz seed", "fuzz=1"] {
            assert_eq!(BootNumberKey::new(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn encode_refuses_what_decode_would() {
        let mut system = sample_system();
        system.processes[1].name = "a-name-longer-than-thirty-two-bytes";
        assert_eq!(
            encode(&system),
            Err(EncodeError::ProcessNameLength { process: 1 })
        );
        let mut system = sample_system();
        system.nodes[0].slots[5] = Capability::new(Target::Meter(3));
        assert!(matches!(
            encode(&system),
            Err(EncodeError::Invalid(SystemTableError::ObjectIndex { .. }))
        ));
        let long_page = [0u8; PAGE_BYTES + 1];
        let mut system = sample_system();
        system.pages[1].contents = &long_page;
        assert_eq!(
            encode(&system),
            Err(EncodeError::Invalid(SystemTableError::PageData { page: 1 }))
        );
    }
}
