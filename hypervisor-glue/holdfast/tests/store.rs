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
