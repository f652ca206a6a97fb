//! The ELF loader: a statically linked executable of the initial image becomes a new
//! process, a root node whose space tree holds its segments and stack.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use holdfast_abi as abi;
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, Rights};

use crate::arch::syscall::UserRegisters;
use crate::memory::PAGE_BYTES;
use crate::objects::{OBJECTS, Objects};
use crate::space;
use holdfast_objects::space::{Walk, slot_for, walk};
use super::table::{Process, ProcessState, SCHEDULER};

/// The height of every program's space: 4 KiB × 32^7 covers the whole 2^47-byte user half.
const SPACE_HEIGHT: u8 = 7;

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
    /// A page would be both writable and executable (a segment with both flags, or a
    /// writable and an executable segment sharing a page): W^X forbids it.
    WritableAndExecutable {
        virtual_address: u64,
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
            Self::WritableAndExecutable { virtual_address } => write!(
                f,
                "the page at {virtual_address:#x} would be writable and executable"
            ),
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

/// Puts `page` at `address` in the space tree `space`, making the nodes on the way.
fn place_page(objects: &mut Objects, space: Capability, address: u64, page: Capability) {
    let mut level = space;
    for height in (1..=SPACE_HEIGHT).rev() {
        let slot = slot_for(height, address);
        if height == 1 {
            objects
                .cache
                .node_mut(&level)
                .expect("a live space")
                .swap(slot, page);
            return;
        }
        let existing = objects.cache.node(&level).expect("a live space").get(slot);
        level = if existing.kind() == CapType::Space {
            existing
        } else {
            let node = objects.create_node(CapType::Node);
            let child = Capability::space(node.object(), node.version(), height - 1, false)
                .expect("height below the maximum");
            objects
                .cache
                .node_mut(&level)
                .expect("a live space")
                .swap(slot, child);
            child
        };
    }
}

/// Fills `[start, end)` of `space` with `contents` then zeros, in fresh pages (read-only
/// where `writable` is false, no-execute where `executable` is). A page an earlier segment
/// already filled (two segments sharing a page, as a linker may lay out .rodata and .text)
/// is filled in place, keeping that segment's bytes, and is writable if either segment is,
/// executable if either is ([`load`] refuses a page that would be both).
fn fill_range(
    objects: &mut Objects,
    space: Capability,
    (start, end): (u64, u64),
    contents: &[u8],
    (writable, executable): (bool, bool),
) {
    let page_bytes = PAGE_BYTES as u64;
    let mut page_address = start & !(page_bytes - 1);
    while page_address < end {
        // The loader's trees restrict no node, so the page found carries its own rights; it
        // maps nothing (no translators).
        let earlier = match walk(&objects.cache, space, page_address, false, 0) {
            Walk::Page { page, .. } => Some(page),
            Walk::Missing { .. } => None,
        };
        let page = match earlier {
            Some(earlier) => objects
                .cache
                .page_capability(earlier.object())
                .expect("in the tree"),
            // Written below: made here rather than read back from the store as zeros.
            None => objects
                .create_resident_page()
                .unwrap_or_else(|error| panic!("making a program's page: {}", error.0)),
        };
        objects
            .ensure_resident(&[page.object()], true)
            .unwrap_or_else(|error| panic!("loading a program's page: {}", error.0));
        let bytes = objects.cache.page_mut(&page).expect("live").bytes_mut();
        // Only this segment's part of the page: its file bytes, then zeros (bss). Slices,
        // not a byte loop: a large bss is hundreds of thousands of pages.
        let segment_start = page_address.max(start);
        let segment_end = (page_address + page_bytes).min(end);
        let part = &mut bytes[(segment_start - page_address) as usize..(segment_end - page_address) as usize];
        let file_part = contents.get((segment_start - start) as usize..).unwrap_or(&[]);
        let file_bytes = file_part.len().min(part.len());
        part[..file_bytes].copy_from_slice(&file_part[..file_bytes]);
        part[file_bytes..].fill(0);
        let writable = writable
            || earlier.is_some_and(|earlier| !earlier.rights().contains(Rights::READ_ONLY));
        let executable = executable || earlier.is_some_and(|earlier| earlier.may_execute());
        let page = match (writable, executable) {
            (true, _) => page.restricted(Rights::NO_EXECUTE),
            (false, true) => page.restricted(Rights::READ_ONLY),
            (false, false) => page.restricted(Rights::READ_ONLY.union(Rights::NO_EXECUTE)),
        };
        place_page(objects, space, page_address, page);
        page_address += page_bytes;
    }
}

/// Loads a statically linked ELF executable as a new, runnable process: a root node whose
/// space is a tree holding the program's segments and stack. Returns its process
/// capability; the caller fills its capability registers.
pub fn load(name: &'static str, elf_bytes: &[u8]) -> Result<Capability, LoadError> {
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
    let segments = file.segments().ok_or(LoadError::NotStaticExecutable)?;
    let mut loads = Vec::new();
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
        let access = (segment.p_flags & PF_W != 0, segment.p_flags & PF_X != 0);
        // W^X: no segment both writable and executable, nor two that share a page.
        let pages = |(start, end): (u64, u64)| start / PAGE_BYTES as u64..end.div_ceil(PAGE_BYTES as u64);
        let shares_page = |&(range, _, _): &((u64, u64), &[u8], (bool, bool))| {
            let (mine, theirs) = (pages((start, end)), pages(range));
            mine.start < theirs.end && theirs.start < mine.end
        };
        let writable = access.0 || loads.iter().filter(|load| shares_page(load)).any(|load| load.2.0);
        let executable = access.1 || loads.iter().filter(|load| shares_page(load)).any(|load| load.2.1);
        if writable && executable {
            return Err(LoadError::WritableAndExecutable { virtual_address: start });
        }
        loads.push(((start, end), contents, access));
    }

    let mut objects = OBJECTS.lock();
    let root = objects.create_node(CapType::Process);
    let space_node = objects.create_node(CapType::Node);
    let space = Capability::space(
        space_node.object(),
        space_node.version(),
        SPACE_HEIGHT,
        false,
    )
    .expect("height within the maximum");
    for (range, contents, access) in loads {
        fill_range(&mut objects, space, range, contents, access);
    }
    let stack = (
        abi::USER_STACK_TOP - abi::USER_STACK_BYTES,
        abi::USER_STACK_TOP,
    );
    fill_range(&mut objects, space, stack, &[], (true, false));
    let root_node = objects.cache.node_mut(&root).expect("just made");
    root_node.swap(process_root::SPACE, space);
    drop(objects);

    let registers = UserRegisters {
        rip: file.ehdr.e_entry,
        rsp: abi::USER_STACK_TOP,
        rflags: 0x202, // interrupts on
        ..UserRegisters::default()
    };
    SCHEDULER.lock().processes.push(Process {
        name,
        root,
        tables: space::UserTables::new(),
        registers,
        state: ProcessState::Runnable,
        stalled: VecDeque::new(),
        kept_for: super::NO_PROCESS,
        kept_until_tick: 0,
        waiting_for_keeper: false,
        payer: Capability::VOID,
        ran_out_while_served: false,
        group: root.object(),
        turn_group: root.object(),
        last_turn: 0,
        invocation_count: 0,
    });
    Ok(root)
}
