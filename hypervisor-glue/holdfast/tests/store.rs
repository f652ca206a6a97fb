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

/// An image file as a block device, so that a test can write journal records into images
/// that `holdfast store format` made, through the store the kernel runs.
struct ImageDevice(std::fs::File);

impl ImageDevice {
    fn open(path: &str) -> Self {
        Self(OpenOptions::new().read(true).write(true).open(path).unwrap())
    }
}

impl holdfast_store::BlockDevice for ImageDevice {
    fn block_count(&self) -> u64 {
        self.0.metadata().unwrap().len() / 4096
    }

    fn read(&mut self, first_block: u64, buf: &mut [u8]) -> Result<(), holdfast_store::DeviceError> {
        self.0
            .read_exact_at(buf, first_block * 4096)
            .map_err(|_| holdfast_store::DeviceError::Io)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), holdfast_store::DeviceError> {
        self.0
            .write_all_at(data, first_block * 4096)
            .map_err(|_| holdfast_store::DeviceError::Io)
    }

    fn flush(&mut self) -> Result<(), holdfast_store::DeviceError> {
        Ok(())
    }
}

/// Opens the images read-write and commits one page per fill through the journal; returns
/// the device block of each commit's record header (a fresh store's log starts empty).
fn journal_pages(images: &[&str], fills: &[u8]) -> Vec<u64> {
    journal_pages_losing_the_last_on(images, fills, None)
}

/// [`journal_pages`]; the last commit's writes never reach `lose_on`'s media (the image is
/// put back as it was before it), as when a crash cuts them.
fn journal_pages_losing_the_last_on(
    images: &[&str],
    fills: &[u8],
    lose_on: Option<&str>,
) -> Vec<u64> {
    let devices = images.iter().map(|image| ImageDevice::open(image)).collect();
    let mut store = holdfast_store::Store::open(devices).unwrap();
    let log_first_block = store.layout().log_first_block;
    let mut headers = Vec::new();
    for (index, &fill) in fills.iter().enumerate() {
        let kept = lose_on
            .filter(|_| index + 1 == fills.len())
            .map(|image| (image, std::fs::read(image).unwrap()));
        headers.push(log_first_block + store.log_used_blocks());
        let data = [fill; 4096];
        store
            .journal_submit(&[holdfast_store::JournalPage {
                id: holdfast_objects::ObjectId(u64::from(fill)),
                version: holdfast_objects::Version(1),
                data: &data,
            }])
            .unwrap();
        store.journal_write().unwrap();
        if let Some((image, bytes)) = kept {
            std::fs::write(image, bytes).unwrap();
        }
    }
    headers
}

#[test]
fn a_newest_record_on_one_mirror_only_is_a_torn_tail_note_and_check_exits_0() {
    let dir = scratch_dir("store-torn-tail");
    let (a, b) = (path_text(&dir.join("a.img")), path_text(&dir.join("b.img")));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &a, &b]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    // A crash: the newest commit's record reached mirror 0 only, and was never acknowledged.
    journal_pages_losing_the_last_on(&[&a, &b], &[1, 2, 3], Some(&b));
    let check = run_holdfast(&["store", "check", &a, &b]);
    assert_eq!(check.status, Some(0), "{}", check.transcript());
    assert!(
        check.stdout.contains("; 0 problem(s)")
            && check.stdout.contains(
                "note: torn tail: log records 3..=3, never acknowledged, reached another mirror \
                 but not mirror 1 before a crash — the next read-write open copies them"
            ),
        "{}",
        check.stdout
    );
}

#[test]
fn mid_log_damage_on_both_mirrors_is_a_problem_naming_what_would_be_lost() {
    let dir = scratch_dir("store-mid-log");
    let (a, b) = (path_text(&dir.join("a.img")), path_text(&dir.join("b.img")));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &a, &b]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let headers = journal_pages(&[&a, &b], &[1, 2, 3]);
    tear(&a, headers[1]);
    tear(&b, headers[1]);
    let check = run_holdfast(&["store", "check", &a, &b]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    let damage = format!(
        "log record 2 (block {}) is bad on every mirror and later records say it was durable: \
         records 2..=3 would be lost (generations 0..=0, journal commits 3..=3)",
        headers[1]
    );
    assert!(
        check.stdout.contains("; 1 problem(s)")
            && check.stdout.contains(&format!("problem: {damage}")),
        "{}",
        check.stdout
    );
    let inspect = run_holdfast(&["store", "inspect", &a, &b]);
    assert!(
        inspect.stdout.contains(&format!("recovery note       {damage}")),
        "{}",
        inspect.stdout
    );
    // A read-write open refuses, saying how to start anyway.
    let devices = [&a, &b].iter().map(|image| ImageDevice::open(image)).collect();
    let refused = holdfast_store::Store::open(devices).err().unwrap().to_string();
    assert!(refused.contains("holdfast.recover=truncate"), "{refused}");
}

#[test]
fn mirrors_that_ran_apart_are_reported_with_the_discarded_history() {
    let dir = scratch_dir("store-split-brain");
    let (a, b) = (path_text(&dir.join("a.img")), path_text(&dir.join("b.img")));
    let format = run_holdfast(&["store", "format", "--size-mib", "4", "--force", &a, &b]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    // Each booted alone: a three times, b once.
    for fill in [1, 2, 3] {
        journal_pages(&[&a], &[fill]);
    }
    journal_pages(&[&b], &[9]);
    let check = run_holdfast(&["store", "check", &a, &b]);
    assert_eq!(check.status, Some(1), "{}", check.transcript());
    assert!(
        check.stdout.contains(
            "problem: split brain: the mirrors ran apart at superblock generation 3; mirror 1's \
             history (superblock generations 3..=3, boot 2, checkpoint 0) is discarded and the \
             longer one (to generation 5) kept — at the next read-write open"
        ),
        "{}",
        check.stdout
    );
}

/// The boot refuses a store whose log is damaged past repair, with the line that names the
/// loss and the way out; `--append holdfast.recover=truncate` starts it from the last intact
/// point, and that boot and the next say the log was truncated.
#[test]
fn a_boot_refuses_mid_log_damage_until_told_to_truncate() {
    let dir = scratch_dir("store-boot-truncate");
    let image = path_text(&dir.join("lone.img"));
    let format = run_holdfast(&["store", "format", "--size-mib", "16", "--force", &image]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    // Pages at the end of the range, which the kernel's first objects do not use.
    let headers = journal_pages(&[&image], &[251, 252, 253]);
    tear(&image, headers[1]);
    let refused = support::boot(&["--disk", &image]);
    let line = format!(
        "selftest: store: log record 2 (block {}) is bad on every mirror and later records say \
         it was durable: records 2..=3 would be lost (generations 0..=0, journal commits 3..=3); \
         refusing to start (`--append holdfast.recover=truncate` starts from the last intact \
         point and loses them); not started",
        headers[1]
    );
    assert!(refused.stdout.contains(&line), "{}", refused.transcript());
    // A system with a store runs until stopped: the time limit ends it once the note is out.
    let image_dir = path_text(support::image_dir());
    let truncated = run_holdfast(&[
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
        "--timeout-seconds",
        "20",
        "--disk",
        &image,
        "--append",
        "holdfast.recover=truncate",
    ]);
    // Boot 1 was the format's open, boot 2 the one that wrote the journal.
    let note = "holdfast: store: log truncated at boot 3 by holdfast.recover=truncate: records 2..=3 \
                were discarded";
    assert!(truncated.stdout.contains(note), "{}", truncated.transcript());
    let inspect = run_holdfast(&["store", "inspect", &image]);
    assert!(
        inspect.stdout.contains("recovery note       log truncated at boot 3"),
        "{}",
        inspect.stdout
    );
}
