//! CI fails while a checked-in generated file differs from what the description generates.

use holdfast_interface_gen::{repository_root, stale_files, stale_line};

#[test]
fn checked_in_generated_files_match_the_description() {
    let stale: Vec<String> = stale_files(&repository_root())
        .expect("the description generates")
        .iter()
        .map(|file| stale_line(file.path))
        .collect();
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
