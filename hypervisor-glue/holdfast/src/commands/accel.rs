//! `holdfast accel`, and the accelerator choice that `run` and `bench` share.

use std::path::Path;
use std::process::ExitCode;

use holdfast_image_builder::ImageDir;
use holdfast_qemu::accel::{self, AccelCache, AccelChoice, Accelerator, VerdictSource};
use holdfast_qemu::{AccelDecision, QemuBinary};

use crate::cli::{AccelArgument, AccelArguments};
use crate::failure::Failure;
use crate::paths;

/// The accelerator for `choice`. For `auto`, prints the one notice line that says which
/// and why (`holdfast: using TCG: /dev/kvm: Permission denied`).
pub fn resolve(
    choice: AccelArgument,
    qemu: &QemuBinary,
    probe_kernel: &Path,
) -> Result<Accelerator, Failure> {
    let choice = match choice {
        AccelArgument::Auto => AccelChoice::Auto,
        AccelArgument::Kvm => AccelChoice::Force(Accelerator::Kvm),
        AccelArgument::Tcg => AccelChoice::Force(Accelerator::Tcg),
    };
    let cache = AccelCache::new(paths::accel_cache_file()?);
    let (accelerator, decision) = choice.resolve(qemu, probe_kernel, &cache);
    if let Some(AccelDecision { verdict, .. }) = decision {
        eprintln!(
            "holdfast: using {}: {}",
            verdict.accelerator, verdict.reason
        );
    }
    Ok(accelerator)
}

pub fn run(arguments: AccelArguments) -> Result<ExitCode, Failure> {
    let image_dir = ImageDir::new(arguments.image_dir.unwrap_or_else(paths::default_image_dir));
    let kernel = image_dir.kernel();
    if !kernel.is_file() {
        return Err(Failure::input(format!(
            "'{}' not found: the KVM probe boots the kernel; run 'holdfast image build' first",
            kernel.display()
        )));
    }
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    let cache = AccelCache::new(paths::accel_cache_file()?);
    let decision = accel::decide(&qemu, &kernel, &cache, arguments.reprobe);
    println!(
        "{}: {}",
        decision.verdict.accelerator, decision.verdict.reason
    );
    match decision.source {
        VerdictSource::KvmDevice => {}
        VerdictSource::Cache => println!(
            "(cached in {}; 'holdfast accel --reprobe' probes again)",
            cache.path().display()
        ),
        VerdictSource::Probe => println!("(probed just now; cached in {})", cache.path().display()),
    }
    Ok(ExitCode::SUCCESS)
}
