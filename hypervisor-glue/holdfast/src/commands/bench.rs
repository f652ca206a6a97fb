//! `holdfast bench boot`, `micro`, `services`, `store`, `tp1` and `pair`: the benchmarks of the
//! `holdfast-bench` crate, with the accelerator chosen as `holdfast run` chooses it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use holdfast_bench::BootBenchOptions;
use holdfast_bench::micro::{self, MicroBenchOptions};
use holdfast_bench::services::{self, ServicesBenchOptions};
use holdfast_bench::store::{self, StoreBenchOptions};
use holdfast_image_builder::ImageDir;
use holdfast_qemu::QemuBinary;

use crate::cli::{
    BenchBootArguments, BenchCommand, BenchMicroArguments, BenchServicesArguments,
    BenchStoreArguments,
};

mod pair;
mod tp1;
use crate::commands::accel;
use crate::failure::Failure;
use crate::paths;

pub fn run(command: BenchCommand) -> Result<ExitCode, Failure> {
    match command {
        BenchCommand::Boot(arguments) => boot(arguments),
        BenchCommand::Micro(arguments) => micro(arguments),
        BenchCommand::Services(arguments) => services_bench(arguments),
        BenchCommand::Store(arguments) => store(arguments),
        BenchCommand::Tp1(arguments) => tp1::tp1(arguments),
        BenchCommand::Pair(arguments) => pair::pair(arguments),
    }
}

fn boot(arguments: BenchBootArguments) -> Result<ExitCode, Failure> {
    let image_dir = arguments.image_dir.unwrap_or_else(paths::default_image_dir);
    let mut options = if arguments.quick {
        BootBenchOptions::quick(&image_dir)
    } else {
        BootBenchOptions::new(&image_dir)
    };
    if let Some(runs) = arguments.runs {
        options.run.runs_per_guest = runs as usize;
    }
    options.run.memory_mib = arguments.memory_mib;
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    options.run.accelerator =
        accel::resolve(arguments.accel, &qemu, &ImageDir::new(&image_dir).kernel())?;
    holdfast_bench::boot(&options)?;
    Ok(ExitCode::SUCCESS)
}

fn micro(arguments: BenchMicroArguments) -> Result<ExitCode, Failure> {
    // The benchmark's own guest image (the system of bench/micro-manifest.toml: bench-micro
    // and the servers it times), built from this source tree: `holdfast image build`'s
    // image runs the self-test's system instead.
    eprintln!("holdfast: building the guest crates for the micro benchmark");
    let holdfast =
        micro::holdfast::prepare(&paths::source_dir(), &holdfast_bench::default_cache_dir())?;
    let mut options = if arguments.quick {
        MicroBenchOptions::quick(holdfast)
    } else {
        MicroBenchOptions::new(holdfast)
    };
    if let Some(runs) = arguments.runs {
        options.run.runs_per_guest = runs as usize;
    }
    options.run.memory_mib = arguments.memory_mib;
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    options.run.accelerator = accel::resolve(arguments.accel, &qemu, &options.holdfast.kernel)?;
    micro::micro(&options)?;
    Ok(ExitCode::SUCCESS)
}

fn services_bench(arguments: BenchServicesArguments) -> Result<ExitCode, Failure> {
    // The benchmark's own guest image (the system of bench/services-manifest.toml), built
    // from this source tree.
    eprintln!("holdfast: building the guest crates for the services benchmark");
    let holdfast =
        services::holdfast::prepare(&paths::source_dir(), &holdfast_bench::default_cache_dir())?;
    let mut options = if arguments.quick {
        ServicesBenchOptions::quick(holdfast)
    } else {
        ServicesBenchOptions::new(holdfast)
    };
    if let Some(runs) = arguments.runs {
        options.run.runs_per_guest = runs as usize;
    }
    options.run.memory_mib = arguments.memory_mib;
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    options.run.accelerator = accel::resolve(arguments.accel, &qemu, &options.holdfast.kernel)?;
    services::services(&options)?;
    Ok(ExitCode::SUCCESS)
}

/// Formats a store on `image` as `holdfast store format --force --size-mib N` does.
fn format_store(image: &Path, size_mib: u64) -> anyhow::Result<()> {
    crate::commands::store::format_images(&[PathBuf::from(image)], size_mib, true)
        .map(drop)
        .map_err(|failure| anyhow::anyhow!("{failure}"))
}

fn store(arguments: BenchStoreArguments) -> Result<ExitCode, Failure> {
    // The benchmark's own guest image (bench/store-manifest.toml's system), built from
    // this source tree.
    eprintln!("holdfast: building the guest crates for the store benchmark");
    let holdfast =
        store::holdfast::prepare(&paths::source_dir(), &holdfast_bench::default_cache_dir())?;
    let mut options = if arguments.quick {
        StoreBenchOptions::quick(holdfast, format_store)
    } else {
        StoreBenchOptions::new(holdfast, format_store)
    };
    if let Some(runs) = arguments.runs {
        options.run.runs_per_guest = runs as usize;
    }
    let qemu = QemuBinary::find().map_err(Failure::other)?;
    options.run.accelerator = accel::resolve(arguments.accel, &qemu, &options.holdfast.kernel)?;
    store::store(&options)?;
    Ok(ExitCode::SUCCESS)
}
