//! Segments: kernel and user code/data in the order `syscall`/`sysret` require, and the TSS
//! that gives interrupts from ring 3 the kernel stack and double faults a stack of their own.

use spin::Once;
use x86_64::VirtAddr;
use x86_64::instructions::segmentation::{CS, DS, ES, SS, Segment};
use x86_64::instructions::tables::load_tss;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;

pub const DOUBLE_FAULT_STACK_INDEX: u16 = 0;
const DOUBLE_FAULT_STACK_BYTES: usize = 16 * 1024;

pub struct Selectors {
    pub kernel_code: SegmentSelector,
    pub kernel_data: SegmentSelector,
    pub user_code: SegmentSelector,
    pub user_data: SegmentSelector,
    pub tss: SegmentSelector,
}

static TSS: Once<TaskStateSegment> = Once::new();
static GDT: Once<(GlobalDescriptorTable, Selectors)> = Once::new();

pub fn init() {
    let tss = TSS.call_once(|| {
        static mut DOUBLE_FAULT_STACK: [u8; DOUBLE_FAULT_STACK_BYTES] =
            [0; DOUBLE_FAULT_STACK_BYTES];
        let mut tss = TaskStateSegment::new();
        tss.privilege_stack_table[0] = VirtAddr::new(super::boot::kernel_stack_top_address());
        let double_fault_stack = &raw const DOUBLE_FAULT_STACK;
        tss.interrupt_stack_table[DOUBLE_FAULT_STACK_INDEX as usize] =
            VirtAddr::from_ptr(double_fault_stack) + DOUBLE_FAULT_STACK_BYTES as u64;
        tss
    });
    let (gdt, selectors) = GDT.call_once(|| {
        let mut gdt = GlobalDescriptorTable::new();
        let kernel_code = gdt.append(Descriptor::kernel_code_segment());
        let kernel_data = gdt.append(Descriptor::kernel_data_segment());
        let user_data = gdt.append(Descriptor::user_data_segment());
        let user_code = gdt.append(Descriptor::user_code_segment());
        let tss = gdt.append(Descriptor::tss_segment(tss));
        (
            gdt,
            Selectors {
                kernel_code,
                kernel_data,
                user_code,
                user_data,
                tss,
            },
        )
    });
    gdt.load();
    // SAFETY: the selectors index the GDT just loaded, with the descriptors named.
    unsafe {
        CS::set_reg(selectors.kernel_code);
        SS::set_reg(selectors.kernel_data);
        DS::set_reg(selectors.kernel_data);
        ES::set_reg(selectors.kernel_data);
        load_tss(selectors.tss);
    }
}

pub fn selectors() -> &'static Selectors {
    &GDT.get().expect("gdt::init ran").1
}
