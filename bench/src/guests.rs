//! The three guests of the boot benchmark, their VMs and what each must print and return.
//!
//! Every guest gets the same VM from the shared launcher's [`VmSpec`]: machine, accelerator,
//! memory and devices (Holdfast's exit device included, which Linux ignores). Only how the
//! kernel gets into memory differs, so that the comparison is of boot paths and kernels,
//! not of VM configurations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_abi as abi;
use holdfast_qemu::Boot;

use crate::linux_peer;
use crate::runner::{BootExpectation, GuestClock, ReadyMarker};

/// What Holdfast's first ring-3 program to print prints first (`hello`,
/// `services/selftest/src/hello.rs`, second in `services/manifest.toml`; the first,
/// `ticker`, computes for several time slices before it prints). The boot benchmark calls
/// Holdfast ready when it arrives, as it calls Linux ready when `/init` prints. It may come
/// a few time slices after ring 3 started (other processes may run first), which counts
/// against Holdfast.
pub const HOLDFAST_FIRST_PROGRAM_LINE: &str = "hello from ring 3";

/// The guests, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guest {
    HoldfastPvh,
    HoldfastGrub,
    Linux,
}

impl Guest {
    pub const ALL: [Guest; 3] = [Guest::HoldfastPvh, Guest::HoldfastGrub, Guest::Linux];

    pub fn name(self) -> &'static str {
        match self {
            Guest::HoldfastPvh => "Holdfast PVH",
            Guest::HoldfastGrub => "Holdfast GRUB",
            Guest::Linux => "Linux (Debian cloud kernel)",
        }
    }

    /// The line that ends the boot and the exit that must follow it. Holdfast's is the
    /// kernel's marker (it is about to start ring 3); the boot benchmark also waits for the
    /// first program's line ([`HOLDFAST_FIRST_PROGRAM_LINE`]).
    pub fn expectation(self, timeout: Duration) -> BootExpectation {
        match self {
            Guest::HoldfastPvh | Guest::HoldfastGrub => BootExpectation {
                marker: ReadyMarker {
                    text: abi::serial::READY_MARKER,
                    clock: GuestClock::Microseconds,
                },
                first_program_line: None,
                // The self-test that follows ready must pass: a kernel that reports ready
                // and then fails is not a boot worth timing.
                exit_code: abi::exit::QEMU_STATUS_SUCCESS,
                timeout,
            },
            Guest::Linux => BootExpectation {
                marker: linux_peer::READY_MARKER,
                first_program_line: None,
                exit_code: linux_peer::EXIT_CODE_POWEROFF,
                timeout,
            },
        }
    }
}

/// The files the guests boot from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestFiles {
    pub holdfast_kernel: PathBuf,
    pub initial_image: PathBuf,
    pub boot_disk: PathBuf,
    pub linux_kernel: PathBuf,
    pub linux_initramfs: PathBuf,
}

/// How `guest` gets into memory: the only thing that differs between the guests' VMs.
pub fn boot(guest: Guest, files: &GuestFiles) -> Boot {
    match guest {
        Guest::HoldfastPvh => holdfast_pvh_boot(&files.holdfast_kernel, &files.initial_image),
        Guest::HoldfastGrub => Boot::Disk {
            boot_disk: files.boot_disk.clone(),
        },
        Guest::Linux => linux_peer::boot(&files.linux_kernel, &files.linux_initramfs),
    }
}

/// Holdfast's kernel loaded by QEMU (PVH) with `initial_image`, no command line.
pub fn holdfast_pvh_boot(kernel: &Path, initial_image: &Path) -> Boot {
    Boot::Pvh {
        kernel: kernel.to_owned(),
        initial_image: Some(initial_image.to_owned()),
        command_line: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::vm_spec;
    use holdfast_qemu::Accelerator;

    fn files() -> GuestFiles {
        GuestFiles {
            holdfast_kernel: "img/holdfast-kernel.elf".into(),
            initial_image: "img/initial.hfi".into(),
            boot_disk: "img/holdfast-boot.img".into(),
            linux_kernel: "/boot/vmlinuz".into(),
            linux_initramfs: "cache/initramfs.cpio".into(),
        }
    }

    fn words(guest: Guest) -> Vec<String> {
        vm_spec(boot(guest, &files()), Accelerator::Tcg, 384)
            .qemu_arguments()
            .into_iter()
            .map(|word| word.into_string().unwrap())
            .collect()
    }

    fn value_of(words: &[String], option: &str) -> Option<String> {
        words
            .windows(2)
            .find(|pair| pair[0] == option)
            .map(|pair| pair[1].clone())
    }

    /// Everything but how the kernel is loaded is the same for all guests.
    #[test]
    fn guests_differ_only_in_how_the_kernel_is_loaded() {
        let loading = ["-kernel", "-initrd", "-append", "-drive", "-device"];
        let common = |words: Vec<String>| -> Vec<String> {
            let mut kept = Vec::new();
            let mut skip_value = false;
            for word in words {
                if skip_value {
                    skip_value = false;
                } else if loading.contains(&word.as_str()) {
                    skip_value = true;
                } else {
                    kept.push(word);
                }
            }
            kept
        };
        let pvh = words(Guest::HoldfastPvh);
        assert_eq!(common(pvh.clone()), common(words(Guest::HoldfastGrub)));
        assert_eq!(common(pvh.clone()), common(words(Guest::Linux)));
        assert_eq!(value_of(&pvh, "-machine").as_deref(), Some("q35"));
        assert_eq!(value_of(&pvh, "-accel").as_deref(), Some("tcg"));
        // W^X in the Holdfast guests needs SMEP and SMAP; Linux runs on the same model.
        assert_eq!(value_of(&pvh, "-cpu").as_deref(), Some(holdfast_qemu::command_line::TCG_CPU_MODEL));
        assert_eq!(value_of(&pvh, "-m").as_deref(), Some("384"));
        for guest in Guest::ALL {
            assert!(
                words(guest).contains(&"isa-debug-exit,iobase=0xf4,iosize=0x04".to_owned()),
                "{guest:?}"
            );
        }
    }

    #[test]
    fn each_guest_loads_its_own_files() {
        let pvh = words(Guest::HoldfastPvh);
        assert_eq!(
            value_of(&pvh, "-kernel").as_deref(),
            Some("img/holdfast-kernel.elf")
        );
        assert_eq!(
            value_of(&pvh, "-initrd").as_deref(),
            Some("img/initial.hfi")
        );
        assert_eq!(value_of(&pvh, "-append"), None);

        let grub = words(Guest::HoldfastGrub);
        assert_eq!(value_of(&grub, "-kernel"), None);
        assert!(
            value_of(&grub, "-drive")
                .unwrap()
                .ends_with("file=img/holdfast-boot.img")
        );

        let linux = words(Guest::Linux);
        assert_eq!(
            value_of(&linux, "-kernel").as_deref(),
            Some("/boot/vmlinuz")
        );
        assert_eq!(
            value_of(&linux, "-initrd").as_deref(),
            Some("cache/initramfs.cpio")
        );
        assert_eq!(
            value_of(&linux, "-append").as_deref(),
            Some(linux_peer::KERNEL_COMMAND_LINE)
        );
    }

    #[test]
    fn holdfast_must_pass_its_self_test_and_linux_power_off() {
        let timeout = Duration::from_secs(1);
        assert_eq!(Guest::HoldfastPvh.expectation(timeout).exit_code, 33);
        assert_eq!(
            Guest::HoldfastGrub.expectation(timeout).marker.text,
            "HOLDFAST-READY"
        );
        assert_eq!(Guest::Linux.expectation(timeout).exit_code, 0);
        assert_eq!(Guest::Linux.expectation(timeout).marker.text, "LINUX-READY");
    }

    /// The line the boot benchmark waits for comes early in ring 3: `hello` prints it first
    /// thing and is started second, after `ticker`, which computes before it prints.
    #[test]
    fn holdfasts_first_program_line_is_printed_first_thing_by_the_second_program() {
        let hello = include_str!("../../services/selftest/src/hello.rs");
        let body = &hello[hello.find("fn main() -> u64 {").unwrap()..];
        let first_statement = body.lines().nth(1).unwrap().trim();
        assert_eq!(
            first_statement,
            format!("user::print(\"{HOLDFAST_FIRST_PROGRAM_LINE}\\n\");")
        );
        let manifest = include_str!("../../services/manifest.toml");
        let programs: Vec<&str> = manifest
            .lines()
            .filter_map(|line| line.strip_prefix("program = \""))
            .map(|rest| rest.trim_end_matches('"'))
            .collect();
        assert_eq!(programs[..2], ["ticker", "hello"]);
        let ticker = include_str!("../../services/selftest/src/ticker.rs");
        let ticker_main = &ticker[ticker.find("fn main() -> u64 {").unwrap()..];
        let before_first_print = &ticker_main[..ticker_main.find("print").unwrap()];
        assert!(before_first_print.contains("for step in"), "{before_first_print}");
    }
}
