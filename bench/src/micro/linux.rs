//! The micro-benchmark's Linux peer: the boot benchmark's Debian cloud kernel and static
//! busybox, plus `bench/peers/linux-micro.c` built on the host with `gcc -static -O2`; its
//! `/init` runs the program and powers off.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::initramfs::Entry;
use crate::linux_peer;

/// The program's source, built into this binary so that a benchmark run needs no source
/// tree and the cached executable is rebuilt exactly when the source changes.
pub const PROGRAM_SOURCE: &str = include_str!("../../peers/linux-micro.c");

/// Where the program lives in the initramfs.
const PROGRAM_PATH: &str = "bin/linux-micro";

/// `/init`: the ready line the runner waits for (as the boot benchmark's), then the
/// program, whose lines go to the console, then power off whatever the program did (a
/// failure shows as missing figures or a `LINUX-MICRO-FAILED` line).
pub const INIT_SCRIPT: &str = "#!/bin/busybox sh
# Holdfast micro-benchmark, Linux peer: report ready, run the program, power off.
/bin/busybox mount -t proc proc /proc
read -r uptime_s idle_s < /proc/uptime
echo \"LINUX-READY $uptime_s\" > /dev/console
/bin/linux-micro > /dev/console 2>&1
exec /bin/busybox poweroff -f
";

/// Builds the program into `cache_directory`/linux-micro unless the one there was built
/// from the same recipe (kept beside it in `linux-micro.recipe`).
pub fn build_program(cache_directory: &Path) -> anyhow::Result<PathBuf> {
    linux_peer::build_static_program(cache_directory, "linux-micro", PROGRAM_SOURCE)
}

/// Builds the program if needed and keeps the initramfs, the boot benchmark's with this
/// `/init` and the program, at `cache_directory`/linux-micro-initramfs.cpio.
pub fn prepare_initramfs(busybox: &Path, cache_directory: &Path) -> anyhow::Result<PathBuf> {
    let busybox = linux_peer::read_static_busybox(busybox)?;
    let program_path = build_program(cache_directory)?;
    let program = fs::read(&program_path)
        .with_context(|| format!("cannot read {}", program_path.display()))?;
    let entries = linux_peer::initramfs_entries(
        busybox,
        vec![Entry::file(PROGRAM_PATH, 0o755, program)],
        INIT_SCRIPT,
    );
    linux_peer::cache_initramfs(&entries, cache_directory, "linux-micro-initramfs.cpio")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_runs_the_program_to_the_console_after_the_ready_line_and_powers_off() {
        let ready = INIT_SCRIPT.find("echo \"LINUX-READY $uptime_s\"").unwrap();
        let program = INIT_SCRIPT.find("/bin/linux-micro > /dev/console").unwrap();
        let power_off = INIT_SCRIPT.find("poweroff -f").unwrap();
        assert!(ready < program && program < power_off);
        assert!(INIT_SCRIPT.contains(&format!("/{PROGRAM_PATH} ")));
    }

    #[test]
    fn the_program_prints_every_figure_the_host_reads() {
        for figure in super::super::figures::LinuxFigure::ALL {
            assert!(
                PROGRAM_SOURCE.contains(&format!("report(\"{}\"", figure.stem())),
                "{}",
                figure.stem()
            );
        }
        assert!(PROGRAM_SOURCE.contains("LINUX-MICRO %s_ns %.1f\\nLINUX-MICRO %s_max_ns %.1f\\n"));
        assert!(PROGRAM_SOURCE.contains("LINUX-MICRO-FAILED %s: %s\\n"));
    }

    /// Builds the real program with the real compiler: once, then from the cache.
    #[test]
    fn the_program_is_built_static_once_and_then_reused() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-micro-{}", std::process::id()));
        let executable = build_program(&directory).unwrap();
        let bytes = fs::read(&executable).unwrap();
        assert_eq!(linux_peer::is_static_elf(&bytes), Ok(true));
        let modified = fs::metadata(&executable).unwrap().modified().unwrap();
        assert_eq!(build_program(&directory).unwrap(), executable);
        assert_eq!(
            fs::metadata(&executable).unwrap().modified().unwrap(),
            modified,
            "an unchanged recipe does not rebuild"
        );
        // A changed recipe (as after an edit of the source) rebuilds.
        fs::write(directory.join("linux-micro.recipe"), "old").unwrap();
        fs::write(&executable, b"stale").unwrap();
        build_program(&directory).unwrap();
        assert_ne!(fs::read(&executable).unwrap(), b"stale");
        fs::remove_dir_all(&directory).unwrap();
    }
}
