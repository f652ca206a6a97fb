//! A store image with random blocks overwritten by garbage or bit flips, on a single disk
//! (no good copy anywhere): opening, reading and checking it must give typed errors or
//! intact objects — never a panic, never damaged contents.

use std::cell::RefCell;
use std::rc::Rc;

use holdfast_objects::{ObjectId, Version};
use holdfast_store::{BLOCK_SIZE, Geometry, JournalPage, MigrationProgress, Store};
use holdfast_store_sim::disk::{SimDisk, World};
use holdfast_store_sim::model::{node_image, page_image, stamp_of};
use holdfast_store_sim::rng::Rng;

const GEOMETRY: Geometry = Geometry {
    store_id: 0xdada,
    node_count: 16,
    page_count: 32,
    log_block_count: 96,
};

fn written_store(rng: &mut Rng) -> SimDisk {
    let world = Rc::new(RefCell::new(World::default()));
    let disk = SimDisk::new(
        &world,
        GEOMETRY.layout().unwrap().block_count,
        rng.next_u64(),
    );
    let mut store = Store::format(vec![disk.clone()], GEOMETRY).unwrap();
    for round in 0..3 {
        store.begin_checkpoint().unwrap();
        for id in 0..16 {
            store
                .checkpoint_write_node(
                    ObjectId(id),
                    Version(round),
                    &node_image(rng.next_u64() | 1),
                )
                .unwrap();
        }
        for id in 0..32 {
            store
                .checkpoint_write_page(
                    ObjectId(id),
                    Version(round),
                    &page_image(rng.next_u64() | 1),
                )
                .unwrap();
        }
        store.commit_checkpoint().unwrap();
        if round < 2 {
            while let MigrationProgress::Migrating { .. } = store.migrate_step(9).unwrap() {}
        }
        let page = page_image(rng.next_u64() | 1);
        store
            .journal_submit(&[JournalPage {
                id: ObjectId(3),
                version: Version(9),
                data: &page,
            }])
            .unwrap();
        store.journal_write().unwrap();
    }
    drop(store);
    disk.crash(rng);
    disk
}

#[test]
fn damaged_single_disk_images_give_errors_or_intact_objects() {
    let mut opened = 0;
    let mut errors = 0;
    for seed in 0..60u64 {
        let mut rng = Rng::new(seed);
        let disk = written_store(&mut rng);
        let block_count = GEOMETRY.layout().unwrap().block_count;
        for _ in 0..1 + rng.below(6) {
            let block = rng.below(block_count);
            if rng.chance(500) {
                for _ in 0..1 + rng.below(64) {
                    disk.rot(block, rng.next_u64());
                }
            } else {
                // Garbage that is not a bit flip: a block of another place or random bytes.
                for bit in 0..BLOCK_SIZE as u64 * 8 {
                    if rng.chance(500) {
                        disk.rot(block, bit);
                    }
                }
            }
        }
        let mut store = match Store::open(vec![disk.clone()]) {
            Ok(store) => store,
            Err(error) => {
                errors += 1;
                assert!(!error.to_string().is_empty());
                continue;
            }
        };
        opened += 1;
        for id in 0..16 {
            match store.read_node(ObjectId(id)) {
                Ok((_, image)) => assert!(
                    stamp_of(&image[..]).is_some(),
                    "seed {seed}: node {id} damaged"
                ),
                Err(_) => errors += 1,
            }
        }
        let mut page = Box::new([0u8; BLOCK_SIZE]);
        for id in 0..32 {
            match store.read_page(ObjectId(id), &mut page) {
                Ok(_) => assert!(
                    stamp_of(&page[..]).is_some(),
                    "seed {seed}: page {id} damaged"
                ),
                Err(_) => errors += 1,
            }
        }
        let report = store.check().unwrap();
        assert!(report.findings.len() <= report.finding_count as usize);
    }
    eprintln!("damaged images: {opened} opened, {errors} typed errors");
    assert!(opened > 0 && errors > 0);
}
