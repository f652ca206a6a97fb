//! A restart fed checkpoints whose blocks carry valid checksums but wrong contents: the
//! store reads them back without complaint (it checks that a block is the one written, not
//! what it says), and the checks a restart makes (`holdfast_objects::restart`, the kernel's
//! `persistence/restore.rs` and `process/root_node.rs`) refuse them with an error naming the
//! object, never a panic or an allocation sized by the disk (a huge process count with a
//! valid checksum is `holdfast_objects::directory`'s own test); a rip or rsp outside the user
//! half (which a program can leave itself) restores that process faulted, named.

use std::cell::RefCell;
use std::rc::Rc;

use holdfast_objects::directory::{Directory, DirectoryBlock, DirectoryProcess, DirectoryReader};
use holdfast_objects::node::process_root;
use holdfast_objects::restart::{self, REGISTER_COUNT, StoreBounds, register_words_slot, status};
use holdfast_objects::{Capability, Node, ObjectId, Version};
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError, Geometry, NODE_SIZE, Store};

const GEOMETRY: Geometry = Geometry { store_id: 0x5eed, node_count: 16, page_count: 200, log_block_count: 256 };
/// The kernel keeps the checkpoint directory as page 0.
const DIRECTORY_PAGE: ObjectId = ObjectId(0);

/// A disk in memory, shared so that the store can be opened again on it.
#[derive(Clone)]
struct MemoryDisk(Rc<RefCell<Vec<u8>>>);

impl BlockDevice for MemoryDisk {
    fn block_count(&self) -> u64 {
        (self.0.borrow().len() / BLOCK_SIZE) as u64
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let start = first_block as usize * BLOCK_SIZE;
        buf.copy_from_slice(self.0.borrow().get(start..start + buf.len()).ok_or(DeviceError::OutOfRange)?);
        Ok(())
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        let start = first_block as usize * BLOCK_SIZE;
        self.0.borrow_mut().get_mut(start..start + data.len()).ok_or(DeviceError::OutOfRange)?.copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}

/// A root node as the kernel's write-back leaves it: `rip`, `rsp` and `rflags` in the
/// register slots, status `code`.
fn root_node(rip: u64, rsp: u64, rflags: u64, code: u64) -> Node {
    let mut words = [0u64; process_root::REGISTER_WORDS];
    words[15..REGISTER_COUNT].copy_from_slice(&[rip, rsp, rflags]);
    let mut node = Node::default();
    node.swap(process_root::STATUS, Capability::number([code, 0]));
    for (index, pair) in words.chunks_exact(2).enumerate() {
        node.swap(register_words_slot(index), Capability::number([pair[0], pair[1]]));
    }
    node
}

/// Commits a checkpoint of `directory` and `roots` (id, node) to a fresh store, reopens it
/// and restarts from it as the kernel does; returns what the restart said.
fn restart_from(directory: &Directory, roots: &[(u64, Node)]) -> Result<usize, String> {
    // A directory of at most 84 processes is one block, page 0.
    let blocks = directory.encode(&[]).unwrap();
    restart_from_block(&blocks[0], roots)
}

/// [`restart_from`] with the directory's block as given.
fn restart_from_block(block: &DirectoryBlock, roots: &[(u64, Node)]) -> Result<usize, String> {
    let disk = MemoryDisk(Rc::new(RefCell::new(vec![0; GEOMETRY.layout().unwrap().block_count as usize * BLOCK_SIZE])));
    let mut store = Store::format(vec![disk.clone()], GEOMETRY).unwrap();
    store.begin_checkpoint().unwrap();
    store.checkpoint_write_page(DIRECTORY_PAGE, Version(1), block).unwrap();
    for (id, node) in roots {
        let image: [u8; NODE_SIZE] = node.encode(Version(1));
        store.checkpoint_write_node(ObjectId(*id), Version(1), &image).unwrap();
    }
    store.commit_checkpoint().unwrap();
    drop(store);

    // The restart: every block below passes the store's checksums.
    let mut store = Store::open(vec![disk]).map_err(|error| error.to_string())?;
    let mut block = [0u8; BLOCK_SIZE];
    store.read_page(DIRECTORY_PAGE, &mut block).map_err(|error| error.to_string())?;
    let geometry = store.geometry();
    let reader = DirectoryReader::new(&block, geometry.page_count).map_err(|error| error.to_string())?;
    let (directory, _) = reader.finish().map_err(|error| error.to_string())?;
    let bounds = StoreBounds { node_count: geometry.node_count, page_count: geometry.page_count };
    restart::check_directory(&directory, bounds).map_err(|error| error.to_string())?;
    for DirectoryProcess { root, name } in &directory.processes {
        let (_, image) = store.read_node(*root).map_err(|error| error.to_string())?;
        let (node, _) = Node::decode(&image).map_err(|error| error.to_string())?;
        let process = restart::read_named_process_root(name, *root, &node).map_err(|error| error.to_string())?;
        if let Some(why) = process.contained {
            return Err(format!("process {name}: root node {}: {why}; restored faulted", root.0));
        }
    }
    Ok(directory.processes.len())
}

fn directory(next_node_id: u64, next_page_id: u64, roots: &[u64]) -> Directory {
    let processes = roots
        .iter()
        .map(|&root| DirectoryProcess { root: ObjectId(root), name: format!("process-{root}") })
        .collect();
    Directory { next_node_id, next_page_id, processes }
}

const USER_RIP: u64 = 0x40_1000;
const USER_RSP: u64 = 0x7fff_fefe_0000;

#[test]
fn a_checkpoint_the_kernel_could_have_written_restarts() {
    let roots = [(3, root_node(USER_RIP, USER_RSP, 0x246, status::RUNNABLE)), (5, root_node(0, 0, 0x202, status::STOPPED))];
    assert_eq!(restart_from(&directory(8, 100, &[3, 5]), &roots), Ok(2));
}

#[test]
fn ids_past_the_geometry_are_refused_naming_the_counter_or_the_process() {
    let roots = [(3, root_node(USER_RIP, USER_RSP, 0x202, status::RUNNABLE))];
    // A next page id of 2^60 would size the kernel's page table at 2^60 entries.
    assert_eq!(
        restart_from(&directory(8, 1 << 60, &[3]), &roots),
        Err(String::from(
            "checkpoint directory: next page id 1152921504606846976 is outside the store's geometry (1..=200)"
        ))
    );
    assert_eq!(
        restart_from(&directory(17, 100, &[3]), &roots),
        Err(String::from("checkpoint directory: next node id 17 is outside the store's geometry (1..=16)"))
    );
    assert_eq!(
        restart_from(&directory(8, 100, &[3, 12]), &roots),
        Err(String::from("process process-12: root node 12 was never allocated (next node id 8)"))
    );
}

#[test]
fn kernel_addresses_in_a_root_node_contain_it_and_kernel_flags_are_refused_naming_it() {
    let refused = |node: Node| restart_from(&directory(8, 100, &[3]), &[(3, node)]).unwrap_err();
    assert_eq!(
        refused(root_node(0xffff_ffff_8010_0000, USER_RSP, 0x202, status::RUNNABLE)),
        "process process-3: root node 3: rip 0xffffffff80100000 is not a user address; restored faulted"
    );
    assert_eq!(
        refused(root_node(USER_RIP, 0xffff_8000_0000_0000, 0x202, status::RUNNABLE)),
        "process process-3: root node 3: rsp 0xffff800000000000 is not a user address; restored faulted"
    );
    // I/O privilege 3: no ring-3 program holds these flags.
    assert_eq!(
        refused(root_node(USER_RIP, USER_RSP, 0x3002, status::RUNNABLE)),
        "process process-3: root node 3: rflags 0x3002 are not a ring-3 program's"
    );
    assert_eq!(
        refused(root_node(USER_RIP, USER_RSP, 0x202, 0xdead_0000_0000)),
        "process process-3: root node 3: unknown run state 0xdead00000000"
    );
}
