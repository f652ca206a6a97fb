//! The Linux peer: Debian's cloud kernel (package `linux-image-cloud-amd64`) booted straight
//! from QEMU with a minimal initramfs of a static busybox (package `busybox-static`) whose
//! `/init` prints a ready line with the kernel's own uptime and powers the VM off.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use holdfast_qemu::Boot;

use crate::initramfs::{self, Entry};
use crate::runner::{GuestClock, ReadyMarker};

/// The line `/init` prints, followed by `/proc/uptime`'s first field (seconds).
pub const READY_MARKER: ReadyMarker = ReadyMarker {
    text: "LINUX-READY",
    clock: GuestClock::Seconds,
};

/// The kernel command line. `quiet` keeps the boot log from costing serial time (each
/// byte is a trapped port write under emulation); `mitigations=off` matches a kernel that,
/// like Holdfast today, applies none; `panic=-1` with QEMU's `-no-reboot` turns a panic
/// into a prompt exit, which the runner reports as a boot with no ready line.
pub const KERNEL_COMMAND_LINE: &str = "console=ttyS0 quiet mitigations=off panic=-1";

/// QEMU's exit status after `poweroff -f` (ACPI S5).
pub const EXIT_CODE_POWEROFF: i32 = 0;

/// Where Debian installs the cloud kernel, and the file name around its version.
const KERNEL_DIRECTORY: &str = "/boot";
const KERNEL_PREFIX: &str = "vmlinuz-";
const KERNEL_SUFFIX: &str = "-cloud-amd64";

/// Where `busybox-static` puts its binary (the plain `busybox` package uses the same path
/// for a dynamically linked one, which cannot run from this initramfs).
const BUSYBOX_PATHS: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];

/// `/init`, run by busybox's shell. Applets are called through the busybox binary so the
/// archive needs no applet links. The uptime is read with the shell's own `read`, so the
/// only processes started are `mount` and `poweroff`.
pub const INIT_SCRIPT: &str = "#!/bin/busybox sh
# Holdfast boot benchmark, Linux peer: report ready with the kernel's own uptime, power off.
/bin/busybox mount -t proc proc /proc
read -r uptime_s idle_s < /proc/uptime
echo \"LINUX-READY $uptime_s\" > /dev/console
exec /bin/busybox poweroff -f
";

/// The peer's kernel loaded by QEMU with `initramfs` and [`KERNEL_COMMAND_LINE`]. QEMU's
/// `-kernel/-initrd/-append` boots a Linux bzImage through its linuxboot option ROM
/// rather than PVH.
pub fn boot(kernel: &Path, initramfs: &Path) -> Boot {
    Boot::Pvh {
        kernel: kernel.to_owned(),
        initial_image: Some(initramfs.to_owned()),
        command_line: KERNEL_COMMAND_LINE.to_owned(),
    }
}

/// The newest `vmlinuz-*-cloud-amd64` in `/boot`.
pub fn find_kernel() -> anyhow::Result<PathBuf> {
    find_kernel_in(Path::new(KERNEL_DIRECTORY))
}

fn find_kernel_in(directory: &Path) -> anyhow::Result<PathBuf> {
    let missing = || {
        format!(
            "no Debian cloud kernel ({}/{KERNEL_PREFIX}*{KERNEL_SUFFIX}) for the Linux peer: \
             install the package linux-image-cloud-amd64 (apt-get install linux-image-cloud-amd64)",
            directory.display()
        )
    };
    let mut versions: Vec<String> = fs::read_dir(directory)
        .with_context(missing)?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            Some(
                name.strip_prefix(KERNEL_PREFIX)?
                    .strip_suffix(KERNEL_SUFFIX)?
                    .to_owned(),
            )
        })
        .collect();
    versions.sort_by(|a, b| compare_versions(a, b));
    let Some(newest) = versions.last() else {
        bail!(missing())
    };
    Ok(directory.join(format!("{KERNEL_PREFIX}{newest}{KERNEL_SUFFIX}")))
}

/// Orders "6.1.0-9" before "6.1.0-56": runs of digits compare as numbers.
fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn pieces(text: &str) -> Vec<Result<u64, String>> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(first) = rest.chars().next() {
            let digits = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digits)
                .unwrap_or(rest.len());
            let (piece, tail) = rest.split_at(end);
            pieces.push(if digits {
                Ok(piece.parse().unwrap_or(u64::MAX))
            } else {
                Err(piece.to_owned())
            });
            rest = tail;
        }
        pieces
    }
    pieces(a).cmp(&pieces(b))
}

/// The static busybox binary, checked to be static.
pub fn find_busybox() -> anyhow::Result<PathBuf> {
    let Some(path) = BUSYBOX_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
    else {
        bail!(
            "no busybox for the Linux peer's initramfs (looked at {}): install the package \
             busybox-static (apt-get install busybox-static)",
            BUSYBOX_PATHS.join(", ")
        );
    };
    Ok(path)
}

/// Whether an ELF file needs no dynamic loader (has no `PT_INTERP` program header). Only
/// 64-bit little-endian ELF is accepted: the peer is x86-64.
pub fn is_static_elf(bytes: &[u8]) -> Result<bool, String> {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let truncated = || "truncated ELF header".to_owned();
    let program_headers =
        usize::try_from(u64_at(0x20).ok_or_else(truncated)?).map_err(|_| truncated())?;
    let entry_size = usize::from(u16_at(0x36).ok_or_else(truncated)?);
    let count = usize::from(u16_at(0x38).ok_or_else(truncated)?);
    for index in 0..count {
        let at = program_headers
            .checked_add(index * entry_size)
            .ok_or_else(truncated)?;
        if u32_at(at).ok_or("truncated program header table")? == PT_INTERP {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The bytes of `busybox`, checked to be a static executable.
pub fn read_static_busybox(busybox: &Path) -> anyhow::Result<Vec<u8>> {
    let binary = fs::read(busybox).with_context(|| format!("cannot read {}", busybox.display()))?;
    match is_static_elf(&binary) {
        Ok(true) => Ok(binary),
        Ok(false) => bail!(
            "{} is dynamically linked and cannot run alone in an initramfs: install the package \
             busybox-static (apt-get install busybox-static)",
            busybox.display()
        ),
        Err(why) => bail!("{}: {why}", busybox.display()),
    }
}

/// The initramfs members: `/bin/busybox`, the `programs` (files under `bin/`),
/// `/dev/console` (without which the kernel cannot give init a console and its output goes
/// nowhere), `/proc` to mount on, and `/init`, the `init_script`.
pub fn initramfs_entries(busybox: Vec<u8>, programs: Vec<Entry>, init_script: &str) -> Vec<Entry> {
    let mut entries = vec![
        Entry::directory("bin", 0o755),
        Entry::file("bin/busybox", 0o755, busybox),
    ];
    entries.extend(programs);
    entries.extend([
        Entry::directory("dev", 0o755),
        Entry::character_device("dev/console", 0o600, 5, 1),
        Entry::directory("proc", 0o755),
        Entry::file("init", 0o755, init_script.as_bytes().to_vec()),
    ]);
    entries
}

/// Builds the initramfs for `busybox` and keeps it at `cache_directory`/linux-peer-initramfs.cpio.
pub fn prepare_initramfs(busybox: &Path, cache_directory: &Path) -> anyhow::Result<PathBuf> {
    let entries = initramfs_entries(read_static_busybox(busybox)?, Vec::new(), INIT_SCRIPT);
    cache_initramfs(&entries, cache_directory, "linux-peer-initramfs.cpio")
}

/// Builds the archive of `entries` and keeps it at `cache_directory`/`file_name`. The
/// archive is rebuilt in memory each time (a few milliseconds) and kept by
/// [`write_cached`], so a new busybox or init script never leaves a stale copy.
pub fn cache_initramfs(
    entries: &[Entry],
    cache_directory: &Path,
    file_name: &str,
) -> anyhow::Result<PathBuf> {
    let archive = initramfs::newc_archive(entries).context("building the initramfs")?;
    write_cached(cache_directory, file_name, &archive)
}

/// Keeps `bytes` at `cache_directory`/`file_name` and returns that path. The file is
/// rewritten only when its bytes differ, so an unchanged input leaves it (and its time
/// stamp) alone and a changed one never leaves a stale copy.
pub fn write_cached(
    cache_directory: &Path,
    file_name: &str,
    bytes: &[u8],
) -> anyhow::Result<PathBuf> {
    let path = cache_directory.join(file_name);
    if fs::read(&path).ok().as_deref() == Some(bytes) {
        return Ok(path);
    }
    fs::create_dir_all(cache_directory)
        .with_context(|| format!("cannot create {}", cache_directory.display()))?;
    // Written beside and renamed into place, so a concurrent run never reads half a file.
    let partial = cache_directory.join(format!("{file_name}.{}.partial", std::process::id()));
    fs::write(&partial, bytes).with_context(|| format!("cannot write {}", partial.display()))?;
    fs::rename(&partial, &path)
        .with_context(|| format!("cannot rename {} into place", partial.display()))?;
    Ok(path)
}

/// The compiler and its flags for the peers' programs. Static, because the initramfs has
/// no dynamic loader or libc; warnings are errors, so a program that may measure the wrong
/// thing does not run.
pub const COMPILER: &str = "gcc";
pub const COMPILER_FLAGS: [&str; 5] = ["-static", "-O2", "-Wall", "-Wextra", "-Werror"];

/// What decides a program's bytes: compiler, flags and source. A cached executable whose
/// recorded recipe differs is rebuilt.
fn recipe(source: &str) -> String {
    format!("{COMPILER} {}\n{source}", COMPILER_FLAGS.join(" "))
}

/// Builds the C program `source` into `cache_directory`/`name` unless the one there was
/// built from the same recipe (kept beside it in `<name>.recipe`).
pub fn build_static_program(
    cache_directory: &Path,
    name: &str,
    source: &str,
) -> anyhow::Result<PathBuf> {
    let executable = cache_directory.join(name);
    let recipe_path = cache_directory.join(format!("{name}.recipe"));
    let recipe = recipe(source);
    if executable.is_file() && fs::read_to_string(&recipe_path).ok() == Some(recipe.clone()) {
        return Ok(executable);
    }
    let source_path = write_cached(cache_directory, &format!("{name}.c"), source.as_bytes())?;
    // Built beside and renamed into place, so a concurrent run never runs half a file.
    let partial = cache_directory.join(format!("{name}.{}.partial", std::process::id()));
    let output = Command::new(COMPILER)
        .args(COMPILER_FLAGS)
        .arg("-o")
        .arg(&partial)
        .arg(&source_path)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "cannot run {COMPILER} to build the Linux peer's program: install the packages \
                 gcc and libc6-dev (apt-get install gcc libc6-dev)"
            )
        })?;
    if !output.status.success() {
        bail!(
            "{COMPILER} {} -o {} {} failed ({}); a static build needs glibc's libc.a from the \
             package libc6-dev:\n{}",
            COMPILER_FLAGS.join(" "),
            partial.display(),
            source_path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    fs::rename(&partial, &executable)
        .with_context(|| format!("cannot rename {} into place", partial.display()))?;
    fs::write(&recipe_path, recipe)
        .with_context(|| format!("cannot write {}", recipe_path.display()))?;
    Ok(executable)
}

/// Checks that the kernel can be read (Debian's is readable by root only).
pub fn check_kernel_readable(kernel: &Path) -> anyhow::Result<()> {
    match fs::File::open(kernel) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "the Linux peer's kernel {} does not exist: install the package linux-image-cloud-amd64 \
             (apt-get install linux-image-cloud-amd64) or pass another kernel",
            kernel.display()
        ),
        Err(error) => Err(error).with_context(|| {
            format!(
                "cannot read the Linux peer's kernel {} (Debian installs it readable by root only: \
                 run as root, or copy it somewhere readable and pass its path)",
                kernel.display()
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn versions_compare_numerically() {
        let mut versions = vec!["6.1.0-56", "6.1.0-9", "6.10.0-1", "6.1.0-56+b1"];
        versions.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(versions, ["6.1.0-9", "6.1.0-56", "6.1.0-56+b1", "6.10.0-1"]);
    }

    #[test]
    fn the_newest_cloud_kernel_is_chosen_and_others_ignored() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-kernels-{}", std::process::id()));
        fs::create_dir_all(&directory).unwrap();
        for name in [
            "vmlinuz-6.1.0-9-cloud-amd64",
            "vmlinuz-6.1.0-56-cloud-amd64",
            "vmlinuz-6.2.0-1-amd64",
            "config-6.3.0-1-cloud-amd64",
        ] {
            fs::write(directory.join(name), b"").unwrap();
        }
        let found = find_kernel_in(&directory).unwrap();
        assert_eq!(found, directory.join("vmlinuz-6.1.0-56-cloud-amd64"));
        fs::remove_dir_all(&directory).unwrap();
        let error = find_kernel_in(&directory).unwrap_err().to_string();
        assert!(error.contains("linux-image-cloud-amd64"), "{error}");
    }

    /// A minimal ELF64 header with one program header of type `program_type`.
    fn elf_with_program_header(program_type: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[64..68].copy_from_slice(&program_type.to_le_bytes());
        bytes
    }

    #[test]
    fn static_and_dynamic_elf_are_told_apart() {
        const PT_LOAD: u32 = 1;
        const PT_INTERP: u32 = 3;
        assert_eq!(is_static_elf(&elf_with_program_header(PT_LOAD)), Ok(true));
        assert_eq!(
            is_static_elf(&elf_with_program_header(PT_INTERP)),
            Ok(false)
        );
        assert!(is_static_elf(b"#!/bin/sh\n").is_err());
        assert!(is_static_elf(&elf_with_program_header(PT_LOAD)[..66]).is_err());
    }

    #[test]
    fn init_prints_the_marker_with_the_uptime_to_the_console_and_powers_off() {
        assert!(INIT_SCRIPT.starts_with("#!/bin/busybox sh\n"));
        assert!(INIT_SCRIPT.contains(&format!(
            "echo \"{} $uptime_s\" > /dev/console",
            READY_MARKER.text
        )));
        assert!(INIT_SCRIPT.contains("mount -t proc proc /proc"));
        assert!(INIT_SCRIPT.contains("poweroff -f"));
    }

    #[test]
    fn initramfs_is_cached_and_holds_init_busybox_and_the_console() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-initramfs-{}", std::process::id()));
        let busybox = directory.join("fake-busybox");
        fs::create_dir_all(&directory).unwrap();
        fs::write(&busybox, elf_with_program_header(1)).unwrap();

        let path = prepare_initramfs(&busybox, &directory.join("cache")).unwrap();
        let modified = fs::metadata(&path).unwrap().modified().unwrap();
        assert_eq!(
            prepare_initramfs(&busybox, &directory.join("cache")).unwrap(),
            path
        );
        assert_eq!(
            fs::metadata(&path).unwrap().modified().unwrap(),
            modified,
            "an identical archive is not rewritten"
        );

        let archive = fs::read(&path).unwrap();
        let mut rest = archive.as_slice();
        let mut seen = Vec::new();
        loop {
            let mut reader = cpio::newc::Reader::new(rest).unwrap();
            let entry = reader.entry().clone();
            if entry.is_trailer() {
                break;
            }
            let mut contents = Vec::new();
            reader.read_to_end(&mut contents).unwrap();
            match entry.name() {
                "init" => assert_eq!(contents, INIT_SCRIPT.as_bytes()),
                "bin/busybox" => assert_eq!(contents, elf_with_program_header(1)),
                "dev/console" => assert_eq!(
                    (entry.mode(), entry.rdev_major(), entry.rdev_minor()),
                    (0o020600, 5, 1)
                ),
                _ => {}
            }
            seen.push(entry.name().to_owned());
            rest = reader.finish().unwrap();
        }
        assert_eq!(
            seen,
            ["bin", "bin/busybox", "dev", "dev/console", "proc", "init"]
        );

        fs::write(&busybox, elf_with_program_header(3)).unwrap();
        let error = prepare_initramfs(&busybox, &directory.join("cache"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("busybox-static"), "{error}");
        fs::remove_dir_all(&directory).unwrap();
    }
}
