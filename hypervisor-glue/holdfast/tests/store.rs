//! `holdfast store` on real image files: format, inspect and check a mirrored store; a
//! foreign image, a missing one and damage on one mirror each get the answer they should.

mod support;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use support::{assert_one_line_error, run_holdfast, scratch_dir};

fn path_text(path: &std::path::Path) -> String {
    path.to_str().expect("UTF-8 path").to_owned()
}

#[test]
fn a_mirrored_store_is_formatted_inspected_and_checked_clean() {
    let dir = scratch_dir("store-clean");
    let (a, b) = (path_text(&dir.join("a.img")), path_text(&dir.join("b.img")));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &a, &b]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let inspect = run_holdfast(&["store", "inspect", &a, &b]);
    assert_eq!(inspect.status, Some(0), "{}", inspect.transcript());
    assert!(
        inspect
            .stdout
            .contains("mirrors             [Healthy, Healthy]"),
        "{}",
        inspect.stdout
    );
    let check = run_holdfast(&["store", "check", &a, &b]);
    assert_eq!(check.status, Some(0), "{}", check.transcript());
    assert!(
        check.stdout.contains("2 mirror(s)") && check.stdout.contains("0 problem(s)"),
        "{}",
        check.stdout
    );
    // Formatting over an existing store needs --force.
    let again = run_holdfast(&["store", "format", "--size-mib", "4", &a]);
    assert_one_line_error(
        &again,
        2,
        &format!("holdfast: {a}: exists; formatting destroys it (add --force)"),
    );
    // One mirror alone opens, and says the store is degraded.
    let alone = run_holdfast(&["store", "check", &a]);
    assert_eq!(alone.status, Some(0), "{}", alone.transcript());
    assert!(alone.stdout.contains("degraded: true"), "{}", alone.stdout);
}

#[test]
fn a_foreign_or_missing_image_gets_one_line_naming_the_block_and_check() {
    let dir = scratch_dir("store-foreign");
    let foreign = dir.join("foreign.img");
    std::fs::write(&foreign, vec![0x5a; 1 << 20]).unwrap();
    let foreign = path_text(&foreign);
    for verb in ["inspect", "check"] {
        let run = run_holdfast(&["store", verb, &foreign]);
        assert_one_line_error(
            &run,
            2,
            &format!(
                "holdfast: {foreign}: every copy is bad: block 0 (superblock) failed the magic \
                 number (blank or not a Holdfast store) check"
            ),
        );
    }
    let missing = path_text(&dir.join("missing.img"));
    let run = run_holdfast(&["store", "check", &missing]);
    assert_one_line_error(
        &run,
        2,
        &format!("holdfast: {missing}: No such file or directory (os error 2)"),
    );
}

#[test]
fn both_superblocks_of_a_lone_image_destroyed_is_a_clear_error() {
    let dir = scratch_dir("store-damaged");
    let image = path_text(&dir.join("lone.img"));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &image]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let file = OpenOptions::new().write(true).open(&image).unwrap();
    for block in [0u64, 1] {
        file.write_all_at(&[0xff; 64], block * 4096 + 64).unwrap();
    }
    let run = run_holdfast(&["store", "check", &image]);
    assert_eq!(run.status, Some(2), "{}", run.transcript());
    assert!(
        run.stderr
            .starts_with(&format!("holdfast: {image}: every copy is bad: block "))
            && run.stderr.lines().count() == 1,
        "{}",
        run.transcript()
    );
}

/// Garbage over bytes 64..128 of a block: the magic survives, the checksum does not.
fn tear(image: &str, block: u64) {
    let file = OpenOptions::new().write(true).open(image).unwrap();
    file.write_all_at(&[0xff; 64], block * 4096 + 64).unwrap();
}

#[test]
fn a_torn_superblock_slot_is_reported_and_left_alone() {
    let dir = scratch_dir("store-torn-slot");
    let image = path_text(&dir.join("lone.img"));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &image]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    // Slot 1 holds the older of the two superblocks: recovery uses slot 0's.
    tear(&image, 1);
    let before = std::fs::read(&image).unwrap();
    let finding = "superblock slot 1 (block 1) failed the record checksum check — will be rewritten \
                   at the next read-write open";

    let check = run_holdfast(&["store", "check", &image]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    let lines: Vec<&str> = check.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", check.transcript());
    assert!(
        lines[0].starts_with(&format!("{image}: 1 mirror(s), "))
            && lines[0].ends_with(" 0 log records checked; 1 problem(s)"),
        "{}",
        check.stdout
    );
    assert_eq!(lines[1], format!("mirror 0 ({image}): {finding}"));
    assert_eq!(check.stderr, "");

    let inspect = run_holdfast(&["store", "inspect", &image]);
    assert_eq!(inspect.status, Some(0), "{}", inspect.transcript());
    assert!(
        inspect
            .stdout
            .contains(&format!("\nrecovery finding    mirror 0: {finding}\n")),
        "{}",
        inspect.stdout
    );
    // Neither wrote to the image: the boot count and the torn slot are as they were.
    assert!(
        std::fs::read(&image).unwrap() == before,
        "check or inspect wrote to the image"
    );
}

#[test]
fn a_torn_newest_superblock_slot_on_one_mirror_is_reported_with_that_mirror() {
    let dir = scratch_dir("store-torn-mirror");
    let (a, b) = (path_text(&dir.join("a.img")), path_text(&dir.join("b.img")));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &a, &b]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    // Slot 0 holds the newest superblock; mirror 0 still has it whole.
    tear(&b, 0);
    let check = run_holdfast(&["store", "check", &a, &b]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    let lines: Vec<&str> = check.stdout.lines().collect();
    assert_eq!(
        lines[1..],
        [format!(
            "mirror 1 ({b}): superblock slot 0 (block 0) failed the record checksum check — will \
             be rewritten at the next read-write open"
        )],
        "{}",
        check.stdout
    );
    assert!(lines[0].ends_with("; 1 problem(s)"), "{}", check.stdout);
}
