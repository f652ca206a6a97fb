//! `holdfast-interface-gen`: regenerates the files made from `guest-kernel/abi/interface.toml`
//! in place; with `--check`, changes nothing and exits 1 if any of them is stale.

use holdfast_interface_gen::{repository_root, stale_files, stale_line};
use std::process::ExitCode;

const USAGE: &str = "usage: holdfast-interface-gen [--check]";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let check_only = match arguments.as_slice() {
        [] => false,
        [flag] if flag == "--check" => true,
        [flag] if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let root = repository_root();
    let stale = match stale_files(&root) {
        Ok(stale) => stale,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    if check_only {
        for file in &stale {
            println!("{}", stale_line(file.path));
        }
        return if stale.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    for file in &stale {
        let path = root.join(file.path);
        if let Err(error) = std::fs::write(&path, &file.contents) {
            eprintln!("error: {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", file.path);
    }
    ExitCode::SUCCESS
}
