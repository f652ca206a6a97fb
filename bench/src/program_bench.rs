//! What the micro and services benchmarks share: two guests that each run one timing
//! program and print its figures, Holdfast's ring-3 program (`services/selftest`) on the
//! benchmark's own initial image and the Linux peer's static C program (`bench/peers/`) in
//! the boot benchmark's initramfs. [`run`] boots both guests the same number of times,
//! interleaved, and reads each boot's figure set; each benchmark then takes the medians
//! and worst cases over boots ([`crate::figure_lines::Figures::over_boots`]) and renders
//! its own table, so that the two differ only in what they time and how they show it.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use holdfast_image_builder::{Manifest, guest_build, initial_image};

use crate::figure_lines::KERNEL_TSC_LINE_PREFIX;
use crate::guests::{self, Guest};
use crate::initramfs::Entry;
use crate::linux_peer;
use crate::setup::{GuestVm, RunOptions, RunSetup};

/// Boots per guest by default, and with the `quick` preset (for CI). Each boot already
/// takes a median over its program's rounds; more boots guard against one slow boot.
pub const RUNS_PER_GUEST_DEFAULT: usize = 3;
pub const RUNS_PER_GUEST_QUICK: usize = 1;

/// What a program benchmark (`holdfast bench micro`, `holdfast bench services`) runs.
#[derive(Clone, Debug)]
pub struct ProgramBenchOptions {
    /// The Holdfast guest, from the benchmark's `holdfast::prepare`.
    pub holdfast: HoldfastFiles,
    /// How both guests run; its cache folder keeps the peer's program and initramfs.
    pub run: RunOptions,
}

impl ProgramBenchOptions {
    /// The full benchmark: [`RUNS_PER_GUEST_DEFAULT`] boots per guest under TCG.
    pub fn new(holdfast: HoldfastFiles) -> Self {
        Self {
            holdfast,
            run: RunOptions::new(RUNS_PER_GUEST_DEFAULT),
        }
    }

    /// The `quick` preset: [`RUNS_PER_GUEST_QUICK`] boot per guest.
    pub fn quick(holdfast: HoldfastFiles) -> Self {
        Self {
            holdfast,
            run: RunOptions::new(RUNS_PER_GUEST_QUICK),
        }
    }
}

/// What the Holdfast guest boots from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldfastFiles {
    pub kernel: PathBuf,
    pub initial_image: PathBuf,
}

/// The initial image of `manifest`'s system, its programs found in `programs` (binary name
/// → ELF file).
pub fn initial_image(
    manifest: &Manifest,
    programs: &BTreeMap<String, PathBuf>,
) -> anyhow::Result<Vec<u8>> {
    Ok(initial_image::make_initial_image(manifest, programs)?)
}

/// Reads the benchmark's manifest (`manifest`, relative to `source_dir`), builds the guest
/// crates of `source_dir` (cargo, incrementally: its progress goes to stderr) and keeps the
/// initial image of its system at `cache_directory`/`image_file_name`, apart from
/// `holdfast image build`'s image (the self-test's).
pub fn prepare_image(
    source_dir: &Path,
    cache_directory: &Path,
    manifest: &str,
    image_file_name: &str,
) -> anyhow::Result<HoldfastFiles> {
    // Before the guest build, which takes long: a mistake in the manifest is told at once.
    let loaded = Manifest::load(&source_dir.join(manifest))?;
    let artifacts = guest_build::build_guest_crates(source_dir)?;
    let image = initial_image(&loaded, &artifacts.programs)
        .with_context(|| format!("cannot make the benchmark's initial image from {manifest}"))?;
    Ok(HoldfastFiles {
        kernel: artifacts.kernel,
        initial_image: linux_peer::write_cached(cache_directory, image_file_name, &image)?,
    })
}

/// The Linux peer's timing program: a C source built on the host with
/// [`linux_peer::COMPILER`] into a static executable that `/init` runs, its lines going to
/// the console, before powering off.
#[derive(Clone, Copy, Debug)]
pub struct PeerProgram {
    /// The executable's name: `/bin/<name>` in the initramfs, `<name>` and
    /// `<name>-initramfs.cpio` in the cache folder.
    pub name: &'static str,
    /// Built into this binary (`include_str!`), so that a benchmark run needs no source
    /// tree and the cached executable is rebuilt exactly when the source changes.
    pub source: &'static str,
}

impl PeerProgram {
    /// `/init`: the ready line the runner waits for (as the boot benchmark's), then the
    /// program by its absolute path (the services peer execs itself by it), then power off
    /// whatever the program did: a failure shows as missing figures or a `-FAILED` line.
    pub fn init_script(&self) -> String {
        format!(
            "#!/bin/busybox sh
# Holdfast benchmark, Linux peer: report ready, run {name}, power off.
/bin/busybox mount -t proc proc /proc
read -r uptime_s idle_s < /proc/uptime
echo \"LINUX-READY $uptime_s\" > /dev/console
/bin/{name} > /dev/console 2>&1
exec /bin/busybox poweroff -f
",
            name = self.name
        )
    }

    /// Builds the program into `cache_directory`/<name> unless the one there was built
    /// from the same recipe (kept beside it in `<name>.recipe`).
    pub fn build(&self, cache_directory: &Path) -> anyhow::Result<PathBuf> {
        linux_peer::build_static_program(cache_directory, self.name, self.source)
    }

    /// Builds the program if needed and keeps the initramfs, the boot benchmark's with
    /// this `/init` and the program, at `cache_directory`/<name>-initramfs.cpio.
    pub fn prepare_initramfs(
        &self,
        busybox: &Path,
        cache_directory: &Path,
    ) -> anyhow::Result<PathBuf> {
        let busybox = linux_peer::read_static_busybox(busybox)?;
        let program_path = self.build(cache_directory)?;
        let program = fs::read(&program_path)
            .with_context(|| format!("cannot read {}", program_path.display()))?;
        let entries = linux_peer::initramfs_entries(
            busybox,
            vec![Entry::file(&format!("bin/{}", self.name), 0o755, program)],
            &self.init_script(),
        );
        let file_name = format!("{}-initramfs.cpio", self.name);
        linux_peer::cache_initramfs(&entries, cache_directory, &file_name)
    }
}

/// How [`run`] reads one guest's program from its serial lines.
#[derive(Clone, Copy, Debug)]
pub struct ProgramLines<T> {
    /// What the program starts its lines with (`HOLDFAST-MICRO`, `LINUX-SERVICES`).
    pub marker: &'static str,
    /// The boot's figure set from its kept lines; an error fails the benchmark.
    pub read: fn(&[String]) -> Result<T, String>,
    /// The figure set for the boot's progress line ("getppid 1351.4 ns, …").
    pub progress: fn(&T) -> String,
}

/// Every boot's figure set, in boot order, and the table's title.
#[derive(Clone, Debug)]
pub struct Boots<H, L> {
    pub holdfast: Vec<H>,
    pub linux: Vec<L>,
    /// "`name`: QEMU q35, TCG, …, median of N boots per guest (interleaved); Linux peer
    /// vmlinuz-… (its command line)".
    pub title: String,
}

/// Boots the Holdfast guest of `options` and the Linux peer running `peer` each
/// `runs_per_guest` times, interleaved ([`RunSetup::run_interleaved`]), with a progress
/// line first (headed "`name` bench:") and one per boot. Fails, with the guest's console
/// output, if a boot does not finish as expected or a figure is missing.
pub fn run<H, L>(
    name: &str,
    options: &ProgramBenchOptions,
    peer: PeerProgram,
    holdfast: ProgramLines<H>,
    linux: ProgramLines<L>,
    progress: &mut dyn Write,
) -> anyhow::Result<Boots<H, L>> {
    let setup = RunSetup::prepare(&options.run)?;
    let linux_initramfs = peer.prepare_initramfs(&setup.busybox, &setup.cache_dir)?;
    writeln!(
        progress,
        "{name} bench: {} boots per guest, {}, {} MiB, QEMU {}; Holdfast {} with {}; Linux peer {} with {}",
        options.run.runs_per_guest,
        options.run.accelerator,
        options.run.memory_mib,
        setup.qemu.path().display(),
        options.holdfast.kernel.display(),
        options.holdfast.initial_image.display(),
        setup.linux_kernel.display(),
        linux_initramfs.display()
    )?;

    // The VMs are the boot benchmark's, so that the two differ only in what the guests run.
    let guest_vms = [
        GuestVm {
            guest: Guest::HoldfastPvh,
            label: "Holdfast",
            spec: setup.vm_spec(guests::holdfast_pvh_boot(
                &options.holdfast.kernel,
                &options.holdfast.initial_image,
            )),
            // The program counts TSC cycles and has no clock to convert them: the kernel's
            // calibration line gives the host the frequency.
            keep_lines_with: vec![holdfast.marker, KERNEL_TSC_LINE_PREFIX],
            first_program_line: None,
            failure_message: "the Holdfast guest did not finish".to_owned(),
        },
        GuestVm {
            guest: Guest::Linux,
            label: "Linux peer",
            spec: setup.vm_spec(linux_peer::boot(&setup.linux_kernel, &linux_initramfs)),
            keep_lines_with: vec![linux.marker],
            first_program_line: None,
            failure_message: "the Linux peer did not finish".to_owned(),
        },
    ];
    let mut boots = Boots {
        holdfast: Vec::new(),
        linux: Vec::new(),
        title: format!(
            "{name}: {} ({})",
            setup.conditions(),
            linux_peer::KERNEL_COMMAND_LINE
        ),
    };
    setup.run_interleaved(&guest_vms, progress, |index, run_number, run| {
        if guest_vms[index].guest == Guest::Linux {
            let figures = (linux.read)(&run.kept_lines)
                .map_err(|why| anyhow!("the Linux peer, run {run_number}: {why}"))?;
            let line = (linux.progress)(&figures);
            boots.linux.push(figures);
            Ok(line)
        } else {
            let figures = (holdfast.read)(&run.kept_lines)
                .map_err(|why| anyhow!("the Holdfast guest, run {run_number}: {why}"))?;
            let line = (holdfast.progress)(&figures);
            boots.holdfast.push(figures);
            Ok(line)
        }
    })?;
    Ok(boots)
}

/// One boot's figures for its progress line: "getppid 1351.4 ns, pipe round trip …".
pub fn listed_ns<const N: usize>(names: [&str; N], figures_ns: [f64; N]) -> String {
    names
        .iter()
        .zip(figures_ns)
        .map(|(name, ns)| format!("{name} {ns:.1} ns"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_qemu::Accelerator;

    const PEER: PeerProgram = PeerProgram {
        name: "linux-micro",
        source: crate::micro::LINUX_PROGRAM.source,
    };

    #[test]
    fn presets() {
        let files = HoldfastFiles {
            kernel: "k.elf".into(),
            initial_image: "bench.hfi".into(),
        };
        assert_eq!(
            ProgramBenchOptions::new(files.clone()).run.runs_per_guest,
            3
        );
        let quick = ProgramBenchOptions::quick(files).run;
        assert_eq!(
            (quick.runs_per_guest, quick.accelerator),
            (1, Accelerator::Tcg)
        );
    }

    #[test]
    fn the_linux_peer_boots_with_mitigations_off() {
        assert!(
            linux_peer::KERNEL_COMMAND_LINE
                .split_whitespace()
                .any(|word| word == "mitigations=off")
        );
    }

    #[test]
    fn init_runs_the_program_by_its_absolute_path_after_the_ready_line_and_powers_off() {
        let script = PEER.init_script();
        let ready = script.find("echo \"LINUX-READY $uptime_s\"").unwrap();
        let program = script.find("\n/bin/linux-micro > /dev/console").unwrap();
        let power_off = script.find("poweroff -f").unwrap();
        assert!(ready < program && program < power_off);
    }

    /// Builds the real program with the real compiler: once, then from the cache.
    #[test]
    fn the_program_is_built_static_once_and_then_reused() {
        let directory =
            std::env::temp_dir().join(format!("holdfast-bench-program-{}", std::process::id()));
        let executable = PEER.build(&directory).unwrap();
        let bytes = fs::read(&executable).unwrap();
        assert_eq!(linux_peer::is_static_elf(&bytes), Ok(true));
        let modified = fs::metadata(&executable).unwrap().modified().unwrap();
        assert_eq!(PEER.build(&directory).unwrap(), executable);
        assert_eq!(
            fs::metadata(&executable).unwrap().modified().unwrap(),
            modified,
            "an unchanged recipe does not rebuild"
        );
        // A changed recipe (as after an edit of the source) rebuilds.
        fs::write(directory.join("linux-micro.recipe"), "old").unwrap();
        fs::write(&executable, b"stale").unwrap();
        PEER.build(&directory).unwrap();
        assert_ne!(fs::read(&executable).unwrap(), b"stale");
        fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn progress_lists_each_figure_in_ns() {
        assert_eq!(
            listed_ns(["getppid", "pipe one way"], [1351.44, 20.0]),
            "getppid 1351.4 ns, pipe one way 20.0 ns"
        );
    }
}
