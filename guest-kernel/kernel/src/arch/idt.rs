//! Interrupts and exceptions. Each vector has an assembly stub that pushes the vector number
//! (and a zero where the CPU pushes no error code) and the general registers, so that every
//! entry reaches [`interrupt_dispatch`] with a complete [`TrapFrame`].
//!
//! Every CPU exception gets a report naming its vector, error code, RIP and (for page
//! faults) the faulting address. An exception in ring 3 is contained: the process is stopped
//! and the kernel goes on. An exception in ring 0 is a kernel bug: the report is printed and
//! the VM exits with the failure status.

use core::arch::global_asm;
use core::fmt;
use spin::Once;
use x86_64::VirtAddr;
use x86_64::registers::control::Cr2;
use x86_64::structures::idt::InterruptDescriptorTable;

use super::syscall::UserRegisters;
use super::timer::{APIC_ERROR_VECTOR, SPURIOUS_VECTOR, TIMER_VECTOR};

/// The disks' completions (MSI-X): above the timer's priority class (vector / 16), so that
/// a disk waited for inside the timer's handler (a checkpoint step) still wakes the CPU.
pub const BLOCK_VECTOR: u8 = 48;
/// The network device's received frames (MSI-X): the same class as the disks'.
pub const NET_VECTOR: u8 = 49;
const DOUBLE_FAULT_VECTOR: u8 = 8;
const PAGE_FAULT_VECTOR: u8 = 14;

/// Exceptions for which the CPU pushes an error code.
const fn has_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

global_asm!(
    r#"
    .macro interrupt_stub vector, error_code
    .section .text.interrupt_stubs, "ax"
    .balign 16
interrupt_stub_\vector:
    .if \error_code == 0
    push 0
    .endif
    push \vector
    jmp interrupt_common
    .section .rodata.interrupt_stubs, "a"
    .quad interrupt_stub_\vector
    .endm

    .section .rodata.interrupt_stubs, "a"
    .balign 8
    .global interrupt_stub_table
interrupt_stub_table:
    .altmacro
    .set vector, 0
    .rept 256
    .if (vector == 8) || ((vector >= 10) && (vector <= 14)) || (vector == 17) || (vector == 21) || (vector == 29) || (vector == 30)
    interrupt_stub %vector, 1
    .else
    interrupt_stub %vector, 0
    .endif
    .set vector, vector + 1
    .endr
    .noaltmacro

    .section .text.interrupt_stubs, "ax"
interrupt_common:
    push rax
    push rbx
    push rcx
    push rdx
    push rsi
    push rdi
    push rbp
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    mov rdi, rsp
    cld
    clac                               /* ring 3 may have set AC, which would lift SMAP */
    call {dispatch}
    pop r15
    pop r14
    pop r13
    pop r12
    pop r11
    pop r10
    pop r9
    pop r8
    pop rbp
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rbx
    pop rax
    add rsp, 16
    iretq
"#,
    dispatch = sym interrupt_dispatch,
);

unsafe extern "C" {
    static interrupt_stub_table: [u64; 256];
}

/// The stack at [`interrupt_dispatch`]: general registers (pushed by `interrupt_common`),
/// vector and error code (pushed by the stub), then the CPU's interrupt frame.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error_code: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

impl TrapFrame {
    pub fn is_from_user_mode(&self) -> bool {
        self.cs & 3 == 3
    }

    pub fn user_registers(&self) -> UserRegisters {
        UserRegisters {
            rax: self.rax,
            rbx: self.rbx,
            rcx: self.rcx,
            rdx: self.rdx,
            rsi: self.rsi,
            rdi: self.rdi,
            rbp: self.rbp,
            r8: self.r8,
            r9: self.r9,
            r10: self.r10,
            r11: self.r11,
            r12: self.r12,
            r13: self.r13,
            r14: self.r14,
            r15: self.r15,
            rip: self.rip,
            rsp: self.rsp,
            rflags: self.rflags,
        }
    }
}

/// What the CPU told us about an exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultReport {
    pub vector: u8,
    pub error_code: Option<u64>,
    pub rip: u64,
    /// CR2, for page faults.
    pub address: Option<u64>,
}

pub fn vector_name(vector: u8) -> &'static str {
    match vector {
        0 => "#DE divide error",
        1 => "#DB debug",
        2 => "NMI",
        3 => "#BP breakpoint",
        4 => "#OF overflow",
        5 => "#BR bound range",
        6 => "#UD invalid opcode",
        7 => "#NM device not available",
        8 => "#DF double fault",
        10 => "#TS invalid TSS",
        11 => "#NP segment not present",
        12 => "#SS stack-segment fault",
        13 => "#GP general protection",
        14 => "#PF page fault",
        16 => "#MF x87 floating point",
        17 => "#AC alignment check",
        18 => "#MC machine check",
        19 => "#XM SIMD floating point",
        20 => "#VE virtualization",
        21 => "#CP control protection",
        _ => "reserved",
    }
}

impl fmt::Display for FaultReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vector {} ({})", self.vector, vector_name(self.vector))?;
        match self.error_code {
            Some(code) => write!(f, " error {code:#x}")?,
            None => write!(f, " error none")?,
        }
        write!(f, " rip {:#x}", self.rip)?;
        if let Some(address) = self.address {
            write!(f, " address {address:#x}")?;
            if let Some(code) = self.error_code {
                write!(f, " ({})", page_fault_cause(code, address))?;
            }
        }
        Ok(())
    }
}

/// What a page fault's error code says (Intel SDM vol. 3, 4.7), naming the protection
/// that refused a present page.
fn page_fault_cause(error_code: u64, address: u64) -> &'static str {
    let (present, write, user, fetch) = (
        error_code & 1 != 0,
        error_code & 2 != 0,
        error_code & 4 != 0,
        error_code & 16 != 0,
    );
    let user_address = address >> 47 == 0;
    match (present, user, fetch, write) {
        (false, _, true, _) => "instruction fetch from a page not mapped",
        (false, _, false, true) => "write to a page not mapped",
        (false, _, false, false) => "read of a page not mapped",
        (true, false, true, _) if user_address => "kernel instruction fetch from a user page: SMEP",
        (true, false, false, _) if user_address => "kernel access to a user page: SMAP",
        (true, _, true, _) => "instruction fetch from a no-execute page",
        (true, _, false, true) => "write to a read-only page",
        (true, _, false, false) => "read refused by the page's protection",
    }
}

/// What an interrupt or exception from ring 3 leads to, above `arch`: registered once at
/// boot ([`init`]), so that `arch` calls up without naming the layer above.
pub struct UserModeHandlers {
    /// The timer interrupted ring 3 (the registers it was running with).
    pub timer: fn(UserRegisters) -> !,
    /// An exception in ring 3.
    pub fault: fn(FaultReport, UserRegisters) -> !,
    /// The network device's interrupt came while ring 3 ran (the registers it was
    /// running with): the layer above delivers what it brought at once.
    pub network: fn(UserRegisters) -> !,
}

/// Set by the network device's interrupt, taken by the layer above
/// ([`take_network_interrupt`]): an interrupt in the kernel (a halt in the idle loop or in
/// a disk wait) only records it, as the kernel may hold locks there.
static NETWORK_INTERRUPTED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the network device interrupted since the last call.
pub fn take_network_interrupt() -> bool {
    NETWORK_INTERRUPTED.swap(false, core::sync::atomic::Ordering::Relaxed)
}

static USER_MODE_HANDLERS: Once<UserModeHandlers> = Once::new();

fn user_mode_handlers() -> &'static UserModeHandlers {
    USER_MODE_HANDLERS.get().expect("idt::init registers the handlers before interrupts are enabled")
}

extern "C" fn interrupt_dispatch(frame: &mut TrapFrame) {
    let vector = frame.vector as u8;
    match vector {
        0..=31 => exception(frame),
        TIMER_VECTOR => {
            super::timer::tick();
            if frame.is_from_user_mode() {
                (user_mode_handlers().timer)(frame.user_registers());
            }
        }
        // Only wakes a driver halted for its disk (`drivers::block`) or the kernel halted
        // for the pair's link (`pair`), which then looks at its queue itself.
        BLOCK_VECTOR => super::timer::end_of_interrupt(),
        NET_VECTOR => {
            NETWORK_INTERRUPTED.store(true, core::sync::atomic::Ordering::Relaxed);
            super::timer::end_of_interrupt();
            if frame.is_from_user_mode() {
                (user_mode_handlers().network)(frame.user_registers());
            }
        }
        APIC_ERROR_VECTOR => {
            crate::println!("holdfast: local APIC error interrupt");
            super::timer::end_of_interrupt();
        }
        SPURIOUS_VECTOR => {}
        _ => {
            crate::println!("holdfast: unexpected interrupt vector {vector}");
            super::timer::end_of_interrupt();
        }
    }
}

fn exception(frame: &TrapFrame) {
    let vector = frame.vector as u8;
    let report = FaultReport {
        vector,
        error_code: has_error_code(vector).then_some(frame.error_code),
        rip: frame.rip,
        address: (vector == PAGE_FAULT_VECTOR).then(Cr2::read_raw),
    };
    if frame.is_from_user_mode() {
        (user_mode_handlers().fault)(report, frame.user_registers());
    }
    crate::println!("holdfast: kernel fault: {report}");
    crate::arch::exit_qemu(holdfast_abi::exit::VALUE_FAILURE);
}

static IDT: Once<InterruptDescriptorTable> = Once::new();

pub fn init(handlers: UserModeHandlers) {
    USER_MODE_HANDLERS.call_once(|| handlers);
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        // SAFETY: the stub table is 256 addresses, written by the assembly above.
        let stubs = unsafe { &interrupt_stub_table };
        let stub = |vector: u8| VirtAddr::new(stubs[vector as usize]);
        macro_rules! exceptions {
            ($($field:ident = $vector:expr),* $(,)?) => {
                $(
                    // SAFETY: each stub is a valid interrupt entry (it ends in iretq through
                    // `interrupt_common`) and pushes a zero exactly where the CPU pushes no
                    // error code for its vector.
                    unsafe { idt.$field.set_handler_addr(stub($vector)); }
                )*
            };
        }
        exceptions!(
            divide_error = 0,
            debug = 1,
            non_maskable_interrupt = 2,
            breakpoint = 3,
            overflow = 4,
            bound_range_exceeded = 5,
            invalid_opcode = 6,
            device_not_available = 7,
            invalid_tss = 10,
            segment_not_present = 11,
            stack_segment_fault = 12,
            general_protection_fault = 13,
            page_fault = 14,
            x87_floating_point = 16,
            alignment_check = 17,
            machine_check = 18,
            simd_floating_point = 19,
            virtualization = 20,
            cp_protection_exception = 21,
            hv_injection_exception = 28,
            vmm_communication_exception = 29,
            security_exception = 30,
        );
        // SAFETY: as above; the IST slot is the double-fault stack set up by gdt::init and
        // used by no other vector.
        unsafe {
            idt.double_fault
                .set_handler_addr(stub(DOUBLE_FAULT_VECTOR))
                .set_stack_index(super::gdt::DOUBLE_FAULT_STACK_INDEX);
        }
        for vector in 32..=255u8 {
            // SAFETY: as above.
            unsafe { idt[vector].set_handler_addr(stub(vector)) };
        }
        idt
    });
    idt.load();
}
