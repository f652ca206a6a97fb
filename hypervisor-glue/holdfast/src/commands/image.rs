//! `holdfast image build`.

use std::process::ExitCode;
use std::time::Instant;

use holdfast_image_builder::{BuildOptions, DEFAULT_MANIFEST};

use crate::cli::{ImageBuildArguments, ImageCommand};
use crate::failure::Failure;
use crate::paths;

pub fn run(command: ImageCommand) -> Result<ExitCode, Failure> {
    match command {
        ImageCommand::Build(arguments) => build(arguments),
    }
}

fn build(arguments: ImageBuildArguments) -> Result<ExitCode, Failure> {
    let source_dir = paths::source_dir();
    if !source_dir.join("Cargo.toml").is_file() {
        return Err(Failure::other(format!(
            "no Holdfast source tree at '{}': set HOLDFAST_SOURCE_DIR to the repository root",
            source_dir.display()
        )));
    }
    let options = BuildOptions {
        out_dir: arguments.out.unwrap_or_else(paths::default_image_dir),
        manifest: arguments
            .manifest
            .unwrap_or_else(|| source_dir.join(DEFAULT_MANIFEST)),
        source_dir,
        grub_command_line: arguments.grub_append,
    };
    let started = Instant::now();
    holdfast_image_builder::build(&options, &mut |step| eprintln!("holdfast: {step}")).map_err(
        |error| {
            if error.is_input_error() {
                Failure::input(error)
            } else {
                Failure::other(error)
            }
        },
    )?;
    eprintln!(
        "holdfast: image ready in {} ({:.1} s)",
        options.out_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
