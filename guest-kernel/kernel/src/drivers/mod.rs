//! Bottom-half drivers: PCI discovery and the virtio devices (through the `virtio-drivers`
//! crate). The store (virtio-blk) and the network (virtio-net) sit on these.
//!
//! - [`pci`]: configuration space by port I/O, finding virtio functions on bus 0;
//! - [`hal`]: DMA memory and device memory for the crate;
//! - [`block`], [`net`]: the two device types the kernel drives, each with its self-test.
//!
//! The first [`DISKS_MAX`] virtio-blk devices are driven (the store's mirrors, in PCI order,
//! which is the order of `holdfast run --disk`) and the first virtio-net device.

mod block;
mod hal;
mod net;
mod pci;

use alloc::format;
use alloc::string::String;
use virtio_drivers::transport::DeviceType;
use virtio_drivers::transport::pci::PciTransport;
use virtio_drivers::transport::pci::bus::DeviceFunction;

use crate::println;
pub use block::{Block, DISK_WAITS, set_answer_time_limit_ms};
pub use net::{Net, SendError};

/// A device the kernel looked for.
pub enum Device<T> {
    Absent,
    /// Present but not driven, and why.
    Unusable(String),
    Ready(T),
}

/// Disks driven at most: the store keeps at most two mirrors.
pub const DISKS_MAX: usize = holdfast_store::mirror::MIRROR_COUNT_MAX;

pub struct Devices {
    /// Disk `i` is the `i`-th virtio-blk function found; `Absent` past the last.
    pub blocks: [Device<Block>; DISKS_MAX],
    pub net: Device<Net>,
    /// The pair's replication link: the virtio-net device whose MAC address begins with
    /// [`LINK_MAC_PREFIX`] (`holdfast pair` gives it one), driven by the kernel itself.
    pub link: Device<Net>,
}

/// `52:54:00` (QEMU's locally administered range) then `HF`.
pub const LINK_MAC_PREFIX: [u8; 5] = [0x52, 0x54, 0x00, 0x48, 0x46];

/// Finds the devices the kernel drives, printing one line per virtio function.
pub fn probe() -> Devices {
    let mut devices = Devices {
        blocks: [const { Device::Absent }; DISKS_MAX],
        net: Device::Absent,
        link: Device::Absent,
    };
    for pci::Found {
        location,
        device_type,
        transport,
    } in pci::discover()
    {
        let status = match device_type {
            DeviceType::Block => attach_disk(&mut devices.blocks, location, transport),
            DeviceType::Network => attach_net(&mut devices, location, transport),
            _ => String::from("not driven"),
        };
        println!("holdfast: pci {location}: virtio {device_type:?}, {status}");
    }
    devices
}

/// Starts the driver of the next disk, if fewer than [`DISKS_MAX`] were found before it.
fn attach_disk(
    slots: &mut [Device<Block>; DISKS_MAX],
    location: DeviceFunction,
    transport: Result<PciTransport, String>,
) -> String {
    let Some(index) = slots.iter().position(|slot| matches!(slot, Device::Absent)) else {
        return format!("not driven (the kernel drives {DISKS_MAX} disks at most)");
    };
    let mut status = attach(&mut slots[index], location, transport, Block::new);
    if let Device::Ready(block) = &mut slots[index] {
        match pci::route_queue_interrupt(location, crate::arch::idt::BLOCK_VECTOR) {
            Ok(()) => block.use_interrupts(),
            Err(why) => status = format!("{status}, polled ({why})"),
        }
    }
    if index == 0 { status } else { format!("{status} (disk {index})") }
}

/// Starts the driver of a network device: the pair's link (by its MAC address, polled), or
/// else the first other one, its receptions routed to [`crate::arch::idt::NET_VECTOR`] (or
/// polled, if they cannot be).
fn attach_net(devices: &mut Devices, location: DeviceFunction, transport: Result<PciTransport, String>) -> String {
    let net = match transport.and_then(Net::new) {
        Ok(net) => net,
        Err(error) => {
            if matches!(devices.net, Device::Absent) {
                devices.net = Device::Unusable(format!("pci {location}: {error}"));
            }
            return format!("unusable: {error}");
        }
    };
    if net.mac_address()[..5] == LINK_MAC_PREFIX {
        if !matches!(devices.link, Device::Absent) {
            return String::from("a second pair link, not driven");
        }
        let mut link = net;
        // Its receptions only wake a halted kernel (the vector the disks use for that);
        // the pair's code looks at the queue itself.
        let status = match pci::route_queue_interrupt(location, crate::arch::idt::BLOCK_VECTOR) {
            Ok(()) => {
                link.use_interrupts();
                String::from("driven (the pair's link)")
            }
            Err(why) => format!("driven (the pair's link), polled ({why})"),
        };
        devices.link = Device::Ready(link);
        return status;
    }
    if !matches!(devices.net, Device::Absent) {
        return String::from("not driven (the kernel drives the first of each type)");
    }
    let mut status = String::from("driven");
    let mut net = net;
    match pci::route_queue_interrupt(location, crate::arch::idt::NET_VECTOR) {
        Ok(()) => net.use_interrupts(),
        Err(why) => status = format!("{status}, polled ({why})"),
    }
    devices.net = Device::Ready(net);
    status
}

/// Starts the driver of a device of a type not seen yet, records it (or why there is
/// none) in `slot` and says what happened.
fn attach<T>(
    slot: &mut Device<T>,
    location: DeviceFunction,
    transport: Result<PciTransport, String>,
    new: fn(PciTransport) -> Result<T, String>,
) -> String {
    if !matches!(slot, Device::Absent) {
        return String::from("not driven (the kernel drives the first of each type)");
    }
    match transport.and_then(new) {
        Ok(driver) => {
            *slot = Device::Ready(driver);
            String::from("driven")
        }
        Err(error) => {
            *slot = Device::Unusable(format!("pci {location}: {error}"));
            format!("unusable: {error}")
        }
    }
}

/// Exercises each device found; prints one report line per device and returns whether all
/// passed. A missing device is not a failure; a device that is present but unusable is.
/// `check` records each verdict with the self-test above and says it (`ok`, `FAILED`).
pub fn self_test(devices: &mut Devices, check: fn(bool) -> &'static str) -> bool {
    // The first disk's line is the one it has always been; a second disk gets its own.
    let [first, rest @ ..] = &mut devices.blocks;
    let mut block = report("virtio-blk", first, Block::self_test, check);
    for (index, disk) in rest.iter_mut().enumerate() {
        if !matches!(disk, Device::Absent) {
            block &= report(&format!("virtio-blk (disk {})", index + 1), disk, Block::self_test, check);
        }
    }
    let net = report("virtio-net", &mut devices.net, Net::self_test, check);
    block && net
}

fn report<T>(
    name: &str,
    device: &mut Device<T>,
    test: fn(&mut T) -> (bool, String),
    check: fn(bool) -> &'static str,
) -> bool {
    match device {
        Device::Absent => {
            println!("selftest: {name}: no device");
            true
        }
        Device::Unusable(why) => {
            println!("selftest: {name}: {why} [{}]", check(false));
            false
        }
        Device::Ready(driver) => {
            let (passed, what) = test(driver);
            println!("selftest: {name}: {what} [{}]", check(passed));
            passed
        }
    }
}
