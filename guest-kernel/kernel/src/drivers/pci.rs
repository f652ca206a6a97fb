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

/// PCI capability ids (PCI 3.0 appendix H) and the virtio structure type of the common
/// configuration (virtio 1.1 4.1.4).
const CAPABILITY_VENDOR: u8 = 0x09;
const CAPABILITY_MSIX: u8 = 0x11;
const VIRTIO_COMMON_CONFIGURATION: u8 = 1;
/// Offsets in the virtio common configuration (virtio 1.1 4.1.4.3).
const COMMON_QUEUE_SELECT: u64 = 22;
const COMMON_QUEUE_MSIX_VECTOR: u64 = 26;
/// What the device reads back for a vector it could not use.
const NO_VECTOR: u16 = 0xffff;
/// Where an MSI goes (Intel SDM 3, 11.11.1): the local APIC's fixed address with the
/// destination id in bits 19:12; the data is the vector, fixed delivery, edge triggered.
const MSI_ADDRESS_BASE: u32 = 0xfee0_0000;
const MSIX_ENABLE: u32 = 1 << 31;
const MSIX_FUNCTION_MASK: u32 = 1 << 30;

/// Routes the used-buffer notifications of `location`'s virtqueue 0 to `vector` on this
/// CPU, through MSI-X table entry 0: a driver waiting for the device can then halt until
/// it answers instead of spinning. Why: a spinning vCPU is a busy host thread, which the
/// host runs only in its turn once the device has answered (and which competes with
/// QEMU's own I/O threads meanwhile); a halted one is woken as soon as the answer comes.
/// Nothing changes if this fails: the driver polls as before. virtio-net's virtqueue 0 is
/// its receive queue: a frame received interrupts (its transmit queue, 1, keeps no vector
/// and completes silently).
pub fn route_queue_interrupt(location: DeviceFunction, vector: u8) -> Result<(), String> {
    let access = PortConfigurationAccess;
    let root = PciRoot::new(PortConfigurationAccess);
    let mut msix = None;
    let mut common = None;
    for capability in root.capabilities(location) {
        match capability.id {
            CAPABILITY_MSIX => msix = Some(capability.offset),
            CAPABILITY_VENDOR
                if (access.read_word(location, capability.offset) >> 24) as u8
                    == VIRTIO_COMMON_CONFIGURATION =>
            {
                common = Some(capability.offset)
            }
            _ => {}
        }
    }
    let msix = msix.ok_or("no MSI-X capability")?;
    let common = common.ok_or("no virtio common configuration")?;
    let table = access.read_word(location, msix + 4);
    let table_address = bar_address(&access, location, (table & 0x7) as u8)? + u64::from(table & !0x7);
    let common_bar = access.read_word(location, common + 4) as u8;
    let common_address = bar_address(&access, location, common_bar)?
        + u64::from(access.read_word(location, common + 8));
    for address in [table_address + 16, common_address + COMMON_QUEUE_MSIX_VECTOR + 2] {
        if address > DIRECT_MAP_BYTES {
            return Err(format!("device memory at {address:#x} is beyond the direct map"));
        }
    }
    let entry = crate::memory::physical_to_virtual(table_address) as *mut u32;
    let destination = u32::from(crate::arch::timer::local_apic_id()) << 12;
    // SAFETY: `entry` is MSI-X table entry 0 of this device, in its memory BAR (checked
    // to lie in the direct map above), which nothing else in the kernel writes: address,
    // upper address, data, then vector control 0 (unmasked), each a 32-bit register.
    unsafe {
        core::ptr::write_volatile(entry, MSI_ADDRESS_BASE | destination);
        core::ptr::write_volatile(entry.add(1), 0);
        core::ptr::write_volatile(entry.add(2), u32::from(vector));
        core::ptr::write_volatile(entry.add(3), 0);
    }
    // Message control is the upper half of the capability's first dword.
    let control = access.read_word(location, msix);
    let mut writer = PortConfigurationAccess;
    writer.write_word(location, msix, (control | MSIX_ENABLE) & !MSIX_FUNCTION_MASK);
    let select = crate::memory::physical_to_virtual(common_address + COMMON_QUEUE_SELECT) as *mut u16;
    let queue_vector = crate::memory::physical_to_virtual(common_address + COMMON_QUEUE_MSIX_VECTOR) as *mut u16;
    // SAFETY: the common configuration lies in the device's memory BAR (checked above);
    // the transport wrote queue_select only while setting the queue up, which is done, and
    // queue 0 is the only queue, so selecting it again changes nothing it relies on.
    let routed = unsafe {
        core::ptr::write_volatile(select, 0);
        core::ptr::write_volatile(queue_vector, 0);
        core::ptr::read_volatile(queue_vector)
    };
    if routed == NO_VECTOR {
        writer.write_word(location, msix, control);
        return Err(String::from("the device refused MSI-X vector 0 for its queue"));
    }
    Ok(())
}

/// The address of memory BAR `index` as the firmware placed it.
fn bar_address(access: &PortConfigurationAccess, location: DeviceFunction, index: u8) -> Result<u64, String> {
    if index > 5 {
        return Err(format!("BAR {index} does not exist"));
    }
    let low = access.read_word(location, 0x10 + 4 * index);
    if low & 1 != 0 {
        return Err(format!("BAR {index} is an I/O port range"));
    }
    let mut address = u64::from(low & !0xf);
    // Type 2: a 64-bit BAR, its upper half in the next register.
    if (low >> 1) & 0x3 == 2 && index < 5 {
        address |= u64::from(access.read_word(location, 0x10 + 4 * (index + 1))) << 32;
    }
    Ok(address)
}
