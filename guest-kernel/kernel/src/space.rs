//! Address spaces: trees of nodes with pages as leaves (EROS 4.2), translated lazily into
//! x86-64 page tables that are only a cache.
//!
//! A process's page tables start with an empty user half. A page fault walks the process's
//! space tree from its root capability; if the walk reaches a page, the page is mapped and
//! the process resumes; if not, the fault is the space's keeper's business. The object cache
//! marks the nodes a walk passed through: a swap into one of them drops every process's
//! user mappings, so that the change is seen at the next access.

use alloc::vec::Vec;
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::{PageTable, PageTableFlags, PhysFrame};
use x86_64::{PhysAddr, VirtAddr};

use crate::memory::{self, PAGE_BYTES};

fn table_at(frame: PhysFrame) -> &'static mut PageTable {
    let address = memory::physical_to_virtual(frame.start_address().as_u64());
    // SAFETY: page-table frames are heap pages owned by one address space; the kernel
    // touches them only with interrupts off, on its single CPU.
    unsafe { &mut *(address as *mut PageTable) }
}

fn new_table_frame() -> PhysFrame {
    let block = memory::allocate_pages(1);
    PhysFrame::containing_address(PhysAddr::new(memory::virtual_to_physical(block as u64)))
}

/// Indices of the user half's entries in a top-level table.
const USER_TOP_ENTRIES: core::ops::Range<usize> = 0..256;

/// How many mapped pages a process may have and still be switched away from by dropping
/// their TLB entries one by one. Beyond it, switching away flushes the whole TLB: under
/// TCG a flush and the refills after it cost about 7 µs, an `invlpg` a small fraction.
const MAPPED_PAGES_TRACKED_MAX: usize = 64;

/// The CPU runs on one top-level table for its whole life, the live root: its kernel half
/// is [`kernel_half`]'s, its user half a copy of the running process's few top-level
/// entries. A process switch rewrites those entries and drops the outgoing process's TLB
/// entries page by page, instead of loading CR3, which flushes everything (L4's and EROS's
/// small spaces, for the same reason: most processes map few pages).
static LIVE_ROOT: spin::Once<PhysFrame> = spin::Once::new();

/// Makes the live root and runs on it, in place of the boot tables (which map everything
/// writable and executable, and the low 4 GiB at 0 too). Runs once the heap exists.
pub fn init_live_root() {
    LIVE_ROOT.call_once(|| {
        let root = new_table_frame();
        kernel_half(table_at(root));
        // SAFETY: the new root maps the kernel image at its link address and the direct
        // map at `DIRECT_MAP_OFFSET`, as the boot tables do, so this code, its stack, the
        // heap and the devices stay mapped (the code executable, the rest writable); no
        // kernel address lies in the low identity range it drops; the user half is empty.
        unsafe { Cr3::write(root, Cr3Flags::empty()) };
        root
    });
}

unsafe extern "C" {
    static kernel_text_start: u8;
    static kernel_rodata_start: u8;
    static kernel_data_start: u8;
    static kernel_end: u8;
}

/// Fills `top`'s kernel half, W^X: the kernel's text read-only and executable, its rodata
/// read-only, its data and bss writable, and the direct map of the low 4 GiB (heap, page
/// tables, devices) writable; nothing but the text executable.
fn kernel_half(top: &mut PageTable) {
    use PageTableFlags as F;
    let table_flags = F::PRESENT | F::WRITABLE;
    let direct_map = new_table_frame();
    let direct_map_pages = F::PRESENT | F::WRITABLE | F::HUGE_PAGE | F::NO_EXECUTE;
    let huge_page_bytes = 2u64 << 20;
    for gib in 0..memory::DIRECT_MAP_BYTES >> 30 {
        let directory = new_table_frame();
        for (index, entry) in table_at(directory).iter_mut().enumerate() {
            let physical = (gib << 30) + index as u64 * huge_page_bytes;
            entry.set_addr(PhysAddr::new(physical), direct_map_pages);
        }
        table_at(direct_map)[gib as usize].set_frame(directory, table_flags);
    }
    top[VirtAddr::new(memory::DIRECT_MAP_OFFSET).p4_index()].set_frame(direct_map, table_flags);

    let (text, rodata, data, end) = (
        &raw const kernel_text_start as u64,
        &raw const kernel_rodata_start as u64,
        &raw const kernel_data_start as u64,
        &raw const kernel_end as u64,
    );
    let image = new_table_frame();
    let image_directory = new_table_frame();
    let first = VirtAddr::new(text);
    table_at(image)[first.p3_index()].set_frame(image_directory, table_flags);
    top[first.p4_index()].set_frame(image, table_flags);
    let directory = table_at(image_directory);
    for page in (text..end).step_by(PAGE_BYTES) {
        let flags = if page < rodata {
            F::PRESENT
        } else if page < data {
            F::PRESENT | F::NO_EXECUTE
        } else {
            F::PRESENT | F::WRITABLE | F::NO_EXECUTE
        };
        let page = VirtAddr::new(page);
        assert_eq!(page.p3_index(), first.p3_index(), "the kernel image spans 1 GiB");
        let entry = &mut directory[page.p2_index()];
        if entry.is_unused() {
            entry.set_frame(new_table_frame(), table_flags);
        }
        let last = entry.frame().expect("a 4 KiB table");
        let physical = memory::virtual_to_physical(page.as_u64());
        table_at(last)[page.p1_index()].set_addr(PhysAddr::new(physical), flags);
    }
}

fn live_root() -> PhysFrame {
    *LIVE_ROOT.get().expect("init_live_root ran at boot")
}

/// How ring 3 may use a page it maps: never written and executed both (W^X).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Execute,
}

/// A page mapped for ring 3 and where its page-table entry is, so that a switch can tell
/// from the entry's accessed flag whether the TLB may hold the page.
struct MappedPage {
    page: VirtAddr,
    /// The direct-map address of the last-level entry that maps it.
    entry: u64,
}

/// A process's page tables: a cache of its space tree, emptied whenever a translation it
/// holds may be stale.
pub struct UserTables {
    /// A top-level table whose user half is this process's. The CPU never runs on it: its
    /// used entries are copied into the live root while the process runs.
    top: PhysFrame,
    /// `top` through the direct map (the switch path reads it without the checks of
    /// [`table_at`]).
    top_table_address: u64,
    /// The live root through the direct map, for the same reason (the same in every
    /// process's tables).
    live_root_table_address: u64,
    /// Which user entries of `top` are in use, while there are at most four (a program
    /// uses one or two); positions past the used ones hold index 0, so that a switch
    /// clears and copies all four without a loop or a branch (copying an entry of `top`
    /// into the live root is always right while this process runs; clearing one of the
    /// live root's user entries is always right when it leaves).
    top_used: [u16; 4],
    top_used_count: usize,
    /// More than four entries are in use: a switch copies the whole user half.
    top_used_overflowed: bool,
    /// Every page mapped, while there are at most [`MAPPED_PAGES_TRACKED_MAX`].
    mapped: Vec<MappedPage>,
    mapped_overflowed: bool,
}

impl UserTables {
    pub fn new() -> Self {
        let top = new_table_frame();
        Self {
            top,
            top_table_address: memory::physical_to_virtual(top.start_address().as_u64()),
            live_root_table_address: memory::physical_to_virtual(live_root().start_address().as_u64()),
            top_used: [0; 4],
            top_used_count: 0,
            top_used_overflowed: false,
            mapped: Vec::new(),
            mapped_overflowed: false,
        }
    }

    /// Maps the 4 KiB page at `address` to `frame` for ring 3, non-executable unless
    /// `executable` (the intermediate entries allow everything: the last level decides).
    /// `running`: these tables are the live root's user half now, so the live root gets
    /// any new top-level entry.
    pub fn map_page(&mut self, address: u64, frame: PhysFrame, access: Access, running: bool) {
        let page_address = VirtAddr::new(address & !(PAGE_BYTES as u64 - 1));
        let top_index = usize::from(page_address.p4_index());
        let intermediate =
            PageTableFlags::PRESENT | PageTableFlags::WRITABLE | PageTableFlags::USER_ACCESSIBLE;
        let top = table_at(self.top);
        if top[top_index].is_unused() {
            top[top_index].set_frame(new_table_frame(), intermediate);
            match self.top_used.get_mut(self.top_used_count) {
                Some(position) => {
                    *position = top_index as u16;
                    self.top_used_count += 1;
                }
                None => self.top_used_overflowed = true,
            }
            if running {
                table_at(live_root())[top_index] = top[top_index].clone();
            }
        }
        let mut table = table_at(top[top_index].frame().expect("a table"));
        for index in [page_address.p3_index(), page_address.p2_index()] {
            let entry = &mut table[index];
            if entry.is_unused() {
                entry.set_frame(new_table_frame(), intermediate);
            }
            table = table_at(entry.frame().expect("a 4 KiB table, never a huge page"));
        }
        let mut flags = PageTableFlags::PRESENT | PageTableFlags::USER_ACCESSIBLE;
        match access {
            Access::Read => flags |= PageTableFlags::NO_EXECUTE,
            Access::Write => flags |= PageTableFlags::WRITABLE | PageTableFlags::NO_EXECUTE,
            Access::Execute => {}
        }
        let entry = &mut table[page_address.p1_index()];
        // A remap (a spurious fault) is on the list already.
        if entry.is_unused() {
            if self.mapped.len() < MAPPED_PAGES_TRACKED_MAX {
                self.mapped.push(MappedPage {
                    page: page_address,
                    entry: core::ptr::from_ref(&*entry) as u64,
                });
            } else {
                self.mapped_overflowed = true;
            }
        }
        entry.set_frame(frame, flags);
        if running {
            x86_64::instructions::tlb::flush(page_address);
        }
    }

    /// Drops every user mapping. The tables below the top level are retired, to be returned
    /// to the heap later ([`free_retired_tables`]): this runs in the snapshot, with the
    /// world stopped, and must not take time in proportion to what is mapped. The caller
    /// makes sure no stale TLB entry survives ([`flush_live_user_half`]).
    pub fn clear(&mut self) {
        let top = table_at(self.top);
        let mut retire = |index: usize| {
            if let Ok(child) = top[index].frame() {
                RETIRED_TABLES.lock().push(child);
            }
            top[index].set_unused();
        };
        if self.top_used_overflowed {
            USER_TOP_ENTRIES.for_each(retire);
        } else {
            self.top_used[..self.top_used_count]
                .iter()
                .for_each(|&index| retire(usize::from(index)));
        }
        self.top_used = [0; 4];
        self.top_used_count = 0;
        self.top_used_overflowed = false;
        self.mapped.clear();
        self.mapped_overflowed = false;
    }
}

/// Third-level tables unhooked from every top-level table, with the tables below them, not
/// yet returned to the heap.
static RETIRED_TABLES: spin::Mutex<Vec<PhysFrame>> = spin::Mutex::new(Vec::new());

/// Returns up to `count` retired third-level tables, and every table below them, to the
/// heap; returns whether any was.
pub fn free_retired_tables(count: usize) -> bool {
    fn free_below(frame: PhysFrame, level: u8) {
        if level > 1 {
            for entry in table_at(frame).iter_mut() {
                if let Ok(child) = entry.frame() {
                    free_below(child, level - 1);
                    free_table(child);
                }
                entry.set_unused();
            }
        }
    }
    fn free_table(frame: PhysFrame) {
        let block = memory::physical_to_virtual(frame.start_address().as_u64()) as *mut u8;
        // SAFETY: table frames come from `new_table_frame`, one page each, and the entry
        // that pointed here was cleared (a retired table's in `UserTables::clear`, whose
        // caller also unhooked the live root's copy): nothing references the table any more.
        unsafe { memory::free_pages(block, 1) };
    }
    let mut retired = RETIRED_TABLES.lock();
    let mut freed = false;
    for _ in 0..count {
        let Some(table) = retired.pop() else { break };
        free_below(table, 3);
        free_table(table);
        freed = true;
    }
    freed
}

/// Puts `incoming`'s user half into the live root in place of `outgoing`'s (if any
/// process's was there) and drops `outgoing`'s TLB entries.
///
/// Only the pages the outgoing process touched since it was last switched in can be in the
/// TLB: the processor caches a translation only with the accessed flag set in its
/// page-table entry, setting the flag first (Intel SDM 4.10.2.3; QEMU's TCG walker sets it
/// too). So a page whose flag is clear needs no `invlpg`, and one whose flag is set gets the
/// flag cleared and its entry dropped. Under TCG each `invlpg` costs far more than reading
/// an entry; a program touches a few of the pages it has mapped between two switches.
#[unsafe(link_section = ".text.ipc")] // see linker.ld
pub fn switch(outgoing: Option<&UserTables>, incoming: &UserTables) {
    // SAFETY: `live_root_table_address` is the direct-map address of the live root, a heap
    // page that is never freed; the kernel touches page tables only with interrupts off, on
    // its single CPU, and no other reference to the live root is live during a switch.
    let live = unsafe { &mut *(incoming.live_root_table_address as *mut PageTable) };
    if let Some(outgoing) = outgoing {
        // One test for the common case, where neither list overflowed (each branch ends a
        // translation block under TCG).
        if outgoing.top_used_overflowed | outgoing.mapped_overflowed {
            leave_overflowed(live, outgoing);
        } else {
            clear_listed_top_entries(live, outgoing);
            flush_touched(&outgoing.mapped);
        }
    }
    // SAFETY: `top_table_address` is the direct-map address of `incoming.top`, a table
    // frame these tables own for their whole life; the kernel touches page tables only
    // with interrupts off, on its single CPU, and `live` is another frame.
    let top = unsafe { &*(incoming.top_table_address as *const PageTable) };
    if incoming.top_used_overflowed {
        USER_TOP_ENTRIES.for_each(|index| live[index] = top[index].clone());
    } else {
        for index in incoming.top_used {
            let index = usize::from(index) % USER_TOP_ENTRIES.end;
            live[index] = top[index].clone();
        }
    }
}

/// Clears the live root's user entries that `outgoing` lists (all four positions: those past
/// the used ones hold index 0, which is always right to clear when it leaves).
#[inline(always)]
fn clear_listed_top_entries(live: &mut PageTable, outgoing: &UserTables) {
    // Masked into the user half: no index can reach the kernel's entries, and the compiler
    // needs no bounds check (each a branch).
    for index in outgoing.top_used {
        live[usize::from(index) % USER_TOP_ENTRIES.end].set_unused();
    }
}

/// [`switch`]'s leaving of a process with more top-level entries or mapped pages than its
/// lists hold.
#[cold]
fn leave_overflowed(live: &mut PageTable, outgoing: &UserTables) {
    if outgoing.top_used_overflowed {
        USER_TOP_ENTRIES.for_each(|index| live[index].set_unused());
    } else {
        clear_listed_top_entries(live, outgoing);
    }
    if outgoing.mapped_overflowed {
        // Reloading CR3 empties the paging-structure caches and the whole TLB. The outgoing
        // entries were cleared above, and the incoming ones are not in the live root yet,
        // so nothing stale can be cached again.
        x86_64::instructions::tlb::flush_all();
    } else {
        flush_touched(&outgoing.mapped);
    }
}

/// Drops from the TLB the pages of `mapped` touched since the last call, clearing their
/// accessed flags. Under TCG every branch ends a translation block, so the scan has none
/// but its loop's: it clears every flag and lists each page with the flag set, then
/// flushes the listed pages.
#[unsafe(link_section = ".text.ipc")] // see linker.ld
#[inline(always)] // on every switch: no call and return
fn flush_touched(mapped: &[MappedPage]) {
    let mut touched =
        [const { core::mem::MaybeUninit::<VirtAddr>::uninit() }; MAPPED_PAGES_TRACKED_MAX];
    let mut count: usize = 0;
    // `map_page` lists at most `MAPPED_PAGES_TRACKED_MAX` pages, so `count` stays below it
    // while the loop writes: the mask and the wrapping add only spare checks (each a block).
    for page in mapped {
        let entry = page.entry as *mut u64;
        // SAFETY: `entry` is the direct-map address of the last-level entry `map_page`
        // filled for this page (a `PageTableEntry` is one `u64`), in a table frame these
        // tables own until `clear`, which empties `mapped` too; the kernel touches tables
        // only with interrupts off on its one CPU, so nothing else accesses the entry now.
        let bits = unsafe { entry.read() };
        // SAFETY: as for the read. A set flag is cleared before the page's `invlpg` below,
        // so a flag set again later means a new TLB entry.
        unsafe { entry.write(bits & !PageTableFlags::ACCESSED.bits()) };
        touched[count % MAPPED_PAGES_TRACKED_MAX].write(page.page);
        count = count.wrapping_add(usize::from(bits & PageTableFlags::ACCESSED.bits() != 0));
    }
    // An `invlpg` also empties every paging-structure cache entry, whatever its address
    // (Intel SDM 4.10.4.1): one is needed even if no page was touched, for the outgoing
    // intermediate entries a walk may have cached. Then slot 0 holds the last page scanned
    // (each iteration writes its page at `count`), which serves as well as any. Computed
    // without a branch (`max` and `min` become conditional moves), as is the bound.
    let flushes = count
        .max(usize::from(!mapped.is_empty()))
        .min(MAPPED_PAGES_TRACKED_MAX);
    for slot in &touched[..flushes] {
        // SAFETY: the loop above wrote the first `count` slots, and slot 0 whenever
        // `mapped` is not empty: `flushes` is at most the larger of the two.
        x86_64::instructions::tlb::flush(unsafe { slot.assume_init() });
    }
}

/// Empties the live root's user half and the TLB: every process's tables were cleared, or
/// no process runs any more.
pub fn flush_live_user_half() {
    let live = table_at(live_root());
    for index in USER_TOP_ENTRIES {
        live[index].set_unused();
    }
    x86_64::instructions::tlb::flush_all();
}
