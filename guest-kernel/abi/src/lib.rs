//! The Holdfast kernel ABI: what ring-3 programs and the host may rely on.
//!
//! Everything here is a commitment. Numbers are never reused; a change of meaning bumps
//! [`ABI_VERSION`], which the kernel prints at boot and checks against every program it
//! loads from the initial image.
//!
//! There is one system call, `invoke`, entered with the `syscall` instruction. Which register
//! carries what, the [`descriptor`]'s bits in `rdi`, keeper messages and run states are
//! described once, in `interface.toml`, with the capability types and their methods; the
//! generated [`interface`] module and `docs/interface.md` hold them (results come back in
//! `rax`).
#![no_std]

pub mod descriptor;
/// The kernel interface (types, order codes, errors, request decoding), generated from
/// `interface.toml` by `cargo run -p holdfast-interface-gen`.
pub mod interface;

/// Version of the kernel ABI (system call registers, capability types, orders, results),
/// written once: `abi_version` in `interface.toml`.
pub use interface::ABI_VERSION;

/// Every ring-3 program carries an ELF note (in a `PT_NOTE` segment) naming the ABI version
/// it was built against; the kernel refuses a program without it or with another version.
pub mod note {
    /// The note's name, NUL included, as ELF stores it.
    pub const NAME: &[u8] = b"Holdfast\0";
    /// Note type whose 4-byte little-endian descriptor is [`super::ABI_VERSION`].
    pub const TYPE_ABI_VERSION: u32 = 1;
}

/// Number of capability registers a process has.
pub const CAPABILITY_REGISTER_COUNT: usize = 16;

/// Longest string an invocation may carry, in bytes.
pub const INVOCATION_STRING_BYTES_MAX: usize = 4096;

/// The most distinct pages one journal `write` may touch: one log record holds a commit, and
/// the kernel checks at build time that this fits the store's record.
pub const JOURNAL_WRITE_PAGES_MAX: usize = 64;

/// A meter's period: the largest share `meter.set_share` takes, in microseconds
/// (`interface.toml`'s range for it; a test checks they agree).
pub const METER_PERIOD_MICROSECONDS: u64 = 100_000;

/// Lowest and highest+1 addresses of a ring-3 address space (the lower canonical half).
pub const USER_ADDRESS_MIN: u64 = 0x0000_0000_0040_0000;
pub const USER_ADDRESS_END: u64 = 0x0000_8000_0000_0000;

/// Where a user program's stack ends (grows down) and how large it is.
pub const USER_STACK_TOP: u64 = 0x0000_7fff_ff00_0000;
pub const USER_STACK_BYTES: u64 = 64 * 1024;
const _: () = assert!(USER_ADDRESS_MIN < USER_STACK_TOP - USER_STACK_BYTES);
const _: () = assert!(USER_STACK_TOP < USER_ADDRESS_END);

/// Order codes by type, as programs name them (`methods::node::FETCH`): the generated
/// codes of [`interface`], gathered.
pub mod methods {
    pub use crate::interface::ObjectError;
    pub use crate::interface::common_order::IDENTIFY;

    macro_rules! orders_of {
        ($($kind:ident),*) => {
            $(pub mod $kind {
                pub use crate::interface::$kind::order::*;
            })*
        };
    }
    orders_of!(number, page, node, space, process, meter, console, clock);

    /// Flags of `node.make_space`.
    pub mod space_flags {
        /// Slot 0 of the node holds the inner space, slot 1 its keeper.
        pub const KEEPER: u64 = 1;
    }
}

/// What keepers receive: the order code says why; the words say where.
pub use interface::keeper;

/// The run state a process's root node holds (slot 19).
pub use interface::run_state;

pub use interface::InvocationError;

/// The message `network_device.notify` arms (interface.toml, type `network_device`): a send
/// with this order code, word 0 the reason, word 1 the device's `boot`.
pub mod network_notification {
    /// The order code of a notification.
    pub const ORDER: u64 = 0x6e6f_7469_6679; // "notify"
    /// The badge of the notification the kernel sends after a restart, through nothing but
    /// the holder's registers; a holder arms `notify` with a start capability of the same
    /// badge, so that every notification arrives alike.
    pub const RESTART_BADGE: u64 = u64::MAX;
    /// Word 0: a frame is waiting.
    pub const REASON_FRAME: u64 = 1;
    /// Word 0: the deadline passed.
    pub const REASON_DEADLINE: u64 = 2;
    /// Word 0: the system restarted from its store; the device is fresh.
    pub const REASON_RESTARTED: u64 = 3;
    /// `notify`'s deadline that never passes.
    pub const NO_DEADLINE: u64 = u64::MAX;
}

/// How the guest tells the host it is done: QEMU's `isa-debug-exit` device at this port
/// makes QEMU exit with status `(value << 1) | 1`.
pub mod exit {
    pub const DEBUG_EXIT_PORT: u16 = 0xf4;
    /// Values written to [`DEBUG_EXIT_PORT`].
    pub const VALUE_SUCCESS: u32 = 0x10;
    pub const VALUE_FAILURE: u32 = 0x11;
    /// The QEMU exit status each value produces.
    pub const fn qemu_status(value: u32) -> i32 {
        ((value << 1) | 1) as i32
    }
    pub const QEMU_STATUS_SUCCESS: i32 = qemu_status(VALUE_SUCCESS);
    pub const QEMU_STATUS_FAILURE: i32 = qemu_status(VALUE_FAILURE);
}

/// Lines the kernel prints on the serial console that the host acts on.
pub mod serial {
    /// Printed once the kernel is initialised and about to start ring-3 programs. It is
    /// followed by ` <microseconds since the kernel's first instruction>`.
    pub const READY_MARKER: &str = "HOLDFAST-READY";
    /// Printed before the self-test report's last line, followed by ` PASS` or ` FAIL`.
    pub const SELFTEST_MARKER: &str = "HOLDFAST-SELFTEST";
}

/// The contract between the kernel's virtio-blk self-test and the host test that checks it.
/// The guest writes only to a disk the host marked as a test disk, and only sectors
/// 1..=[`SECTORS`](test_disk::SECTORS): sector 0 of a test disk starts with
/// [`MAGIC`](test_disk::MAGIC) followed by a little-endian u64 seed.
pub mod test_disk {
    pub const MAGIC: &[u8] = b"HOLDFAST-DISK-TEST";
    pub const SECTORS: u64 = 64;
    pub const SECTOR_BYTES: u64 = 512;

    /// The byte written at `offset` (0..512) of `sector`: the top byte of
    /// `(seed + sector * 512 + offset) * 0x9E3779B97F4A7C15` (Fibonacci hashing), all
    /// arithmetic wrapping in u64, so that a byte in the wrong place shows.
    pub fn pattern_byte(seed: u64, sector: u64, offset: u64) -> u8 {
        (seed
            .wrapping_add(sector.wrapping_mul(SECTOR_BYTES).wrapping_add(offset))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> 56) as u8
    }
}

/// `checkpoint.counters`' pages: given the byte length of every family of the counters'
/// text, where the page that starts at family `first` ends (the first family not in it):
/// as many whole families as fit one invocation's string. A `first` at or beyond the end
/// gives an empty page (`Some(family_bytes.len())`); `None` if family `first` alone does
/// not fit, as a family is never cut.
pub fn counters_page_end(family_bytes: &[usize], first: usize) -> Option<usize> {
    if first >= family_bytes.len() {
        return Some(family_bytes.len());
    }
    let mut bytes = 0;
    let mut end = first;
    while let Some(&length) = family_bytes.get(end) {
        if bytes + length > INVOCATION_STRING_BYTES_MAX {
            break;
        }
        bytes += length;
        end += 1;
    }
    (end > first).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_are_distinct_and_odd() {
        assert_eq!(exit::QEMU_STATUS_SUCCESS, 33);
        assert_eq!(exit::QEMU_STATUS_FAILURE, 35);
    }

    #[test]
    fn test_disk_sectors_differ_between_seeds_and_sectors() {
        let sector = |seed, sector| -> [u8; 512] {
            core::array::from_fn(|offset| test_disk::pattern_byte(seed, sector, offset as u64))
        };
        assert_ne!(sector(7, 1), sector(7, 2));
        assert_ne!(sector(7, 1), sector(8 << 20, 1));
        assert!(sector(7, 1).windows(2).any(|pair| pair[0] != pair[1]));
    }

    #[test]
    fn counters_pages_hold_whole_families_and_cover_the_text() {
        // A text of 3.5 pages: families of 1000 bytes, then one of 1500, then small ones.
        let families = [1000, 1000, 1000, 1000, 1500, 40, 40, 4096, 40];
        let mut pages = pages_from_the_start(&families);
        assert_eq!(pages.next(), Some((0, 4)));
        assert_eq!(pages.next(), Some((4, 7)));
        assert_eq!(pages.next(), Some((7, 8)), "a family of exactly a page fits alone");
        assert_eq!(pages.next(), Some((8, 9)));
        assert_eq!(pages.next(), None);
        assert_eq!(counters_page_end(&families, 9), Some(9), "past the end: an empty page");
        assert_eq!(counters_page_end(&families, usize::MAX), Some(9));
        assert_eq!(counters_page_end(&[10, 4097], 1), None, "a family longer than a page is refused");
        assert_eq!(counters_page_end(&[], 0), Some(0));
    }

    /// The pages a reader gets going from family 0 to the end, as (first, end).
    fn pages_from_the_start(families: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut first = 0;
        core::iter::from_fn(move || {
            if first >= families.len() {
                return None;
            }
            let end = counters_page_end(families, first).expect("every family fits a page");
            assert!(end > first);
            let page = (first, end);
            first = end;
            Some(page)
        })
    }
}
