//! The first instructions: from 32-bit protected mode (as both PVH and multiboot2 enter) to
//! long mode in the higher half, then into `kernel_entry_from_boot`, which the kernel above
//! defines (in `boot.rs`): called by symbol, so that `arch` names nothing above it.
//!
//! Both boot protocols enter at `start32` with paging off, interrupts off, flat 32-bit
//! segments and `ebx` pointing at their boot information (PVH: `hvm_start_info`; multiboot2:
//! the information structure, with `eax` = 0x36d76289). We read the TSC first of all so that
//! the host can be told how long the kernel took from its first instruction to ready.
//!
//! The boot page tables map, with 2 MiB pages:
//! - the low 4 GiB at 0 (identity: needed while we jump from low to high code),
//! - the low 4 GiB at [`crate::memory::DIRECT_MAP_OFFSET`] (physical memory as the kernel sees it),
//! - the low 1 GiB at [`crate::memory::KERNEL_OFFSET`] (the kernel image).

use core::arch::global_asm;

global_asm!(
    r#"
    .set KERNEL_OFFSET, 0xFFFFFFFF80000000
    .set MULTIBOOT2_MAGIC, 0xe85250d6

    /* Multiboot2 header: architecture i386, no tags but the end tag. */
    .section .multiboot2_header, "a"
    .balign 8
multiboot2_header_start:
    .long MULTIBOOT2_MAGIC
    .long 0
    .long multiboot2_header_end - multiboot2_header_start
    .long -(MULTIBOOT2_MAGIC + (multiboot2_header_end - multiboot2_header_start))
    .short 0
    .short 0
    .long 8
multiboot2_header_end:

    /* Xen ELF note XEN_ELFNOTE_PHYS32_ENTRY (18): QEMU's PVH loader enters here. */
    .section .note.Xen, "a", @note
    .balign 4
    .long 4
    .long 4
    .long 18
    .asciz "Xen"
    .balign 4
    .long start32
    .balign 4

    .section .boot.bss, "aw", @nobits
    .balign 4096
boot_pml4:       .skip 4096
boot_pdpt_low:   .skip 4096
boot_pdpt_high:  .skip 4096
boot_pd:         .skip 4096 * 4
boot_stack32:    .skip 256
boot_stack32_top:

    .section .boot.data, "aw"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff   /* 0x08: 64-bit code, ring 0 */
    .quad 0x00cf92000000ffff   /* 0x10: data, ring 0 */
boot_gdt_end:
boot_gdt_pointer:
    .short boot_gdt_end - boot_gdt - 1
    .long boot_gdt
    .long 0
    .global boot_tsc_at_entry
    .balign 8
boot_tsc_at_entry: .quad 0

    .section .boot.text, "ax"
    .code32
    .global start32
start32:
    mov edi, eax                     /* multiboot2 magic (or anything, under PVH) */
    mov esi, ebx                     /* boot information, physical */
    rdtsc
    mov [boot_tsc_at_entry], eax
    mov [boot_tsc_at_entry + 4], edx
    mov esp, offset boot_stack32_top

    /* Four page directories of 2 MiB pages covering 0..4 GiB. */
    mov ecx, 0
1:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83                     /* present, writable, huge */
    mov [boot_pd + ecx * 8], eax
    mov eax, ecx
    shr eax, 11
    mov [boot_pd + ecx * 8 + 4], eax
    inc ecx
    cmp ecx, 2048
    jne 1b

    /* PDPT low: 4 entries to the 4 directories (used for identity and direct map). */
    mov eax, offset boot_pd
    or eax, 0x3
    mov [boot_pdpt_low], eax
    add eax, 4096
    mov [boot_pdpt_low + 8], eax
    add eax, 4096
    mov [boot_pdpt_low + 16], eax
    add eax, 4096
    mov [boot_pdpt_low + 24], eax
    /* PDPT high: entry 510 (-2 GiB) to the first directory (physical 0..1 GiB). */
    mov eax, offset boot_pd
    or eax, 0x3
    mov [boot_pdpt_high + 510 * 8], eax

    mov eax, offset boot_pdpt_low
    or eax, 0x3
    mov [boot_pml4], eax             /* 0: identity */
    mov [boot_pml4 + 256 * 8], eax   /* 256: direct map at 0xFFFF800000000000 */
    mov eax, offset boot_pdpt_high
    or eax, 0x3
    mov [boot_pml4 + 511 * 8], eax   /* 511: kernel image */

    mov eax, offset boot_pml4
    mov cr3, eax
    mov eax, cr4
    or eax, (1 << 5)                 /* PAE */
    mov cr4, eax
    mov ecx, 0xC0000080              /* EFER */
    rdmsr
    or eax, (1 << 8) | (1 << 11)     /* long mode, no-execute */
    wrmsr
    mov eax, cr0
    or eax, (1 << 31) | (1 << 16) | 1  /* paging, write-protect, protected mode */
    mov cr0, eax

    lgdt [boot_gdt_pointer]
    /* jmp far 0x08:start64_low, spelled out (the assembler's Intel syntax has no form for it) */
    .byte 0xea
    .long start64_low
    .short 0x08

    .code64
start64_low:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor ax, ax
    mov fs, ax
    mov gs, ax
    mov edi, edi
    mov esi, esi
    movabs rsp, offset kernel_stack_top
    xor ebp, ebp
    movabs rax, offset kernel_entry_from_boot
    call rax
    ud2
"#
);

global_asm!(
    r#"
    /* The one kernel stack. Every entry from ring 3 starts on an empty one: kernel
       operations finish or restart, so no process owns kernel stack (EROS). */
    .section .bss.kernel_stack, "aw", @nobits
    .balign 4096
    .global kernel_stack_bottom
kernel_stack_bottom:
    .skip 128 * 1024
    .global kernel_stack_top
kernel_stack_top:
"#
);

unsafe extern "C" {
    /// Low 32 bits first: the TSC as `start32` read it.
    static boot_tsc_at_entry: u64;
    static kernel_stack_top: u8;
    static kernel_end: u8;
}

/// TSC value at the kernel's first instruction.
pub fn tsc_at_entry() -> u64 {
    // The symbol's address is its physical address (the boot area has VMA = LMA); read it
    // through the direct map, because ring-3 page tables do not map the low identity range.
    // SAFETY: written once by `start32` before any Rust runs; only read afterwards.
    unsafe {
        let physical = &raw const boot_tsc_at_entry as u64;
        core::ptr::read_volatile(crate::memory::physical_to_virtual(physical) as *const u64)
    }
}

/// Top of the kernel stack (also the TSS's ring-0 stack).
pub fn kernel_stack_top_address() -> u64 {
    &raw const kernel_stack_top as u64
}

/// First virtual address after the kernel image (kernel half).
pub fn kernel_end_address() -> u64 {
    &raw const kernel_end as u64
}
