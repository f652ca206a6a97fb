//! Engine tests over an in-memory device without a write cache; the crash and fault
//! campaigns are in holdfast-store-sim.

use alloc::rc::Rc;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

use holdfast_objects::{ObjectId, Version};

use crate::device::check_request;
use crate::format::log_record::LOG_RECORD_DATA_BLOCKS_MAX;
use crate::format::zeroed_block;
use crate::*;

/// Shared so that a test can damage the media under an open store; counts the write and
/// flush requests it gets, the reads and the `read_many` requests.
#[derive(Clone)]
pub(crate) struct MemoryDevice(Rc<RefCell<Vec<u8>>>, Rc<Cell<u64>>, Rc<Cell<u64>>, Rc<Cell<u64>>);

impl MemoryDevice {
    pub(crate) fn new(block_count: u64) -> Self {
        Self(
            Rc::new(RefCell::new(
                alloc::vec![0; block_count as usize * BLOCK_SIZE],
            )),
            Rc::new(Cell::new(0)),
            Rc::new(Cell::new(0)),
            Rc::new(Cell::new(0)),
        )
    }

    /// `read_many` requests so far (their runs count in [`MemoryDevice::reads`] too).
    fn read_batches(&self) -> u64 {
        self.3.get()
    }

    /// Write and flush requests so far.
    fn requests(&self) -> u64 {
        self.1.get()
    }

    /// Read requests so far.
    fn reads(&self) -> u64 {
        self.2.get()
    }

    pub(crate) fn contents(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }

    pub(crate) fn block(&self, block: u64) -> Vec<u8> {
        self.0.borrow()[block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE].to_vec()
    }

    fn set_block(&self, block: u64, bytes: &[u8]) {
        self.0.borrow_mut()[block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE]
            .copy_from_slice(bytes);
    }

    pub(crate) fn flip_bit(&self, block: u64) {
        self.0.borrow_mut()[block as usize * BLOCK_SIZE + 100] ^= 1;
    }
}

impl BlockDevice for MemoryDevice {
    fn block_count(&self) -> u64 {
        (self.0.borrow().len() / BLOCK_SIZE) as u64
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.2.set(self.2.get() + 1);
        check_request(self.block_count(), first_block, buf.len())?;
        let start = first_block as usize * BLOCK_SIZE;
        buf.copy_from_slice(&self.0.borrow()[start..start + buf.len()]);
        Ok(())
    }

    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        self.3.set(self.3.get() + 1);
        for (first_block, buf) in reads.iter_mut() {
            self.read(*first_block, buf)?;
        }
        Ok(())
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.1.set(self.1.get() + 1);
        check_request(self.block_count(), first_block, data.len())?;
        let start = first_block as usize * BLOCK_SIZE;
        self.0.borrow_mut()[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.1.set(self.1.get() + 1);
        Ok(())
    }
}

pub(crate) const GEOMETRY: Geometry = Geometry {
    store_id: 0x5eed,
    node_count: 16,
    page_count: 200,
    log_block_count: 256,
};

fn page(fill: u8) -> alloc::boxed::Box<format::Block> {
    let mut block = zeroed_block();
    block.fill(fill);
    block
}

pub(crate) fn checkpoint_pages(store: &mut Store<MemoryDevice>, pages: &[(u64, u64, u8)]) -> u64 {
    store.begin_checkpoint().unwrap();
    for (id, version, fill) in pages {
        store
            .checkpoint_write_page(ObjectId(*id), Version(*version), &page(*fill))
            .unwrap();
    }
    store.commit_checkpoint().unwrap()
}

pub(crate) fn migrate_all(store: &mut Store<MemoryDevice>) {
    while let MigrationProgress::Migrating { .. } = store.migrate_step(7).unwrap() {}
}

/// Two blank disks of the test geometry's size, for a mirrored store.
pub(crate) fn blank_mirrors() -> (MemoryDevice, MemoryDevice) {
    let block_count = GEOMETRY.layout().unwrap().block_count;
    (MemoryDevice::new(block_count), MemoryDevice::new(block_count))
}

pub(crate) fn read_page(store: &mut Store<MemoryDevice>, id: u64) -> (u64, u8) {
    let mut data = zeroed_block();
    let version = store.read_page(ObjectId(id), &mut data).unwrap();
    assert!(
        data.iter().all(|byte| *byte == data[0]),
        "page {id} is one byte repeated"
    );
    (version.0, data[0])
}

#[test]
fn a_fresh_store_reads_zeros_at_version_0() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], GEOMETRY).unwrap();
    assert_eq!(read_page(&mut store, 199), (0, 0));
    let (version, image) = store.read_node(ObjectId(15)).unwrap();
    assert_eq!(
        (version, image.iter().all(|byte| *byte == 0)),
        (Version(0), true)
    );
    assert_eq!(
        store.read_page(ObjectId(200), &mut zeroed_block()),
        Err(StoreError::ObjectOutOfRange { id: 200 })
    );
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn checkpoints_migrate_home_and_survive_reopen() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    // More pages than one record holds, so that the checkpoint spans records.
    let pages: Vec<(u64, u64, u8)> = (0..100).map(|id| (id, 1, id as u8 + 1)).collect();
    assert_eq!(checkpoint_pages(&mut store, &pages), 1);
    assert_eq!(read_page(&mut store, 42), (1, 43));
    migrate_all(&mut store);
    // The tail moved to where migration began, just past the commit record.
    assert_eq!(store.log_used_blocks(), 0);
    assert_eq!(read_page(&mut store, 42), (1, 43));
    store.begin_checkpoint().unwrap();
    let mut image = [0u8; NODE_SIZE];
    image[0] = 9;
    store
        .checkpoint_write_node(ObjectId(5), Version(3), &image)
        .unwrap();
    store
        .checkpoint_write_page(ObjectId(42), Version(2), &page(0xee))
        .unwrap();
    store.commit_checkpoint().unwrap();
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(store.checkpoint_generation(), 2);
    assert_eq!(read_page(&mut store, 42), (2, 0xee));
    assert_eq!(read_page(&mut store, 41), (1, 42));
    let (version, node) = store.read_node(ObjectId(5)).unwrap();
    assert_eq!((version, node[0]), (Version(3), 9));
    let pot = store.read_node_pot(1).unwrap();
    assert_eq!((pot[1].0, pot[1].1[0], pot[0].0), (Version(3), 9, Version(0)), "node 5 is slot 1 of pot 1");
    assert_eq!(store.read_node(ObjectId(4)).unwrap().0, Version(0));
    migrate_all(&mut store);
    let report = store.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.home_pages_written, 100);
    assert_eq!(report.home_node_pots_written, 1);
}

/// A checkpoint of many records goes out in runs of several records per device write; a
/// run that meets the end of the log is split around the padding record, and every block
/// reads back after a reopen, from the log and then from home.
#[test]
fn a_checkpoint_takes_no_more_log_than_its_bound_says() {
    let geometry = Geometry {
        store_id: 0xb0d,
        node_count: 400,
        page_count: 1200,
        log_block_count: 1000,
    };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], geometry).unwrap();
    // Nodes one to a pot and pages, from heads that make some records wrap around the log's
    // end.
    for (round, (pages, nodes)) in [(0u64, 0u64), (1, 0), (0, 1), (71, 0), (72, 3), (500, 90), (300, 0), (610, 97)]
        .into_iter()
        .enumerate()
    {
        let used_before = store.log_used_blocks();
        store.begin_checkpoint().unwrap();
        for node in 0..nodes {
            store
                .checkpoint_write_node(ObjectId(node * NODES_PER_POT), Version(1), &[round as u8; NODE_SIZE])
                .unwrap();
        }
        for id in 0..pages {
            store
                .checkpoint_write_page(ObjectId(id), Version(1), &page(round as u8))
                .unwrap();
        }
        store.commit_checkpoint().unwrap();
        let used = store.log_used_blocks() - used_before;
        let bound = crate::checkpoint_log_blocks_max(pages, nodes);
        assert!(used <= bound, "{pages} pages, {nodes} nodes: {used} blocks, bound {bound}");
        // Not so loose that it refuses systems that fit: a record's overhead, a padding.
        assert!(bound <= used + 2 * LOG_RECORD_DATA_BLOCKS_MAX as u64 + 4, "{pages} pages, {nodes} nodes: {used} blocks, bound {bound}");
        migrate_all(&mut store);
    }
}

#[test]
fn large_checkpoints_write_runs_of_records_that_wrap_around_the_log() {
    let geometry = Geometry {
        store_id: 0x5eed,
        node_count: 16,
        page_count: 1200,
        log_block_count: 1000,
    };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], geometry).unwrap();
    let first: Vec<(u64, u64, u8)> = (0..300).map(|id| (id, 1, id as u8)).collect();
    checkpoint_pages(&mut store, &first);
    migrate_all(&mut store);
    // 5 records of 71 pages or fewer and the commit record.
    assert_eq!(store.head.position, 300 + 5 + 1);
    // 700 pages and a pot: 9 records of 71 data blocks and one of 62. Records 1-8 are one run
    // (one write) from position 306; records 9 and 10 the next, and record 10 (63 blocks)
    // does not fit before the end (306 + 9 * 72 = 954): padding, then record 10 at 0.
    let requests_before = device.requests();
    let second: Vec<(u64, u64, u8)> = (300..1000).map(|id| (id, 2, id as u8 ^ 0x5a)).collect();
    store.begin_checkpoint().unwrap();
    let mut image = [0u8; NODE_SIZE];
    image[7] = 0x77;
    store
        .checkpoint_write_node(ObjectId(6), Version(4), &image)
        .unwrap();
    for (id, version, fill) in &second {
        store
            .checkpoint_write_page(ObjectId(*id), Version(*version), &page(*fill))
            .unwrap();
    }
    store.commit_checkpoint().unwrap();
    // Writes: run 1; run 2 as the stretch before the end, the padding header and the
    // stretch from 0; flush, commit record, flush.
    assert_eq!(device.requests() - requests_before, 1 + 3 + 3);
    assert_eq!(store.head.position, 63 + 1, "record 10 and the commit record from 0");
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(store.checkpoint_generation(), 2);
    for &(id, version, fill) in first.iter().chain(&second) {
        assert_eq!(read_page(&mut store, id), (version, fill), "page {id}");
    }
    let (version, node) = store.read_node(ObjectId(6)).unwrap();
    assert_eq!((version, node[7]), (Version(4), 0x77));
    migrate_all(&mut store);
    for &(id, version, fill) in first.iter().chain(&second) {
        assert_eq!(read_page(&mut store, id), (version, fill), "page {id}");
    }
    let report = store.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.home_pages_written, 1000);
}

/// A device whose handed-over writes ([`BlockDevice::write_owned`]) reach the media only
/// when a flush (or a read, which must see them) makes them: what a device with requests in
/// flight may do.
struct DeferringDevice {
    media: MemoryDevice,
    in_flight: Vec<(u64, alloc::sync::Arc<Vec<u8>>)>,
    flush_begins: u64,
}

impl DeferringDevice {
    fn land(&mut self) {
        for (first_block, data) in core::mem::take(&mut self.in_flight) {
            self.media.write(first_block, &data).unwrap();
        }
    }
}

impl BlockDevice for DeferringDevice {
    fn block_count(&self) -> u64 {
        self.media.block_count()
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.land();
        self.media.read(first_block, buf)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.media.write(first_block, data)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.land();
        self.media.flush()
    }

    fn write_owned(&mut self, first_block: u64, data: alloc::sync::Arc<Vec<u8>>) -> Result<(), DeviceError> {
        check_request(self.block_count(), first_block, data.len())?;
        self.in_flight.push((first_block, data));
        Ok(())
    }

    fn flush_begin(&mut self) -> Result<(), DeviceError> {
        self.flush_begins += 1;
        Ok(())
    }
}

/// A checkpoint's runs are handed to the device, which may still hold them when the next
/// node reads the log; the commit flushes them before its commit record, so that the media
/// hold every block the commit vouches for.
#[test]
fn handed_over_runs_are_flushed_before_the_commit_record() {
    let geometry = Geometry {
        store_id: 0x5eed,
        node_count: 400,
        page_count: 1200,
        log_block_count: 1000,
    };
    let media = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let device = DeferringDevice {
        media: media.clone(),
        in_flight: Vec::new(),
        flush_begins: 0,
    };
    let mut store = Store::format(alloc::vec![device], geometry).unwrap();
    store.begin_checkpoint().unwrap();
    let mut image = [0u8; NODE_SIZE];
    // Nodes in 71 pots fill the pot map, which goes out at once as a run of its own; pot 0
    // comes back after the pages and is read from the log, through the device that still
    // holds the run.
    for pot in 0..71u64 {
        image[0] = pot as u8 + 1;
        store
            .checkpoint_write_node(ObjectId(pot * 4), Version(1), &image)
            .unwrap();
    }
    for id in 0..600u64 {
        store
            .checkpoint_write_page(ObjectId(id), Version(1), &page(id as u8))
            .unwrap();
    }
    // The pots' run and one of 8 full records of pages went to the device, in flight.
    assert_eq!(store.mirrors.mirrors[0].device.in_flight.len(), 2);
    assert_eq!(store.mirrors.mirrors[0].device.flush_begins, 2);
    image[0] = 0x99;
    store
        .checkpoint_write_node(ObjectId(1), Version(2), &image)
        .unwrap();
    store.commit_checkpoint().unwrap();
    assert!(store.mirrors.mirrors[0].device.in_flight.is_empty());
    drop(store);
    let mut store = Store::open(alloc::vec![media]).unwrap();
    assert_eq!(store.checkpoint_generation(), 1);
    for id in 0..600u64 {
        assert_eq!(read_page(&mut store, id), (1, id as u8), "page {id}");
    }
    let pot = store.read_node_pot(0).unwrap();
    assert_eq!((pot[0].0, pot[0].1[0]), (Version(1), 1));
    assert_eq!((pot[1].0, pot[1].1[0]), (Version(2), 0x99));
    assert_eq!(store.read_node(ObjectId(280)).unwrap().1[0], 71);
}

/// A page written twice in one checkpoint (two copies in the log, in one record or in two)
/// reads as its last copy, before and after a reopen, and migrates home as that.
#[test]
fn the_last_copy_of_a_page_written_twice_in_a_checkpoint_wins() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    let mut pages: Vec<(u64, u64, u8)> = (0..80).map(|id| (id, 1, id as u8)).collect();
    // Page 3 again in the same record, page 5 again in the next record.
    pages.insert(10, (3, 2, 0xa3));
    pages.push((5, 2, 0xa5));
    checkpoint_pages(&mut store, &pages);
    assert_eq!(read_page(&mut store, 3), (2, 0xa3));
    assert_eq!(read_page(&mut store, 5), (2, 0xa5));
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 3), (2, 0xa3));
    assert_eq!(read_page(&mut store, 5), (2, 0xa5));
    migrate_all(&mut store);
    assert_eq!(read_page(&mut store, 3), (2, 0xa3));
    assert_eq!(read_page(&mut store, 5), (2, 0xa5));
    assert_eq!(read_page(&mut store, 4), (1, 4));
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn page_versions_come_from_the_tables_and_the_log_without_reading_pages() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], GEOMETRY).unwrap();
    // More pages than one table covers, some migrated home, some still in the log.
    let home: Vec<(u64, u64, u8)> = (0..100).map(|id| (id, id % 3, 1)).collect();
    checkpoint_pages(&mut store, &home);
    migrate_all(&mut store);
    checkpoint_pages(&mut store, &[(7, 9, 2), (150, 4, 2)]);
    let mut version = |id| store.page_version(ObjectId(id)).unwrap();
    assert_eq!((version(5), version(7), version(99)), (Version(2), Version(9), Version(0)));
    assert_eq!((version(150), version(151)), (Version(4), Version(0)), "in the log; never written");
    assert_eq!(store.page_version(ObjectId(200)), Err(StoreError::ObjectOutOfRange { id: 200 }));
}

#[test]
fn a_migration_cut_short_leaves_a_store_that_checks_clean_and_reads_the_log() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    let first: Vec<(u64, u64, u8)> = (0..20).map(|id| (id, 1, 1)).collect();
    checkpoint_pages(&mut store, &first);
    migrate_all(&mut store);
    let second: Vec<(u64, u64, u8)> = (0..20).map(|id| (id, 2, 2)).collect();
    checkpoint_pages(&mut store, &second);
    // Some pages are home, their checksum tables not yet: the crash comes now.
    assert!(matches!(store.migrate_step(7).unwrap(), MigrationProgress::Migrating { .. }));
    drop(store);
    let mut store = Store::open_read_only(alloc::vec![device.clone()]).unwrap();
    let report = store.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(read_page(&mut store, 3), (2, 2));
    let mut store = Store::open(alloc::vec![device]).unwrap();
    migrate_all(&mut store);
    assert!(store.check().unwrap().is_clean());
    assert_eq!(read_page(&mut store, 3), (2, 2));
}

#[test]
fn journal_commits_are_newer_than_the_snapshot_before_them_and_older_than_the_one_after() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    store.begin_checkpoint().unwrap();
    // Made after snapshot 1 was taken: it must win over the snapshot's copy.
    let ticket = store
        .journal_submit(&[JournalPage {
            id: ObjectId(7),
            version: Version(5),
            data: &page(0x55),
        }])
        .unwrap();
    assert_eq!(store.journal_write().unwrap(), Some(ticket));
    store
        .checkpoint_write_page(ObjectId(7), Version(4), &page(0x44))
        .unwrap();
    store.commit_checkpoint().unwrap();
    assert_eq!(read_page(&mut store, 7), (5, 0x55));
    drop(store);
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    assert_eq!(read_page(&mut store, 7), (5, 0x55));
    migrate_all(&mut store);
    checkpoint_pages(&mut store, &[(7, 6, 0x66)]);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 7), (6, 0x66));
}

/// A commit made before snapshot 2 but written only after checkpoint 2 has moved home (a
/// checkpoint taken at once, in a fault, while commits waited for their group) is older than
/// what home holds: neither a read nor a restart may bring its copy back.
#[test]
fn a_journal_commit_written_after_a_newer_checkpoint_went_home_is_not_read() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(7, 1, 0x11)]);
    migrate_all(&mut store);
    // Made after snapshot 1, queued, not written.
    let late = store
        .journal_submit(&[JournalPage { id: ObjectId(7), version: Version(1), data: &page(0x22) }])
        .unwrap();
    // Checkpoint 2 holds what the page became after that commit was made.
    checkpoint_pages(&mut store, &[(7, 2, 0x33)]);
    migrate_all(&mut store);
    assert_eq!(store.journal_write().unwrap(), Some(late));
    assert_eq!(read_page(&mut store, 7), (2, 0x33));
    drop(store);
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    assert_eq!(read_page(&mut store, 7), (2, 0x33), "after a restart");
    migrate_all(&mut store);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 7), (2, 0x33), "after the next migration");
}

/// Two commits written while checkpoint 2 migrates, after it took its work: one made after
/// snapshot 2, the other before it, of a page snapshot 2 leaves out (which the kernel never
/// does: a page is clean only once its newest commit is durable, so one with a commit still
/// queued is in the next snapshot). At every step after the
/// migration, the running store reads what a restart reads: the newer commit, and the
/// home copy in place of the older one.
#[test]
fn commits_written_during_a_migration_read_the_same_before_and_after_a_restart() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(8, 1, 0x81), (9, 1, 0x91)]);
    migrate_all(&mut store);
    let submit = |store: &mut Store<MemoryDevice>, id, version, fill| {
        store.journal_submit(&[JournalPage { id: ObjectId(id), version: Version(version), data: &page(fill) }]).unwrap()
    };
    submit(&mut store, 9, 2, 0x92);
    store.begin_checkpoint().unwrap();
    submit(&mut store, 8, 2, 0x82);
    store.checkpoint_write_page(ObjectId(5), Version(1), &page(0x51)).unwrap();
    // Its migration takes its work now: the commits are not in it.
    store.commit_checkpoint().unwrap();
    store.journal_write().unwrap().unwrap();
    migrate_all(&mut store);
    let expected = [(8, (2, 0x82)), (9, (1, 0x91)), (5, (1, 0x51))];
    for (id, copy) in expected {
        assert_eq!(read_page(&mut store, id), copy, "page {id} once checkpoint 2 is home");
    }
    checkpoint_pages(&mut store, &[(5, 2, 0x52)]);
    for (id, copy) in &expected[..2] {
        assert_eq!(read_page(&mut store, *id), *copy, "page {id} once checkpoint 3 is committed");
    }
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    for (id, copy) in &expected[..2] {
        assert_eq!(read_page(&mut store, *id), *copy, "page {id} after a restart");
    }
    migrate_all(&mut store);
    assert_eq!(read_page(&mut store, 8), (2, 0x82), "page 8 once checkpoint 3 is home");
}

#[test]
fn group_commit_packs_commits_into_records() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    migrate_all(&mut store);
    let blocks_before = store.log_used_blocks();
    let mut last = None;
    for id in 0..10 {
        let data = page(id as u8);
        last = Some(
            store
                .journal_submit(&[JournalPage {
                    id: ObjectId(id),
                    version: Version(1),
                    data: &data,
                }])
                .unwrap(),
        );
    }
    assert_eq!(store.journal_write().unwrap(), last);
    // One header for ten single-page commits.
    assert_eq!(store.log_used_blocks() - blocks_before, 11);
    let too_many: Vec<JournalPage<'_>> = Vec::new();
    assert_eq!(store.journal_submit(&too_many).map(|_| ()), Ok(()));
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 9), (1, 9));
    assert_eq!(store.counters().journal_commits_total, 0);
}

#[test]
fn a_bad_copy_is_read_from_the_other_mirror_and_repaired() {
    let (first, second) = blank_mirrors();
    let mut store = Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    migrate_all(&mut store);
    let home_block = GEOMETRY.layout().unwrap().page_ranges.data_first_block + 3;
    first.flip_bit(home_block);
    assert_eq!(read_page(&mut store, 3), (1, 0x33));
    assert_eq!(store.counters().mirror_repaired_blocks_total, 1);
    assert!(store.check().unwrap().is_clean());
    first.flip_bit(home_block);
    second.flip_bit(home_block);
    let error = store
        .read_page(ObjectId(3), &mut zeroed_block())
        .unwrap_err();
    assert_eq!(
        error,
        StoreError::Corrupt(Corruption {
            region: Region::PageData,
            block: home_block,
            check: Check::DataChecksum
        })
    );
    assert_eq!(
        alloc::format!("{error}"),
        alloc::format!(
            "every copy is bad: block {home_block} (page home block) failed the data checksum listed apart from the block check"
        )
    );
    assert_eq!(store.check().unwrap().finding_count, 2);
}

#[test]
fn migration_reads_the_log_in_runs_and_takes_each_block_from_a_mirror_that_has_it() {
    let block_count = GEOMETRY.layout().unwrap().block_count;
    let (first, second) = blank_mirrors();
    let mut store = Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap();
    let pages: Vec<(u64, u64, u8)> = (1..=6).map(|id| (id, 1, 0x10 * id as u8)).collect();
    checkpoint_pages(&mut store, &pages);
    // Before migration a page's bytes are only in the log.
    let logged = |fill: u8| {
        (0..block_count)
            .find(|&block| first.block(block) == page(fill)[..])
            .unwrap()
    };
    // One bad block on each mirror within one run: no mirror holds the run whole.
    first.flip_bit(logged(0x20));
    second.flip_bit(logged(0x50));
    migrate_all(&mut store);
    for (id, version, fill) in pages {
        assert_eq!(read_page(&mut store, id), (version, fill));
    }
    // The first mirror's bad block was read from the second and repaired; the second's was
    // never read (the first's copy was good), and the log it was in is free now.
    assert_eq!(store.counters().mirror_repaired_blocks_total, 1);
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn a_migration_step_reads_its_blocks_scattered_in_the_log_in_one_request() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    // Logged in falling id order, migrated in rising: no two blocks of a step are next to
    // each other in the log (as pages journaled at random are).
    let pages: Vec<(u64, u64, u8)> = (1..=40).rev().map(|id| (id, 1, id as u8)).collect();
    checkpoint_pages(&mut store, &pages);
    let (batches, reads) = (device.read_batches(), device.reads());
    assert!(matches!(store.migrate_step(16).unwrap(), MigrationProgress::Migrating { .. }));
    assert_eq!(device.read_batches() - batches, 1, "one request for the step's 16 runs");
    assert!(device.reads() - reads >= 16, "each run one read within it");
    migrate_all(&mut store);
    for (id, version, fill) in pages {
        assert_eq!(read_page(&mut store, id), (version, fill));
    }
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn a_scrub_repairs_bad_copies_nothing_reads() {
    let layout = GEOMETRY.layout().unwrap();
    let (a, b) = blank_mirrors();
    let mut store = Store::format(alloc::vec![a.clone(), b], GEOMETRY).unwrap();
    let pages: Vec<(u64, u64, u8)> = (0..120).map(|id| (id, 1, id as u8)).collect();
    checkpoint_pages(&mut store, &pages);
    migrate_all(&mut store);
    for id in [3, 90, 119] {
        a.flip_bit(layout.page_ranges.data_first_block + id);
    }
    assert!(!store.check().unwrap().is_clean());
    let mut cursor = ScrubCursor::default();
    while store.scrub_step(&mut cursor).unwrap() {}
    assert_eq!(cursor.blocks_checked, 120);
    assert_eq!(store.counters().mirror_repaired_blocks_total, 3);
    let report = store.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_home_block_takes_one_read_once_its_table_is_cached_and_migration_keeps_it_current() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    let pages: Vec<(u64, u64, u8)> = (0..100).map(|id| (id, 1, id as u8 + 1)).collect();
    checkpoint_pages(&mut store, &pages);
    migrate_all(&mut store);
    drop(store);
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    let reads = device.reads();
    assert_eq!(read_page(&mut store, 42), (1, 43));
    assert_eq!(device.reads() - reads, 2, "the table's two slots in one read, then the page");
    let reads = device.reads();
    assert_eq!(read_page(&mut store, 43), (1, 44));
    assert_eq!(device.reads() - reads, 1, "the table is cached");
    // A migration writes the group's table anew: the cache must follow it, or the page's
    // new copy at home fails the old table's checksum.
    checkpoint_pages(&mut store, &[(42, 2, 0xee)]);
    migrate_all(&mut store);
    assert_eq!(store.log_used_blocks(), 0);
    assert_eq!(read_page(&mut store, 42), (2, 0xee));
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 42), (2, 0xee));
    assert_eq!(read_page(&mut store, 43), (1, 44));
}

#[test]
fn a_restart_reads_a_log_of_small_records_in_windows() {
    let (a, b) = blank_mirrors();
    let mut store = Store::format(alloc::vec![a.clone(), b.clone()], GEOMETRY).unwrap();
    let records = 40;
    for id in 0..records {
        journal_page(&mut store, id, 1, id as u8 + 1);
    }
    drop(store);
    let reads = a.reads() + b.reads();
    let mut store = Store::open(alloc::vec![a.clone(), b.clone()]).unwrap();
    let open_reads = a.reads() + b.reads() - reads;
    // Record by record it took three reads each (a header and its data from the first
    // mirror, the record from the second): 120 here.
    assert!(open_reads < records / 2, "{open_reads} reads to open a log of {records} records");
    for id in 0..records {
        assert_eq!(read_page(&mut store, id), (1, id as u8 + 1));
    }
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn the_scrub_checks_tables_on_the_mirrors_not_in_the_cache() {
    let layout = GEOMETRY.layout().unwrap();
    let (a, b) = blank_mirrors();
    let mut store = Store::format(alloc::vec![a.clone(), b], GEOMETRY).unwrap();
    let pages: Vec<(u64, u64, u8)> = (0..100).map(|id| (id, 1, id as u8)).collect();
    checkpoint_pages(&mut store, &pages);
    migrate_all(&mut store);
    // Both slots of group 0's table: whichever is current, a copy is bad.
    let table_block = layout.page_ranges.table_block(0, 0);
    a.flip_bit(table_block);
    a.flip_bit(table_block + 1);
    assert!(!store.check().unwrap().is_clean());
    let mut cursor = ScrubCursor::default();
    while store.scrub_step(&mut cursor).unwrap() {}
    let report = store.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_blank_replacement_is_resilvered() {
    let block_count = GEOMETRY.layout().unwrap().block_count;
    let first = MemoryDevice::new(block_count);
    let mut store = Store::format(alloc::vec![first.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    migrate_all(&mut store);
    let second = MemoryDevice::new(block_count);
    store.replace_mirror(1, second.clone()).unwrap();
    assert!(store.mirror_status().degraded);
    while store.resilver_step(50).unwrap() > 0 {}
    assert!(!store.mirror_status().degraded);
    drop(store);
    let mut store = Store::open(alloc::vec![second]).unwrap();
    assert_eq!(read_page(&mut store, 3), (1, 0x33));
}

#[test]
fn a_foreign_or_blank_disk_is_refused_with_the_check() {
    let block_count = GEOMETRY.layout().unwrap().block_count;
    let blank = MemoryDevice::new(block_count);
    assert_eq!(
        Store::open(alloc::vec![blank]).err(),
        Some(StoreError::Corrupt(Corruption {
            region: Region::Superblock,
            block: 0,
            check: Check::Magic
        }))
    );
    let ours = MemoryDevice::new(block_count);
    let theirs = MemoryDevice::new(block_count);
    drop(Store::format(alloc::vec![ours.clone()], GEOMETRY).unwrap());
    drop(
        Store::format(
            alloc::vec![theirs.clone()],
            Geometry {
                store_id: 1,
                ..GEOMETRY
            },
        )
        .unwrap(),
    );
    assert!(matches!(
        Store::open(alloc::vec![ours, theirs]).err(),
        Some(StoreError::Foreign { .. })
    ));
}

#[test]
fn the_log_fills_and_a_checkpoint_frees_it() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], GEOMETRY).unwrap();
    migrate_all(&mut store);
    let data = page(1);
    let mut result = Ok(None);
    for id in 0..200 {
        store
            .journal_submit(&[JournalPage {
                id: ObjectId(id),
                version: Version(1),
                data: &data,
            }])
            .unwrap();
        result = store.journal_write();
        if result.is_err() {
            break;
        }
    }
    assert!(
        matches!(result, Err(StoreError::LogFull { .. })),
        "{result:?}"
    );
    assert!(store.log_fill_ratio() > 0.9);
}

#[test]
fn metric_names_follow_prometheus_conventions() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(1, 1, 1), (2, 1, 2)]);
    store.note_checkpoint_stabilization_seconds(0.25);
    let counters = store.counters();
    assert_eq!(counters.checkpoint_generation, 1);
    assert_eq!(counters.checkpoint_objects_written_total, 2);
    assert_eq!(counters.migration_backlog_objects, 2);
    assert!(counters.device_written_bytes_total > 0);
    let metrics = counters.metrics();
    let mut names: Vec<&str> = metrics.iter().map(|(name, _)| *name).collect();
    for name in &names {
        assert!(name.starts_with("holdfast_"), "{name}");
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
    }
    assert!(metrics.contains(&("holdfast_checkpoint_stabilization_last_seconds", 0.25)));
    store.note_checkpoint_stabilization_seconds(0.0125);
    let counters = store.counters();
    let [(name, histogram)] = counters.histograms();
    assert_eq!(name, "holdfast_checkpoint_stabilization_seconds");
    assert!(!names.contains(&name), "a histogram's name is no other metric's");
    assert_eq!(histogram.count(), 2);
    assert_eq!(histogram.sum_seconds(), 0.2625);
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), metrics.len(), "metric names are unique");
    let inspection = alloc::format!("{}", store.inspect());
    assert!(
        inspection.contains("generation 1 committed"),
        "{inspection}"
    );
}

#[test]
fn a_mirror_missing_at_open_is_reported_and_stale_when_it_returns() {
    let (first, second) = blank_mirrors();
    drop(Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap());
    let mut store = Store::open(alloc::vec![first.clone()]).unwrap();
    let status = store.mirror_status();
    assert!(
        status.degraded && status.mirrors_expected == 2,
        "{status:?}"
    );
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    migrate_all(&mut store);
    drop(store);
    // The second disk missed the checkpoint: it must be copied anew, not trusted.
    let mut store = Store::open(alloc::vec![first.clone(), second.clone()]).unwrap();
    assert_eq!(
        store.mirror_status().mirrors[1],
        MirrorState::Resilvering { copied_blocks: 0 }
    );
    while store.resilver_step(40).unwrap() > 0 {}
    assert!(!store.mirror_status().degraded);
    drop(store);
    let mut store = Store::open(alloc::vec![second]).unwrap();
    assert_eq!(read_page(&mut store, 3), (1, 0x33));
}

#[test]
fn a_torn_superblock_slot_is_reported_left_alone_read_only_and_repaired_by_open() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    // Format writes generations 0 and 1, its open 2 (slot 0): slot 1 holds the older one.
    drop(Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap());
    device.flip_bit(1);
    let (before, requests) = (device.contents(), device.requests());

    let mut store = Store::open_read_only(alloc::vec![device.clone()]).unwrap();
    let torn = Finding::superblock_slot(0, 1, Check::Checksum, Remedy::NextOpen);
    assert_eq!(store.recovery_findings(), &[torn]);
    assert_eq!(store.inspect().recovery_findings, alloc::vec![torn]);
    assert_eq!(
        alloc::format!("{torn}"),
        "superblock slot 1 (block 1) failed the record checksum check — will be rewritten at the next read-write open"
    );
    assert!(
        alloc::format!("{}", store.inspect()).ends_with(
            "\nrecovery finding    mirror 0: superblock slot 1 (block 1) failed the record checksum check — will be \
             rewritten at the next read-write open"
        ),
        "{}",
        store.inspect()
    );
    let report = store.check().unwrap();
    assert_eq!(
        (
            report.findings.clone(),
            report.finding_count,
            report.is_clean()
        ),
        (alloc::vec![torn], 1, false)
    );
    assert_eq!(read_page(&mut store, 5), (0, 0));
    // Nothing that writes works, and nothing was written or flushed.
    assert_eq!(store.journal_write(), Ok(None));
    let data = page(1);
    store
        .journal_submit(&[JournalPage {
            id: ObjectId(1),
            version: Version(1),
            data: &data,
        }])
        .unwrap();
    assert_eq!(store.journal_write(), Err(StoreError::ReadOnly));
    assert_eq!(store.resilver_step(10), Err(StoreError::ReadOnly));
    assert_eq!(store.inspect().boot_count, 1);
    drop(store);
    assert_eq!(device.requests(), requests);
    assert!(
        device.contents() == before,
        "a read-only open changed the device"
    );

    // A read-write open repairs it (its boot superblock goes to slot 1) and says so.
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    assert_eq!(
        store.recovery_findings(),
        &[Finding::superblock_slot(0, 1, Check::Checksum, Remedy::Repaired)]
    );
    assert!(store.check().unwrap().is_clean());
    drop(store);
    assert!(
        Store::open_read_only(alloc::vec![device])
            .unwrap()
            .recovery_findings()
            .is_empty()
    );
}

#[test]
fn a_torn_newest_superblock_falls_back_to_the_other_slot_and_is_reported() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    let generation = store.inspect().superblock_generation;
    drop(store);
    let newest_slot = generation % 2;
    device.flip_bit(newest_slot);
    let mut store = Store::open_read_only(alloc::vec![device.clone()]).unwrap();
    assert_eq!(
        store.recovery_findings(),
        &[Finding::superblock_slot(
            0,
            newest_slot,
            Check::Checksum,
            Remedy::NextOpen
        )]
    );
    assert_eq!(store.inspect().superblock_generation, generation - 1);
    // The older superblock names the same log: the checkpoint is still there.
    assert_eq!(read_page(&mut store, 3), (1, 0x33));
    assert_eq!(store.check().unwrap().finding_count, 1);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(
        store.recovery_findings(),
        &[Finding::superblock_slot(
            0,
            newest_slot,
            Check::Checksum,
            Remedy::Repaired
        )]
    );
    assert_eq!(read_page(&mut store, 3), (1, 0x33));
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn a_superblock_write_that_missed_one_mirror_is_reported_as_stale() {
    let (first, second) = blank_mirrors();
    drop(Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap());
    // Generation 3 goes to slot 1 of both; the second mirror then loses it, as if the power
    // had failed before its copy reached the media.
    let older = second.block(1);
    drop(Store::open(alloc::vec![first.clone(), second.clone()]).unwrap());
    second.set_block(1, &older);
    let mut store = Store::open_read_only(alloc::vec![first.clone(), second.clone()]).unwrap();
    let stale = Finding::superblock_slot(1, 1, Check::Sequence, Remedy::NextOpen);
    assert_eq!(store.recovery_findings(), &[stale]);
    assert_eq!(store.check().unwrap().findings, alloc::vec![stale]);
    drop(store);
    let mut store = Store::open(alloc::vec![first, second]).unwrap();
    assert_eq!(
        store.recovery_findings(),
        &[Finding::superblock_slot(1, 1, Check::Sequence, Remedy::Repaired)]
    );
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn an_abandoned_checkpoint_leaves_the_last_committed_one_and_the_next_commits() {
    // Room for a checkpoint that writes a run of records to the log before it is abandoned.
    let geometry = Geometry { page_count: 1000, log_block_count: 2048, ..GEOMETRY };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], geometry).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x31)]);
    migrate_all(&mut store);
    assert_eq!(store.abandon_checkpoint(), Err(StoreError::WrongPhase));
    let abandoned = store.begin_checkpoint().unwrap();
    store.checkpoint_write_page(ObjectId(3), Version(2), &page(0x32)).unwrap();
    // A journal commit made while the abandoned checkpoint was stabilized stays.
    let ticket = store
        .journal_submit(&[JournalPage { id: ObjectId(4), version: Version(1), data: &page(0x41) }])
        .unwrap();
    assert_eq!(store.journal_write().unwrap(), Some(ticket));
    // Enough pages that a run of records reaches the log before the abandon.
    let used_before = store.log_used_blocks();
    for id in 10..700 {
        store.checkpoint_write_page(ObjectId(id), Version(1), &page(0x77)).unwrap();
    }
    assert!(store.log_used_blocks() > used_before + 500, "records written");
    store.abandon_checkpoint().unwrap();
    assert!(matches!(store.checkpoint_phase(), CheckpointPhase::Migrating { .. }), "the journal's commits go home");
    assert_eq!((store.checkpoint_generation(), read_page(&mut store, 3)), (abandoned - 1, (1, 0x31)));
    assert_eq!(read_page(&mut store, 50), (0, 0));
    drop(store);
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    assert_eq!((store.checkpoint_generation(), read_page(&mut store, 3)), (abandoned - 1, (1, 0x31)));
    assert_eq!((read_page(&mut store, 4), read_page(&mut store, 50)), ((1, 0x41), (0, 0)));
    migrate_all(&mut store);
    // The retry takes the next generation and commits.
    assert_eq!(checkpoint_pages(&mut store, &[(3, 2, 0x32)]), abandoned + 1);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(store.checkpoint_generation(), abandoned + 1);
    assert_eq!((read_page(&mut store, 3), read_page(&mut store, 4)), ((2, 0x32), (1, 0x41)));
}

#[test]
fn an_abandoned_checkpoint_frees_the_log_it_filled_for_the_retry() {
    // The kernel's failed checkpoint on a small store: the abandoned records and the
    // journal's commits made meanwhile left less room than the retry, as large, needed.
    let geometry = Geometry { page_count: 2000, log_block_count: 2048, ..GEOMETRY };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], geometry).unwrap();
    migrate_all(&mut store);
    let pages: Vec<(u64, u64, u8)> = (10..1810).map(|id| (id, 1, 0x77)).collect();
    store.begin_checkpoint().unwrap();
    for &(id, version, fill) in &pages[..1700] {
        store.checkpoint_write_page(ObjectId(id), Version(version), &page(fill)).unwrap();
    }
    for (id, fill) in [(4, 0x41), (5, 0x51)] {
        store.journal_submit(&[JournalPage { id: ObjectId(id), version: Version(1), data: &page(fill) }]).unwrap();
        store.journal_write().unwrap();
    }
    assert!(store.log_used_blocks() > 1000, "{} blocks used", store.log_used_blocks());
    store.abandon_checkpoint().unwrap();
    migrate_all(&mut store);
    assert_eq!(store.log_used_blocks(), 0, "the abandoned records and the journal's commits left the log");
    let retried = checkpoint_pages(&mut store, &pages);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(store.checkpoint_generation(), retried);
    assert_eq!((read_page(&mut store, 4), read_page(&mut store, 5)), ((1, 0x41), (1, 0x51)), "journal commits kept");
    assert_eq!(read_page(&mut store, 1809), (1, 0x77));
    assert!(store.check().unwrap().is_clean());
}

#[test]
fn a_commit_larger_than_a_record_is_refused_and_nothing_is_queued() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], GEOMETRY).unwrap();
    let data = page(0x11);
    let pages: Vec<JournalPage<'_>> = (0..=JOURNAL_COMMIT_PAGES_MAX as u64)
        .map(|id| JournalPage { id: ObjectId(id), version: Version(1), data: &data })
        .collect();
    assert_eq!(
        store.journal_submit(&pages),
        Err(StoreError::CommitTooLarge { pages: JOURNAL_COMMIT_PAGES_MAX + 1, pages_max: JOURNAL_COMMIT_PAGES_MAX })
    );
    assert_eq!(store.journal_queued_commits(), 0);
    // One page fewer fits.
    assert!(store.journal_submit(&pages[..JOURNAL_COMMIT_PAGES_MAX]).is_ok());
    assert_eq!(store.journal_queued_commits(), 1);
}

#[test]
fn a_full_journal_queue_refuses_until_it_is_written() {
    // A log that holds the whole queue.
    let geometry = Geometry { log_block_count: 2048, ..GEOMETRY };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device], geometry).unwrap();
    migrate_all(&mut store);
    let data = page(0x22);
    let commit: Vec<JournalPage<'_>> = (0..JOURNAL_COMMIT_PAGES_MAX as u64)
        .map(|id| JournalPage { id: ObjectId(id), version: Version(1), data: &data })
        .collect();
    let full = crate::journal::JOURNAL_QUEUE_PAGES_MAX / JOURNAL_COMMIT_PAGES_MAX;
    for _ in 0..full {
        store.journal_submit(&commit).unwrap();
    }
    let one = [JournalPage { id: ObjectId(1), version: Version(2), data: &data }];
    assert!(!store.journal_would_take(1), "the check agrees with the refusal");
    assert_eq!(store.journal_submit(&one), Err(StoreError::JournalQueueFull));
    assert_eq!(store.journal_queued_commits(), full, "the refused commit is not queued");
    // Once written, the queue takes commits again.
    assert!(store.journal_write().unwrap().is_some());
    assert_eq!(store.journal_queued_commits(), 0);
    assert!(store.journal_would_take(JOURNAL_COMMIT_PAGES_MAX));
    assert!(!store.journal_would_take(JOURNAL_COMMIT_PAGES_MAX + 1), "more than a record holds");
    assert!(store.journal_submit(&one).is_ok());
}

/// Commits one page through the journal; returns where its record landed (position in the
/// log, sequence).
fn journal_page(store: &mut Store<MemoryDevice>, id: u64, version: u64, fill: u8) -> (u64, u64) {
    let position = store.head.position;
    let sequence = store.head.sequence;
    store
        .journal_submit(&[JournalPage {
            id: ObjectId(id),
            version: Version(version),
            data: &page(fill),
        }])
        .unwrap();
    store.journal_write().unwrap().unwrap();
    (position, sequence)
}

fn log_loss(notes: &[RecoveryNote]) -> Option<LogLoss> {
    notes.iter().find_map(|note| match note {
        RecoveryNote::LogDamaged(loss) => Some(*loss),
        _ => None,
    })
}

/// One journal record in the middle of the log is bad on every copy (header on one test,
/// a data block on the other): the records after it say it was durable, so the open is
/// refused naming the records and commits that would be lost; `check` reports it; the
/// operator's truncate starts from the last intact point and the superblock says so for
/// good, without a false alarm at later opens.
#[test]
fn mid_log_damage_on_every_copy_is_refused_naming_the_loss_until_truncated() {
    for damage_data in [false, true] {
        let (first, second) = blank_mirrors();
        let mut store =
            Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap();
        migrate_all(&mut store);
        journal_page(&mut store, 7, 1, 0x11);
        let (damaged_position, damaged_sequence) = journal_page(&mut store, 8, 1, 0x22);
        journal_page(&mut store, 9, 1, 0x33);
        let (_, last_sequence) = journal_page(&mut store, 7, 2, 0x44);
        let log_first_block = store.layout().log_first_block;
        drop(store);
        let block = log_first_block + damaged_position + u64::from(damage_data);
        first.flip_bit(block);
        second.flip_bit(block);
        let mirrors = || alloc::vec![first.clone(), second.clone()];
        let Err(StoreError::LogDamaged(loss)) = Store::open(mirrors()) else {
            panic!("mid-log damage must refuse the open");
        };
        assert_eq!(
            (loss.block, loss.first_sequence, loss.last_sequence),
            (log_first_block + damaged_position, damaged_sequence, last_sequence)
        );
        // The damaged record's own commit is named when its header survived.
        let first_ticket = if damage_data { 2 } else { 3 };
        assert_eq!(loss.journal_tickets, Some((first_ticket, 4)), "{loss}");
        let message = StoreError::LogDamaged(loss).to_string();
        assert!(message.contains("holdfast.recover=truncate"), "{message}");
        // The read-only check reports it as a problem.
        let mut checked = Store::open_read_only(mirrors()).unwrap();
        assert_eq!(log_loss(checked.recovery_notes()), Some(loss));
        assert!(!checked.check().unwrap().is_clean());
        drop(checked);
        let mut store = Store::open_with(mirrors(), Recover::Truncate).unwrap();
        assert_eq!(read_page(&mut store, 7), (1, 0x11), "the last intact point");
        assert_eq!(read_page(&mut store, 9), (0, 0));
        let truncation = RecoveryNote::Truncated(format::superblock::LogTruncation {
            boot_count: store.inspect().boot_count,
            first_sequence: damaged_sequence,
            last_sequence,
        });
        assert_eq!(store.recovery_notes(), &[truncation]);
        let report = store.check().unwrap();
        assert!(report.is_clean(), "{report:?}");
        // New records over the discarded ones, a crash, and opens that find no damage.
        journal_page(&mut store, 9, 2, 0x55);
        drop(store);
        let mut store = Store::open(mirrors()).unwrap();
        assert_eq!(read_page(&mut store, 9), (2, 0x55));
        assert_eq!(store.recovery_notes(), &[truncation]);
        assert!(store.inspect().to_string().contains("log truncated at boot"));
    }
}

/// The same with a checkpoint: its data record is bad on the only disk and its commit
/// record follows. Restarting from the checkpoint before would be silent loss.
#[test]
fn damage_under_a_committed_checkpoint_names_its_commit() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    migrate_all(&mut store);
    let data_position = store.head.position;
    let generation = checkpoint_pages(&mut store, &[(3, 2, 0x34)]);
    let log_first_block = store.layout().log_first_block;
    drop(store);
    device.flip_bit(log_first_block + data_position);
    let Err(StoreError::LogDamaged(loss)) = Store::open(alloc::vec![device.clone()]) else {
        panic!("a checkpoint with a damaged data record must not be dropped silently");
    };
    assert_eq!(loss.checkpoint_committed, Some(generation), "{loss}");
}

/// The newest record, never flushed, torn on the only disk, is a torn tail: dropped, the
/// open goes on.
#[test]
fn a_torn_newest_record_is_a_torn_tail_not_damage() {
    let device = MemoryDevice::new(GEOMETRY.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], GEOMETRY).unwrap();
    migrate_all(&mut store);
    journal_page(&mut store, 7, 1, 0x11);
    let (position, _) = journal_page(&mut store, 8, 1, 0x22);
    let log_first_block = store.layout().log_first_block;
    drop(store);
    device.flip_bit(log_first_block + position);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(read_page(&mut store, 7), (1, 0x11));
    assert_eq!(read_page(&mut store, 8), (0, 0));
}

/// A crash left the newest journal record (never acknowledged) on the first mirror only:
/// `check` notes a torn tail and calls the store clean, and an open copies the record.
#[test]
fn a_newest_record_on_one_mirror_only_is_a_torn_tail_note_not_a_problem() {
    let (first, second) = blank_mirrors();
    let mut store = Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap();
    migrate_all(&mut store);
    journal_page(&mut store, 7, 1, 0x11);
    let before = second.contents();
    let (_, sequence) = journal_page(&mut store, 8, 1, 0x22);
    drop(store);
    // The second mirror's media never got the last write.
    let log_first_block = GEOMETRY.layout().unwrap().log_first_block;
    for block in log_first_block..log_first_block + 4 {
        second.set_block(block, &before[block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE]);
    }
    let mirrors = || alloc::vec![first.clone(), second.clone()];
    let mut checked = Store::open_read_only(mirrors()).unwrap();
    let report = checked.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let torn_tail = RecoveryNote::TornTail {
        mirror: 1,
        first_sequence: sequence,
        last_sequence: sequence,
        remedy: Remedy::NextOpen,
    };
    assert_eq!(report.notes, [torn_tail]);
    drop(checked);
    let mut store = Store::open(mirrors()).unwrap();
    assert_eq!(read_page(&mut store, 8), (1, 0x22));
    assert!(store.check().unwrap().is_clean());
    drop(store);
    let mut store = Store::open(alloc::vec![second]).unwrap();
    assert_eq!(read_page(&mut store, 8), (1, 0x22), "copied at open");
}

/// Each mirror booted alone and ran on (split brain): the longer history wins, and the
/// other is named as discarded from the generation where they parted, not passed off as
/// bad copies; the loser is copied anew.
#[test]
fn mirrors_that_ran_apart_report_the_discarded_history() {
    let (first, second) = blank_mirrors();
    drop(Store::format(alloc::vec![first.clone(), second.clone()], GEOMETRY).unwrap());
    let mut store = Store::open(alloc::vec![first.clone()]).unwrap();
    checkpoint_pages(&mut store, &[(3, 1, 0x33)]);
    migrate_all(&mut store);
    checkpoint_pages(&mut store, &[(3, 2, 0x34)]);
    migrate_all(&mut store);
    let kept_generation = store.inspect().superblock_generation;
    drop(store);
    let mut store = Store::open(alloc::vec![second.clone()]).unwrap();
    checkpoint_pages(&mut store, &[(4, 1, 0x44)]);
    let discarded_generation = store.inspect().superblock_generation;
    drop(store);
    assert!(discarded_generation < kept_generation);
    let mirrors = || alloc::vec![first.clone(), second.clone()];
    let mut checked = Store::open_read_only(mirrors()).unwrap();
    let report = checked.check().unwrap();
    assert!(!report.is_clean(), "{report:?}");
    drop(checked);
    let mut store = Store::open(mirrors()).unwrap();
    let [RecoveryNote::HistoryDiscarded {
        mirror: 1,
        discarded_generation: found_discarded,
        kept_generation: found_kept,
        remedy: Remedy::Repaired,
        ..
    }] = store.recovery_notes()
    else {
        panic!("{:?}", store.recovery_notes());
    };
    assert_eq!((*found_discarded, *found_kept), (discarded_generation, kept_generation));
    assert!(store.inspect().to_string().contains("split brain"));
    assert_eq!(
        store.mirror_status().mirrors[1],
        MirrorState::Resilvering { copied_blocks: 0 }
    );
    assert_eq!(read_page(&mut store, 3), (2, 0x34));
    assert_eq!(read_page(&mut store, 4), (0, 0));
}

#[test]
fn a_checkpoint_cut_short_by_a_crash_is_freed_from_the_log_at_open() {
    // A crash during the first checkpoint: its records fill the log, and nothing committed.
    let geometry = Geometry { page_count: 2000, log_block_count: 2048, ..GEOMETRY };
    let device = MemoryDevice::new(geometry.layout().unwrap().block_count);
    let mut store = Store::format(alloc::vec![device.clone()], geometry).unwrap();
    migrate_all(&mut store);
    store.begin_checkpoint().unwrap();
    for id in 10..1400 {
        store.checkpoint_write_page(ObjectId(id), Version(1), &page(0x77)).unwrap();
    }
    assert!(store.log_used_blocks() > 1000, "{} blocks used", store.log_used_blocks());
    drop(store);
    let mut store = Store::open(alloc::vec![device.clone()]).unwrap();
    assert_eq!(store.checkpoint_generation(), 0, "nothing committed");
    migrate_all(&mut store);
    assert_eq!(store.log_used_blocks(), 0, "the cut-short checkpoint's records left the log");
    let pages: Vec<(u64, u64, u8)> = (10..1810).map(|id| (id, 1, 0x55)).collect();
    let generation = checkpoint_pages(&mut store, &pages);
    drop(store);
    let mut store = Store::open(alloc::vec![device]).unwrap();
    assert_eq!(store.checkpoint_generation(), generation);
    assert_eq!(read_page(&mut store, 1809), (1, 0x55));
    assert!(store.check().unwrap().is_clean());
}

/// When a device was asked something (a moment of the shared clock), what, and which
/// mirror it is.
type FlushEvents = Rc<RefCell<Vec<(u64, &'static str, usize)>>>;

/// A device that notes, on a clock shared with the other mirror and the replica, when it
/// was asked to start a flush and when to finish one.
struct FlushOrderDevice {
    media: MemoryDevice,
    mirror: usize,
    clock: alloc::sync::Arc<core::sync::atomic::AtomicU64>,
    events: FlushEvents,
}

impl FlushOrderDevice {
    fn note(&self, what: &'static str) {
        let moment = self.clock.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        self.events.borrow_mut().push((moment, what, self.mirror));
    }
}

impl BlockDevice for FlushOrderDevice {
    fn block_count(&self) -> u64 {
        self.media.block_count()
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.media.read(first_block, buf)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.media.write(first_block, data)
    }

    fn flush_submit(&mut self) -> Result<(), DeviceError> {
        self.note("flush_submit");
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.note("flush");
        self.media.flush()
    }
}

struct FlushOrderReplica {
    clock: alloc::sync::Arc<core::sync::atomic::AtomicU64>,
    flushed_at: alloc::sync::Arc<core::sync::atomic::AtomicU64>,
}

impl mirror::Replica for FlushOrderReplica {
    fn write(&mut self, _first_block: u64, _data: &[u8]) {}

    fn flush(&mut self) {
        let moment = self.clock.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        self.flushed_at.store(moment, core::sync::atomic::Ordering::Relaxed);
    }
}

/// A journal commit's flush starts on every mirror, and on the replica before them, before
/// it waits for any: the disks of both mirrors and of the standby flush side by side.
#[test]
fn a_flush_is_under_way_on_every_mirror_and_the_replica_before_it_is_waited_for() {
    let clock = alloc::sync::Arc::new(core::sync::atomic::AtomicU64::new(1));
    let events = Rc::new(RefCell::new(Vec::new()));
    let devices = (0..2)
        .map(|mirror| FlushOrderDevice {
            media: MemoryDevice::new(GEOMETRY.layout().unwrap().block_count),
            mirror,
            clock: clock.clone(),
            events: events.clone(),
        })
        .collect();
    let mut store = Store::format(devices, GEOMETRY).unwrap();
    let flushed_at = alloc::sync::Arc::new(core::sync::atomic::AtomicU64::new(0));
    store.set_replica(alloc::boxed::Box::new(FlushOrderReplica { clock, flushed_at: flushed_at.clone() }));
    events.borrow_mut().clear();
    store
        .journal_submit(&[JournalPage { id: ObjectId(7), version: Version(1), data: &page(0x77) }])
        .unwrap();
    store.journal_write().unwrap();
    let events = events.borrow();
    let moments = |what: &str| -> Vec<(u64, usize)> {
        events.iter().filter(|event| event.1 == what).map(|event| (event.0, event.2)).collect()
    };
    let (submits, flushes) = (moments("flush_submit"), moments("flush"));
    assert_eq!(submits.iter().map(|submit| submit.1).collect::<Vec<_>>(), [0, 1], "{events:?}");
    assert_eq!(flushes.iter().map(|flush| flush.1).collect::<Vec<_>>(), [0, 1], "{events:?}");
    let last_submit = submits.iter().map(|submit| submit.0).max().unwrap();
    let first_flush = flushes.iter().map(|flush| flush.0).min().unwrap();
    assert!(last_submit < first_flush, "a mirror was waited for before the other began: {events:?}");
    let replica_flush = flushed_at.load(core::sync::atomic::Ordering::Relaxed);
    assert!(replica_flush != 0 && replica_flush < submits[0].0, "the replica was told at {replica_flush}: {events:?}");
}
