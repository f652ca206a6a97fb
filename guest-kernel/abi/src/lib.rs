//! The Holdfast kernel ABI: what ring-3 programs and the host may rely on.
//!
//! Everything here is a commitment. Numbers are never reused; a change of meaning bumps
//! [`ABI_VERSION`], which the kernel prints at boot and checks against every program it
//! loads from the initial image.
//!
//! There is one system call, `invoke`, entered with the `syscall` instruction:
//!
//! | register | in | out |
//! |---|---|---|
//! | `rdi` | the [`descriptor`]: target capability register, call/return/send, capability registers sent and received | — |
//! | `rsi` | order code (call, send) or reply code (return) | result code: 0 ok, an object error, or an [`InvocationError`] |
//! | `rdx`, `r10`, `r8`, `r9` | words 0..=3 | words 0..=3 |
//! | `r12`, `r13` | string address and length (at most [`INVOCATION_STRING_BYTES_MAX`]) | badge of the capability invoked; length of the string received |
//! | `r14`, `r15` | receive buffer address and capacity | — |
//!
//! `rcx` and `r11` are clobbered by the instruction itself; every other register is kept.
#![no_std]

pub mod descriptor;

/// Version of the kernel ABI (system call registers, capability types, orders, results).
pub const ABI_VERSION: u32 = 2;

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

/// Lowest and highest+1 addresses of a ring-3 address space (the lower canonical half).
pub const USER_ADDRESS_MIN: u64 = 0x0000_0000_0040_0000;
pub const USER_ADDRESS_END: u64 = 0x0000_8000_0000_0000;

/// Where a user program's stack ends (grows down) and how large it is.
pub const USER_STACK_TOP: u64 = 0x0000_7fff_ff00_0000;
pub const USER_STACK_BYTES: u64 = 64 * 1024;
const _: () = assert!(USER_ADDRESS_MIN < USER_STACK_TOP - USER_STACK_BYTES);
const _: () = assert!(USER_STACK_TOP < USER_ADDRESS_END);

pub mod methods;

/// Capability type codes, as `identify` returns them in word 0.
pub mod capability_type {
    pub const VOID: u64 = 0;
    pub const NUMBER: u64 = 1;
    pub const PAGE: u64 = 2;
    pub const NODE: u64 = 3;
    pub const SPACE: u64 = 4;
    pub const PROCESS: u64 = 5;
    pub const START: u64 = 6;
    pub const RESUME: u64 = 7;
    pub const METER: u64 = 8;
    pub const INDIRECTOR: u64 = 9;
    pub const CONSOLE: u64 = 10;
    pub const CLOCK: u64 = 11;
}

/// What keepers receive: the order code says why; the words say where.
pub mod keeper {
    /// A CPU exception (or a page fault no space keeper takes): words vector, error code
    /// (`u64::MAX` if none), rip, faulting address. Capability 0 is the process; replying
    /// to the resume capability restarts it from its registers.
    pub const EXCEPTION: u64 = 1;
    /// A page fault the space tree could not resolve, to the keeper of the innermost keeper
    /// node on the path; words as for [`EXCEPTION`].
    pub const SPACE_FAULT: u64 = 2;
    /// The process's meter ran out: capability 0 is the process; the keeper refills the
    /// meter (or not) and replies to restart it.
    pub const METER_EXHAUSTED: u64 = 3;
}

/// Why the kernel refused an invocation itself (as opposed to an object's method or a
/// server refusing it). The codes have the top bit set, so that they never collide with a
/// server's reply codes.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvocationError {
    /// The target capability is void (or revoked, or a resume capability already used).
    Void = 1 << 63,
    /// `rdi` has undefined bits set or counts more than four capabilities.
    MalformedDescriptor = (1 << 63) | 1,
    /// The string is longer than [`INVOCATION_STRING_BYTES_MAX`].
    StringTooLong = (1 << 63) | 2,
    /// The string is not mapped in the invoker's space.
    BadAddress = (1 << 63) | 3,
    /// A call through a start capability without the right to call.
    NoCall = (1 << 63) | 4,
}

impl InvocationError {
    pub const ALL: [Self; 5] = [
        Self::Void,
        Self::MalformedDescriptor,
        Self::StringTooLong,
        Self::BadAddress,
        Self::NoCall,
    ];

    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL.into_iter().find(|error| *error as u64 == code)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_are_distinct_and_odd() {
        assert_eq!(exit::QEMU_STATUS_SUCCESS, 33);
        assert_eq!(exit::QEMU_STATUS_FAILURE, 35);
    }

    #[test]
    fn invocation_error_codes_round_trip_and_have_the_top_bit() {
        for error in InvocationError::ALL {
            assert_eq!(InvocationError::from_code(error as u64), Some(error));
            assert!(error as u64 >= 1 << 63);
        }
        assert_eq!(InvocationError::from_code(0), None);
        assert_eq!(InvocationError::from_code((1 << 63) | 5), None);
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
}
