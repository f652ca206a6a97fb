//! The initial system: the processes, nodes, pages and meters the image builder resolved
//! from its manifest (`holdfast_boot_image::system_table`), made into objects, with every
//! capability the table names installed where it says.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use holdfast_boot_image::Image;
use holdfast_boot_image::system_table::{self as table, SystemTable, Target};
use holdfast_objects::node::process_root;
use holdfast_objects::{CapType, Capability, ObjectId, Rights, Slot, Version};

use crate::objects::{OBJECTS, Objects};
use crate::process;

/// The objects made so far, by their index in the table.
struct Made<'a> {
    processes: Vec<Capability>,
    nodes: Vec<Capability>,
    pages: Vec<Capability>,
    meters: Vec<Capability>,
    /// The value of `holdfast.<key>=<value>` on the command line, if given.
    boot_number: &'a dyn Fn(&str) -> Option<u64>,
}

/// A kernel capability for the table's `capability`. The table was checked when decoded,
/// so every index is in range.
fn capability(objects: &Objects, made: &Made<'_>, capability: &table::Capability) -> Capability {
    let index = |list: &Vec<Capability>, at: u32| list[at as usize];
    let from_node = |kind, node: Capability| {
        objects
            .cache
            .node_capability(kind, node.object())
            .expect("made above")
    };
    let made_capability = match capability.target {
        Target::Void => Capability::VOID,
        Target::Number(words) => Capability::number(words),
        // Word 1 says whether the command line gave it, so that 0 is a value like any other.
        Target::BootNumber(key) => match (made.boot_number)(key.as_str()) {
            Some(value) => Capability::number([value, 1]),
            None => Capability::number([0, 0]),
        },
        Target::Page(at) => index(&made.pages, at),
        Target::Node(at) => index(&made.nodes, at),
        Target::Space { node, height } => {
            let node = index(&made.nodes, node);
            Capability::space(node.object(), node.version(), height, false)
                .expect("the table checks heights")
        }
        Target::Process(at) => index(&made.processes, at),
        Target::Start { process, badge } => {
            from_node(CapType::Start, index(&made.processes, process)).with_badge(badge)
        }
        Target::Meter(at) => index(&made.meters, at),
        Target::Indirector { node, badge } => {
            from_node(CapType::Indirector, index(&made.nodes, node)).with_badge(badge)
        }
        Target::Console => Capability::new(CapType::Console, ObjectId(0), Version(0)),
        Target::Clock => Capability::new(CapType::Clock, ObjectId(0), Version(0)),
        Target::Checkpoint => Capability::new(CapType::Checkpoint, ObjectId(0), Version(0)),
        Target::Journal => Capability::new(CapType::Journal, ObjectId(0), Version(0)),
        Target::Control => Capability::new(CapType::Control, ObjectId(0), Version(0)),
        Target::NetworkDevice => Capability::new(CapType::NetworkDevice, ObjectId(0), Version(0)),
        Target::Range => Capability::new(CapType::Range, ObjectId(0), Version(0)),
    };
    let rights = Rights::from_bits(capability.rights.0).expect("the table checks rights");
    made_capability.restricted(rights)
}

/// Loads every process of the table and makes its objects; returns how many processes
/// there are, or what went wrong, naming the process. `boot_number` gives the value of a
/// boot number's key from the command line.
pub fn build(
    image: &Image<'static>,
    system: &SystemTable<'static>,
    boot_number: &dyn Fn(&str) -> Option<u64>,
) -> Result<usize, String> {
    let programs: Vec<_> = image.programs().collect();
    let mut made = Made {
        processes: Vec::new(),
        nodes: Vec::new(),
        pages: Vec::new(),
        meters: Vec::new(),
        boot_number,
    };
    for process in system.processes() {
        let program = programs[process.program as usize];
        let root = process::load(process.name, program.payload).map_err(|error| {
            format!(
                "process {}: program {}: {error}",
                process.name, program.name
            )
        })?;
        if process.template {
            // A constructor's template: made and kept, never run.
            process::stop_made(root.object());
        }
        made.processes.push(root);
    }
    let mut objects = OBJECTS.lock();
    for _ in system.nodes() {
        made.nodes.push(objects.create_node(CapType::Node));
    }
    for page in system.pages() {
        let capability = objects.create_page();
        // A zero page stays on the store until used.
        if page.fill != 0 || page.contents.iter().any(|&byte| byte != 0) {
            objects
                .ensure_resident(&[capability.object()], true)
                .map_err(|error| format!("page {}: {}", capability.object().0, error.0))?;
            let bytes = objects.cache.page_mut(&capability).expect("just made").bytes_mut();
            bytes.fill(page.fill);
            bytes[..page.contents.len()].copy_from_slice(page.contents);
        }
        // Data: only the loader's code pages may be executed (`Rights::NO_EXECUTE`).
        made.pages.push(capability.restricted(Rights::NO_EXECUTE));
    }
    for meter in system.meters() {
        let capability = objects.create_node(CapType::Meter);
        // The table checks that a parent is an earlier meter.
        let parent = meter.parent.map_or(Capability::VOID, |parent| made.meters[parent as usize]);
        let node = objects.cache.node_mut(&capability).expect("just made");
        node.swap(process::METER_PARENT_SLOT, parent);
        node.swap(
            Slot::new(0).expect("slot 0"),
            Capability::number([meter.microseconds, 0]),
        );
        made.meters.push(capability);
    }
    for (node, record) in made.nodes.iter().zip(system.nodes()) {
        for (index, slot) in record.slots.iter().enumerate() {
            let installed = capability(&objects, &made, slot);
            let slot = Slot::new(index as u64).expect("32 slots");
            objects
                .cache
                .node_mut(node)
                .expect("made above")
                .swap(slot, installed);
        }
    }
    for (root, record) in made.processes.iter().zip(system.processes()) {
        let mut installs = Vec::new();
        for (index, register) in record.registers.iter().enumerate() {
            let slot = process_root::capability_register(index as u64).expect("16 registers");
            installs.push((slot, capability(&objects, &made, register)));
        }
        installs.push((
            process_root::KEEPER,
            capability(&objects, &made, &record.keeper),
        ));
        installs.push((
            process_root::METER,
            capability(&objects, &made, &record.meter),
        ));
        let node = objects.cache.node_mut(root).expect("made by load");
        for (slot, installed) in installs {
            node.swap(slot, installed);
        }
    }
    Ok(made.processes.len())
}
