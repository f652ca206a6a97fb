//! Ring-3 processes of the foundation kernel: each runs a program from the initial image
//! in its own page tables, holds capability registers, and enters the kernel only through
//! `syscall` (invocation) or by faulting. A fault stops the faulting process and the kernel
//! goes on with the next one.
//!
//! The kernel-core issue replaces this with processes made of nodes; the entry paths in
//! `arch::syscall` and `arch::idt` stay.

use alloc::vec::Vec;
use holdfast_abi::{self as abi, InvokeResult};
use spin::Mutex;
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, PhysFrame, Size4KiB,
    Translate, mapper::TranslateResult,
};
use x86_64::{PhysAddr, VirtAddr};

use crate::arch::idt::FaultReport;
use crate::arch::syscall::{UserRegisters, enter_user};
use crate::memory::{self, DIRECT_MAP_OFFSET, PAGE_BYTES};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    Void,
    Console,
    /// The holder's own process.
    OwnProcess,
}

#[derive(Clone, Copy, Debug)]
pub enum ProcessState {
    Runnable,
    Stopped { exit_code: u64 },
    Faulted(FaultReport),
}

pub struct Process {
    pub name: &'static str,
    page_table_root: PhysFrame,
    registers: UserRegisters,
    capabilities: [Capability; abi::CAPABILITY_REGISTER_COUNT],
    pub state: ProcessState,
    pub invocation_count: u64,
}

struct Scheduler {
    processes: Vec<Process>,
    current: Option<usize>,
    /// Called when no process is runnable any more.
    on_all_done: Option<fn() -> !>,
}

static SCHEDULER: Mutex<Scheduler> = Mutex::new(Scheduler {
    processes: Vec::new(),
    current: None,
    on_all_done: None,
});

/// Page-table frames come from the kernel heap, which lies in the direct map.
struct HeapFrames;

// SAFETY: every frame returned is a fresh, zeroed, page-aligned heap block used for nothing
// else.
unsafe impl FrameAllocator<Size4KiB> for HeapFrames {
    fn allocate_frame(&mut self) -> Option<PhysFrame> {
        let block = memory::allocate_pages(1);
        Some(PhysFrame::containing_address(PhysAddr::new(
            memory::virtual_to_physical(block as u64),
        )))
    }
}

/// Why a program could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    NotElf,
    NotStaticExecutable,
    SegmentOutsideUserSpace {
        virtual_address: u64,
    },
    SegmentOutsideFile,
    /// No Holdfast ABI note: not built with `holdfast-userlib`.
    NoAbiNote,
    AbiVersion {
        found: u32,
    },
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotElf => write!(f, "not an ELF file"),
            Self::NotStaticExecutable => write!(f, "not a statically linked executable"),
            Self::SegmentOutsideUserSpace { virtual_address } => {
                write!(
                    f,
                    "segment at {virtual_address:#x} lies outside the user half"
                )
            }
            Self::SegmentOutsideFile => write!(f, "segment data lies outside the file"),
            Self::NoAbiNote => write!(f, "no Holdfast ABI note (not built with holdfast-userlib)"),
            Self::AbiVersion { found } => write!(
                f,
                "built for ABI version {found}, this kernel has version {}",
                abi::ABI_VERSION
            ),
        }
    }
}

/// Finds the program's ABI version note (see `holdfast_abi::note`).
fn abi_version_of(file: &elf::ElfBytes<elf::endian::LittleEndian>) -> Option<u32> {
    let segments = file.segments()?;
    segments
        .iter()
        .filter(|segment| segment.p_type == elf::abi::PT_NOTE)
        .filter_map(|segment| file.segment_data_as_notes(&segment).ok())
        .flatten()
        .find_map(|note| match note {
            elf::note::Note::Unknown(any)
                if any.n_type == abi::note::TYPE_ABI_VERSION as u64
                    && any.name == abi::note::NAME =>
            {
                Some(u32::from_le_bytes(any.desc.get(..4)?.try_into().ok()?))
            }
            _ => None,
        })
}

fn page_table_at(frame: PhysFrame) -> &'static mut PageTable {
    let address = memory::physical_to_virtual(frame.start_address().as_u64());
    // SAFETY: page-table frames are heap pages owned by one address space; the kernel
    // touches them only with interrupts off, on its single CPU.
    unsafe { &mut *(address as *mut PageTable) }
}

fn mapper_for(root: PhysFrame) -> OffsetPageTable<'static> {
    // SAFETY: all of physical memory that holds page tables is in the direct map at
    // DIRECT_MAP_OFFSET.
    unsafe { OffsetPageTable::new(page_table_at(root), VirtAddr::new(DIRECT_MAP_OFFSET)) }
}

/// A new address space: the kernel half shared with the boot page tables, the user half empty.
fn new_address_space() -> PhysFrame {
    let root = HeapFrames.allocate_frame().expect("heap frame");
    let (kernel_root, _) = Cr3::read();
    let kernel_table = page_table_at(kernel_root);
    let table = page_table_at(root);
    for index in 256..512 {
        table[index] = kernel_table[index].clone();
    }
    root
}

fn map_user_range(mapper: &mut OffsetPageTable, start: u64, end: u64, flags: PageTableFlags) {
    let first = Page::<Size4KiB>::containing_address(VirtAddr::new(start));
    let last = Page::<Size4KiB>::containing_address(VirtAddr::new(end - 1));
    for page in Page::range_inclusive(first, last) {
        if mapper.translate_page(page).is_ok() {
            continue; // shared with a previous segment
        }
        let frame = HeapFrames.allocate_frame().expect("heap frame");
        // SAFETY: a fresh frame mapped at a user address in a space nobody runs yet.
        unsafe {
            mapper
                .map_to(
                    page,
                    frame,
                    flags | PageTableFlags::PRESENT | PageTableFlags::USER_ACCESSIBLE,
                    &mut HeapFrames,
                )
                .expect("page was free")
                .ignore();
        }
    }
}

fn copy_into(mapper: &OffsetPageTable, address: u64, bytes: &[u8]) {
    for (offset, chunk) in bytes.chunks(PAGE_BYTES).enumerate() {
        let mut target = address + (offset * PAGE_BYTES) as u64;
        let mut remaining = chunk;
        while !remaining.is_empty() {
            let physical = mapper
                .translate_addr(VirtAddr::new(target))
                .expect("mapped above");
            let room = PAGE_BYTES - (target as usize % PAGE_BYTES);
            let count = room.min(remaining.len());
            // SAFETY: the destination is a frame of this new space, reached by the direct map.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    remaining.as_ptr(),
                    memory::physical_to_virtual(physical.as_u64()) as *mut u8,
                    count,
                );
            }
            target += count as u64;
            remaining = &remaining[count..];
        }
    }
}

/// Loads a statically linked ELF executable into a new address space.
pub fn load(
    name: &'static str,
    elf_bytes: &[u8],
    capabilities: &[Capability],
) -> Result<(), LoadError> {
    use elf::abi::{ET_EXEC, PF_W, PF_X, PT_LOAD};
    let file = elf::ElfBytes::<elf::endian::LittleEndian>::minimal_parse(elf_bytes)
        .map_err(|_| LoadError::NotElf)?;
    if file.ehdr.e_type != ET_EXEC {
        return Err(LoadError::NotStaticExecutable);
    }
    match abi_version_of(&file) {
        None => return Err(LoadError::NoAbiNote),
        Some(abi::ABI_VERSION) => {}
        Some(found) => return Err(LoadError::AbiVersion { found }),
    }
    let root = new_address_space();
    let mut mapper = mapper_for(root);
    let segments = file.segments().ok_or(LoadError::NotStaticExecutable)?;
    for segment in segments.iter().filter(|segment| segment.p_type == PT_LOAD) {
        let start = segment.p_vaddr;
        let end = start.saturating_add(segment.p_memsz);
        if start < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END || segment.p_memsz == 0 {
            return Err(LoadError::SegmentOutsideUserSpace {
                virtual_address: start,
            });
        }
        let file_range = segment.p_offset as usize..(segment.p_offset + segment.p_filesz) as usize;
        let contents = elf_bytes
            .get(file_range)
            .ok_or(LoadError::SegmentOutsideFile)?;
        let mut flags = PageTableFlags::empty();
        if segment.p_flags & PF_W != 0 {
            flags |= PageTableFlags::WRITABLE;
        }
        if segment.p_flags & PF_X == 0 {
            flags |= PageTableFlags::NO_EXECUTE;
        }
        map_user_range(&mut mapper, start, end, flags | PageTableFlags::WRITABLE);
        copy_into(&mapper, start, contents);
        // Segments are writable only while we fill them; now apply the real protection.
        let first = Page::<Size4KiB>::containing_address(VirtAddr::new(start));
        let last = Page::<Size4KiB>::containing_address(VirtAddr::new(end - 1));
        for page in Page::range_inclusive(first, last) {
            let final_flags = flags | PageTableFlags::PRESENT | PageTableFlags::USER_ACCESSIBLE;
            // SAFETY: the page was mapped above in this unused space.
            unsafe {
                mapper
                    .update_flags(page, final_flags)
                    .expect("mapped")
                    .ignore()
            };
        }
    }
    map_user_range(
        &mut mapper,
        abi::USER_STACK_TOP - abi::USER_STACK_BYTES,
        abi::USER_STACK_TOP,
        PageTableFlags::WRITABLE | PageTableFlags::NO_EXECUTE,
    );
    let registers = UserRegisters {
        rip: file.ehdr.e_entry,
        rsp: abi::USER_STACK_TOP,
        rflags: 0x202, // interrupts on
        ..UserRegisters::default()
    };
    let mut capability_registers = [Capability::Void; abi::CAPABILITY_REGISTER_COUNT];
    capability_registers[..capabilities.len()].copy_from_slice(capabilities);
    SCHEDULER.lock().processes.push(Process {
        name,
        page_table_root: root,
        registers,
        capabilities: capability_registers,
        state: ProcessState::Runnable,
        invocation_count: 0,
    });
    Ok(())
}

/// Runs the loaded processes, each until it stops or faults, then calls `on_all_done`.
pub fn run(on_all_done: fn() -> !) -> ! {
    KERNEL_ROOT.call_once(|| Cr3::read().0);
    SCHEDULER.lock().on_all_done = Some(on_all_done);
    switch_to_next()
}

/// Chooses the next runnable process after the current one (round robin) and enters it;
/// never returns.
fn switch_to_next() -> ! {
    let mut scheduler = SCHEDULER.lock();
    let count = scheduler.processes.len();
    let after = scheduler.current.map_or(0, |current| current + 1);
    let next = (0..count)
        .map(|offset| (after + offset) % count)
        .find(|&index| matches!(scheduler.processes[index].state, ProcessState::Runnable));
    let Some(index) = next else {
        let done = scheduler.on_all_done.expect("run() set it");
        scheduler.current = None;
        drop(scheduler);
        // Back to the kernel's own page tables before the self-test report.
        done()
    };
    scheduler.current = Some(index);
    let process = &scheduler.processes[index];
    let registers = process.registers;
    let root = process.page_table_root;
    drop(scheduler);
    // SAFETY: `root` is a complete address space: the kernel half is shared with the
    // current tables, so this code and its stack stay mapped; `registers` hold the
    // process's user rip and rsp.
    unsafe {
        Cr3::write(root, Cr3Flags::empty());
        enter_user(&registers)
    }
}

/// Calls `with` on the result of the stopped or faulted processes, in load order.
pub fn for_each_process(mut with: impl FnMut(&Process)) {
    for process in SCHEDULER.lock().processes.iter() {
        with(process);
    }
}

static KERNEL_ROOT: spin::Once<PhysFrame> = spin::Once::new();

/// Back to the page tables the kernel started with, for code that runs after the last
/// process (a stopped process's tables stay mapped otherwise).
pub fn restore_kernel_address_space() {
    let root = *KERNEL_ROOT.get().expect("run() recorded it");
    // SAFETY: the boot page tables map the kernel as every process's tables do.
    unsafe { Cr3::write(root, Cr3Flags::empty()) };
}

fn stop_current(state: ProcessState) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current.expect("a process was running");
        scheduler.processes[current].state = state;
    }
    switch_to_next()
}

/// The timer interrupted ring 3: the time slice is over; save the registers, go on with
/// the next runnable process.
pub fn timer_in_user_mode(registers: UserRegisters) -> ! {
    {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current.expect("a process was running");
        scheduler.processes[current].registers = registers;
    }
    switch_to_next()
}

/// An exception in ring 3: report it, stop the process, go on.
pub fn fault_in_user_mode(report: FaultReport) -> ! {
    let name = {
        let scheduler = SCHEDULER.lock();
        scheduler
            .current
            .map(|index| scheduler.processes[index].name)
            .unwrap_or("?")
    };
    crate::println!("holdfast: process {name} faulted: {report}; process stopped");
    stop_current(ProcessState::Faulted(report))
}

/// Checks that `[address, address + length)` is mapped readable for ring 3 in `root`.
fn user_range_readable(root: PhysFrame, address: u64, length: u64) -> bool {
    let Some(end) = address.checked_add(length) else {
        return false;
    };
    if address < abi::USER_ADDRESS_MIN || end > abi::USER_ADDRESS_END {
        return false;
    }
    if length == 0 {
        return true;
    }
    let mapper = mapper_for(root);
    let mut page = address & !(PAGE_BYTES as u64 - 1);
    while page < end {
        match mapper.translate(VirtAddr::new(page)) {
            TranslateResult::Mapped { flags, .. }
                if flags.contains(PageTableFlags::USER_ACCESSIBLE) => {}
            _ => return false,
        }
        page += PAGE_BYTES as u64;
    }
    true
}

/// The kernel side of `invoke` (see `holdfast_abi` for the registers).
pub extern "C" fn system_call(registers: &mut UserRegisters) {
    let (capability_index, order) = (registers.rdi, registers.rsi);
    let words = [registers.rdx, registers.r10, registers.r8, registers.r9];
    let (capability, root) = {
        let mut scheduler = SCHEDULER.lock();
        let current = scheduler.current.expect("a process was running");
        let process = &mut scheduler.processes[current];
        process.invocation_count += 1;
        let capability = process.capabilities.get(capability_index as usize).copied();
        (capability, process.page_table_root)
    };
    let (result, value) = match capability {
        None => (InvokeResult::InvalidRegister, 0),
        Some(Capability::Void) => (InvokeResult::Void, 0),
        Some(Capability::Console) => match order {
            abi::console::WRITE => console_write(root, words[0], words[1]),
            _ => (InvokeResult::UnknownOrder, 0),
        },
        Some(Capability::OwnProcess) => match order {
            abi::process::STOP => stop_current(ProcessState::Stopped {
                exit_code: words[0],
            }),
            _ => (InvokeResult::UnknownOrder, 0),
        },
    };
    registers.rax = result as u64;
    registers.rdx = value;
}

fn console_write(root: PhysFrame, address: u64, length: u64) -> (InvokeResult, u64) {
    if length > abi::INVOCATION_STRING_BYTES_MAX as u64 {
        return (InvokeResult::StringTooLong, 0);
    }
    if !user_range_readable(root, address, length) {
        return (InvokeResult::BadAddress, 0);
    }
    // SAFETY: the range was just checked to be mapped and user-readable in the current
    // address space (CR3 = root), and a single CPU means nobody unmaps it meanwhile.
    let bytes = unsafe { core::slice::from_raw_parts(address as *const u8, length as usize) };
    crate::console::write_bytes(bytes);
    (InvokeResult::Ok, length)
}
