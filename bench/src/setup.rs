//! What the boot and micro benchmarks share around their guests: the options for running
//! them, finding QEMU and the Linux peer's files, the VM every guest gets, and the rounds
//! that boot the guests interleaved with a progress line per boot.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use holdfast_qemu::{Accelerator, Boot, QemuBinary, QemuNotFound, VmSpec};

use crate::guests::Guest;
use crate::linux_peer;
use crate::runner::{self, GuestRun};

/// Longest one boot may take, ready line and exit included. Generous because the peer
/// takes seconds under TCG on a shared two-core machine; a guest that needs longer is
/// treated as not booting.
pub const BOOT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

/// How a benchmark runs its guests, and where the Linux peer comes from.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The accelerator every guest runs under; the caller chooses it (`holdfast_qemu::accel`).
    pub accelerator: Accelerator,
    pub runs_per_guest: usize,
    pub memory_mib: u32,
    /// QEMU's binary; `None`: `$HOLDFAST_QEMU`, else `qemu-system-x86_64` on `PATH`.
    pub qemu_binary: Option<PathBuf>,
    /// Longest one boot may take, measuring and exit included.
    pub boot_timeout: Duration,
    /// The Linux peer's kernel; `None`: the newest `/boot/vmlinuz-*-cloud-amd64`.
    pub linux_kernel: Option<PathBuf>,
    /// A static busybox for the peer's initramfs; `None`: `/bin/busybox` (busybox-static).
    pub busybox: Option<PathBuf>,
    /// Where the peer's files are kept; `None`: [`default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
}

impl RunOptions {
    /// `runs_per_guest` boots per guest under TCG, with the launcher's memory.
    pub fn new(runs_per_guest: usize) -> Self {
        Self {
            accelerator: Accelerator::Tcg,
            runs_per_guest,
            memory_mib: holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
            qemu_binary: None,
            boot_timeout: BOOT_TIMEOUT_DEFAULT,
            linux_kernel: None,
            busybox: None,
            cache_dir: None,
        }
    }
}

/// [`RunOptions`] with QEMU and the Linux peer's files found.
#[derive(Clone, Debug)]
pub struct RunSetup {
    pub options: RunOptions,
    pub qemu: QemuBinary,
    pub linux_kernel: PathBuf,
    pub busybox: PathBuf,
    pub cache_dir: PathBuf,
}

/// One guest of a benchmark's rounds.
#[derive(Clone, Debug)]
pub struct GuestVm {
    /// What the guest must print and how QEMU must exit.
    pub guest: Guest,
    /// The guest's name in the progress lines.
    pub label: &'static str,
    pub spec: VmSpec,
    /// The serial lines to keep for the caller: those with one of these words.
    pub keep_lines_with: Vec<&'static str>,
    /// Ready only at this line after the marker: [`crate::runner::BootExpectation`].
    pub first_program_line: Option<&'static str>,
    /// What the error says when a run fails, before "(run N of M)".
    pub failure_message: String,
}

impl RunSetup {
    /// Checks the options and finds QEMU, the Linux peer's kernel (checked readable) and
    /// busybox.
    pub fn prepare(options: &RunOptions) -> anyhow::Result<Self> {
        if options.runs_per_guest == 0 {
            bail!("runs per guest must be at least 1");
        }
        let qemu =
            match &options.qemu_binary {
                // The launcher's message for an unusable path names its environment variable;
                // here the path came from the options.
                Some(path) => QemuBinary::find_with(Some(path.as_os_str()), None).map_err(
                    |error| match error {
                        QemuNotFound::OverrideUnusable { path, problem } => {
                            anyhow!("QEMU binary '{}' {problem}", path.display())
                        }
                        other => other.into(),
                    },
                )?,
                None => QemuBinary::find()?,
            };
        let linux_kernel = match &options.linux_kernel {
            Some(path) => path.clone(),
            None => linux_peer::find_kernel()?,
        };
        linux_peer::check_kernel_readable(&linux_kernel)?;
        let busybox = match &options.busybox {
            Some(path) => path.clone(),
            None => linux_peer::find_busybox()?,
        };
        Ok(Self {
            options: options.clone(),
            qemu,
            linux_kernel,
            busybox,
            cache_dir: options.cache_dir.clone().unwrap_or_else(default_cache_dir),
        })
    }

    /// The VM that boots `boot`: the launcher's defaults with the options' accelerator and
    /// memory, the same for every guest, so that guests differ only in what they boot.
    pub fn vm_spec(&self, boot: Boot) -> VmSpec {
        vm_spec(boot, self.options.accelerator, self.options.memory_mib)
    }

    /// What every run had in common, for a table's title: "QEMU q35, TCG, 256 MiB, median
    /// of 3 boots per guest (interleaved); Linux peer vmlinuz-…".
    pub fn conditions(&self) -> String {
        let linux_name = self
            .linux_kernel
            .file_name()
            .unwrap_or(OsStr::new("?"))
            .to_string_lossy();
        format!(
            "QEMU q35, {}, {} MiB, median of {} boots per guest (interleaved); Linux peer {linux_name}",
            self.options.accelerator, self.options.memory_mib, self.options.runs_per_guest
        )
    }

    /// Boots every guest `runs_per_guest` times and hands each run to `record` (with its
    /// guest's index and the run's number from 1), which returns the figures for the
    /// run's progress line. Rounds interleave the guests, so that a slow spell of this
    /// shared machine falls on all of them alike rather than on whichever guest was being
    /// measured at the time.
    pub fn run_interleaved(
        &self,
        guests: &[GuestVm],
        progress: &mut dyn Write,
        mut record: impl FnMut(usize, usize, GuestRun) -> anyhow::Result<String>,
    ) -> anyhow::Result<()> {
        let runs_per_guest = self.options.runs_per_guest;
        let boots_total = runs_per_guest * guests.len();
        let boots_width = boots_total.to_string().len();
        let label_width = guests
            .iter()
            .map(|guest| guest.label.chars().count())
            .max()
            .unwrap_or(0);
        let mut boots_done = 0;
        for run_number in 1..=runs_per_guest {
            for (index, guest) in guests.iter().enumerate() {
                let mut command = self.qemu.command();
                command.args(guest.spec.qemu_arguments());
                let mut expectation = guest.guest.expectation(self.options.boot_timeout);
                expectation.first_program_line = guest.first_program_line;
                let run = runner::run_guest(command, &expectation, &guest.keep_lines_with)
                    .with_context(|| {
                        format!(
                            "{} (run {run_number} of {runs_per_guest})",
                            guest.failure_message
                        )
                    })?;
                let figures = record(index, run_number, run)?;
                boots_done += 1;
                writeln!(
                    progress,
                    "[{boots_done:>boots_width$}/{boots_total}] {:<label_width$} run {run_number}/{runs_per_guest}: {figures}",
                    guest.label,
                )?;
                progress.flush()?;
            }
        }
        Ok(())
    }
}

/// The VM that boots `boot` under `accelerator` with `memory_mib`, otherwise the
/// launcher's defaults.
pub fn vm_spec(boot: Boot, accelerator: Accelerator, memory_mib: u32) -> VmSpec {
    let mut spec = VmSpec::new(boot, accelerator);
    spec.memory_mib = memory_mib;
    spec
}

/// `holdfast-bench/` in Cargo's target folder: `CARGO_TARGET_DIR`, else the nearest folder
/// above the running program that holds Cargo's `CACHEDIR.TAG` (the target folder), else
/// the system's temporary folder.
pub fn default_cache_dir() -> PathBuf {
    const SUBDIRECTORY: &str = "holdfast-bench";
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join(SUBDIRECTORY);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .find(|folder| folder.join("CACHEDIR.TAG").is_file())
                .map(Path::to_owned)
        })
        .unwrap_or_else(std::env::temp_dir)
        .join(SUBDIRECTORY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_runs_is_refused_before_anything_is_looked_for() {
        let mut options = RunOptions::new(0);
        options.qemu_binary = Some("/nonexistent-qemu".into());
        let error = RunSetup::prepare(&options).unwrap_err().to_string();
        assert_eq!(error, "runs per guest must be at least 1");
    }

    #[test]
    fn an_unusable_qemu_path_is_named_as_given() {
        let mut options = RunOptions::new(1);
        options.qemu_binary = Some("/nonexistent-qemu".into());
        let error = RunSetup::prepare(&options).unwrap_err().to_string();
        assert_eq!(error, "QEMU binary '/nonexistent-qemu' does not exist");
    }

    #[test]
    fn the_cache_lands_in_the_target_folder_under_cargo() {
        let cache = default_cache_dir();
        assert!(cache.ends_with("holdfast-bench"));
        assert!(
            cache.parent().unwrap().join("CACHEDIR.TAG").is_file()
                || std::env::var_os("CARGO_TARGET_DIR").is_some()
        );
    }
}
