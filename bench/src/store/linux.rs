//! The store benchmark's Linux peer: the boot benchmark's Debian cloud kernel and static
//! busybox, the kernel's virtio modules (the cloud kernel builds virtio-blk as a module),
//! and `bench/peers/linux-store.c` built on the host with `gcc -static -O2`. Its `/init`
//! loads the modules, waits for `/dev/vda`, runs the program on it and powers off.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::initramfs::Entry;
use crate::linux_peer;

/// The program's source, built into this binary (see `program_bench::PeerProgram`).
pub const PROGRAM_SOURCE: &str = include_str!("../../peers/linux-store.c");
const PROGRAM_NAME: &str = "linux-store";

/// The modules virtio-blk needs, in load order, under `/lib/modules/<version>/kernel/`.
pub const MODULES: [&str; 6] = [
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko",
    "drivers/virtio/virtio_pci.ko",
    "drivers/block/virtio_blk.ko",
];

/// `/init`: modules, devtmpfs, the ready line, the program on `/dev/vda` writing `mib` MiB a
/// round for `rounds` rounds, power off.
pub fn init_script(mib: u64, rounds: usize) -> String {
    let insmods: String = MODULES
        .iter()
        .map(|module| {
            let name = module.rsplit('/').next().unwrap_or(module);
            format!("/bin/busybox insmod /lib/modules/{name}\n")
        })
        .collect();
    format!(
        "#!/bin/busybox sh
# Holdfast store benchmark, Linux peer: the raw disk's write throughput and write + flush latency.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs devtmpfs /dev
{insmods}n=0
while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do /bin/busybox sleep 0.05; n=$((n+1)); done
read -r uptime_s idle_s < /proc/uptime
echo \"LINUX-READY $uptime_s\" > /dev/console
/bin/{PROGRAM_NAME} {mib} {rounds} > /dev/console 2>&1
exec /bin/busybox poweroff -f
"
    )
}

/// `/lib/modules/<version>` for the kernel `vmlinuz-<version>`.
pub fn modules_directory(kernel: &Path) -> anyhow::Result<PathBuf> {
    let name = kernel
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("");
    let Some(version) = name.strip_prefix("vmlinuz-") else {
        bail!(
            "cannot tell the version of the Linux peer's kernel {} (not vmlinuz-<version>)",
            kernel.display()
        );
    };
    Ok(Path::new("/lib/modules").join(version))
}

/// Builds the program if needed and keeps the initramfs at
/// `cache_directory`/linux-store-initramfs.cpio.
pub fn prepare_initramfs(
    busybox: &Path,
    kernel: &Path,
    cache_directory: &Path,
    mib: u64,
    rounds: usize,
) -> anyhow::Result<PathBuf> {
    let busybox = linux_peer::read_static_busybox(busybox)?;
    let program_path =
        linux_peer::build_static_program(cache_directory, PROGRAM_NAME, PROGRAM_SOURCE)?;
    let program = fs::read(&program_path)
        .with_context(|| format!("cannot read {}", program_path.display()))?;
    let modules_directory = modules_directory(kernel)?;
    let mut programs = vec![
        Entry::file(&format!("bin/{PROGRAM_NAME}"), 0o755, program),
        Entry::directory("lib", 0o755),
        Entry::directory("lib/modules", 0o755),
    ];
    for module in MODULES {
        let path = modules_directory.join("kernel").join(module);
        let bytes = fs::read(&path).with_context(|| {
            format!(
                "cannot read the Linux peer's module {} (the package linux-image-cloud-amd64 installs it)",
                path.display()
            )
        })?;
        let name = module.rsplit('/').next().unwrap_or(module);
        programs.push(Entry::file(&format!("lib/modules/{name}"), 0o644, bytes));
    }
    let entries = linux_peer::initramfs_entries(busybox, programs, &init_script(mib, rounds));
    linux_peer::cache_initramfs(&entries, cache_directory, "linux-store-initramfs.cpio")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_loads_the_modules_in_order_then_runs_the_program_on_the_disk() {
        let script = init_script(64, 3);
        let positions: Vec<usize> = MODULES
            .iter()
            .map(|module| script.find(module.rsplit('/').next().unwrap()).unwrap())
            .collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
        let ready = script.find("LINUX-READY").unwrap();
        let program = script.find("/bin/linux-store 64 3 > /dev/console").unwrap();
        assert!(positions[5] < ready && ready < program);
        assert!(program < script.find("poweroff -f").unwrap());
        assert!(script.contains("mount -t devtmpfs devtmpfs /dev"));
    }

    #[test]
    fn the_modules_come_from_the_kernel_version() {
        assert_eq!(
            modules_directory(Path::new("/boot/vmlinuz-6.1.0-56-cloud-amd64")).unwrap(),
            Path::new("/lib/modules/6.1.0-56-cloud-amd64")
        );
        assert!(modules_directory(Path::new("/boot/bzImage")).is_err());
    }

    #[test]
    fn the_program_prints_what_the_host_reads() {
        for key in [
            "raw_write_bytes_per_second",
            "write_flush_ns",
            "LINUX-STORE-FAILED %s: %s\\n",
        ] {
            assert!(PROGRAM_SOURCE.contains(key), "{key}");
        }
    }
}
