//! W^X for the kernel itself: no-execute pages (EFER.NXE, which `boot.rs` sets when the
//! CPU has it), and the kernel kept from executing (SMEP) or touching (SMAP) user pages.
//!
//! The kernel reads and writes process memory only through the direct map
//! (`user_memory.rs`: supervisor mappings of the pages' frames), never at user addresses,
//! so it needs no `stac` anywhere: any kernel access to a user address is a bug and faults.
//! Ring 3 can set RFLAGS.AC, which would lift SMAP in the kernel: `syscall` clears it
//! (SFMASK, `syscall.rs`) and every interrupt entry runs `clac` (`idt.rs`).

use x86_64::registers::control::{Cr4, Cr4Flags};
use x86_64::registers::model_specific::{Efer, EferFlags};

/// The CPUID bits W^X needs: (leaf, register, bit, name).
const FEATURES: [(u32, Register, u32, &str); 3] = [
    (0x8000_0001, Register::Edx, 20, "NX"),
    (7, Register::Ebx, 7, "SMEP"),
    (7, Register::Ebx, 20, "SMAP"),
];

#[derive(Clone, Copy)]
enum Register {
    Ebx,
    Edx,
}

/// The names of the features W^X needs that this CPU lacks.
fn missing_features() -> impl Iterator<Item = &'static str> {
    // Leaf 0 gives the highest basic leaf (CPUID itself always exists in long mode).
    let basic_max = core::arch::x86_64::__cpuid(0).eax;
    FEATURES.into_iter().filter_map(move |(leaf, register, bit, name)| {
        if leaf < 0x8000_0000 && leaf > basic_max {
            return Some(name);
        }
        // The leaf exists: checked for basic leaves; 0x80000001 exists with long mode.
        let result = core::arch::x86_64::__cpuid_count(leaf, 0);
        let word = match register {
            Register::Ebx => result.ebx,
            Register::Edx => result.edx,
        };
        (word & (1 << bit) == 0).then_some(name)
    })
}

/// Turns on SMEP and SMAP, or refuses to run on a CPU that lacks them or NX. Before the
/// interrupt stubs (which run `clac`) and the kernel's own page tables (NX bits) are used.
pub fn init() {
    if missing_features().next().is_some() {
        struct Missing;
        impl core::fmt::Display for Missing {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                missing_features().try_for_each(|name| write!(f, " {name}"))
            }
        }
        crate::println!(
            "holdfast: this CPU lacks{Missing}, which the kernel's W^X needs; under QEMU use -cpu qemu64,+smep,+smap (as `holdfast run` does) or -cpu max"
        );
        super::exit_qemu(holdfast_abi::exit::VALUE_FAILURE);
    }
    assert!(
        Efer::read().contains(EferFlags::NO_EXECUTE_ENABLE),
        "boot.rs turns on EFER.NXE when the CPU has NX"
    );
    // SAFETY: the CPU has both (checked above); the kernel never touches user pages at
    // user addresses nor executes them, and RFLAGS.AC is clear in the kernel (see above).
    unsafe {
        Cr4::update(|flags| {
            flags.insert(
                Cr4Flags::SUPERVISOR_MODE_EXECUTION_PROTECTION
                    | Cr4Flags::SUPERVISOR_MODE_ACCESS_PREVENTION,
            );
        });
    }
}
