//! The guest peer of `holdfast bench tp1`: PostgreSQL 15 in a Debian 12 guest under the
//! same QEMU as the Holdfast appliance (q35, accelerator and CPU model, memory, one CPU, a
//! raw virtio-blk disk attached as the appliance's store is: QEMU's default
//! `cache=writeback`, so PostgreSQL's fdatasync is the host's), reached only through a QEMU
//! user-mode forward of 127.0.0.1:PORT to the guest's 5432, as the appliance's TP1 port is.
//!
//! The image is built by `bench/peers/postgres-guest/build-image.sh` (compiled into the
//! CLI) and cached in a folder named after the script's hash: a changed script builds a new
//! image; an unchanged one is reused. Every run boots a fresh sparse copy of it, so runs
//! start from the same data.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use holdfast_qemu::{Accelerator, Boot, QemuBinary};

/// The image build script, run when its image is not in the cache.
pub const BUILD_SCRIPT: &str = include_str!("../../peers/postgres-guest/build-image.sh");
/// What the guest's PID 1 prints when PostgreSQL accepts connections, and when it failed.
pub const READY_LINE: &str = "PG-GUEST-READY";
pub const FAILED_LINE: &str = "PG-GUEST-FAILED";
/// The kernel command line: the image's PID 1, not systemd (see the script);
/// `mitigations=off` as the other Linux peers (Holdfast applies none).
pub const KERNEL_COMMAND_LINE: &str = "console=ttyS0 root=/dev/vda rw rootfstype=ext4 init=/sbin/holdfast-pg-init quiet mitigations=off panic=-1 net.ifnames=0";
/// PostgreSQL's port inside the guest, and the guest's address on QEMU's user network.
pub const GUEST_POSTGRES_PORT: u16 = 5432;
pub const GUEST_ADDRESS: &str = "10.0.2.15";
/// How long a boot may take until PostgreSQL is ready (TCG on a shared host: about 20 s).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(300);
/// Console lines kept for an error message.
const TRANSCRIPT_LINES: usize = 40;

/// The built image's files.
#[derive(Clone, Debug)]
pub struct GuestImage {
    pub dir: PathBuf,
    pub rootfs: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// FNV-1a, 64 bits: a stable name for the script's content (std's hasher may change
/// between Rust releases, which would rebuild the image for nothing).
pub fn script_hash(script: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in script.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The image's folder in `cache_dir`, named after the script it was built by.
pub fn image_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join(format!("pg-guest-{:016x}", script_hash(BUILD_SCRIPT)))
}

impl GuestImage {
    fn in_dir(dir: PathBuf) -> Self {
        Self {
            rootfs: dir.join("rootfs.img"),
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.img"),
            dir,
        }
    }

    /// The cached image, if it was built by this script.
    pub fn cached(cache_dir: &Path) -> Option<Self> {
        let image = Self::in_dir(image_dir(cache_dir));
        [&image.rootfs, &image.kernel, &image.initrd]
            .iter()
            .all(|path| path.is_file())
            .then_some(image)
    }

    /// The cached image, built first (several minutes: downloading and unpacking Debian's
    /// packages) if it is not there. The script writes into a folder of its own that is
    /// renamed into place only when it succeeded, so an interrupted build is never used.
    pub fn prepare(cache_dir: &Path) -> anyhow::Result<Self> {
        if let Some(image) = Self::cached(cache_dir) {
            return Ok(image);
        }
        let target = image_dir(cache_dir);
        std::fs::create_dir_all(cache_dir)
            .with_context(|| format!("creating {}", cache_dir.display()))?;
        let building = cache_dir.join(format!(
            "{}.building-{}",
            target
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("pg-guest"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&building);
        let script = cache_dir.join(format!("build-image-{}.sh", std::process::id()));
        std::fs::write(&script, BUILD_SCRIPT)
            .with_context(|| format!("writing {}", script.display()))?;
        eprintln!(
            "holdfast bench tp1: building the PostgreSQL guest image into {} (minutes: Debian packages from the mirror)",
            target.display()
        );
        let started = Instant::now();
        // The script's progress goes to our stderr: stdout is the table's.
        let status = Command::new("bash")
            .arg(&script)
            .arg(&building)
            .stdin(Stdio::null())
            .stdout(std::io::stderr())
            .stderr(std::io::stderr())
            .status()
            .context("running bash")?;
        let _ = std::fs::remove_file(&script);
        if !status.success() {
            let _ = std::fs::remove_dir_all(&building);
            bail!(
                "bench/peers/postgres-guest/build-image.sh failed ({status}); its output is above"
            );
        }
        if let Err(error) = std::fs::rename(&building, &target) {
            // Another benchmark may have built the same image meanwhile: use that one.
            let _ = std::fs::remove_dir_all(&building);
            if Self::cached(cache_dir).is_none() {
                return Err(error).with_context(|| {
                    format!("renaming {} to {}", building.display(), target.display())
                });
            }
        }
        eprintln!(
            "holdfast bench tp1: the PostgreSQL guest image took {:.0} s to build",
            started.elapsed().as_secs_f64()
        );
        remove_stale_images(cache_dir, &target);
        Self::cached(cache_dir).context("the image build left no rootfs.img, vmlinuz or initrd.img")
    }
}

/// Removes the images older scripts built (about 600 MiB each): only the current script's
/// is ever used again.
fn remove_stale_images(cache_dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stale = path != current
            && entry.file_name().to_str().is_some_and(is_image_dir_name)
            && path.is_dir();
        if stale {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// `pg-guest-` and 16 hexadecimal digits: a built image's folder (not one being built).
fn is_image_dir_name(name: &str) -> bool {
    name.strip_prefix("pg-guest-")
        .is_some_and(|hash| hash.len() == 16 && hash.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

/// A running guest; QEMU is killed and the run's disk removed when dropped.
pub struct GuestPostgres {
    child: Child,
    pub port: u16,
    disk: PathBuf,
    transcript: Arc<Mutex<VecDeque<String>>>,
    /// From spawning QEMU to PostgreSQL ready.
    pub boot_time: Duration,
}

impl GuestPostgres {
    /// Copies the image's disk into `run_dir` and boots it; returns when PostgreSQL is
    /// ready, or fails with the console's last lines.
    pub fn start(
        qemu: &QemuBinary,
        image: &GuestImage,
        accelerator: Accelerator,
        memory_mib: u32,
        run_dir: &Path,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(run_dir)
            .with_context(|| format!("creating {}", run_dir.display()))?;
        let disk = run_dir.join(format!("pg-guest-run-{}.img", std::process::id()));
        let copy = Command::new("cp")
            .arg("--sparse=always")
            .arg(&image.rootfs)
            .arg(&disk)
            .status()
            .context("running cp")?;
        if !copy.success() {
            bail!(
                "copying {} to {}: {copy}",
                image.rootfs.display(),
                disk.display()
            );
        }
        let port = super::free_port()?;
        let mut command = qemu.command();
        command.args(qemu_arguments(image, &disk, accelerator, memory_mib, port));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let transcript = Arc::new(Mutex::new(VecDeque::with_capacity(TRANSCRIPT_LINES)));
        let (sender, lines) = mpsc::channel::<String>();
        let stdout = child.stdout.take().context("QEMU's stdout was piped")?;
        let stderr = child.stderr.take().context("QEMU's stderr was piped")?;
        // The console is read to its end for the guest's whole life (a full pipe would stall
        // the guest's serial writes), its last lines kept for errors.
        for (stream, prefix) in [
            (Box::new(stdout) as Box<dyn std::io::Read + Send>, ""),
            (Box::new(stderr), "qemu: "),
        ] {
            let sender = sender.clone();
            let transcript = Arc::clone(&transcript);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let line = format!("{prefix}{}", line.trim_end_matches('\r'));
                    {
                        let mut kept = transcript
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner());
                        if kept.len() == TRANSCRIPT_LINES {
                            kept.pop_front();
                        }
                        kept.push_back(line.clone());
                    }
                    let _ = sender.send(line);
                }
            });
        }
        drop(sender);
        let mut guest = GuestPostgres {
            child,
            port,
            disk,
            transcript,
            boot_time: Duration::ZERO,
        };
        let deadline = started + BOOT_TIMEOUT;
        loop {
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "the PostgreSQL guest was not ready after {} s:\n{}",
                    BOOT_TIMEOUT.as_secs(),
                    guest.console()
                );
            }
            match lines.recv_timeout(deadline - now) {
                Ok(line) if line.contains(READY_LINE) => break,
                Ok(line) if line.contains(FAILED_LINE) || line.contains("Kernel panic") => {
                    bail!("the PostgreSQL guest failed: {line}\n{}", guest.console());
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = guest.child.wait().ok();
                    bail!(
                        "QEMU ended ({}) before the PostgreSQL guest was ready:\n{}",
                        status.map_or_else(|| "?".to_owned(), |status| status.to_string()),
                        guest.console()
                    );
                }
            }
        }
        guest.boot_time = started.elapsed();
        Ok(guest)
    }

    /// A connection URL for the load generator (through the forward).
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The console's last lines.
    pub fn console(&self) -> String {
        let kept = self
            .transcript
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.iter().map(|line| format!("  | {line}\n")).collect()
    }
}

impl Drop for GuestPostgres {
    fn drop(&mut self) {
        // The run's disk is thrown away, so nothing needs a clean shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.disk);
    }
}

/// QEMU's arguments: the VM the Holdfast appliance gets (the launcher's own
/// [`holdfast_qemu::VmSpec`] with its kernel booted directly, the run's disk as its store
/// disk), plus user-mode networking as `holdfast run --tp1-port` has it, forwarding
/// 127.0.0.1:`port` to PostgreSQL.
pub fn qemu_arguments(
    image: &GuestImage,
    disk: &Path,
    accelerator: Accelerator,
    memory_mib: u32,
    port: u16,
) -> Vec<std::ffi::OsString> {
    let boot = Boot::Pvh {
        kernel: image.kernel.clone(),
        initial_image: Some(image.initrd.clone()),
        command_line: KERNEL_COMMAND_LINE.to_owned(),
    };
    let mut spec = crate::setup::vm_spec(boot, accelerator, memory_mib);
    spec.disks = vec![disk.to_owned()];
    let mut arguments = spec.qemu_arguments();
    arguments.extend(
        [
            "-netdev".to_owned(),
            // As the appliance's: only 127.0.0.1 on the host, and `restrict=on` keeps the
            // guest from reaching anything but the forward.
            format!(
                "user,id=net0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:{port}-{GUEST_ADDRESS}:{GUEST_POSTGRES_PORT}"
            ),
            "-device".to_owned(),
            format!(
                "virtio-net-pci,netdev=net0,mac={},romfile=",
                holdfast_qemu::command_line::GUEST_MAC_ADDRESS
            ),
        ]
        .map(Into::into),
    );
    arguments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(arguments: &[std::ffi::OsString]) -> Vec<String> {
        arguments
            .iter()
            .map(|word| word.to_string_lossy().into_owned())
            .collect()
    }

    fn value_of(words: &[String], option: &str) -> Vec<String> {
        words
            .windows(2)
            .filter(|pair| pair[0] == option)
            .map(|pair| pair[1].clone())
            .collect()
    }

    #[test]
    fn the_guest_gets_the_appliances_vm_and_a_loopback_forward_only() {
        let image = GuestImage::in_dir("/cache/pg".into());
        let words = words(&qemu_arguments(
            &image,
            Path::new("/run/disk.img"),
            Accelerator::Tcg,
            256,
            47432,
        ));
        assert_eq!(value_of(&words, "-m"), ["256"]);
        assert_eq!(
            value_of(&words, "-cpu"),
            [holdfast_qemu::command_line::TCG_CPU_MODEL]
        );
        assert!(
            !words.iter().any(|word| word == "-smp"),
            "one CPU, as the appliance"
        );
        // The store disk's attachment, QEMU's default cache mode (no cache= at all).
        let drives = value_of(&words, "-drive");
        assert_eq!(drives.len(), 1);
        assert!(drives[0].starts_with("format=raw,if=none,id=disk0,"));
        assert!(drives[0].ends_with("file=/run/disk.img"));
        assert!(!drives[0].contains("cache="));
        assert!(value_of(&words, "-device").contains(&"virtio-blk-pci,drive=disk0".to_owned()));
        assert_eq!(
            value_of(&words, "-netdev"),
            [
                "user,id=net0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:47432-10.0.2.15:5432"
            ]
        );
        assert_eq!(value_of(&words, "-kernel"), ["/cache/pg/vmlinuz"]);
        assert_eq!(value_of(&words, "-initrd"), ["/cache/pg/initrd.img"]);
        assert_eq!(value_of(&words, "-append"), [KERNEL_COMMAND_LINE]);
    }

    #[test]
    fn the_image_folder_changes_with_the_script() {
        assert_ne!(
            script_hash(BUILD_SCRIPT),
            script_hash(&format!("{BUILD_SCRIPT}\n"))
        );
        assert_eq!(script_hash(""), 0xcbf2_9ce4_8422_2325);
        let dir = image_dir(Path::new("/c"));
        assert!(dir.to_string_lossy().starts_with("/c/pg-guest-"));
    }

    #[test]
    fn only_built_image_folders_are_stale_candidates() {
        assert!(is_image_dir_name("pg-guest-29b8dae0d9248f6a"));
        assert!(!is_image_dir_name("pg-guest-29b8dae0d9248f6a.building-77"));
        assert!(!is_image_dir_name("accel.toml"));
        assert!(!is_image_dir_name("pg-guest-xyz"));
        let current = image_dir(Path::new("/c"));
        assert!(is_image_dir_name(current.file_name().unwrap().to_str().unwrap()));
    }

    #[test]
    fn the_script_configures_the_settings_the_host_peer_gets() {
        for (name, value) in super::super::POSTGRES_SETTINGS {
            let line = format!("\n{name} = {value}\n");
            assert!(
                BUILD_SCRIPT.contains(&line),
                "build-image.sh lacks {line:?}"
            );
        }
        assert!(BUILD_SCRIPT.contains(&format!("echo \"{READY_LINE}\"")));
        assert!(BUILD_SCRIPT.contains(FAILED_LINE));
        assert!(KERNEL_COMMAND_LINE.contains("init=/sbin/holdfast-pg-init"));
        assert!(BUILD_SCRIPT.contains("> \"$root/sbin/holdfast-pg-init\""));
    }
}
