//! Choosing the accelerator: KVM where it is fast, TCG everywhere else.
//!
//! `/dev/kvm` existing is not enough: under nested virtualization KVM can be a thousand
//! times slower than TCG. So the kernel is booted once with `holdfast.probe`, which runs a
//! fixed 10M-iteration loop and exits; KVM is used only if that finishes within
//! [`PROBE_TIME_LIMIT`]. The verdict is cached per host (kernel release, CPU model, QEMU
//! version), since the probe costs seconds when KVM is slow.

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::binary::QemuBinary;
use crate::command_line::{Boot, VmSpec};
use crate::vm::{RunningVm, VmEnding};

/// How long the KVM probe (QEMU start, boot, 10M-iteration loop) may take. Under TCG the
/// loop alone takes about 20 ms; under a working KVM, less.
pub const PROBE_TIME_LIMIT: Duration = Duration::from_secs(3);

/// The kernel command-line word that makes the kernel run the probe loop and exit.
pub const PROBE_COMMAND_LINE: &str = "holdfast.probe";

const KVM_DEVICE: &str = "/dev/kvm";

/// A QEMU accelerator Holdfast runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accelerator {
    /// Hardware virtualization, with the host's CPU model.
    Kvm,
    /// QEMU's portable binary translator.
    Tcg,
}

impl fmt::Display for Accelerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kvm => "KVM",
            Self::Tcg => "TCG",
        })
    }
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccelChoice {
    /// KVM if the probe shows it is fast, else TCG.
    Auto,
    /// This accelerator, no questions asked.
    Force(Accelerator),
}

impl AccelChoice {
    /// The accelerator to use; for [`AccelChoice::Auto`] also the decision, whose reason
    /// the user should be told.
    pub fn resolve(
        self,
        qemu: &QemuBinary,
        probe_kernel: &Path,
        cache: &AccelCache,
    ) -> (Accelerator, Option<AccelDecision>) {
        match self {
            Self::Force(accelerator) => (accelerator, None),
            Self::Auto => {
                let decision = decide(qemu, probe_kernel, cache, false);
                (decision.verdict.accelerator, Some(decision))
            }
        }
    }
}

/// What identifies a host for the cached verdict: a change of any of these may change
/// whether KVM is fast.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIdentity {
    pub kernel_release: String,
    pub cpu_model: String,
    pub qemu_version: String,
}

impl HostIdentity {
    pub fn current(qemu: &QemuBinary) -> io::Result<Self> {
        let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?
            .trim()
            .to_owned();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")?;
        let cpu_model = cpuinfo
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Ok(Self {
            kernel_release,
            cpu_model,
            qemu_version: qemu.version()?,
        })
    }
}

/// Which accelerator to use, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccelVerdict {
    pub accelerator: Accelerator,
    /// One clause for the user: `KVM probe did not finish ...`, `/dev/kvm: Permission denied`.
    pub reason: String,
    /// How long the probe ran, if it ran.
    pub probe_milliseconds: Option<u64>,
}

impl AccelVerdict {
    fn tcg(reason: impl Into<String>, probe_milliseconds: Option<u64>) -> Self {
        Self {
            accelerator: Accelerator::Tcg,
            reason: reason.into(),
            probe_milliseconds,
        }
    }
}

/// Why `/dev/kvm` cannot be used (`/dev/kvm: Permission denied`), or `None` if it opens.
pub fn kvm_device_problem() -> Option<String> {
    match OpenOptions::new().read(true).write(true).open(KVM_DEVICE) {
        Ok(_) => None,
        Err(error) => Some(format!("{KVM_DEVICE}: {}", os_error_text(&error))),
    }
}

/// `Permission denied` rather than `Permission denied (os error 13)`.
fn os_error_text(error: &io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Boots `kernel` with [`PROBE_COMMAND_LINE`] under KVM and judges by how long it takes.
pub fn probe_kvm(qemu: &QemuBinary, kernel: &Path) -> AccelVerdict {
    let boot = Boot::Pvh {
        kernel: kernel.to_owned(),
        initial_image: None,
        command_line: PROBE_COMMAND_LINE.to_owned(),
    };
    let spec = VmSpec::new(boot, Accelerator::Kvm);
    let report = match RunningVm::launch(qemu, &spec).and_then(|vm| {
        vm.wait(Some(PROBE_TIME_LIMIT), |_| {
            std::ops::ControlFlow::Continue(())
        })
    }) {
        Ok(report) => report,
        Err(error) => {
            return AccelVerdict::tcg(format!("KVM probe could not run QEMU: {error}"), None);
        }
    };
    let milliseconds = Some(report.elapsed.as_millis() as u64);
    match report.ending {
        VmEnding::GuestPassed => AccelVerdict {
            accelerator: Accelerator::Kvm,
            reason: format!(
                "KVM probe finished 10M-iteration loop in {} ms (QEMU start included)",
                report.elapsed.as_millis()
            ),
            probe_milliseconds: milliseconds,
        },
        VmEnding::TimedOut { .. } => AccelVerdict::tcg(
            format!(
                "KVM probe did not finish 10M-iteration loop within {} s (nested virtualization?)",
                PROBE_TIME_LIMIT.as_secs()
            ),
            milliseconds,
        ),
        ending => {
            let detail = report
                .qemu_stderr
                .lines()
                .next()
                .unwrap_or("no message")
                .to_owned();
            AccelVerdict::tcg(
                format!("KVM probe failed: {ending}: {detail}"),
                milliseconds,
            )
        }
    }
}

/// The accelerator verdict cache: one TOML file holding the last probe's verdict and the
/// host it was made on.
pub struct AccelCache {
    path: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct CacheRecord {
    host: HostIdentity,
    verdict: AccelVerdict,
}

impl AccelCache {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cached verdict for this host, if there is one. A missing, unreadable or foreign
    /// file counts as no verdict: the probe is run again.
    pub fn load(&self, host: &HostIdentity) -> Option<AccelVerdict> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let record: CacheRecord = toml::from_str(&text).ok()?;
        (record.host == *host).then_some(record.verdict)
    }

    pub fn store(&self, host: &HostIdentity, verdict: &AccelVerdict) -> io::Result<()> {
        let record = CacheRecord {
            host: host.clone(),
            verdict: verdict.clone(),
        };
        let body = toml::to_string(&record).map_err(io::Error::other)?;
        let text = format!(
            "# Whether KVM is fast on this host, as `holdfast` last probed it.\n\
             # Delete this file or run `holdfast accel --reprobe` to probe again.\n{body}"
        );
        if let Some(directory) = self.path.parent() {
            std::fs::create_dir_all(directory)?;
        }
        // Write then rename, so a concurrent reader sees the old file or the new one.
        let temporary = self
            .path
            .with_extension(format!("toml.{}", std::process::id()));
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, &self.path)
    }
}

/// Where a verdict came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictSource {
    /// `/dev/kvm` could not be opened; nothing was probed or cached.
    KvmDevice,
    /// The cache held a verdict for this host.
    Cache,
    /// The probe ran just now (and its verdict was cached).
    Probe,
}

/// A verdict and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccelDecision {
    pub verdict: AccelVerdict,
    pub source: VerdictSource,
}

/// Decides KVM or TCG for `holdfast run --accel auto`: `/dev/kvm` must open (checked every
/// time: group membership can change), then the cached verdict for this host, else a probe
/// (also when `reprobe`), whose verdict is cached.
pub fn decide(
    qemu: &QemuBinary,
    probe_kernel: &Path,
    cache: &AccelCache,
    reprobe: bool,
) -> AccelDecision {
    if let Some(problem) = kvm_device_problem() {
        return AccelDecision {
            verdict: AccelVerdict::tcg(problem, None),
            source: VerdictSource::KvmDevice,
        };
    }
    let Ok(host) = HostIdentity::current(qemu) else {
        // Without an identity the verdict cannot be cached; probe every time.
        return AccelDecision {
            verdict: probe_kvm(qemu, probe_kernel),
            source: VerdictSource::Probe,
        };
    };
    if !reprobe && let Some(verdict) = cache.load(&host) {
        return AccelDecision {
            verdict,
            source: VerdictSource::Cache,
        };
    }
    let verdict = probe_kvm(qemu, probe_kernel);
    // A cache that cannot be written only costs a probe next time.
    let _ = cache.store(&host, &verdict);
    AccelDecision {
        verdict,
        source: VerdictSource::Probe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostIdentity {
        HostIdentity {
            kernel_release: "6.1.0".into(),
            cpu_model: "Example CPU".into(),
            qemu_version: "7.2.22".into(),
        }
    }

    #[test]
    fn cache_round_trips_and_is_keyed_by_host() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-accel-test-{}", std::process::id()));
        let cache = AccelCache::new(directory.join("accel.toml"));
        assert_eq!(cache.load(&host()), None);
        let verdict = AccelVerdict::tcg("KVM probe did not finish", Some(3000));
        cache.store(&host(), &verdict).unwrap();
        assert_eq!(cache.load(&host()), Some(verdict));
        let other_qemu = HostIdentity {
            qemu_version: "9.0.0".into(),
            ..host()
        };
        assert_eq!(cache.load(&other_qemu), None);
        std::fs::remove_dir_all(directory).unwrap();
    }

    #[test]
    fn os_error_number_is_dropped() {
        let error = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(os_error_text(&error), "Permission denied");
    }
}
