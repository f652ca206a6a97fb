//! What the boot protocol tells us: which protocol it was, the command line, the usable
//! RAM and the modules (the initial image). PVH (`hvm_start_info`) and multiboot2 are read
//! into the same [`BootInformation`], so nothing after this depends on how we were booted.

use crate::memory::physical_to_virtual;

pub const RANGES_MAX: usize = 32;
const PVH_START_INFO_MAGIC: u32 = 0x336e_c578;
const MULTIBOOT2_BOOTLOADER_MAGIC: u32 = 0x36d7_6289;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootProtocol {
    Pvh,
    Multiboot2,
}

impl BootProtocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pvh => "pvh",
            Self::Multiboot2 => "multiboot2",
        }
    }
}

pub struct BootInformation {
    pub protocol: BootProtocol,
    pub command_line: &'static str,
    /// Usable RAM as (start, end) physical addresses.
    pub usable: [(u64, u64); RANGES_MAX],
    pub usable_count: usize,
    /// The first module: the initial image, as (physical start, length).
    pub initial_image: Option<(u64, u64)>,
    /// Physical ranges (start, end) that hold the boot information and the modules.
    pub reserved: [(u64, u64); RANGES_MAX],
    pub reserved_count: usize,
}

impl BootInformation {
    pub fn usable_ranges(&self) -> &[(u64, u64)] {
        &self.usable[..self.usable_count]
    }

    pub fn initial_image_bytes(&self) -> Option<&'static [u8]> {
        let (start, length) = self.initial_image?;
        // SAFETY: the boot loader placed the module there; the range is excluded from the
        // heap (`reserved_end`) and never written.
        Some(unsafe {
            core::slice::from_raw_parts(physical_to_virtual(start) as *const u8, length as usize)
        })
    }

    pub fn reserved_ranges(&self) -> &[(u64, u64)] {
        &self.reserved[..self.reserved_count]
    }

    fn push_reserved(&mut self, start: u64, end: u64) {
        assert!(self.reserved_count < RANGES_MAX, "too many reserved ranges");
        self.reserved[self.reserved_count] = (start, end);
        self.reserved_count += 1;
    }

    fn push_usable(&mut self, start: u64, end: u64) {
        if self.usable_count < RANGES_MAX && end > start {
            self.usable[self.usable_count] = (start, end);
            self.usable_count += 1;
        }
    }
}

/// A NUL-terminated string at a physical address, if it is UTF-8.
///
/// # Safety
/// `physical` points at a NUL-terminated string that is never written again.
unsafe fn c_string(physical: u64) -> &'static str {
    if physical == 0 {
        return "";
    }
    // SAFETY: guaranteed by the caller.
    let text = unsafe { core::ffi::CStr::from_ptr(physical_to_virtual(physical) as *const _) };
    text.to_str().unwrap_or("")
}

/// Reads the boot information.
///
/// # Safety
/// `information_physical` is the boot information address the loader passed in `ebx`, and
/// `magic` the `eax` it passed.
pub unsafe fn read(magic: u32, information_physical: u64) -> BootInformation {
    let mut information = BootInformation {
        protocol: BootProtocol::Pvh,
        command_line: "",
        usable: [(0, 0); RANGES_MAX],
        usable_count: 0,
        initial_image: None,
        reserved: [(0, 0); RANGES_MAX],
        reserved_count: 0,
    };
    let base = physical_to_virtual(information_physical);
    if magic == MULTIBOOT2_BOOTLOADER_MAGIC {
        // SAFETY: the multiboot2 loader passed a valid information structure in `ebx`.
        unsafe { read_multiboot2(&mut information, base) };
    } else {
        // SAFETY: PVH puts `hvm_start_info` at `ebx`; its magic is checked below.
        let start_magic = unsafe { core::ptr::read(base as *const u32) };
        assert_eq!(start_magic, PVH_START_INFO_MAGIC, "unknown boot protocol");
        // SAFETY: as above.
        unsafe { read_pvh(&mut information, base) };
    }
    information
}

#[repr(C)]
struct PvhStartInformation {
    magic: u32,
    version: u32,
    flags: u32,
    module_count: u32,
    module_list_physical: u64,
    command_line_physical: u64,
    rsdp_physical: u64,
    memory_map_physical: u64,
    memory_map_entry_count: u32,
    reserved: u32,
}

#[repr(C)]
struct PvhModule {
    physical: u64,
    size: u64,
    command_line_physical: u64,
    reserved: u64,
}

#[repr(C)]
struct PvhMemoryMapEntry {
    address: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// The physical range of a NUL-terminated string, for reservation.
fn c_string_range(physical: u64, text: &str) -> (u64, u64) {
    (physical, physical + text.len() as u64 + 1)
}

/// # Safety
/// `base` maps a valid `hvm_start_info` (version 1 or later).
unsafe fn read_pvh(information: &mut BootInformation, base: u64) {
    // SAFETY: guaranteed by the caller.
    let start = unsafe { &*(base as *const PvhStartInformation) };
    assert!(
        start.version >= 1,
        "PVH start info version 0 has no memory map"
    );
    information.protocol = BootProtocol::Pvh;
    // SAFETY: the loader's command line is NUL-terminated.
    information.command_line = unsafe { c_string(start.command_line_physical) };
    let (line_start, line_end) =
        c_string_range(start.command_line_physical, information.command_line);
    information.push_reserved(line_start, line_end);
    let information_physical = base - crate::memory::DIRECT_MAP_OFFSET;
    information.push_reserved(
        information_physical,
        information_physical + size_of::<PvhStartInformation>() as u64,
    );
    if start.module_count > 0 {
        // SAFETY: the module list has `module_count` entries.
        let module =
            unsafe { &*(physical_to_virtual(start.module_list_physical) as *const PvhModule) };
        information.initial_image = Some((module.physical, module.size));
        information.push_reserved(module.physical, module.physical + module.size);
    }
    for index in 0..start.memory_map_entry_count as u64 {
        let address = start.memory_map_physical + index * size_of::<PvhMemoryMapEntry>() as u64;
        // SAFETY: the memory map has `memory_map_entry_count` entries.
        let entry = unsafe { &*(physical_to_virtual(address) as *const PvhMemoryMapEntry) };
        if entry.kind == 1 {
            information.push_usable(entry.address, entry.address + entry.size);
        }
    }
}

/// # Safety
/// `base` maps a valid multiboot2 information structure.
unsafe fn read_multiboot2(information: &mut BootInformation, base: u64) {
    // SAFETY: guaranteed by the caller.
    let boot = unsafe {
        multiboot2::BootInformation::load(base as *const multiboot2::BootInformationHeader)
    }
    .expect("malformed multiboot2 information");
    information.protocol = BootProtocol::Multiboot2;
    let information_physical = base - crate::memory::DIRECT_MAP_OFFSET;
    information.push_reserved(
        information_physical,
        information_physical + boot.total_size() as u64,
    );
    if let Some(command_line) = boot.command_line_tag() {
        let text = command_line.cmdline().unwrap_or("");
        // SAFETY: the tag lives in the information structure, which we never overwrite
        // (the heap starts above `reserved_end`).
        information.command_line = unsafe { &*(text as *const str) };
    }
    if let Some(module) = boot.module_tags().next() {
        let start = module.start_address() as u64;
        let end = module.end_address() as u64;
        information.initial_image = Some((start, end - start));
        information.push_reserved(start, end);
    }
    if let Some(map) = boot.memory_map_tag() {
        for area in map.memory_areas() {
            if area.typ() == multiboot2::MemoryAreaType::Available {
                information.push_usable(area.start_address(), area.end_address());
            }
        }
    }
}
