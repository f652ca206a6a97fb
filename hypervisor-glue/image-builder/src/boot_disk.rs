//! The GRUB boot disk: a BIOS-bootable image made by `grub-mkrescue` (an El Torito and
//! hybrid-MBR ISO 9660 image, which firmware boots as a hard disk too).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// GRUB's BIOS platform files (Debian package grub-pc-bin). Naming them keeps the disk
/// BIOS-only even on hosts that also have GRUB's EFI files installed.
const GRUB_BIOS_PLATFORM_DIR: &str = "/usr/lib/grub/i386-pc";

const GRUB_PACKAGES: &str = "grub-pc-bin grub-common xorriso mtools";

/// Where kernel and initial image live on the disk, as `grub.cfg` names them.
const DISK_KERNEL_PATH: &str = "/boot/holdfast-kernel.elf";
const DISK_INITIAL_IMAGE_PATH: &str = "/boot/initial.hfi";

/// The initial image's multiboot2 module string (the kernel takes the first module as the
/// initial image; the name is for people reading `grub.cfg`).
const INITIAL_IMAGE_MODULE_NAME: &str = "initial";

#[derive(Debug, thiserror::Error)]
pub enum BootDiskError {
    #[error("grub-mkrescue not found: install {GRUB_PACKAGES}")]
    GrubMissing,
    #[error("GRUB's BIOS files ({GRUB_BIOS_PLATFORM_DIR}) are missing: install grub-pc-bin")]
    GrubBiosFilesMissing,
    #[error("cannot prepare the boot disk's files in '{}': {source}", path.display())]
    Staging {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("grub-mkrescue failed ({status}): {message}")]
    GrubFailed {
        status: std::process::ExitStatus,
        message: String,
    },
}

/// The `grub.cfg` that boots the kernel with `kernel_command_line` at once.
///
/// GRUB writes to the serial port (the VM has no display), so its errors reach the
/// console, as a `dumb` terminal (no screen-clearing escape sequences in the log). It does
/// not read the serial port: a serial input terminal costs three seconds of polling under
/// TCG, and with no menu there is nothing to type.
pub fn grub_config(kernel_command_line: &str) -> String {
    let kernel_line = if kernel_command_line.trim().is_empty() {
        format!("multiboot2 {DISK_KERNEL_PATH}")
    } else {
        format!(
            "multiboot2 {DISK_KERNEL_PATH} {}",
            kernel_command_line.trim()
        )
    };
    format!(
        "# Made by `holdfast image build`.\n\
         serial --unit=0 --speed=115200\n\
         terminfo serial dumb\n\
         terminal_output serial\n\
         set timeout=0\n\
         set timeout_style=hidden\n\
         menuentry \"Holdfast\" {{\n\
         \x20   {kernel_line}\n\
         \x20   module2 {DISK_INITIAL_IMAGE_PATH} {INITIAL_IMAGE_MODULE_NAME}\n\
         \x20   boot\n\
         }}\n"
    )
}

/// Makes the boot disk `output` holding `kernel` and `initial_image`.
pub fn make_boot_disk(
    kernel: &Path,
    initial_image: &Path,
    kernel_command_line: &str,
    output: &Path,
) -> Result<(), BootDiskError> {
    if !Path::new(GRUB_BIOS_PLATFORM_DIR)
        .join("modinfo.sh")
        .is_file()
    {
        return Err(BootDiskError::GrubBiosFilesMissing);
    }
    let staging = output.with_extension("staging");
    let staging_error = |source| BootDiskError::Staging {
        path: staging.clone(),
        source,
    };
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(staging_error)?;
    }
    let grub_dir = staging.join("boot/grub");
    std::fs::create_dir_all(&grub_dir).map_err(staging_error)?;
    std::fs::write(grub_dir.join("grub.cfg"), grub_config(kernel_command_line))
        .map_err(staging_error)?;
    std::fs::copy(
        kernel,
        staging.join(DISK_KERNEL_PATH.trim_start_matches('/')),
    )
    .map_err(staging_error)?;
    std::fs::copy(
        initial_image,
        staging.join(DISK_INITIAL_IMAGE_PATH.trim_start_matches('/')),
    )
    .map_err(staging_error)?;

    // Written beside `output` and renamed over it, like the image's other files (see
    // `write_file`): a VM booting the previous disk keeps reading it whole.
    let partial = crate::partial_path(output);
    let result = Command::new("grub-mkrescue")
        .arg("-d")
        .arg(GRUB_BIOS_PLATFORM_DIR)
        .arg("-o")
        .arg(&partial)
        .arg(&staging)
        .stdin(Stdio::null())
        .output();
    // The staging files are copies; failing to remove them costs only disk space.
    let _ = std::fs::remove_dir_all(&staging);
    let grub = match result {
        Ok(grub) => grub,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(BootDiskError::GrubMissing);
        }
        Err(error) => return Err(staging_error(error)),
    };
    if !grub.status.success() {
        let message = last_lines(&String::from_utf8_lossy(&grub.stderr), 3);
        return Err(BootDiskError::GrubFailed {
            status: grub.status,
            message,
        });
    }
    std::fs::rename(&partial, output).map_err(|source| BootDiskError::Staging {
        path: partial,
        source,
    })
}

/// The last `count` lines of `text`, joined by `; `: xorriso is chatty, and its last lines
/// say what went wrong.
fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grub_config_boots_at_once_by_multiboot2() {
        let config = grub_config("holdfast.after=stay");
        assert!(config.contains("set timeout=0\n"));
        assert!(config.contains("    multiboot2 /boot/holdfast-kernel.elf holdfast.after=stay\n"));
        assert!(config.contains("    module2 /boot/initial.hfi initial\n"));
        assert!(grub_config("").contains("    multiboot2 /boot/holdfast-kernel.elf\n"));
    }
}
