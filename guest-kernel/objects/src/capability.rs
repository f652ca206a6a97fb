//! Capabilities: what a program holds instead of addresses or ids.
//!
//! A program names a capability by the capability register or node slot that holds it and
//! never sees these bits. The kernel checks a capability's version against its object's on
//! every use ([`crate::ObjectCache::check`]); this module holds the rules that need no
//! object: rights, restriction and weakening.

use holdfast_abi::interface::Type as codes;

use crate::{ObjectId, Version};

/// What a capability designates and so which methods it has. The codes are the ABI's
/// (`holdfast_abi::interface::Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CapType {
    Void = codes::Void as u8,
    /// Two words of data and no object.
    Number = codes::Number as u8,
    Page = codes::Page as u8,
    Node = codes::Node as u8,
    /// A node seen as an address-space tree.
    Space = codes::Space as u8,
    /// Full authority over a process: its registers, space, keeper and meter.
    Process = codes::Process as u8,
    /// The right to invoke a process (call or send); carries the badge the process sees.
    Start = codes::Start as u8,
    /// The right to reply once to a process waiting in a call.
    Resume = codes::Resume as u8,
    Meter = codes::Meter as u8,
    /// A revocable forwarder: invocations go to the capability in slot 0 of its node.
    Indirector = codes::Indirector as u8,
    Console = codes::Console as u8,
    Clock = codes::Clock as u8,
    /// Checkpoint control: the interval, a checkpoint now, the store's counters.
    Checkpoint = codes::Checkpoint as u8,
    /// Synchronous page commits to the store's log.
    Journal = codes::Journal as u8,
    /// The control channel to the host.
    Control = codes::Control as u8,
    /// The virtio-net device: frames in and out, interrupts as messages.
    NetworkDevice = codes::NetworkDevice as u8,
    /// Making and destroying pages and nodes: the space bank's alone.
    Range = codes::Range as u8,
}

impl CapType {
    pub const ALL: [Self; 17] = [
        Self::Void,
        Self::Number,
        Self::Page,
        Self::Node,
        Self::Space,
        Self::Process,
        Self::Start,
        Self::Resume,
        Self::Meter,
        Self::Indirector,
        Self::Console,
        Self::Clock,
        Self::Checkpoint,
        Self::Journal,
        Self::Control,
        Self::NetworkDevice,
        Self::Range,
    ];

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// What kind of object the capability's id names, if any.
    pub fn object_kind(self) -> Option<ObjectKind> {
        match self {
            Self::Page => Some(ObjectKind::Page),
            Self::Node | Self::Space | Self::Meter | Self::Indirector => Some(ObjectKind::Node),
            // A process is its root node; start and resume capabilities name that node too.
            Self::Process | Self::Start | Self::Resume => Some(ObjectKind::Node),
            Self::Void
            | Self::Number
            | Self::Console
            | Self::Clock
            | Self::Checkpoint
            | Self::Journal
            | Self::Control
            | Self::NetworkDevice
            | Self::Range => None,
        }
    }

    /// Whether the capability names a node (`object_kind` is `Node`), as a test of one bit:
    /// every IPC asks, and a `match` is a branch or two under TCG.
    #[inline]
    pub const fn names_node(self) -> bool {
        const NODE_KINDS: u32 = 1 << CapType::Node as u8
            | 1 << CapType::Space as u8
            | 1 << CapType::Meter as u8
            | 1 << CapType::Indirector as u8
            | 1 << CapType::Process as u8
            | 1 << CapType::Start as u8
            | 1 << CapType::Resume as u8;
        NODE_KINDS >> (self as u8 as u32 % 32) & 1 != 0
    }

    /// Whether a weak fetch may hand this capability out (weakened): a weak path conveys
    /// only capabilities that cannot be used to change anything.
    fn survives_weak_fetch(self) -> bool {
        matches!(
            self,
            Self::Void | Self::Number | Self::Page | Self::Node | Self::Space | Self::Clock
        )
    }
}

/// The two kinds of object on the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Page,
    Node,
}

/// Restrictions a capability carries. Rights only ever shrink: every operation that makes a
/// capability from another keeps or adds these bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Rights(u8);

impl Rights {
    pub const NONE: Self = Self(0);
    /// No method that changes the object (page write, node swap, ...).
    pub const READ_ONLY: Self = Self(1);
    /// Read-only, and whatever is fetched through it is weakened too (KeyKOS "sensory").
    pub const WEAK: Self = Self(2);
    /// A start capability that may be sent to but not called; on a space, faults under it
    /// are not passed to its keeper.
    pub const NO_CALL: Self = Self(4);
    /// A page that may not be executed; on a space, every page under it (Coyotos's
    /// no-execute restriction). Every page capability the kernel makes carries it but those
    /// of the pages a program is loaded into as code, so no other page can ever be mapped
    /// executable (W^X: the loader's code pages are read-only).
    pub const NO_EXECUTE: Self = Self(8);
    const ALL_BITS: u8 = 15;

    pub const fn bits(self) -> u8 {
        self.0
    }

    /// `None` if `bits` has a bit that is not a right.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & !Self::ALL_BITS == 0 {
            Some(Self(bits))
        } else {
            None
        }
    }

    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A capability as the kernel stores it in a node slot or a capability register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Capability {
    kind: CapType,
    rights: Rights,
    /// Type-specific: a space's height (bits 0..=3) and keeper flag (bit 4).
    detail: u16,
    /// What the recipient sees when invoked through this capability; a number's first word.
    badge: u64,
    /// The object named; a number's second word.
    object: ObjectId,
    version: Version,
}

/// A space of height h covers 4 KiB × 32^h; 7 levels cover the 2^47-byte user half.
pub const SPACE_HEIGHT_MAX: u8 = 7;
const SPACE_HEIGHT_MASK: u16 = 0xf;
pub(crate) const SPACE_KEEPER_FLAG: u16 = 0x10;

impl Capability {
    pub const VOID: Self = Self {
        kind: CapType::Void,
        rights: Rights::NONE,
        detail: 0,
        badge: 0,
        object: ObjectId(0),
        version: Version(0),
    };

    /// A capability to an object, or a kernel service when `kind` has no object.
    pub const fn new(kind: CapType, object: ObjectId, version: Version) -> Self {
        Self {
            kind,
            rights: Rights::NONE,
            detail: 0,
            badge: 0,
            object,
            version,
        }
    }

    /// A capability from its stored fields, which the caller has checked (see `image`).
    pub(crate) const fn from_parts(
        kind: CapType,
        rights: Rights,
        detail: u16,
        badge: u64,
        object: ObjectId,
        version: Version,
    ) -> Self {
        Self {
            kind,
            rights,
            detail,
            badge,
            object,
            version,
        }
    }

    pub(crate) const fn detail(&self) -> u16 {
        self.detail
    }

    pub const fn number(words: [u64; 2]) -> Self {
        Self {
            kind: CapType::Number,
            rights: Rights::NONE,
            detail: 0,
            badge: words[0],
            object: ObjectId(words[1]),
            version: Version(0),
        }
    }

    /// A space capability to node `object`; `None` if `height` is above
    /// [`SPACE_HEIGHT_MAX`]. With `keeper`, slot 0 of the node is the inner space and slot 1
    /// the keeper that faults under it go to.
    pub fn space(object: ObjectId, version: Version, height: u8, keeper: bool) -> Option<Self> {
        if height > SPACE_HEIGHT_MAX {
            return None;
        }
        let detail = u16::from(height) | if keeper { SPACE_KEEPER_FLAG } else { 0 };
        Some(Self {
            detail,
            ..Self::new(CapType::Space, object, version)
        })
    }

    pub const fn kind(&self) -> CapType {
        self.kind
    }

    pub const fn rights(&self) -> Rights {
        self.rights
    }

    pub const fn badge(&self) -> u64 {
        self.badge
    }

    pub const fn object(&self) -> ObjectId {
        self.object
    }

    pub const fn version(&self) -> Version {
        self.version
    }

    pub const fn is_void(&self) -> bool {
        matches!(self.kind, CapType::Void)
    }

    /// A number capability's two words.
    pub fn number_words(&self) -> Option<[u64; 2]> {
        (self.kind == CapType::Number).then_some([self.badge, self.object.0])
    }

    /// A space capability's height and whether its node is a keeper node.
    pub fn space_shape(&self) -> Option<(u8, bool)> {
        (self.kind == CapType::Space).then_some((
            (self.detail & SPACE_HEIGHT_MASK) as u8,
            self.detail & SPACE_KEEPER_FLAG != 0,
        ))
    }

    #[must_use]
    pub const fn with_badge(self, badge: u64) -> Self {
        Self { badge, ..self }
    }

    /// The same capability with at least `rights`. Numbers carry no rights (they are data).
    #[must_use]
    pub fn restricted(self, rights: Rights) -> Self {
        match self.kind {
            CapType::Void | CapType::Number => self,
            _ => Self {
                rights: self.rights.union(rights),
                ..self
            },
        }
    }

    /// What a fetch through a weak capability yields: read-only and weak where that still
    /// means something, void where any use could change state (KeyKOS's sensory keys).
    #[must_use]
    pub fn weakened(self) -> Self {
        if self.kind.survives_weak_fetch() {
            self.restricted(Rights::READ_ONLY.union(Rights::WEAK))
        } else {
            Self::VOID
        }
    }

    /// Whether a method that changes the object is allowed through this capability.
    pub const fn may_write(&self) -> bool {
        !self.rights.contains(Rights::READ_ONLY) && !self.rights.contains(Rights::WEAK)
    }

    /// Whether a call (which waits for a reply) is allowed through this capability.
    pub const fn may_call(&self) -> bool {
        !self.rights.contains(Rights::NO_CALL)
    }

    /// Whether the page this designates (as a space walk returns it, with the rights of
    /// the path) may be mapped executable.
    pub const fn may_execute(&self) -> bool {
        !self.rights.contains(Rights::NO_EXECUTE)
    }
}

impl Default for Capability {
    fn default() -> Self {
        Self::VOID
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_cap() -> Capability {
        Capability::new(CapType::Node, ObjectId(5), Version(2))
    }

    #[test]
    fn type_codes_round_trip_and_stop_at_the_last() {
        for kind in CapType::ALL {
            assert_eq!(CapType::from_code(kind as u8), Some(kind));
        }
        assert_eq!(CapType::from_code(17), None);
    }

    #[test]
    fn names_node_agrees_with_object_kind() {
        for kind in CapType::ALL {
            assert_eq!(kind.names_node(), kind.object_kind() == Some(ObjectKind::Node), "{kind:?}");
        }
    }

    #[test]
    fn rights_only_grow_under_restriction() {
        let read_only = node_cap().restricted(Rights::READ_ONLY);
        let both = read_only.restricted(Rights::NO_CALL);
        assert!(both.rights().contains(Rights::READ_ONLY));
        assert!(both.rights().contains(Rights::NO_CALL));
        assert!(!read_only.may_write());
        assert!(node_cap().may_write());
        assert_eq!(read_only.restricted(Rights::NONE), read_only);
    }

    #[test]
    fn unknown_right_bits_are_refused() {
        assert_eq!(
            Rights::from_bits(15),
            Some(
                Rights::READ_ONLY
                    .union(Rights::WEAK)
                    .union(Rights::NO_CALL)
                    .union(Rights::NO_EXECUTE)
            )
        );
        assert_eq!(Rights::from_bits(16), None);
    }

    #[test]
    fn weak_fetch_keeps_sensory_capabilities_read_only_and_voids_the_rest() {
        let weak_node = node_cap().weakened();
        assert_eq!(weak_node.kind(), CapType::Node);
        assert!(weak_node.rights().contains(Rights::WEAK));
        assert!(!weak_node.may_write());
        let number = Capability::number([1, 2]);
        assert_eq!(number.weakened(), number);
        for kind in [
            CapType::Process,
            CapType::Start,
            CapType::Resume,
            CapType::Meter,
            CapType::Indirector,
            CapType::Console,
        ] {
            let capability = Capability::new(kind, ObjectId(1), Version(0));
            assert!(
                capability.weakened().is_void(),
                "{kind:?} survived a weak fetch"
            );
        }
    }

    #[test]
    fn numbers_carry_two_words_and_no_rights() {
        let number = Capability::number([u64::MAX, 7]).restricted(Rights::READ_ONLY);
        assert_eq!(number.number_words(), Some([u64::MAX, 7]));
        assert_eq!(number.rights(), Rights::NONE);
        assert_eq!(node_cap().number_words(), None);
    }

    #[test]
    fn space_height_is_bounded_and_kept() {
        let space = Capability::space(ObjectId(3), Version(1), 7, true).expect("height 7");
        assert_eq!(space.space_shape(), Some((7, true)));
        assert_eq!(Capability::space(ObjectId(3), Version(1), 8, false), None);
        assert_eq!(node_cap().space_shape(), None);
    }

    #[test]
    fn no_call_forbids_call_only() {
        let start = Capability::new(CapType::Start, ObjectId(1), Version(0));
        assert!(start.may_call());
        let send_only = start.restricted(Rights::NO_CALL);
        assert!(!send_only.may_call());
        assert!(send_only.may_write());
    }
}
