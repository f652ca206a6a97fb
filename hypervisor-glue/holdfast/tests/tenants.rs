//! Hostile tenants (services/tenant-manifest.toml): a hostile tenant
//! (services/selftest/src/hostile_tenant.rs) replays capabilities the monitor revoked, asks
//! it for forbidden grants, counts what it can name, exhausts its bank, spins on its meter,
//! floods the victim's server through the forwarder it was granted, asks for 1000 forbidden
//! grants (twice what the audit log holds, were each logged: after them the victim's
//! allowed grant must still be made) and then invokes everything it holds at random for
//! 10 s from a seed given on the command line; the
//! victim (tenant_victim.rs) finds its pages' checksum and its bank's counts unchanged, and
//! its calls to its server during and after the attack, all but the slowest, waited at most
//! one quantum more than its slowest call before it.
//!
//! Why the slowest call before the attack and not nothing: the victim waits without any
//! attack too (up to 38 ms seen, at random, on a busy host: its cause is not yet known).
//! Why one quantum, as tests/meters.rs bounds a spinner's delay: a server's time is charged
//! to its caller's meter (`process::meters::charge_meter`), so the services running the
//! hostile tenant's requests (its bank, the monitor, the victim's server) run on its share,
//! and they take turns with its processes as one group (`process::switch_to_next`): the
//! victim waits for one of its quanta in a round. Seen: 12 to 16 ms during the attack with
//! 10.2 to 12.8 ms quanta. (The slowest call before the attack is larger than those on
//! this host, so this test alone would not tell one quantum from two: tests/meters.rs
//! does.) Before `ipc::make_available` kept a server for the first caller stalled
//! on it, a flooder that the server had just answered ran first and called again, holding
//! the server for its whole run: 34 to 91 ms (51 ms against 13 ms before the attack).
//! Before servers ran on their callers' meters, this bound allowed a second quantum.

mod support;

use std::time::{Duration, Instant};

use support::{build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// The fuzzing's seed: `hostile-tenant: seed N` prints it, and the same seed repeats the
/// digest of the first 2000 calls' reply codes.
const SEED: u64 = 1717;
/// A victim call's own time beside the quantum the attack may add: microseconds, but a
/// host that deschedules QEMU's vCPU thread stretches it by milliseconds (as in
/// tests/meters.rs).
const CALL_US_MAX: u64 = 5_000;

/// The numbers in `line` after each of `labels`, in order.
fn figures<const N: usize>(line: &str, labels: [&str; N]) -> Option<[u64; N]> {
    let mut values = [0; N];
    let mut rest = line;
    for (label, value) in labels.iter().zip(values.iter_mut()) {
        rest = &rest[rest.find(label)? + label.len()..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        *value = rest[..digits].parse().ok()?;
    }
    Some(values)
}

#[test]
fn a_hostile_tenant_leaves_another_tenants_data_latency_and_quota_unchanged() {
    let image_dir = build_image("tenant-image", Some(&source_dir().join("services/tenant-manifest.toml")));
    // The monitor's audit log is written through the journal: a store.
    let store = scratch_dir("tenants").join("store.img");
    let store = store.to_str().expect("UTF-8 path");
    let format = run_holdfast(&["store", "format", "--size-mib", "64", "--force", store]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let name = format!("tenants-{}", std::process::id());
    let vm = spawn_reading_lines(
        holdfast()
            .args(["run", "--name", &name, "--accel", "tcg", "--timeout-seconds", "300"])
            .arg("--image-dir")
            .arg(&image_dir)
            // No periodic checkpoint: its pause and stabilization delay the victim's calls
            // by up to 54 ms with no attack at all, which is not what is measured here.
            .args(["--disk", store, "--append", &format!("holdfast.fuzz-seed={SEED} holdfast.checkpoint-interval-ms=3600000")]),
    );
    let deadline = Instant::now() + Duration::from_secs(280);
    let mut seen: Vec<String> = Vec::new();
    let awaited = ["hostile-tenant: passed", "tenant-victim: passed"];
    while !awaited.iter().all(|wanted| seen.iter().any(|line| line == wanted)) {
        let Ok(line) = vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            panic!("no verdicts from both tenants:\n{}", seen.join("\n"));
        };
        for bad in ["MISMATCH", "kernel panic", "faulted"] {
            assert!(!line.contains(bad), "'{bad}' printed:\n{}\n{line}", seen.join("\n"));
        }
        seen.push(line);
    }
    let _ = run_holdfast(&["vm", "kill", &name]);
    let line = |prefix: &str| {
        seen.iter().find(|line| line.starts_with(prefix)).unwrap_or_else(|| panic!("no '{prefix}' line:\n{}", seen.join("\n")))
    };
    assert_eq!(line("hostile-tenant: seed "), &format!("hostile-tenant: seed {SEED}"));
    assert!(line("tenant-warden: lapsed revoked (").ends_with(" objects)"));
    let [pages, nodes, ran_permille, quantum_us, flood_calls] = figures(
        line("hostile-tenant: its bank sold "),
        ["sold ", "pages and ", "then refused; it spun ", "its longest run ", "server with "],
    )
    .expect("the attack's figures");
    // Its bank's limits (the manifest's bank 2): all of them, and not one more.
    assert_eq!((pages, nodes), (32, 32), "{}", seen.join("\n"));
    assert!((100..=450).contains(&ran_permille), "it ran {ran_permille} permille on a 300 permille share");
    assert!(flood_calls > 0);
    let refused_line = seen.iter().find(|line| line.contains(" forbidden grants refused in "));
    let [refusals, allowed_code] = refused_line
        .and_then(|line| figures(line, ["hostile-tenant: ", "then the victim's allowed grant got code "]))
        .unwrap_or_else(|| panic!("no refusals' figures:\n{}", seen.join("\n")));
    assert_eq!((refusals, allowed_code), (1000, 0), "{}", seen.join("\n"));
    let [fuzz_calls, fuzz_ms] =
        figures(line("hostile-tenant: fuzz: "), ["fuzz: ", "calls in "]).expect("the fuzzing's figures");
    assert!(fuzz_ms >= 10_000 && fuzz_calls >= 2_000, "{fuzz_calls} calls in {fuzz_ms} ms");
    let [before_calls, before_us, during_calls, during_us, during_next_us, after_calls, after_us, after_next_us] = figures(
        line("tenant-victim: latency "),
        ["before ", "the slowest ", "during ", "the slowest ", "then ", "after ", "the slowest ", "then "],
    )
    .expect("the victim's latency figures");
    eprintln!(
        "hostile tenant: {pages} pages and {nodes} nodes, ran {ran_permille} permille, longest run {quantum_us} us, \
         {flood_calls} flood calls, {fuzz_calls} fuzz calls in {fuzz_ms} ms; victim: before {before_calls} calls \
         slowest {before_us} us, during {during_calls} slowest {during_us} then {during_next_us} us, after \
         {after_calls} slowest {after_us} then {after_next_us} us"
    );
    assert!(during_calls > 0 && after_calls > 0);
    let wait_us_max = before_us + quantum_us + CALL_US_MAX;
    // The slowest call but one: a host that deschedules QEMU's vCPU thread stalls one call
    // by as long as it likes (50 ms once in CI, beside 13 ms before the attack), while an
    // attack that beat the meters would stall the victim in every period it ran.
    assert!(
        during_next_us <= wait_us_max && after_next_us <= wait_us_max,
        "two victim calls took {during_us} and {during_next_us} us during the attack, {after_us} and \
         {after_next_us} us after it: more than {wait_us_max} us (its slowest call before the attack, \
         {before_us} us, one of the hostile tenant's quanta, {quantum_us} us, and a call)\n{}",
        seen.join("\n")
    );
}
