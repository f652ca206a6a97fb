//! The system call entry and the two ways back to ring 3.
//!
//! `syscall` arrives on the one kernel stack, reset to empty at each entry: the user
//! registers are saved into a [`UserRegisters`] on it and handed to the handler [`init`]
//! registered (the invocation path's `ipc::system_call`). When that returns, the same
//! process continues through `sysretq`; when the kernel switches process instead,
//! [`enter_user`] starts the chosen one through `iretq` from a fresh stack.

use core::arch::{global_asm, naked_asm};
use core::sync::atomic::{AtomicUsize, Ordering};
use x86_64::VirtAddr;
use x86_64::registers::model_specific::{Efer, EferFlags, LStar, SFMask, Star};
use x86_64::registers::rflags::RFlags;

/// A ring-3 register file, as saved at every kernel entry. The field order is the push
/// order of the entry stubs below, reversed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UserRegisters {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rsp: u64,
    pub rflags: u64,
}

impl UserRegisters {
    const WORDS: usize = core::mem::size_of::<Self>() / 8;

    /// `*self = *from`, as 18 moves: a plain copy compiles to `rep movsq`, and under TCG
    /// each of its iterations is a translation block of its own.
    #[inline]
    pub fn copy_from(&mut self, from: &Self) {
        let source = core::ptr::from_ref(from).cast::<u64>();
        let destination = core::ptr::from_mut(self).cast::<u64>();
        for index in 0..Self::WORDS {
            // SAFETY: `UserRegisters` is `repr(C)` with only `u64` fields, so both are
            // arrays of `WORDS` aligned words; they cannot overlap (one is borrowed
            // mutably). The volatile read keeps the compiler from turning the loop back
            // into a call of `memcpy`.
            unsafe {
                destination
                    .add(index)
                    .write(source.add(index).read_volatile());
            }
        }
    }
}

const _: () = assert!(core::mem::size_of::<UserRegisters>() == 18 * 8);

// The invocation path reads and writes each role of `invoke` in the register `interface.toml`
// names for it (`UserRegisters` is laid out in the register file's order, as
// `process.read_registers` returns it): a description that moved a role fails here until
// the kernel moves with it.
const _: () = {
    use core::mem::offset_of;
    use holdfast_abi::interface::register_file_index as role;
    assert!(offset_of!(UserRegisters, rdi) == 8 * role::IN_DESCRIPTOR);
    assert!(offset_of!(UserRegisters, rsi) == 8 * role::IN_CODE);
    assert!(offset_of!(UserRegisters, rax) == 8 * role::OUT_RESULT);
    assert!(offset_of!(UserRegisters, rdx) == 8 * role::IN_WORD0 && role::IN_WORD0 == role::OUT_WORD0);
    assert!(offset_of!(UserRegisters, r10) == 8 * role::IN_WORD1 && role::IN_WORD1 == role::OUT_WORD1);
    assert!(offset_of!(UserRegisters, r8) == 8 * role::IN_WORD2 && role::IN_WORD2 == role::OUT_WORD2);
    assert!(offset_of!(UserRegisters, r9) == 8 * role::IN_WORD3 && role::IN_WORD3 == role::OUT_WORD3);
    assert!(offset_of!(UserRegisters, r12) == 8 * role::IN_STRING_ADDRESS);
    assert!(offset_of!(UserRegisters, r12) == 8 * role::OUT_BADGE);
    assert!(offset_of!(UserRegisters, r13) == 8 * role::IN_STRING_LENGTH);
    assert!(offset_of!(UserRegisters, r13) == 8 * role::OUT_RECEIVED_LENGTH);
    assert!(offset_of!(UserRegisters, r14) == 8 * role::IN_BUFFER_ADDRESS);
    assert!(offset_of!(UserRegisters, r15) == 8 * role::IN_BUFFER_CAPACITY);
};

/// User code and stack selectors (GDT entries 4 and 3 with RPL 3); `gdt::init` lays the
/// table out so, and [`init`] checks it.
const USER_CODE_SELECTOR: u64 = 0x23;
const USER_DATA_SELECTOR: u64 = 0x1b;

global_asm!(
    r#"
    .section .bss.syscall_scratch, "aw", @nobits
    .balign 8
syscall_user_rsp: .quad 0

    .section .text.syscall_entry, "ax"
    .global syscall_entry
syscall_entry:
    /* Interrupts are off (SFMASK clears IF). One CPU: the scratch slot is ours. */
    mov [rip + syscall_user_rsp], rsp
    lea rsp, [rip + kernel_stack_top]
    push r11                           /* rflags */
    push qword ptr [rip + syscall_user_rsp]
    push rcx                           /* rip */
    push r15
    push r14
    push r13
    push r12
    push r11
    push r10
    push r9
    push r8
    push rbp
    push rdi
    push rsi
    push rdx
    push rcx
    push rbx
    push rax
    mov rdi, rsp
    call qword ptr [rip + {system_call}]
    pop rax
    pop rbx
    pop rcx
    pop rdx
    pop rsi
    pop rdi
    pop rbp
    pop r8
    pop r9
    pop r10
    pop r11
    pop r12
    pop r13
    pop r14
    pop r15
    pop rcx                            /* rip */
    mov r11, [rsp + 8]                 /* rflags */
    mov rsp, [rsp]                     /* user rsp */
    sysretq
"#,
    system_call = sym SYSTEM_CALL_HANDLER,
);

unsafe extern "C" {
    fn syscall_entry();
}

/// The kernel side of `invoke`, above `arch`: the address of the function `syscall_entry`
/// calls with the saved registers, set once by [`init`] before `syscall` is enabled.
static SYSTEM_CALL_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Enables `syscall`, which calls `system_call` with the invoker's saved registers.
pub fn init(system_call: extern "C" fn(&mut UserRegisters)) {
    SYSTEM_CALL_HANDLER.store(system_call as usize, Ordering::Relaxed);
    let selectors = super::gdt::selectors();
    assert_eq!(selectors.user_code.0 as u64, USER_CODE_SELECTOR);
    assert_eq!(selectors.user_data.0 as u64, USER_DATA_SELECTOR);
    Star::write(
        selectors.user_code,
        selectors.user_data,
        selectors.kernel_code,
        selectors.kernel_data,
    )
    .expect("GDT order fits syscall/sysret");
    LStar::write(VirtAddr::new(syscall_entry as *const () as u64));
    // Enter the kernel with interrupts off and direction flag clear.
    SFMask::write(RFlags::INTERRUPT_FLAG | RFlags::DIRECTION_FLAG | RFlags::TRAP_FLAG);
    // SAFETY: turning on SYSCALL/SYSRET, whose MSRs were just set up.
    unsafe { Efer::update(|flags| flags.insert(EferFlags::SYSTEM_CALL_EXTENSIONS)) };
}

/// The user half is the addresses below 2^47: `sysretq` to a `rip` at or above it would
/// fault in ring 0 on the user's stack (Intel SDM, SYSRET), so such a `rip` goes by `iretq`.
const USER_HALF_BITS: u32 = 47;

/// Starts or resumes ring-3 execution with `registers`, in whatever user half the live root
/// holds. The kernel stack is abandoned: nothing on it is live across a switch to user mode.
///
/// Registers saved by `syscall_entry` have `rcx` = `rip` and `r11` = `rflags` (the CPU put
/// them there): for those `sysretq` restores exactly what `iretq` would, and it costs far
/// less under TCG (no frame to pop, no descriptors to load). Any other register file (a
/// process interrupted by the timer or a fault, or whose keeper set its registers) goes by
/// `iretq`, which restores `rcx` and `r11` too.
///
/// # Safety
/// The live root holds the user half of the process whose registers these are; `rip` and
/// `rsp` are user addresses; `registers` is not on the kernel stack, which this resets and
/// pushes onto before it has read them all.
#[unsafe(naked)]
#[unsafe(link_section = ".text.ipc")] // see linker.ld
pub unsafe extern "C" fn enter_user(registers: *const UserRegisters) -> ! {
    naked_asm!(
        // sysretq when rcx = rip, r11 = rflags and rip is in the user half (below 2^47):
        // the three tests ORed into one word, tested once (under TCG each branch ends a
        // translation block).
        "mov rcx, [rdi + 15 * 8]",
        "mov rax, rcx",
        "xor rax, [rdi + 2 * 8]",
        "mov r11, [rdi + 17 * 8]",
        "mov rdx, r11",
        "xor rdx, [rdi + 10 * 8]",
        "or rax, rdx",
        "mov rdx, rcx",
        "shr rdx, {user_half_bits}",
        "or rax, rdx",
        "jnz 2f",
        "mov rsp, [rdi + 16 * 8]",
        "mov rax, [rdi + 0 * 8]",
        "mov rbx, [rdi + 1 * 8]",
        "mov rdx, [rdi + 3 * 8]",
        "mov rsi, [rdi + 4 * 8]",
        "mov rbp, [rdi + 6 * 8]",
        "mov r8, [rdi + 7 * 8]",
        "mov r9, [rdi + 8 * 8]",
        "mov r10, [rdi + 9 * 8]",
        "mov r12, [rdi + 11 * 8]",
        "mov r13, [rdi + 12 * 8]",
        "mov r14, [rdi + 13 * 8]",
        "mov r15, [rdi + 14 * 8]",
        "mov rdi, [rdi + 5 * 8]",
        "sysretq",
        "2:",
        "lea rsp, [rip + kernel_stack_top]",
        "push {user_data}",
        "push qword ptr [rdi + 16 * 8]", // rsp
        "push qword ptr [rdi + 17 * 8]", // rflags
        "push {user_code}",
        "push qword ptr [rdi + 15 * 8]", // rip
        "mov rax, [rdi + 0 * 8]",
        "mov rbx, [rdi + 1 * 8]",
        "mov rcx, [rdi + 2 * 8]",
        "mov rdx, [rdi + 3 * 8]",
        "mov rsi, [rdi + 4 * 8]",
        "mov rbp, [rdi + 6 * 8]",
        "mov r8, [rdi + 7 * 8]",
        "mov r9, [rdi + 8 * 8]",
        "mov r10, [rdi + 9 * 8]",
        "mov r11, [rdi + 10 * 8]",
        "mov r12, [rdi + 11 * 8]",
        "mov r13, [rdi + 12 * 8]",
        "mov r14, [rdi + 13 * 8]",
        "mov r15, [rdi + 14 * 8]",
        "mov rdi, [rdi + 5 * 8]",
        "iretq",
        user_data = const USER_DATA_SELECTOR,
        user_code = const USER_CODE_SELECTOR,
        user_half_bits = const USER_HALF_BITS,
    )
}
