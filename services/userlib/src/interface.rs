// Generated from guest-kernel/abi/interface.toml by holdfast-interface-gen; do not edit.
// Change the description and regenerate: `cargo run -p holdfast-interface-gen`.

//! Stubs for the methods of kernel objects, one function per method (see
//! `docs/interface.md`). Each calls its target with [`invoke`]; a capability result
//! goes to the capability register the caller names, a string result into the
//! buffer it lends.

use crate::syscall::{CapReg, Error, Invocation, invoke};

/// The `invoke` system call: `descriptor` and `code` (the order or reply code), the
/// words, the string sent and the buffer that receives one, each in the register
/// `docs/interface.md` names. Always inlined: an invocation's `syscall` stays on its
/// caller's code page.
#[inline(always)]
pub fn system_call(
    descriptor: u64,
    code: u64,
    words: [u64; 4],
    string: &[u8],
    buffer: &mut [u8],
) -> crate::Reply {
    let (result, badge, received_length): (u64, u64, u64);
    let [mut word0, mut word1, mut word2, mut word3] = words;
    // SAFETY: `syscall` enters the kernel, which reads the registers named here as inputs
    // and writes only those named as outputs (the CPU clobbers rcx and r11); it writes
    // memory only within `buffer`, borrowed mutably for the call, and reads only
    // `string`, which is borrowed.
    unsafe {
        core::arch::asm!(
            "syscall",
            in("rdi") descriptor,
            in("rsi") code,
            lateout("rax") result,
            inout("rdx") word0 => word0,
            inout("r10") word1 => word1,
            inout("r8") word2 => word2,
            inout("r9") word3 => word3,
            inout("r12") string.as_ptr() as u64 => badge,
            inout("r13") string.len() as u64 => received_length,
            in("r14") buffer.as_mut_ptr() as u64,
            in("r15") buffer.len() as u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    crate::Reply {
        code: result,
        words: [word0, word1, word2, word3],
        badge,
        string_length: received_length as usize,
    }
}

/// What [`identify`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentifyResults {
    /// The capability's type code.
    pub type_code: u64,
    /// Its rights: read-only 1, weak 2, no-call 4, no-execute 8.
    pub rights: u64,
}

/// Says what the capability is.
///
/// - returns `type_code`: The capability's type code.
/// - returns `rights`: Its rights: read-only 1, weak 2, no-call 4, no-execute 8.
///
/// Errors: invocation errors only.
pub fn identify(target: CapReg) -> Result<IdentifyResults, Error> {
    let received = invoke(Invocation::call(
        target,
        crate::abi::interface::common_order::IDENTIFY,
    ))
    .check()?;
    Ok(IdentifyResults {
        type_code: received.words[0],
        rights: received.words[1],
    })
}

/// Two words of data held in the capability itself.
pub mod number {
    use crate::abi::interface::number::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// What [`value`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ValueResults {
        /// The first word.
        pub word0: u64,
        /// The second word.
        pub word1: u64,
    }

    /// Returns the two words.
    ///
    /// - returns `word0`: The first word.
    /// - returns `word1`: The second word.
    ///
    /// Errors: invocation errors only.
    pub fn value(number: CapReg) -> Result<ValueResults, Error> {
        let received = invoke(Invocation::call(number, order::VALUE)).check()?;
        Ok(ValueResults {
            word0: received.words[0],
            word1: received.words[1],
        })
    }
}

/// 4 KiB of data.
pub mod page {
    use crate::abi::interface::page::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Reads `length` bytes from `offset`.
    ///
    /// - `offset`: First byte read. Range 0..=4096.
    /// - `length`: Bytes read; `offset + length` is at most 4096. Range 0..=4096.
    /// - `data`: receives the bytes read.
    ///
    /// Returns bytes of `data` received.
    ///
    /// Errors: `out_of_range`; and invocation errors.
    pub fn read(page: CapReg, offset: u64, length: u64, data: &mut [u8]) -> Result<usize, Error> {
        let received = invoke(Invocation {
            words: [offset, length, 0, 0],
            buffer: data,
            ..Invocation::call(page, order::READ)
        })
        .check()?;
        Ok(received.string_length)
    }

    /// Writes the string at `offset`.
    ///
    /// - `offset`: First byte written; `offset` plus the string's length is at most 4096. Range 0..=4096.
    /// - `data`: The bytes written.
    ///
    /// Errors: `read_only`, `out_of_range`; and invocation errors.
    pub fn write(page: CapReg, offset: u64, data: &[u8]) -> Result<(), Error> {
        invoke(Invocation {
            words: [offset, 0, 0, 0],
            string: data,
            ..Invocation::call(page, order::WRITE)
        })
        .check()?;
        Ok(())
    }

    /// Sets every byte of the page to zero.
    ///
    /// Errors: `read_only`; and invocation errors.
    pub fn zero(page: CapReg) -> Result<(), Error> {
        invoke(Invocation::call(page, order::ZERO)).check()?;
        Ok(())
    }

    /// Returns a read-only capability to the same page.
    ///
    /// - `into`: the capability register that receives the read-only capability.
    ///
    /// Errors: invocation errors only.
    pub fn weaken(page: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(page, order::WEAKEN)
        })
        .check()?;
        Ok(())
    }

    /// Copies every byte of page `source` into this page (no string passes through ring 3).
    ///
    /// - `source`: The page copied, read-only or not (void once revoked: `wrong_type`). Type page.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn copy_from(page: CapReg, source: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[source],
            ..Invocation::call(page, order::COPY_FROM)
        })
        .check()?;
        Ok(())
    }
}

/// 32 capability slots, numbered 0..=31.
pub mod node {
    use crate::abi::interface::node::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Returns a copy of the capability in a slot (weakened if the node capability is weak).
    ///
    /// - `slot`: The slot. Range 0..=31.
    /// - `into`: the capability register that receives the slot's capability.
    ///
    /// Errors: `invalid_slot`; and invocation errors.
    pub fn fetch(node: CapReg, slot: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [slot, 0, 0, 0],
            receive: &[into],
            ..Invocation::call(node, order::FETCH)
        })
        .check()?;
        Ok(())
    }

    /// Stores a capability in a slot and returns the one it replaces.
    ///
    /// - `slot`: The slot. Range 0..=31.
    /// - `stored`: The capability stored (void if none is sent).
    /// - `into`: the capability register that receives the capability the slot held.
    ///
    /// Errors: `invalid_slot`, `read_only`; and invocation errors.
    pub fn swap(node: CapReg, slot: u64, stored: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [slot, 0, 0, 0],
            send: &[stored],
            receive: &[into],
            ..Invocation::call(node, order::SWAP)
        })
        .check()?;
        Ok(())
    }

    /// Stores void in a slot.
    ///
    /// - `slot`: The slot. Range 0..=31.
    ///
    /// Errors: `invalid_slot`, `read_only`; and invocation errors.
    pub fn clear(node: CapReg, slot: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [slot, 0, 0, 0],
            ..Invocation::call(node, order::CLEAR)
        })
        .check()?;
        Ok(())
    }

    /// Returns a read-only, weak capability to the same node: what is fetched through it is weakened too.
    ///
    /// - `into`: the capability register that receives the read-only, weak capability.
    ///
    /// Errors: invocation errors only.
    pub fn weaken(node: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(node, order::WEAKEN)
        })
        .check()?;
        Ok(())
    }

    /// Returns a space capability of this node: an address-space tree of height `height`, covering 4 KiB × 32^height.
    ///
    /// - `height`: The space's height. Range 0..=7.
    /// - `flags`: Bit 0, keeper: slot 0 holds the inner space and slot 1 its keeper (a start capability). No other bit is defined. Range 0..=1.
    /// - `into`: the capability register that receives the space capability.
    ///
    /// Errors: `read_only`, `out_of_range`; and invocation errors.
    pub fn make_space(node: CapReg, height: u64, flags: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [height, flags, 0, 0],
            receive: &[into],
            ..Invocation::call(node, order::MAKE_SPACE)
        })
        .check()?;
        Ok(())
    }

    /// Returns an indirector capability of this node, which forwards every invocation to the capability in slot 0.
    ///
    /// - `badge`: The badge of the indirector capability.
    /// - `into`: the capability register that receives the indirector capability.
    ///
    /// Errors: `read_only`; and invocation errors.
    pub fn make_indirector(node: CapReg, badge: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [badge, 0, 0, 0],
            receive: &[into],
            ..Invocation::call(node, order::MAKE_INDIRECTOR)
        })
        .check()?;
        Ok(())
    }

    /// Returns a meter capability of this node, below `parent`: the time processes use on the new meter is charged to the parent and every meter above it too, so a meter made at run time never gives more than the meters above it (top meters come only from the initial system). The node's slots become the meter's: 0 the time left, 1 the keeper, 2 the parent, 3 the share.
    ///
    /// - `parent`: The parent meter. Type meter.
    /// - `into`: the capability register that receives the meter capability.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn make_meter(node: CapReg, parent: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[parent],
            receive: &[into],
            ..Invocation::call(node, order::MAKE_METER)
        })
        .check()?;
        Ok(())
    }

    /// Returns a process capability of this node, the process's root, and adds the process (stopped) to the kernel's table if it is not there; every process is in each checkpoint, however many there are.
    ///
    /// - `into`: the capability register that receives the process capability.
    ///
    /// Errors: `read_only`, `exhausted`; and invocation errors.
    pub fn make_process(node: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(node, order::MAKE_PROCESS)
        })
        .check()?;
        Ok(())
    }

    /// What [`sense`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SenseResults {
        /// The type code of the slot's capability.
        pub type_code: u64,
        /// Its rights: read-only 1, weak 2, no-call 4, no-execute 8.
        pub rights: u64,
    }

    /// Says what the capability in a slot is, its type code and rights as `identify` gives them (void once revoked), without invoking it: a start, resume or indirector capability is described, not called (KeyKOS's discrim). A reference monitor classifies what it is handed this way, so that a capability to a process that never answers cannot hold it up.
    ///
    /// - `slot`: The slot. Range 0..=31.
    /// - returns `type_code`: The type code of the slot's capability.
    /// - returns `rights`: Its rights: read-only 1, weak 2, no-call 4, no-execute 8.
    ///
    /// Errors: `invalid_slot`; and invocation errors.
    pub fn sense(node: CapReg, slot: u64) -> Result<SenseResults, Error> {
        let received = invoke(Invocation {
            words: [slot, 0, 0, 0],
            ..Invocation::call(node, order::SENSE)
        })
        .check()?;
        Ok(SenseResults {
            type_code: received.words[0],
            rights: received.words[1],
        })
    }

    /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation, as `space.occupied` does: a constructor gives a process only the components it has.
    ///
    ///
    /// Returns bit i set: slot i holds a capability.
    ///
    /// Errors: invocation errors only.
    pub fn occupied(node: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation::call(node, order::OCCUPIED)).check()?;
        Ok(received.words[0])
    }
}

/// An address-space tree of height h covering 4 KiB × 32^h; slot i covers the i-th 4 KiB × 32^(h-1) part.
pub mod space {
    use crate::abi::interface::space::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Returns a copy of the capability in a slot, weakened if the space capability is read-only: nothing fetched through a read-only space can write what it maps.
    ///
    /// - `slot`: The slot. Range 0..=31.
    /// - `into`: the capability register that receives the slot's capability.
    ///
    /// Errors: `invalid_slot`; and invocation errors.
    pub fn fetch(space: CapReg, slot: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [slot, 0, 0, 0],
            receive: &[into],
            ..Invocation::call(space, order::FETCH)
        })
        .check()?;
        Ok(())
    }

    /// Stores a page or space capability in a slot and returns the one it replaces.
    ///
    /// - `slot`: The slot. Range 0..=31.
    /// - `stored`: The capability stored. Type void or page or space.
    /// - `into`: the capability register that receives the capability the slot held.
    ///
    /// Errors: `invalid_slot`, `read_only`, `wrong_type`; and invocation errors.
    pub fn swap(space: CapReg, slot: u64, stored: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [slot, 0, 0, 0],
            send: &[stored],
            receive: &[into],
            ..Invocation::call(space, order::SWAP)
        })
        .check()?;
        Ok(())
    }

    /// What [`info`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct InfoResults {
        /// The height, 0..=7.
        pub height: u64,
        /// Bit 0: the space has a keeper (slot 1).
        pub flags: u64,
    }

    /// Returns the space's height and flags.
    ///
    /// - returns `height`: The height, 0..=7.
    /// - returns `flags`: Bit 0: the space has a keeper (slot 1).
    ///
    /// Errors: invocation errors only.
    pub fn info(space: CapReg) -> Result<InfoResults, Error> {
        let received = invoke(Invocation::call(space, order::INFO)).check()?;
        Ok(InfoResults {
            height: received.words[0],
            flags: received.words[1],
        })
    }

    /// Returns a read-only capability to the same space: it maps every page below it read-only, and what is fetched through it is weakened.
    ///
    /// - `into`: the capability register that receives the read-only capability.
    ///
    /// Errors: invocation errors only.
    pub fn weaken(space: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(space, order::WEAKEN)
        })
        .check()?;
        Ok(())
    }

    /// Says which slots hold a capability that is not void (a revoked one counts as void), in one invocation: a walk of a space tree visits only those slots.
    ///
    ///
    /// Returns bit i set: slot i holds a capability.
    ///
    /// Errors: invocation errors only.
    pub fn occupied(space: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation::call(space, order::OCCUPIED)).check()?;
        Ok(received.words[0])
    }
}

/// A process: registers, 16 capability registers, an address space, a keeper and a meter.
pub mod process {
    use crate::abi::interface::process::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Returns the register file: 18 little-endian words, rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15, rip, rsp, rflags.
    ///
    /// - `registers`: receives the register file.
    ///
    /// Returns bytes of `registers` received.
    ///
    /// Errors: invocation errors only.
    pub fn read_registers(process: CapReg, registers: &mut [u8]) -> Result<usize, Error> {
        let received = invoke(Invocation {
            buffer: registers,
            ..Invocation::call(process, order::READ_REGISTERS)
        })
        .check()?;
        Ok(received.string_length)
    }

    /// Replaces the register file of a process other than the invoker. Only the arithmetic, direction and trap flags of rflags are taken: interrupts stay on and I/O privilege 0.
    ///
    /// - `registers`: The register file as `read_registers` returns it (144 bytes); rip and rsp must be user addresses.
    ///
    /// Errors: `out_of_range`, `no_right`; and invocation errors.
    pub fn write_registers(process: CapReg, registers: &[u8]) -> Result<(), Error> {
        invoke(Invocation {
            string: registers,
            ..Invocation::call(process, order::WRITE_REGISTERS)
        })
        .check()?;
        Ok(())
    }

    /// Returns a copy of the capability in one of the process's capability registers.
    ///
    /// - `index`: The capability register. Range 0..=15.
    /// - `into`: the capability register that receives the register's capability.
    ///
    /// Errors: `invalid_slot`; and invocation errors.
    pub fn fetch_register(process: CapReg, index: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [index, 0, 0, 0],
            receive: &[into],
            ..Invocation::call(process, order::FETCH_REGISTER)
        })
        .check()?;
        Ok(())
    }

    /// Stores a capability in one of the process's capability registers and returns the one it replaces.
    ///
    /// - `index`: The capability register. Range 0..=15.
    /// - `stored`: The capability stored (void if none is sent).
    /// - `into`: the capability register that receives the capability the register held.
    ///
    /// Errors: `invalid_slot`, `read_only`; and invocation errors.
    pub fn swap_register(
        process: CapReg,
        index: u64,
        stored: CapReg,
        into: CapReg,
    ) -> Result<(), Error> {
        invoke(Invocation {
            words: [index, 0, 0, 0],
            send: &[stored],
            receive: &[into],
            ..Invocation::call(process, order::SWAP_REGISTER)
        })
        .check()?;
        Ok(())
    }

    /// Sets the process's address space.
    ///
    /// - `space`: The address space. Type space.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn set_space(process: CapReg, space: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[space],
            ..Invocation::call(process, order::SET_SPACE)
        })
        .check()?;
        Ok(())
    }

    /// Sets the process's keeper, which receives its exceptions; void removes it.
    ///
    /// - `keeper`: The keeper's start capability, or void. Type void or start.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn set_keeper(process: CapReg, keeper: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[keeper],
            ..Invocation::call(process, order::SET_KEEPER)
        })
        .check()?;
        Ok(())
    }

    /// Sets the meter the process runs on.
    ///
    /// - `meter`: The meter. Type meter.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn set_meter(process: CapReg, meter: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[meter],
            ..Invocation::call(process, order::SET_METER)
        })
        .check()?;
        Ok(())
    }

    /// Returns a start capability to the process, through which it is called.
    ///
    /// - `badge`: The badge the process sees when invoked through the start capability.
    /// - `into`: the capability register that receives the start capability.
    ///
    /// Errors: `read_only`; and invocation errors.
    pub fn make_start(process: CapReg, badge: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [badge, 0, 0, 0],
            receive: &[into],
            ..Invocation::call(process, order::MAKE_START)
        })
        .check()?;
        Ok(())
    }

    /// Makes the process runnable. A process with no meter is refused: only the initial system's processes run unmetered.
    ///
    /// Errors: `read_only`, `no_right`; and invocation errors.
    pub fn start(process: CapReg) -> Result<(), Error> {
        invoke(Invocation::call(process, order::START)).check()?;
        Ok(())
    }

    /// Stops the process; the kernel reports the exit code.
    ///
    /// - `exit_code`: The exit code.
    ///
    /// Errors: `read_only`; and invocation errors.
    pub fn stop(process: CapReg, exit_code: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [exit_code, 0, 0, 0],
            ..Invocation::call(process, order::STOP)
        })
        .check()?;
        Ok(())
    }

    /// Returns the process's space capability.
    ///
    /// - `into`: the capability register that receives the space capability (void if none).
    ///
    /// Errors: invocation errors only.
    pub fn fetch_space(process: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(process, order::FETCH_SPACE)
        })
        .check()?;
        Ok(())
    }

    /// Returns the badge of a start capability to this process: a server given one of its own start capabilities (a listener handed back by a client, say) learns which it is, where the badge otherwise shows only to an invocation through it. Only through the process capability: holding a start capability tells nothing of its badge.
    ///
    /// - `start`: A start capability to this process (one to another process is `wrong_type`). Type start.
    ///
    /// Returns its badge.
    ///
    /// Errors: `wrong_type`; and invocation errors.
    pub fn start_badge(process: CapReg, start: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation {
            send: &[start],
            ..Invocation::call(process, order::START_BADGE)
        })
        .check()?;
        Ok(received.words[0])
    }
}

/// CPU time that processes run on, charged one timer tick (10 ms) at a time to the meter and every meter above it (its parent, set when it was made). A process serving a message (a call, a send or a return to its start capability, or a fault for its keeper) runs on the sender's meters instead (the sender's own payer, down a chain of calls) until it waits again, unless the sender has none; if they run out meanwhile it goes on, the time their debt (a negative time left, which the next shares pay first; `remaining` says 0), and a caller runs out of time when its call returns. A process runs out of time when any of them has none left: its keeper (or, without one, the meter's refill or next share) lets it run again. A meter with a share is given that much time by the kernel at the start of every 100 ms period: a tree of shares (the meter keeper, services/meter-keeper, and the reference monitor, services/keysafe, set tenants' shares).
pub mod meter {
    use crate::abi::interface::meter::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Returns the time left on the meter.
    ///
    ///
    /// Returns microseconds left.
    ///
    /// Errors: invocation errors only.
    pub fn remaining(meter: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation::call(meter, order::REMAINING)).check()?;
        Ok(received.words[0])
    }

    /// Sets the time left on the meter.
    ///
    /// - `microseconds`: Microseconds left.
    ///
    /// Errors: `read_only`; and invocation errors.
    pub fn refill(meter: CapReg, microseconds: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [microseconds, 0, 0, 0],
            ..Invocation::call(meter, order::REFILL)
        })
        .check()?;
        Ok(())
    }

    /// Sets the meter's keeper, which is invoked when the meter runs out; void removes it.
    ///
    /// - `keeper`: The keeper's start capability, or void. Type void or start.
    ///
    /// Errors: `read_only`, `wrong_type`; and invocation errors.
    pub fn set_keeper(meter: CapReg, keeper: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            send: &[keeper],
            ..Invocation::call(meter, order::SET_KEEPER)
        })
        .check()?;
        Ok(())
    }

    /// Sets the meter's share: the microseconds of CPU time the kernel gives it at the start of every 100 ms period (what was left is not carried over); 0: none, the meter gets time only from `refill`.
    ///
    /// - `microseconds`: Microseconds per 100 ms period. Range 0..=100000.
    ///
    /// Errors: `read_only`, `out_of_range`; and invocation errors.
    pub fn set_share(meter: CapReg, microseconds: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [microseconds, 0, 0, 0],
            ..Invocation::call(meter, order::SET_SHARE)
        })
        .check()?;
        Ok(())
    }

    /// Returns a read-only capability to the same meter: processes may run on it (`process.set_meter`) and meters be made below it (`node.make_meter`), but its holder can neither refill it, nor set its keeper or share. A tenant gets its meter so: it cannot raise its own CPU quota.
    ///
    /// - `into`: the capability register that receives the read-only capability.
    ///
    /// Errors: invocation errors only.
    pub fn weaken(meter: CapReg, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            receive: &[into],
            ..Invocation::call(meter, order::WEAKEN)
        })
        .check()?;
        Ok(())
    }
}

/// The serial console.
pub mod console {
    use crate::abi::interface::console::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Writes the string to the console.
    ///
    /// - `text`: The bytes written.
    ///
    /// Errors: invocation errors only.
    pub fn write(console: CapReg, text: &[u8]) -> Result<(), Error> {
        invoke(Invocation {
            string: text,
            ..Invocation::call(console, order::WRITE)
        })
        .check()?;
        Ok(())
    }
}

/// The time since boot.
pub mod clock {
    use crate::abi::interface::clock::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// What [`now`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct NowResults {
        /// Nanoseconds since this boot.
        pub nanoseconds: u64,
        /// How many times the system has started from its store (0 without a store): it changes at every restart.
        pub boot: u64,
    }

    /// Returns the time since boot.
    ///
    /// - returns `nanoseconds`: Nanoseconds since this boot.
    /// - returns `boot`: How many times the system has started from its store (0 without a store): it changes at every restart.
    ///
    /// Errors: invocation errors only.
    pub fn now(clock: CapReg) -> Result<NowResults, Error> {
        let received = invoke(Invocation::call(clock, order::NOW)).check()?;
        Ok(NowResults {
            nanoseconds: received.words[0],
            boot: received.words[1],
        })
    }
}

/// Control of the single-level store's checkpoints: their interval, a checkpoint now, and the store's counters.
pub mod checkpoint {
    use crate::abi::interface::checkpoint::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Sets how often a checkpoint is taken (one is taken early whenever the log is 65 % full).
    ///
    /// - `milliseconds`: The interval. Range 10..=86400000.
    ///
    /// Errors: `read_only`, `out_of_range`, `unavailable`; and invocation errors.
    pub fn set_interval(checkpoint: CapReg, milliseconds: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [milliseconds, 0, 0, 0],
            ..Invocation::call(checkpoint, order::SET_INTERVAL)
        })
        .check()?;
        Ok(())
    }

    /// What [`status`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct StatusResults {
        /// The newest committed checkpoint.
        pub generation: u64,
        /// The checkpoint interval.
        pub milliseconds: u64,
        /// How full the log is, in thousandths.
        pub log_fill_permille: u64,
        /// 1 if a mirror is missing, failed or being resilvered, else 0.
        pub degraded: u64,
    }

    /// Says how the store stands.
    ///
    /// - returns `generation`: The newest committed checkpoint.
    /// - returns `milliseconds`: The checkpoint interval.
    /// - returns `log_fill_permille`: How full the log is, in thousandths.
    /// - returns `degraded`: 1 if a mirror is missing, failed or being resilvered, else 0.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn status(checkpoint: CapReg) -> Result<StatusResults, Error> {
        let received = invoke(Invocation::call(checkpoint, order::STATUS)).check()?;
        Ok(StatusResults {
            generation: received.words[0],
            milliseconds: received.words[1],
            log_fill_permille: received.words[2],
            degraded: received.words[3],
        })
    }

    /// Asks for a checkpoint now rather than at the end of the interval, and returns at once: `status` shows its commit.
    ///
    /// Errors: `read_only`, `unavailable`; and invocation errors.
    pub fn take(checkpoint: CapReg) -> Result<(), Error> {
        invoke(Invocation::call(checkpoint, order::TAKE)).check()?;
        Ok(())
    }

    /// What [`counters`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CountersResults {
        /// The first family not in this page: the next page's `first_family`.
        pub next_family: u64,
        /// The families in all: the text is read when `next_family` reaches it.
        pub family_count: u64,
        /// Bytes of `text` received.
        pub text_length: usize,
    }

    /// The store's counters in the Prometheus text format, in base units, `_total` for counters, `_bucket`, `_sum` and `_count` for histograms: one `name value` line each, grouped in families (a metric's lines: all of a histogram's). The text is longer than one invocation's string, so it comes in pages of whole families: the first from family 0, each next from the `next_family` the one before returned, until `next_family` reaches `family_count`. A page is never cut inside a line or a family; its values are read at once (pages read one after another may be from moments apart).
    ///
    /// - `first_family`: The first family returned: 0, then the `next_family` of the page before. One at or beyond `family_count` returns an empty page.
    /// - `text`: receives the page: whole families, at most 4096 bytes.
    /// - returns `next_family`: The first family not in this page: the next page's `first_family`.
    /// - returns `family_count`: The families in all: the text is read when `next_family` reaches it.
    /// - returns `text_length`: Bytes of `text` received.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn counters(
        checkpoint: CapReg,
        first_family: u64,
        text: &mut [u8],
    ) -> Result<CountersResults, Error> {
        let received = invoke(Invocation {
            words: [first_family, 0, 0, 0],
            buffer: text,
            ..Invocation::call(checkpoint, order::COUNTERS)
        })
        .check()?;
        Ok(CountersResults {
            next_family: received.words[0],
            family_count: received.words[1],
            text_length: received.string_length,
        })
    }

    /// What [`failures`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct FailuresResults {
        /// Checkpoints failed since the last one committed.
        pub since_commit: u64,
        /// Checkpoints (and journal writes) failed since boot.
        pub total: u64,
    }

    /// Says whether checkpoints are failing. A failed checkpoint is retried at the next interval; while `since_commit` is not 0, nothing done since the last committed checkpoint is persisted but the journal's commits. (A store that can no longer be written stops the system instead.)
    ///
    /// - returns `since_commit`: Checkpoints failed since the last one committed.
    /// - returns `total`: Checkpoints (and journal writes) failed since boot.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn failures(checkpoint: CapReg) -> Result<FailuresResults, Error> {
        let received = invoke(Invocation::call(checkpoint, order::FAILURES)).check()?;
        Ok(FailuresResults {
            since_commit: received.words[0],
            total: received.words[1],
        })
    }
}

/// Synchronous commits of chosen pages to the store's log: once a commit is acknowledged, a restart brings the pages back as committed, whatever crash comes. The rest of the program comes back as the last checkpoint caught it, which may be before commits it went on to make: a program must not write a journaled page from what it read before that checkpoint (after a restart, read the page again; or make every write one that a replay repeats harmlessly, as services/selftest/src/journal_writer.rs does).
pub mod journal {
    use crate::abi::interface::journal::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Commits the pages sent, as they are now, and returns once they are on disk; commits made meanwhile share the disk write (group commit).
    ///
    /// - `page0`: A page to commit. Type page.
    /// - `page1`: Another page, or void. Type void or page.
    /// - `page2`: Another page, or void. Type void or page.
    /// - `page3`: Another page, or void. Type void or page.
    ///
    /// Returns the commit's number: commits become durable in this order.
    ///
    /// Errors: `wrong_type`, `unavailable`; and invocation errors.
    pub fn commit(
        journal: CapReg,
        page0: CapReg,
        page1: CapReg,
        page2: CapReg,
        page3: CapReg,
    ) -> Result<u64, Error> {
        let received = invoke(Invocation {
            send: &[page0, page1, page2, page3],
            ..Invocation::call(journal, order::COMMIT)
        })
        .check()?;
        Ok(received.words[0])
    }

    /// Writes pieces into the pages of `space` and commits those pages, as `commit` does, but only if the word at `guard_address` still holds `guard_expected`; the check, the writes and the commit happen while no checkpoint can come between them. A program whose journaled data changes only this way, each write moving a counter the guard checks, never applies a change twice after a restart, however late the checkpoint it resumes from (services/tp1). A page changed only this way (not written otherwise, nor mapped writable, since the last checkpoint's snapshot) costs one disk write: once its commit is durable, the next checkpoint leaves it out, and migration moves the commit's copy home. The string is a sequence of pieces: a little-endian u64 address, a little-endian u16 length, then that many bytes. The pieces may touch at most 64 pages. Without a store, or while the journal's queue is full, it is refused as `unavailable` with nothing written.
    ///
    /// - `space`: The address space the addresses are in; every piece must be writable through it. Type space.
    /// - `guard_address`: The address of the guard: a little-endian word, 8-byte aligned, in `space`.
    /// - `guard_expected`: What the guard must hold for anything to be written.
    /// - `pieces`: The pieces written, in order.
    ///
    /// Returns the commit's number: commits become durable in this order.
    ///
    /// Errors: `wrong_type`, `out_of_range`, `unavailable`, `changed`; and invocation errors.
    pub fn write(
        journal: CapReg,
        space: CapReg,
        guard_address: u64,
        guard_expected: u64,
        pieces: &[u8],
    ) -> Result<u64, Error> {
        let received = invoke(Invocation {
            words: [guard_address, guard_expected, 0, 0],
            string: pieces,
            send: &[space],
            ..Invocation::call(journal, order::WRITE)
        })
        .check()?;
        Ok(received.words[0])
    }
}

/// The control channel: a serial line on which the host's `holdfast` sends requests and reads replies.
pub mod control {
    use crate::abi::interface::control::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Waits until the host has sent at least one byte, then returns what has arrived, up to `length` bytes.
    ///
    /// - `length`: The most bytes returned. Range 1..=4096.
    /// - `data`: receives the bytes read.
    ///
    /// Returns bytes of `data` received.
    ///
    /// Errors: `out_of_range`, `unavailable`; and invocation errors.
    pub fn read(control: CapReg, length: u64, data: &mut [u8]) -> Result<usize, Error> {
        let received = invoke(Invocation {
            words: [length, 0, 0, 0],
            buffer: data,
            ..Invocation::call(control, order::READ)
        })
        .check()?;
        Ok(received.string_length)
    }

    /// Sends the string to the host.
    ///
    /// - `data`: The bytes sent.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn write(control: CapReg, data: &[u8]) -> Result<(), Error> {
        invoke(Invocation {
            string: data,
            ..Invocation::call(control, order::WRITE)
        })
        .check()?;
        Ok(())
    }
}

/// The virtio-net device, raw Ethernet frames in and out; held only by the network service. Its interrupts become messages (`notify`). After a restart from the store the device is fresh: every method's last result word, `boot`, says which start of the system this device belongs to (the clock's `boot`), so a holder that sees it change knows its old connections are gone; the kernel also sends one `restarted` notification to each process holding this capability in a capability register once it restores the system, through nothing but its own registers: as a send with order `holdfast_abi::network_notification::ORDER`, badge 2^64-1.
pub mod network_device {
    use crate::abi::interface::network_device::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Queues one Ethernet frame (without FCS) for transmission. Transmissions still in flight are collected first; if all the device's transmit buffers stay busy for 10 ms the frame is refused with `exhausted` (the holder's protocol retransmits).
    ///
    /// - `frame`: The frame: destination, source, EtherType, payload; 14..=1514 bytes.
    ///
    /// Returns the system's start this device belongs to.
    ///
    /// Errors: `out_of_range`, `unavailable`, `exhausted`; and invocation errors.
    pub fn send(network_device: CapReg, frame: &[u8]) -> Result<u64, Error> {
        let received = invoke(Invocation {
            string: frame,
            ..Invocation::call(network_device, order::SEND)
        })
        .check()?;
        Ok(received.words[0])
    }

    /// What [`receive`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ReceiveResults {
        /// The frame's length in bytes, 0 if none was waiting.
        pub length: u64,
        /// The system's start this device belongs to.
        pub boot: u64,
        /// Bytes of `frame` received.
        pub frame_length: usize,
    }

    /// Returns the oldest frame received and not yet returned, or an empty string when none is waiting: it never waits.
    ///
    /// - `frame`: receives the frame (without FCS).
    /// - returns `length`: The frame's length in bytes, 0 if none was waiting.
    /// - returns `boot`: The system's start this device belongs to.
    /// - returns `frame_length`: Bytes of `frame` received.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn receive(network_device: CapReg, frame: &mut [u8]) -> Result<ReceiveResults, Error> {
        let received = invoke(Invocation {
            buffer: frame,
            ..Invocation::call(network_device, order::RECEIVE)
        })
        .check()?;
        Ok(ReceiveResults {
            length: received.words[0],
            boot: received.words[1],
            frame_length: received.string_length,
        })
    }

    /// What [`mac_address`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct MacAddressResults {
        /// The six bytes of the address, the first in the lowest byte.
        pub mac: u64,
        /// The system's start this device belongs to.
        pub boot: u64,
    }

    /// Returns the device's MAC address.
    ///
    /// - returns `mac`: The six bytes of the address, the first in the lowest byte.
    /// - returns `boot`: The system's start this device belongs to.
    ///
    /// Errors: `unavailable`; and invocation errors.
    pub fn mac_address(network_device: CapReg) -> Result<MacAddressResults, Error> {
        let received = invoke(Invocation::call(network_device, order::MAC_ADDRESS)).check()?;
        Ok(MacAddressResults {
            mac: received.words[0],
            boot: received.words[1],
        })
    }

    /// Arms one notification: the kernel sends one message through `target` (a send: order `holdfast_abi::network_notification::ORDER`, word 0 the reason — 1 a frame arrived, 2 the deadline passed, 3 the system restarted — word 1 `boot`) as soon as a frame is waiting or the clock passes `deadline_us`, whichever comes first; then it is disarmed until `notify` is called again. A frame already waiting fires it at once. If the target process is busy, the message waits in the kernel (one per device, never more) and is delivered when the process is next available. A later `notify` replaces an armed one.
    ///
    /// - `target`: Where the notification goes. Type start.
    /// - `deadline_us`: Microseconds since this boot (the clock's `now` / 1000); 2^64-1: no deadline.
    ///
    /// Returns the system's start this device belongs to.
    ///
    /// Errors: `wrong_type`, `unavailable`; and invocation errors.
    pub fn notify(network_device: CapReg, target: CapReg, deadline_us: u64) -> Result<u64, Error> {
        let received = invoke(Invocation {
            words: [deadline_us, 0, 0, 0],
            send: &[target],
            ..Invocation::call(network_device, order::NOTIFY)
        })
        .check()?;
        Ok(received.words[0])
    }
}

/// The authority to make and destroy pages and nodes (KeyKOS's prime range key): held only by the space bank (`services/space-bank`), which every other program buys storage from. Object ids are handed out once by `create_page` and `create_node`; a destroyed object keeps its id, at a new version, for `reissue`. With a store the objects live there, and their number is bounded by its size.
pub mod range {
    use crate::abi::interface::range::order;
    use crate::syscall::{CapReg, Error, Invocation, invoke};

    /// Makes a new zeroed page.
    ///
    /// - `into`: the capability register that receives the page capability.
    ///
    /// Returns the page's object id, for `rescind` and `reissue`.
    ///
    /// Errors: `exhausted`; and invocation errors.
    pub fn create_page(range: CapReg, into: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation {
            receive: &[into],
            ..Invocation::call(range, order::CREATE_PAGE)
        })
        .check()?;
        Ok(received.words[0])
    }

    /// Makes a new node, every slot void.
    ///
    /// - `into`: the capability register that receives the node capability.
    ///
    /// Returns the node's object id, for `rescind` and `reissue`.
    ///
    /// Errors: `exhausted`; and invocation errors.
    pub fn create_node(range: CapReg, into: CapReg) -> Result<u64, Error> {
        let received = invoke(Invocation {
            receive: &[into],
            ..Invocation::call(range, order::CREATE_NODE)
        })
        .check()?;
        Ok(received.words[0])
    }

    /// Destroys an object: its version moves on, so every capability to it, however many and wherever held, is void at once; a page is zeroed and a node's slots made void. A node that is a process's root destroys the process too: it never runs again, and is in no later checkpoint.
    ///
    /// - `kind`: 0 a page, 1 a node. Range 0..=1.
    /// - `id`: The object's id.
    ///
    /// Errors: `out_of_range`, `unavailable`; and invocation errors.
    pub fn rescind(range: CapReg, kind: u64, id: u64) -> Result<(), Error> {
        invoke(Invocation {
            words: [kind, id, 0, 0],
            ..Invocation::call(range, order::RESCIND)
        })
        .check()?;
        Ok(())
    }

    /// Returns a page or node capability to object `id` at its current version: the way a destroyed object's id is used again (the bank keeps the ids it destroyed).
    ///
    /// - `kind`: 0 a page, 1 a node. Range 0..=1.
    /// - `id`: The object's id.
    /// - `into`: the capability register that receives the page or node capability.
    ///
    /// Errors: `out_of_range`, `unavailable`; and invocation errors.
    pub fn reissue(range: CapReg, kind: u64, id: u64, into: CapReg) -> Result<(), Error> {
        invoke(Invocation {
            words: [kind, id, 0, 0],
            receive: &[into],
            ..Invocation::call(range, order::REISSUE)
        })
        .check()?;
        Ok(())
    }

    /// What [`object_id`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ObjectIdResults {
        /// 0 a page, 1 a node.
        pub kind: u64,
        /// The object's id.
        pub id: u64,
    }

    /// Says which object a live capability names (a page, or any capability to a node: node, space, process, start, meter, indirector), so that the bank can check that what it is given back is its own.
    ///
    /// - `object`: The capability.
    /// - returns `kind`: 0 a page, 1 a node.
    /// - returns `id`: The object's id.
    ///
    /// Errors: `wrong_type`; and invocation errors.
    pub fn object_id(range: CapReg, object: CapReg) -> Result<ObjectIdResults, Error> {
        let received = invoke(Invocation {
            send: &[object],
            ..Invocation::call(range, order::OBJECT_ID)
        })
        .check()?;
        Ok(ObjectIdResults {
            kind: received.words[0],
            id: received.words[1],
        })
    }

    /// What [`capacity`] returns.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CapacityResults {
        /// Pages that can still be made.
        pub pages: u64,
        /// Nodes that can still be made.
        pub nodes: u64,
    }

    /// How many more pages and nodes `create_page` and `create_node` can make: the store's room beyond the ids handed out (2^64-1 without a store, where memory is the bound and `exhausted` the refusal).
    ///
    /// - returns `pages`: Pages that can still be made.
    /// - returns `nodes`: Nodes that can still be made.
    ///
    /// Errors: invocation errors only.
    pub fn capacity(range: CapReg) -> Result<CapacityResults, Error> {
        let received = invoke(Invocation::call(range, order::CAPACITY)).check()?;
        Ok(CapacityResults {
            pages: received.words[0],
            nodes: received.words[1],
        })
    }
}
