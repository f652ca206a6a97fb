//! PCI configuration space through the legacy I/O ports 0xCF8/0xCFC, and discovery of the
//! virtio devices on bus 0.
//!
//! Why port I/O and not ECAM: it works the same on q35 and i440fx and needs no ACPI table
//! walk to find the MMCONFIG window; 256 bytes of configuration space per function is all
//! virtio needs. Why bus 0 only: QEMU plugs `-device virtio-*-pci` into the root bus unless
//! told otherwise, and the launcher never tells it otherwise.
//!
//! We do not assign BARs: SeaBIOS runs before the kernel even under `-kernel` and has
//! placed them. The kernel reaches device memory through the direct map, which covers only
//! the low 4 GiB, so a device with a BAR above that is reported as unusable rather than
//! driven.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use virtio_drivers::transport::DeviceType;
use virtio_drivers::transport::pci::bus::{
    BarInfo, Command, ConfigurationAccess, DeviceFunction, PciRoot,
};
use virtio_drivers::transport::pci::{PciTransport, virtio_device_type};
use x86_64::instructions::interrupts;
use x86_64::instructions::port::Port;

use super::hal::KernelHal;
use crate::memory::DIRECT_MAP_BYTES;

const CONFIG_ADDRESS_PORT: u16 = 0xcf8;
const CONFIG_DATA_PORT: u16 = 0xcfc;

/// Configuration mechanism #1: write the function's address to 0xCF8, then move the
/// 32-bit register through 0xCFC.
pub struct PortConfigurationAccess;

impl PortConfigurationAccess {
    fn address(device_function: DeviceFunction, register_offset: u8) -> u32 {
        0x8000_0000
            | u32::from(device_function.bus) << 16
            | u32::from(device_function.device) << 11
            | u32::from(device_function.function) << 8
            | u32::from(register_offset & 0xfc)
    }
}

impl ConfigurationAccess for PortConfigurationAccess {
    fn read_word(&self, device_function: DeviceFunction, register_offset: u8) -> u32 {
        let address = Self::address(device_function, register_offset);
        // The address/data pair is two accesses: keep interrupts out from between them.
        interrupts::without_interrupts(|| {
            // SAFETY: 0xCF8/0xCFC are the PC's PCI configuration ports on every machine QEMU
            // models; selecting a register and reading it has no side effect on memory.
            unsafe {
                Port::<u32>::new(CONFIG_ADDRESS_PORT).write(address);
                Port::<u32>::new(CONFIG_DATA_PORT).read()
            }
        })
    }

    fn write_word(&mut self, device_function: DeviceFunction, register_offset: u8, data: u32) {
        let address = Self::address(device_function, register_offset);
        interrupts::without_interrupts(|| {
            // SAFETY: as in `read_word`; the caller (the virtio-drivers PCI code, for BAR
            // sizing and the command register) owns the function whose register it writes.
            unsafe {
                Port::<u32>::new(CONFIG_ADDRESS_PORT).write(address);
                Port::<u32>::new(CONFIG_DATA_PORT).write(data);
            }
        })
    }

    unsafe fn unsafe_clone(&self) -> Self {
        Self
    }
}

/// A virtio function found on bus 0, with a transport when it can be driven.
pub struct Found {
    pub location: DeviceFunction,
    pub device_type: DeviceType,
    /// The transport, or why the device cannot be driven.
    pub transport: Result<PciTransport, String>,
}

/// Finds every virtio function on bus 0 and sets up a transport for each.
pub fn discover() -> Vec<Found> {
    let mut root = PciRoot::new(PortConfigurationAccess);
    let functions: Vec<_> = root
        .enumerate_bus(0)
        .filter_map(|(location, info)| Some((location, virtio_device_type(&info)?)))
        .collect();
    functions
        .into_iter()
        .map(|(location, device_type)| Found {
            location,
            device_type,
            transport: open(&mut root, location),
        })
        .collect()
}

fn open(
    root: &mut PciRoot<PortConfigurationAccess>,
    location: DeviceFunction,
) -> Result<PciTransport, String> {
    let bars = root
        .bars(location)
        .map_err(|error| format!("reading BARs: {error}"))?;
    for (index, bar) in bars.iter().enumerate() {
        if let Some(BarInfo::Memory { address, size, .. }) = bar
            && address + size > DIRECT_MAP_BYTES
        {
            return Err(format!(
                "BAR {index} at {address:#x} (+{size:#x}) is above 4 GiB, beyond the kernel's direct map"
            ));
        }
    }
    // Memory decoding for the virtio structures, bus mastering for the virtqueues (QEMU
    // drops the DMA of a device that is not a bus master).
    let (_, command) = root.get_status_command(location);
    root.set_command(
        location,
        command | Command::MEMORY_SPACE | Command::BUS_MASTER,
    );
    PciTransport::new::<KernelHal, _>(root, location).map_err(|error| format!("{error}"))
}
