//! A store four times the guest's memory: `page-toucher` (services/selftest/src/
//! page_toucher.rs) writes and reads back every page of a space four times larger than the
//! VM's RAM, twice over, so that the kernel must load pages from the store on demand, evict
//! clean ones when memory runs short, and checkpoint dirty ones to make them clean; every
//! page must read back what was written. The nodes of the space tree are evicted with the
//! pages and loaded again when a walk needs them.

mod support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use support::{build_image, holdfast, run_holdfast, scratch_dir, spawn_reading_lines};

const MEMORY_MIB: u64 = 32;
/// Four times the guest's memory, in 4 KiB pages.
const PAGE_COUNT: u64 = 4 * MEMORY_MIB * 256;
const ROUNDS: u64 = 2;
const STORE_MIB: &str = "256";

/// A manifest with `page-toucher` and a space tree of height 6 over `PAGE_COUNT` fresh
/// pages (level 1 nodes hold the pages; each level above holds up to 32 of the one below),
/// plus the admin service for `holdfast vm counters`.
fn manifest() -> String {
    let mut text = String::new();
    for page in 0..PAGE_COUNT {
        writeln!(text, "[[page]]\nname = \"p{page}\"\n").unwrap();
    }
    // Level 1: nodes of pages; then each level up, nodes of the level below.
    let mut below: Vec<String> = (0..PAGE_COUNT).map(|page| format!("p{page}")).collect();
    for height in 1..=6u8 {
        let mut level = Vec::new();
        for (index, chunk) in below.chunks(32).enumerate() {
            let name = format!("h{height}-{index}");
            let slots: Vec<String> = chunk
                .iter()
                .enumerate()
                .map(|(slot, child)| match height {
                    1 => format!("{slot} = {{ page = \"{child}\" }}"),
                    _ => format!("{slot} = {{ space = \"{child}\", height = {} }}", height - 1),
                })
                .collect();
            writeln!(text, "[[node]]\nname = \"{name}\"\nslots = {{ {} }}\n", slots.join(", ")).unwrap();
            level.push(name);
        }
        below = level;
    }
    assert_eq!(below.len(), 1, "one node at height 6");
    writeln!(
        text,
        "[[process]]\nname = \"page-toucher\"\nprogram = \"page-toucher\"\n\
         registers = {{ 0 = {{ console = {{}} }}, 1 = {{ own-process = {{}} }}, 2 = {{ space = \"{}\", height = 6 }}, 5 = {{ number = [{PAGE_COUNT}, {ROUNDS}] }} }}\n",
        below[0]
    )
    .unwrap();
    text.push_str(
        "[[process]]\nname = \"admin\"\nprogram = \"admin\"\n\
         registers = { 0 = { console = {} }, 1 = { control = {} }, 2 = { checkpoint = {} } }\n",
    );
    text
}

#[test]
fn a_store_four_times_the_guest_memory_is_paged() {
    let directory = scratch_dir("paging");
    let manifest_path = directory.join("manifest.toml");
    std::fs::write(&manifest_path, manifest()).unwrap();
    let image_dir = build_image("paging-image", Some(&manifest_path));
    let store = directory.join("store.img");
    let store_path = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", STORE_MIB, store_path]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());

    let name = format!("paging-test-{}", std::process::id());
    let memory = MEMORY_MIB.to_string();
    let vm = spawn_reading_lines(
        holdfast()
            .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "600"])
            .args(["--memory-mib", &memory, "--disk", store_path, "--image-dir"])
            .arg(&image_dir),
    );
    let mut lines = Vec::new();
    let done = format!("page-toucher: round {ROUNDS}: {PAGE_COUNT} pages written and read back");
    let deadline = Instant::now() + Duration::from_secs(400);
    while !lines.contains(&done) {
        let left = deadline.saturating_duration_since(Instant::now());
        match vm.lines.recv_timeout(left) {
            Ok(line) => {
                let failed = line.contains("MISMATCH") || line.contains("kernel panic") || line.contains("failed");
                lines.push(line);
                assert!(!failed, "{}", lines.join("\n"));
            }
            Err(_) => panic!("no '{done}' within 400 s:\n{}", lines.join("\n")),
        }
    }
    let counters = run_holdfast(&["vm", "counters", &name]);
    assert_eq!(counters.status, Some(0), "{}", counters.transcript());
    let counter = |name: &str| -> f64 {
        counters
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no counter {name}:\n{}", counters.stdout))
    };
    let evicted = counter("holdfast_evicted_pages_total");
    // Each round touches four times what fits: most pages must have gone out and come back.
    assert!(evicted >= (PAGE_COUNT * ROUNDS) as f64, "only {evicted} pages evicted\n{}", counters.stdout);
    // ...and came back from the disk, each read timed.
    let (loaded, load_seconds) = (counter("holdfast_loaded_pages_total"), counter("holdfast_page_load_seconds_total"));
    assert!(loaded >= evicted / 2.0 && load_seconds > 0.0, "{loaded} pages loaded in {load_seconds} s\n{}", counters.stdout);
    // The space tree's nodes go out with the pages and are loaded again by the walks that
    // need them.
    let (nodes_evicted, nodes_loaded) = (counter("holdfast_evicted_nodes_total"), counter("holdfast_loaded_nodes_total"));
    assert!(nodes_evicted > 0.0 && nodes_loaded > 0.0, "nodes never paged\n{}", counters.stdout);
    eprintln!(
        "{PAGE_COUNT} pages in {MEMORY_MIB} MiB of guest memory: {evicted} page evictions, \
         {nodes_evicted} node evictions, {nodes_loaded} node loads, {loaded} page loads in {load_seconds:.3} s"
    );
    let _ = run_holdfast(&["vm", "kill", &name]);
}
