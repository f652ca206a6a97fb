//! The services benchmark's Linux peer: the boot benchmark's Debian cloud kernel and static
//! busybox, plus `bench/peers/linux-services.c` built on the host with `gcc -static -O2`
//! (the program also is the static binary its fork and exec figure execs); its `/init` runs
//! the program and powers off.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::initramfs::Entry;
use crate::linux_peer;

/// The program's source, built into this binary so that the cached executable is rebuilt
/// exactly when the source changes.
pub const PROGRAM_SOURCE: &str = include_str!("../../peers/linux-services.c");

/// Where the program lives in the initramfs. It execs itself by this path (its argv[0]).
const PROGRAM_PATH: &str = "bin/linux-services";

/// `/init`: the ready line, the program by its absolute path, power off whatever the
/// program did (a failure shows as missing figures or a `LINUX-SERVICES-FAILED` line).
pub const INIT_SCRIPT: &str = "#!/bin/busybox sh
# Holdfast services benchmark, Linux peer: report ready, run the program, power off.
/bin/busybox mount -t proc proc /proc
read -r uptime_s idle_s < /proc/uptime
echo \"LINUX-READY $uptime_s\" > /dev/console
/bin/linux-services > /dev/console 2>&1
exec /bin/busybox poweroff -f
";

/// Builds the program into `cache_directory`/linux-services unless the one there was built
/// from the same recipe.
pub fn build_program(cache_directory: &Path) -> anyhow::Result<PathBuf> {
    linux_peer::build_static_program(cache_directory, "linux-services", PROGRAM_SOURCE)
}

/// Builds the program if needed and keeps the initramfs at
/// `cache_directory`/linux-services-initramfs.cpio.
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
    linux_peer::cache_initramfs(&entries, cache_directory, "linux-services-initramfs.cpio")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::figures::LinuxFigure;

    #[test]
    fn init_runs_the_program_by_its_absolute_path_and_powers_off() {
        let program = INIT_SCRIPT
            .find(&format!("/{PROGRAM_PATH} > /dev/console"))
            .unwrap();
        assert!(INIT_SCRIPT.find("LINUX-READY").unwrap() < program);
        assert!(program < INIT_SCRIPT.find("poweroff -f").unwrap());
    }

    #[test]
    fn the_program_prints_every_figure_the_host_reads() {
        for figure in LinuxFigure::ALL {
            assert!(
                PROGRAM_SOURCE.contains(&format!("report(\"{}\"", figure.stem())),
                "{}",
                figure.stem()
            );
        }
        assert!(PROGRAM_SOURCE.contains("LINUX-SERVICES-FAILED %s: %s\\n"));
    }

    /// Builds the real program with the real compiler and runs it on the host: its exec of
    /// itself with `--exit` must work, and it prints each figure.
    #[test]
    fn the_program_builds_static_and_runs() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-services-{}", std::process::id()));
        let executable = build_program(&directory).unwrap();
        assert_eq!(
            linux_peer::is_static_elf(&fs::read(&executable).unwrap()),
            Ok(true)
        );
        let output = std::process::Command::new(&executable).output().unwrap();
        fs::remove_dir_all(&directory).unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}");
        let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
        crate::services::figures::linux_figures(&lines).unwrap();
    }
}
