//! Every error is one line, `holdfast: <what is wrong>`, with an exit status that says whose
//! fault it was: 2 for the user's input, 3 for anything else. Never a panic.

mod support;

use support::{assert_one_line_error, holdfast, image_dir, run_command, run_holdfast, scratch_dir};

const INPUT_ERROR: i32 = 2;
const OTHER_FAILURE: i32 = 3;

fn run_with_image(extra: &[&str]) -> support::Run {
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let mut arguments = vec!["run", "--image-dir", &image_dir, "--accel", "tcg"];
    arguments.extend_from_slice(extra);
    run_holdfast(&arguments)
}

#[test]
fn missing_disk_image() {
    let missing = scratch_dir("missing-disk").join("x.img");
    let run = run_with_image(&["--disk", missing.to_str().unwrap()]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!("holdfast: disk image '{}' not found", missing.display()),
    );
}

#[test]
fn directory_as_disk_image() {
    let directory = scratch_dir("directory-disk");
    let run = run_with_image(&["--disk", directory.to_str().unwrap()]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: disk image '{}' is not a regular file or a block device",
            directory.display()
        ),
    );
}

#[test]
fn file_that_is_not_a_holdfast_image() {
    let directory = scratch_dir("not-an-image");
    std::fs::write(
        directory.join("holdfast-kernel.elf"),
        b"\x7fELF and not much else",
    )
    .unwrap();
    let initial_image = directory.join("initial.hfi");
    std::fs::write(&initial_image, vec![0u8; 4096]).unwrap();
    let run = run_holdfast(&[
        "run",
        "--image-dir",
        directory.to_str().unwrap(),
        "--accel",
        "tcg",
    ]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: '{}' is not a Holdfast image: bad magic (not a Holdfast image)",
            initial_image.display()
        ),
    );
}

#[test]
fn missing_image_directory_says_to_build() {
    let missing = scratch_dir("no-image").join("image");
    let run = run_holdfast(&["run", "--image-dir", missing.to_str().unwrap()]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: image directory '{}' not found: run 'holdfast image build' first",
            missing.display()
        ),
    );
}

#[test]
fn qemu_not_in_path() {
    let empty = scratch_dir("empty-path");
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let run = run_command(holdfast().env("PATH", &empty).args([
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
    ]));
    assert_one_line_error(
        &run,
        OTHER_FAILURE,
        "holdfast: QEMU not found: install qemu-system-x86 (looked for qemu-system-x86_64 in PATH)",
    );
}

#[test]
fn qemu_override_that_does_not_exist() {
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let run = run_command(
        holdfast()
            .env("HOLDFAST_QEMU", "/nonexistent/qemu-system-x86_64")
            .args(["run", "--image-dir", &image_dir, "--accel", "tcg"]),
    );
    assert_one_line_error(
        &run,
        OTHER_FAILURE,
        "holdfast: QEMU not found: HOLDFAST_QEMU names '/nonexistent/qemu-system-x86_64', which does not exist",
    );
}

#[test]
fn qemu_that_fails_is_reported_with_its_status() {
    let image_dir = image_dir().to_str().unwrap().to_owned();
    let run = run_command(holdfast().env("HOLDFAST_QEMU", "/bin/false").args([
        "run",
        "--image-dir",
        &image_dir,
        "--accel",
        "tcg",
    ]));
    assert_one_line_error(&run, OTHER_FAILURE, "holdfast: QEMU exited with status 1");
}

#[test]
fn unknown_flag_is_one_short_line() {
    let run = run_holdfast(&["run", "--frobnicate"]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        "holdfast: unexpected argument '--frobnicate' found (see 'holdfast run --help')",
    );
}

#[test]
fn append_needs_pvh_boot() {
    let run = run_holdfast(&["run", "--boot", "grub", "--append", "holdfast.after=stay"]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        "holdfast: --append works only with --boot pvh: GRUB's kernel command line is fixed in the boot disk's grub.cfg (see 'holdfast image build --grub-append')",
    );
}

#[test]
fn bad_net_connect_address() {
    let run = run_holdfast(&["run", "--net-connect", "localhost"]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        "holdfast: invalid value 'localhost' for '--net-connect <HOST:PORT>': 'localhost' is not HOST:PORT (see 'holdfast run --help')",
    );
}

#[test]
fn unknown_vm_name() {
    let run = run_holdfast(&["vm", "status", "no-such-vm"]);
    let socket = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("holdfast-state/no-such-vm/qmp.sock");
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: no VM named 'no-such-vm' is running (nothing answers on {})",
            socket.display()
        ),
    );
}

/// `holdfast image build --manifest` with a manifest of `text`, into a scratch directory.
fn build_with_manifest(test_name: &str, text: &str) -> (support::Run, std::path::PathBuf) {
    let directory = scratch_dir(test_name);
    let manifest = directory.join("manifest.toml");
    std::fs::write(&manifest, text).unwrap();
    let out = directory.join("image");
    let run = run_holdfast(&[
        "image",
        "build",
        "--manifest",
        manifest.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    (run, manifest)
}

#[test]
fn manifest_with_a_dangling_reference() {
    let (run, manifest) = build_with_manifest(
        "manifest-dangling",
        "[[process]]\nname = \"echo\"\nprogram = \"hello\"\nregisters = { 3 = { node = \"scratch\" } }\n",
    );
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: {}: process 'echo' register 3: no node named 'scratch'",
            manifest.display()
        ),
    );
}

#[test]
fn manifest_with_a_syntax_error() {
    let (run, manifest) = build_with_manifest("manifest-syntax", "[[process]\n");
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: {}: line 1, column 10: invalid table header: expected `.`, `]]`",
            manifest.display()
        ),
    );
}

#[test]
fn manifest_that_does_not_exist() {
    let missing = scratch_dir("manifest-missing").join("manifest.toml");
    let run = run_holdfast(&["image", "build", "--manifest", missing.to_str().unwrap()]);
    assert_one_line_error(
        &run,
        INPUT_ERROR,
        &format!(
            "holdfast: {}: cannot read it: No such file or directory (os error 2)",
            missing.display()
        ),
    );
}

/// The programs are known only after the guest build: this runs cargo for the guest crates
/// (quick when the test image is already built).
#[test]
fn manifest_naming_a_program_the_build_lacks() {
    let (run, manifest) = build_with_manifest(
        "manifest-unknown-program",
        "[[process]]\nname = \"echo\"\nprogram = \"echo\"\n",
    );
    assert_eq!(run.status, Some(INPUT_ERROR), "{}", run.transcript());
    let last_line = run.stderr.lines().last().unwrap_or_default();
    // The list of programs the build has grows with services/; the line names them all.
    let expected_start = format!(
        "holdfast: {}: process 'echo': no program 'echo' in the guest build (it has ",
        manifest.display()
    );
    assert!(
        last_line.starts_with(&expected_start) && last_line.contains(", hello, "),
        "{}",
        run.transcript()
    );
}

#[test]
fn every_verb_has_help() {
    let verbs: [(&[&str], &[&str]); 9] = [
        (
            &[],
            &["image", "run", "vm", "accel", "bench", "Exit status"],
        ),
        (
            &["image", "build"],
            &["--out", "--manifest", "--grub-append", "grub-mkrescue"],
        ),
        (
            &["run"],
            &[
                "--image-dir",
                "--boot",
                "--disk",
                "--net-connect",
                "--accel",
                "--memory-mib",
                "--append",
                "--stay-up",
                "--name",
                "--timeout-seconds",
            ],
        ),
        (&["vm"], &["list", "status", "pause", "resume", "quit"]),
        (&["vm", "status"], &["<NAME>"]),
        (&["vm", "quit"], &["<NAME>"]),
        (&["accel"], &["--reprobe"]),
        (&["bench"], &["boot"]),
        (&["bench", "boot"], &["--quick"]),
    ];
    for (verb, mentions) in verbs {
        let mut arguments = verb.to_vec();
        arguments.push("--help");
        let run = run_holdfast(&arguments);
        assert_eq!(run.status, Some(0), "{verb:?}\n{}", run.transcript());
        for mention in mentions {
            assert!(
                run.stdout.contains(mention),
                "{verb:?} --help lacks {mention:?}\n{}",
                run.stdout
            );
        }
    }
}
