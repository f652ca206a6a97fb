//! A Holdfast VM as libvirt domain XML: what [`DomainSpec`] says, written from the structs
//! below with quick-xml's serde serializer, so that every element and attribute has a type
//! and nothing is pasted together as text.
//!
//! It mirrors `holdfast_qemu::VmSpec::qemu_arguments` (the QEMU runner's command line):
//!
//! | QEMU runner | domain XML |
//! |---|---|
//! | `-machine q35 -nodefaults -no-reboot -display none` | `<type machine='q35'>`, `<on_reboot>destroy`, no graphics, no USB controller, no balloon |
//! | `-accel tcg -cpu qemu64,+...` / `-accel kvm -cpu host,-arch-capabilities` | `<domain type='qemu'>` with a custom `qemu64` model and its features / `<domain type='kvm'>` with `host-passthrough` less `arch-capabilities` |
//! | `-kernel K -initrd I -append C` (PVH) | `<os><kernel>`, `<initrd>`, `<cmdline>` |
//! | `-drive ...,werror=report,rerror=report,discard=unmap,detect-zeroes=unmap -device virtio-blk-pci` per disk, in order | one `<disk>` per image on virtio, `error_policy='report'`, `discard='unmap'`, `detect_zeroes='unmap'`, at PCI 00:03.0, 00:04.0, ... in order |
//! | `-serial stdio` | COM1 on a pty, which the runner reads through libvirt's console stream |
//! | `-serial unix:control.sock` (COM2) | `<serial type='unix'>` bound at the control socket, port 1 |
//! | `-netdev user,restrict=on,hostfwd=tcp:127.0.0.1:P-10.0.2.15:7100` | the same netdev in `<qemu:commandline>` (see [`QEMU_NETDEV_WHY`]) |
//! | `-device isa-debug-exit` | the same device in `<qemu:commandline>`: libvirt has no element for it |
//! | `-netdev stream,addr=127.0.0.1:P -device virtio-net-pci,mac=52:54:00:48:46:0N` (a pair's link) | `<interface type='client'>` to 127.0.0.1:P with that MAC, at PCI 00:1d.0: QEMU's `-netdev socket,connect=`, whose frames on the wire are the same (a 4-byte big-endian length, then the frame) |
//! | `-chardev socket,...,path=qmp.sock -mon ...`, the same for events.sock | the same in `<qemu:commandline>`, beside libvirt's own monitor: `holdfast vm`, the pair's freeze drill and the disk-error reports use them as under the QEMU runner |
//!
//! The kernel finds virtio devices on PCI bus 0 only (guest-kernel/kernel/src/drivers/pci.rs),
//! so every device has an explicit address on bus 0: libvirt would otherwise put each behind
//! a PCIe root port of its own.

use std::path::{Path, PathBuf};

use holdfast_abi::exit::DEBUG_EXIT_PORT;
use holdfast_qemu::Accelerator;
use holdfast_qemu::command_line::{
    GUEST_ADDRESS, GUEST_MAC_ADDRESS, GUEST_TP1_PORT, LinkConnect, TCG_CPU_MODEL,
};
use serde::Serialize;

/// libvirt's namespace for QEMU pass-through elements (`<qemu:commandline>`).
pub const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// The PCI slot on bus 0 of the TP1 network device; store disks follow from
/// [`FIRST_DISK_SLOT`], in order, as QEMU's runner plugs them.
pub const NETWORK_SLOT: u8 = 0x02;
pub const FIRST_DISK_SLOT: u8 = 0x03;
/// Slots 0x03..=0x1e are free on q35's bus 0 (0x1f is the ICH9's own functions); the
/// kernel's store uses two disks, and a few more leave room for tests.
pub const DISKS_MAX: usize = 16;
/// The PCI slot on bus 0 of a pair's replication link, past the disks' slots.
pub const LINK_SLOT: u8 = 0x1d;
/// The longest domain name taken: a pair's (`holdfast-pair-NAME-N-HASH`, NAME up to 62).
pub const NAME_LENGTH_MAX: usize = 128;

/// Why the TP1 forward is QEMU pass-through and not a libvirt `<interface>`: libvirt 9.0
/// (Debian 12) can express a host port forward only on its passt backend, and its parser
/// rejects `<backend type='passt'/>` although its schema lists it ("XML error: Invalid
/// value for attribute 'type' in element 'backend': 'passt'"); a libvirt network would
/// give the host an address on the guest's network (the NAT `default` network is what
/// Holdfast must never use). So the one netdev the QEMU runner uses goes in
/// `<qemu:commandline>`: user-mode networking with `restrict=on` (the guest reaches nothing)
/// and a single forward from 127.0.0.1. libvirt marks such a domain tainted
/// (`custom-argv`) in its log; nothing else changes.
pub const QEMU_NETDEV_WHY: &str = "libvirt 9.0 has no working port forward (passt's backend element is rejected)";

/// Everything that makes a Holdfast VM under libvirt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainSpec {
    /// The libvirt domain name (unique on the host).
    pub name: String,
    /// The QEMU binary libvirt runs (an absolute path).
    pub emulator: PathBuf,
    pub accelerator: Accelerator,
    pub memory_mib: u32,
    /// PVH direct kernel boot: the kernel ELF of `holdfast image build`, its initial image
    /// (loaded as the PVH module), and the kernel command line.
    pub kernel: PathBuf,
    pub initial_image: Option<PathBuf>,
    pub command_line: String,
    /// Raw disk images (regular files or block devices), attached in order on virtio-blk.
    pub disks: Vec<PathBuf>,
    /// 127.0.0.1:PORT on the host forwarded to the guest's TP1 port.
    pub tp1_port: Option<u16>,
    /// Where the guest's control channel (COM2, the admin service) listens on the host, for
    /// `holdfast checkpoint`, `holdfast tp1 token` and the exporter.
    pub control_socket: Option<PathBuf>,
    /// The replication link of a pair's VM: a virtio-net device whose frames go to a TCP
    /// socket on the host (the pair's supervisor relays them to the peer).
    pub replication_link: Option<LinkConnect>,
    /// Where QEMU listens on a QMP monitor of its own (besides libvirt's), for `holdfast
    /// vm` and a pair's freeze drill, if anywhere.
    pub qmp_socket: Option<PathBuf>,
    /// Where QEMU listens on a second QMP monitor that only reports events (disk errors),
    /// if anywhere.
    pub event_socket: Option<PathBuf>,
    /// The user and group QEMU runs as: `holdfast run`'s QEMU runs as the user who started
    /// it, and so does this one (see [`SecLabel`]).
    pub run_as: (u32, u32),
}

/// Why a spec cannot be written as domain XML.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DomainXmlError {
    #[error("'{0}' is not valid UTF-8: libvirt's XML holds only text paths")]
    NotUtf8(PathBuf),
    #[error("'{0}' must be an absolute path: libvirtd does not run in this directory")]
    NotAbsolute(PathBuf),
    #[error("{0} disks given; a Holdfast domain takes at most {DISKS_MAX}")]
    TooManyDisks(usize),
    #[error("a pair's node number is 1 to 9, not {0}")]
    BadLinkNode(u8),
    #[error("domain name '{0}' must be 1 to {NAME_LENGTH_MAX} letters, digits, '-', '_' or '.'")]
    BadName(String),
    #[error("writing the domain XML: {0}")]
    Serialize(String),
}

impl DomainSpec {
    /// The domain XML libvirtd is given (`virDomainCreateXML`).
    pub fn to_xml(&self) -> Result<String, DomainXmlError> {
        let domain = self.domain()?;
        let mut xml = String::new();
        let mut serializer = quick_xml::se::Serializer::new(&mut xml);
        serializer.indent(' ', 2);
        domain
            .serialize(serializer)
            .map_err(|error| DomainXmlError::Serialize(error.to_string()))?;
        Ok(xml)
    }

    fn domain(&self) -> Result<Domain, DomainXmlError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= NAME_LENGTH_MAX
            && self
                .name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"-_.".contains(&byte));
        if !name_ok {
            return Err(DomainXmlError::BadName(self.name.clone()));
        }
        let mut interfaces = Vec::new();
        if let Some(link) = &self.replication_link {
            if !(1..=9).contains(&link.node) {
                return Err(DomainXmlError::BadLinkNode(link.node));
            }
            interfaces.push(Interface {
                kind: "client",
                mac: MacAddress { address: link.mac_address() },
                source: InterfaceSource { address: link.connect.host.clone(), port: link.connect.port },
                model: InterfaceModel { kind: "virtio" },
                // No option ROM, as `romfile=` under the QEMU runner: PVH boot reads none.
                rom: Rom { enabled: "no" },
                address: PciAddress::bus_0(LINK_SLOT),
            });
        }
        if self.disks.len() > DISKS_MAX {
            return Err(DomainXmlError::TooManyDisks(self.disks.len()));
        }
        let mut disks = Vec::with_capacity(self.disks.len());
        for (index, image) in self.disks.iter().enumerate() {
            disks.push(Disk::virtio(index, absolute_text(image)?, is_block_device(image)));
        }
        let mut serials = vec![Serial {
            kind: "pty",
            source: None,
            target: SerialTarget {
                kind: "isa-serial",
                port: 0,
                model: Some(SerialModel { name: "isa-serial" }),
            },
        }];
        if let Some(socket) = &self.control_socket {
            serials.push(Serial {
                kind: "unix",
                source: Some(SerialSource {
                    mode: "bind",
                    path: absolute_text(socket)?,
                }),
                target: SerialTarget {
                    kind: "isa-serial",
                    port: 1,
                    model: Some(SerialModel { name: "isa-serial" }),
                },
            });
        }
        Ok(Domain {
            kind: match self.accelerator {
                Accelerator::Kvm => "kvm",
                Accelerator::Tcg => "qemu",
            },
            qemu_namespace: QEMU_NAMESPACE,
            name: self.name.clone(),
            memory: Memory {
                unit: "MiB",
                value: self.memory_mib,
            },
            vcpu: 1,
            os: Os {
                kind: OsType {
                    arch: "x86_64",
                    machine: "q35",
                    value: "hvm",
                },
                kernel: absolute_text(&self.kernel)?,
                initrd: self.initial_image.as_deref().map(absolute_text).transpose()?,
                cmdline: self.command_line.clone(),
            },
            cpu: Cpu::for_accelerator(self.accelerator),
            // A guest reset ends the domain, as `-no-reboot` ends QEMU: a kernel that triple
            // faults must not boot again in a loop.
            on_poweroff: "destroy",
            on_reboot: "destroy",
            on_crash: "destroy",
            devices: Devices {
                emulator: absolute_text(&self.emulator)?,
                disk: disks,
                interface: interfaces,
                serial: serials,
                console: Console {
                    kind: "pty",
                    target: ConsoleTarget {
                        kind: "serial",
                        port: 0,
                    },
                },
                // q35 would get a USB controller and a virtio balloon by default: devices
                // the QEMU runner does not have (-nodefaults), and the balloon a virtio
                // function on the kernel's bus.
                controller: vec![Controller {
                    kind: "usb",
                    model: "none",
                }],
                memballoon: MemBalloon { model: "none" },
            },
            seclabel: SecLabel {
                kind: "static",
                model: "dac",
                relabel: "no",
                label: format!("+{}:+{}", self.run_as.0, self.run_as.1),
            },
            qemu_commandline: QemuCommandline {
                arg: self.qemu_arguments()?.into_iter().map(|value| QemuArg { value }).collect(),
            },
        })
    }

    /// What libvirt cannot say itself, passed to QEMU as is: the guest's exit device and the
    /// TP1 network (see [`QEMU_NETDEV_WHY`]). Ids start with `hf` so that they never meet
    /// libvirt's own (`net0`, `serial0`, ...).
    fn qemu_arguments(&self) -> Result<Vec<String>, DomainXmlError> {
        // The kernel ends the VM through this port after its self-test and on a fatal error
        // (holdfast_abi::exit); without it the kernel halts and the domain runs on idle.
        let mut arguments = vec![
            "-device".to_owned(),
            format!(
                "isa-debug-exit,id=hfexit,iobase={DEBUG_EXIT_PORT:#x},iosize=0x04"
            ),
        ];
        if let Some(port) = self.tp1_port {
            arguments.extend([
                "-netdev".to_owned(),
                // Only 127.0.0.1 on the host; `restrict=on` keeps the guest from reaching
                // anything but the forward. No libvirt network, so no host address on
                // the guest's network.
                format!(
                    "user,id=hfnet0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:{port}-{GUEST_ADDRESS}:{GUEST_TP1_PORT}"
                ),
                "-device".to_owned(),
                format!(
                    "virtio-net-pci,id=hfnic0,netdev=hfnet0,mac={GUEST_MAC_ADDRESS},romfile=,bus=pcie.0,addr={NETWORK_SLOT:#x}"
                ),
            ]);
        }
        for (id, socket) in [("hfqmp", &self.qmp_socket), ("hfevents", &self.event_socket)] {
            if let Some(socket) = socket {
                // A comma in a QEMU option value is written twice.
                let path = absolute_text(socket)?.replace(',', ",,");
                arguments.extend([
                    "-chardev".to_owned(),
                    format!("socket,id={id},server=on,wait=off,path={path}"),
                    "-mon".to_owned(),
                    format!("chardev={id},mode=control"),
                ]);
            }
        }
        Ok(arguments)
    }
}

fn absolute_text(path: &Path) -> Result<String, DomainXmlError> {
    if !path.is_absolute() {
        return Err(DomainXmlError::NotAbsolute(path.to_owned()));
    }
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| DomainXmlError::NotUtf8(path.to_owned()))
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_block_device())
}

// The XML, element by element. Field names are the element names; `@name` is an attribute
// and `$text` the element's text.

#[derive(Debug, Serialize)]
#[serde(rename = "domain")]
struct Domain {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@xmlns:qemu")]
    qemu_namespace: &'static str,
    name: String,
    memory: Memory,
    vcpu: u32,
    os: Os,
    cpu: Cpu,
    on_poweroff: &'static str,
    on_reboot: &'static str,
    on_crash: &'static str,
    devices: Devices,
    seclabel: SecLabel,
    #[serde(rename = "qemu:commandline")]
    qemu_commandline: QemuCommandline,
}

#[derive(Debug, Serialize)]
struct Memory {
    #[serde(rename = "@unit")]
    unit: &'static str,
    #[serde(rename = "$text")]
    value: u32,
}

#[derive(Debug, Serialize)]
struct Os {
    #[serde(rename = "type")]
    kind: OsType,
    kernel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    initrd: Option<String>,
    cmdline: String,
}

#[derive(Debug, Serialize)]
struct OsType {
    #[serde(rename = "@arch")]
    arch: &'static str,
    #[serde(rename = "@machine")]
    machine: &'static str,
    #[serde(rename = "$text")]
    value: &'static str,
}

#[derive(Debug, Serialize)]
struct Cpu {
    #[serde(rename = "@mode")]
    mode: &'static str,
    #[serde(rename = "@match", skip_serializing_if = "Option::is_none")]
    matching: Option<&'static str>,
    /// `none`: libvirt passes the model as given rather than compare it with the host's
    /// CPU (under TCG the host's CPU is beside the point).
    #[serde(rename = "@check")]
    check: &'static str,
    #[serde(rename = "@migratable", skip_serializing_if = "Option::is_none")]
    migratable: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<CpuModel>,
    feature: Vec<CpuFeature>,
}

impl Cpu {
    fn for_accelerator(accelerator: Accelerator) -> Self {
        match accelerator {
            // The host's CPU less IA32_ARCH_CAPABILITIES, as the QEMU runner (QEMU 7.2 fails
            // to set that MSR on AMD hosts whose KVM emulates it).
            Accelerator::Kvm => Self {
                mode: "host-passthrough",
                matching: None,
                check: "none",
                migratable: Some("off"),
                model: None,
                feature: vec![CpuFeature {
                    policy: "disable",
                    name: "arch-capabilities".to_owned(),
                }],
            },
            // The QEMU runner's TCG model, from the same constant: qemu64 plus the features
            // the kernel needs (SMEP, SMAP, SSE4.2, RDRAND, ...).
            Accelerator::Tcg => {
                let mut words = TCG_CPU_MODEL.split(',');
                let model = words.next().unwrap_or("qemu64");
                Self {
                    mode: "custom",
                    matching: Some("exact"),
                    check: "none",
                    migratable: None,
                    model: Some(CpuModel {
                        fallback: "forbid",
                        name: model.to_owned(),
                    }),
                    feature: words
                        .map(|word| match word.strip_prefix('-') {
                            Some(name) => CpuFeature {
                                policy: "disable",
                                name: name.to_owned(),
                            },
                            None => CpuFeature {
                                policy: "require",
                                name: word.trim_start_matches('+').to_owned(),
                            },
                        })
                        .collect(),
                }
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct CpuModel {
    #[serde(rename = "@fallback")]
    fallback: &'static str,
    #[serde(rename = "$text")]
    name: String,
}

#[derive(Debug, Serialize)]
struct CpuFeature {
    #[serde(rename = "@policy")]
    policy: &'static str,
    #[serde(rename = "@name")]
    name: String,
}

#[derive(Debug, Serialize)]
struct Devices {
    emulator: String,
    disk: Vec<Disk>,
    interface: Vec<Interface>,
    serial: Vec<Serial>,
    console: Console,
    controller: Vec<Controller>,
    memballoon: MemBalloon,
}

#[derive(Debug, Serialize)]
struct Disk {
    /// `file` for an image, `block` for a block device.
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@device")]
    device: &'static str,
    driver: DiskDriver,
    source: DiskSource,
    target: DiskTarget,
    address: PciAddress,
}

impl Disk {
    fn virtio(index: usize, image: String, block_device: bool) -> Self {
        let (kind, source) = if block_device {
            ("block", DiskSource { file: None, dev: Some(image) })
        } else {
            ("file", DiskSource { file: Some(image), dev: None })
        };
        let letter = char::from(b'a' + index as u8);
        Self {
            kind,
            device: "disk",
            // A host error on an image (its file system full) is reported to the guest,
            // which marks that mirror failed and goes on, rather than pausing the domain.
            // Blocks written as zeros become holes in the image, and the guest's discards
            // free the host's blocks, as under the QEMU runner: a standby's full copy writes
            // every block of the store, most of them zeros.
            driver: DiskDriver {
                name: "qemu",
                format: "raw",
                error_policy: "report",
                rerror_policy: "report",
                discard: "unmap",
                detect_zeroes: "unmap",
            },
            source,
            target: DiskTarget {
                dev: format!("vd{letter}"),
                bus: "virtio",
            },
            address: PciAddress::bus_0(FIRST_DISK_SLOT + index as u8),
        }
    }
}

#[derive(Debug, Serialize)]
struct DiskDriver {
    #[serde(rename = "@name")]
    name: &'static str,
    #[serde(rename = "@type")]
    format: &'static str,
    #[serde(rename = "@error_policy")]
    error_policy: &'static str,
    #[serde(rename = "@rerror_policy")]
    rerror_policy: &'static str,
    #[serde(rename = "@discard")]
    discard: &'static str,
    #[serde(rename = "@detect_zeroes")]
    detect_zeroes: &'static str,
}

/// A pair's replication link: `<interface type='client'>`, a TCP client socket (no libvirt
/// network, no host address on any guest network).
#[derive(Debug, Serialize)]
struct Interface {
    #[serde(rename = "@type")]
    kind: &'static str,
    mac: MacAddress,
    source: InterfaceSource,
    model: InterfaceModel,
    rom: Rom,
    address: PciAddress,
}

#[derive(Debug, Serialize)]
struct MacAddress {
    #[serde(rename = "@address")]
    address: String,
}

#[derive(Debug, Serialize)]
struct InterfaceSource {
    #[serde(rename = "@address")]
    address: String,
    #[serde(rename = "@port")]
    port: u16,
}

#[derive(Debug, Serialize)]
struct InterfaceModel {
    #[serde(rename = "@type")]
    kind: &'static str,
}

#[derive(Debug, Serialize)]
struct Rom {
    #[serde(rename = "@enabled")]
    enabled: &'static str,
}

#[derive(Debug, Serialize)]
struct DiskSource {
    #[serde(rename = "@file", skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    dev: Option<String>,
}

#[derive(Debug, Serialize)]
struct DiskTarget {
    #[serde(rename = "@dev")]
    dev: String,
    #[serde(rename = "@bus")]
    bus: &'static str,
}

#[derive(Debug, Serialize)]
struct PciAddress {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@domain")]
    domain: &'static str,
    #[serde(rename = "@bus")]
    bus: &'static str,
    #[serde(rename = "@slot")]
    slot: String,
    #[serde(rename = "@function")]
    function: &'static str,
}

impl PciAddress {
    fn bus_0(slot: u8) -> Self {
        Self {
            kind: "pci",
            domain: "0x0000",
            bus: "0x00",
            slot: format!("{slot:#04x}"),
            function: "0x0",
        }
    }
}

#[derive(Debug, Serialize)]
struct Serial {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<SerialSource>,
    target: SerialTarget,
}

#[derive(Debug, Serialize)]
struct SerialSource {
    #[serde(rename = "@mode")]
    mode: &'static str,
    #[serde(rename = "@path")]
    path: String,
}

#[derive(Debug, Serialize)]
struct SerialTarget {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@port")]
    port: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<SerialModel>,
}

#[derive(Debug, Serialize)]
struct SerialModel {
    #[serde(rename = "@name")]
    name: &'static str,
}

#[derive(Debug, Serialize)]
struct Console {
    #[serde(rename = "@type")]
    kind: &'static str,
    target: ConsoleTarget,
}

#[derive(Debug, Serialize)]
struct ConsoleTarget {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@port")]
    port: u8,
}

#[derive(Debug, Serialize)]
struct Controller {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@model")]
    model: &'static str,
}

#[derive(Debug, Serialize)]
struct MemBalloon {
    #[serde(rename = "@model")]
    model: &'static str,
}

/// QEMU runs as `label` (`+uid:+gid`), the user who ran `holdfast run`, and libvirt changes
/// no file's owner (`relabel='no'`): the kernel, the images and the control socket are
/// reached with exactly that user's rights, as under the QEMU runner. libvirt's default
/// (its own `libvirt-qemu` user, chowning each image while the domain runs) cannot reach
/// a user's home directory and would leave images owned by someone else after a crash.
#[derive(Debug, Serialize)]
struct SecLabel {
    #[serde(rename = "@type")]
    kind: &'static str,
    #[serde(rename = "@model")]
    model: &'static str,
    #[serde(rename = "@relabel")]
    relabel: &'static str,
    label: String,
}

#[derive(Debug, Serialize)]
struct QemuCommandline {
    #[serde(rename = "qemu:arg")]
    arg: Vec<QemuArg>,
}

#[derive(Debug, Serialize)]
struct QemuArg {
    #[serde(rename = "@value")]
    value: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::events::Event;

    /// An element of the XML read back with quick-xml's event reader, independent of the
    /// serde structs that wrote it: so a misnamed element or attribute fails here.
    #[derive(Debug, Default)]
    struct Element {
        name: String,
        attributes: Vec<(String, String)>,
        text: String,
        children: Vec<Element>,
    }

    impl Element {
        fn parse(xml: &str) -> Element {
            let mut reader = quick_xml::Reader::from_str(xml);
            let mut stack: Vec<Element> = vec![Element::default()];
            loop {
                match reader.read_event().expect("well-formed XML") {
                    Event::Start(start) => stack.push(Self::opened(&start)),
                    Event::Empty(start) => {
                        let element = Self::opened(&start);
                        stack.last_mut().unwrap().children.push(element);
                    }
                    Event::End(_) => {
                        let element = stack.pop().unwrap();
                        stack.last_mut().unwrap().children.push(element);
                    }
                    Event::Text(text) => {
                        stack.last_mut().unwrap().text.push_str(text.unescape().unwrap().trim());
                    }
                    Event::Eof => break,
                    _ => {}
                }
            }
            assert_eq!(stack.len(), 1, "unclosed elements");
            let mut document = stack.pop().unwrap();
            assert_eq!(document.children.len(), 1, "one root element");
            document.children.pop().unwrap()
        }

        fn opened(start: &quick_xml::events::BytesStart) -> Element {
            Element {
                name: String::from_utf8(start.name().as_ref().to_vec()).unwrap(),
                attributes: start
                    .attributes()
                    .map(|attribute| {
                        let attribute = attribute.unwrap();
                        (
                            String::from_utf8(attribute.key.as_ref().to_vec()).unwrap(),
                            attribute.unescape_value().unwrap().into_owned(),
                        )
                    })
                    .collect(),
                ..Element::default()
            }
        }

        fn attribute(&self, name: &str) -> Option<&str> {
            self.attributes.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
        }

        fn all(&self, name: &str) -> Vec<&Element> {
            self.children.iter().filter(|child| child.name == name).collect()
        }

        /// The one child on the path `a/b/c`.
        fn at(&self, path: &str) -> &Element {
            path.split('/').fold(self, |element, name| {
                let found = element.all(name);
                assert_eq!(found.len(), 1, "{path}: {} <{name}> under <{}>", found.len(), element.name);
                found[0]
            })
        }
    }

    fn spec(accelerator: Accelerator) -> DomainSpec {
        DomainSpec {
            name: "holdfast-tp1".into(),
            emulator: "/usr/bin/qemu-system-x86_64".into(),
            accelerator,
            memory_mib: 512,
            kernel: "/images/holdfast-kernel.elf".into(),
            initial_image: Some("/images/initial.hfi".into()),
            command_line: "holdfast.after=stay a<b&c".into(),
            disks: vec!["/stores/a.img".into(), "/stores/b.img".into()],
            tp1_port: Some(47100),
            control_socket: Some("/state/tp1/control.sock".into()),
            replication_link: None,
            qmp_socket: None,
            event_socket: None,
            run_as: (1000, 1001),
        }
    }

    fn parsed(spec: &DomainSpec) -> Element {
        Element::parse(&spec.to_xml().expect("a domain"))
    }

    #[test]
    fn pvh_boot_memory_and_machine() {
        let domain = parsed(&spec(Accelerator::Tcg));
        assert_eq!(domain.name, "domain");
        assert_eq!(domain.attribute("type"), Some("qemu"));
        assert_eq!(domain.attribute("xmlns:qemu"), Some(QEMU_NAMESPACE));
        assert_eq!(domain.at("name").text, "holdfast-tp1");
        assert_eq!(domain.at("memory").text, "512");
        assert_eq!(domain.at("memory").attribute("unit"), Some("MiB"));
        assert_eq!(domain.at("vcpu").text, "1");
        let os_type = domain.at("os/type");
        assert_eq!((os_type.text.as_str(), os_type.attribute("machine"), os_type.attribute("arch")), ("hvm", Some("q35"), Some("x86_64")));
        assert_eq!(domain.at("os/kernel").text, "/images/holdfast-kernel.elf");
        assert_eq!(domain.at("os/initrd").text, "/images/initial.hfi");
        // Escaped on the way out, whole on the way back.
        assert_eq!(domain.at("os/cmdline").text, "holdfast.after=stay a<b&c");
        for event in ["on_poweroff", "on_reboot", "on_crash"] {
            assert_eq!(domain.at(event).text, "destroy", "{event}");
        }
        assert_eq!(domain.at("devices/emulator").text, "/usr/bin/qemu-system-x86_64");
        assert_eq!(domain.at("devices/memballoon").attribute("model"), Some("none"));
        assert_eq!(domain.at("devices/controller").attribute("type"), Some("usb"));
        assert_eq!(domain.at("devices/controller").attribute("model"), Some("none"));
        let seclabel = domain.at("seclabel");
        assert_eq!((seclabel.attribute("model"), seclabel.attribute("relabel")), (Some("dac"), Some("no")));
        assert_eq!(seclabel.at("label").text, "+1000:+1001");
    }

    #[test]
    fn tcg_is_domain_type_qemu_with_the_qemu_runners_cpu_model() {
        let domain = parsed(&spec(Accelerator::Tcg));
        let cpu = domain.at("cpu");
        assert_eq!(cpu.attribute("mode"), Some("custom"));
        assert_eq!(cpu.at("model").text, "qemu64");
        let required: Vec<&str> = cpu
            .all("feature")
            .iter()
            .filter(|feature| feature.attribute("policy") == Some("require"))
            .map(|feature| feature.attribute("name").unwrap())
            .collect();
        assert_eq!(required, ["ssse3", "sse4.1", "sse4.2", "popcnt", "smep", "smap", "rdrand"]);
    }

    #[test]
    fn kvm_is_domain_type_kvm_with_the_hosts_cpu_less_arch_capabilities() {
        let domain = parsed(&spec(Accelerator::Kvm));
        assert_eq!(domain.attribute("type"), Some("kvm"));
        let cpu = domain.at("cpu");
        assert_eq!(cpu.attribute("mode"), Some("host-passthrough"));
        assert!(cpu.all("model").is_empty());
        let feature = cpu.at("feature");
        assert_eq!((feature.attribute("policy"), feature.attribute("name")), (Some("disable"), Some("arch-capabilities")));
    }

    #[test]
    fn store_disks_are_virtio_in_order_on_bus_0_with_errors_reported() {
        let domain = parsed(&spec(Accelerator::Tcg));
        let disks = domain.at("devices").all("disk");
        assert_eq!(disks.len(), 2);
        for (index, (disk, image)) in disks.iter().zip(["/stores/a.img", "/stores/b.img"]).enumerate() {
            assert_eq!(disk.attribute("type"), Some("file"));
            assert_eq!(disk.at("source").attribute("file"), Some(image));
            assert_eq!(disk.at("target").attribute("bus"), Some("virtio"));
            assert_eq!(disk.at("target").attribute("dev"), Some(["vda", "vdb"][index]));
            assert_eq!(disk.at("driver").attribute("type"), Some("raw"));
            assert_eq!(disk.at("driver").attribute("error_policy"), Some("report"));
            assert_eq!(disk.at("driver").attribute("rerror_policy"), Some("report"));
            assert_eq!(disk.at("driver").attribute("discard"), Some("unmap"));
            assert_eq!(disk.at("driver").attribute("detect_zeroes"), Some("unmap"));
            let address = disk.at("address");
            assert_eq!(address.attribute("bus"), Some("0x00"));
            assert_eq!(address.attribute("slot"), Some(format!("{:#04x}", FIRST_DISK_SLOT as usize + index).as_str()));
        }
    }

    #[test]
    fn console_is_com1_on_a_pty_and_control_is_com2_on_a_bound_socket() {
        let domain = parsed(&spec(Accelerator::Tcg));
        let serials = domain.at("devices").all("serial");
        assert_eq!(serials.len(), 2);
        assert_eq!(serials[0].attribute("type"), Some("pty"));
        assert_eq!(serials[0].at("target").attribute("port"), Some("0"));
        assert_eq!(serials[1].attribute("type"), Some("unix"));
        assert_eq!(serials[1].at("source").attribute("mode"), Some("bind"));
        assert_eq!(serials[1].at("source").attribute("path"), Some("/state/tp1/control.sock"));
        assert_eq!(serials[1].at("target").attribute("port"), Some("1"));
        let console = domain.at("devices/console");
        assert_eq!((console.attribute("type"), console.at("target").attribute("type")), (Some("pty"), Some("serial")));

        let mut without_control = spec(Accelerator::Tcg);
        without_control.control_socket = None;
        assert_eq!(parsed(&without_control).at("devices").all("serial").len(), 1);
    }

    #[test]
    fn tp1_port_is_forwarded_from_loopback_only_and_there_is_no_libvirt_network() {
        let domain = parsed(&spec(Accelerator::Tcg));
        assert!(domain.at("devices").all("interface").is_empty(), "no libvirt network, NAT or other");
        let arguments: Vec<&str> = domain
            .at("qemu:commandline")
            .all("qemu:arg")
            .iter()
            .map(|argument| argument.attribute("value").unwrap())
            .collect();
        assert_eq!(
            arguments,
            [
                "-device",
                "isa-debug-exit,id=hfexit,iobase=0xf4,iosize=0x04",
                "-netdev",
                "user,id=hfnet0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:47100-10.0.2.15:7100",
                "-device",
                "virtio-net-pci,id=hfnic0,netdev=hfnet0,mac=52:54:00:12:34:56,romfile=,bus=pcie.0,addr=0x2",
            ]
        );
        let mut no_network = spec(Accelerator::Tcg);
        no_network.tp1_port = None;
        let domain = parsed(&no_network);
        let arguments = domain.at("qemu:commandline").all("qemu:arg");
        assert_eq!(arguments.len(), 2, "only the exit device");
    }

    #[test]
    fn specs_libvirt_cannot_take_are_refused_with_the_reason() {
        let mut relative = spec(Accelerator::Tcg);
        relative.disks[1] = "b.img".into();
        assert_eq!(relative.to_xml(), Err(DomainXmlError::NotAbsolute("b.img".into())));
        let mut too_many = spec(Accelerator::Tcg);
        too_many.disks = (0..=DISKS_MAX).map(|index| PathBuf::from(format!("/d/{index}.img"))).collect();
        assert_eq!(too_many.to_xml(), Err(DomainXmlError::TooManyDisks(DISKS_MAX + 1)));
        let mut linked = spec(Accelerator::Tcg);
        linked.replication_link = Some(LinkConnect { connect: "127.0.0.1:7000".parse().unwrap(), node: 0 });
        assert_eq!(linked.to_xml(), Err(DomainXmlError::BadLinkNode(0)));
        let mut badly_named = spec(Accelerator::Tcg);
        badly_named.name = "a b".into();
        assert_eq!(badly_named.to_xml(), Err(DomainXmlError::BadName("a b".into())));
        let mut no_initial_image = spec(Accelerator::Tcg);
        no_initial_image.initial_image = None;
        assert!(parsed(&no_initial_image).at("os").all("initrd").is_empty());
    }

    #[test]
    fn a_pairs_link_is_a_tcp_client_interface_with_the_link_mac_and_its_monitors_are_qemu_sockets() {
        let mut node = spec(Accelerator::Tcg);
        node.replication_link = Some(LinkConnect { connect: "127.0.0.1:41234".parse().unwrap(), node: 2 });
        node.qmp_socket = Some("/state/p-2/qmp.sock".into());
        node.event_socket = Some("/state/p-2/events,1.sock".into());
        let domain = parsed(&node);
        let interface = domain.at("devices/interface");
        assert_eq!(interface.attribute("type"), Some("client"), "a socket, not a libvirt network");
        assert_eq!(interface.at("mac").attribute("address"), Some("52:54:00:48:46:02"));
        assert_eq!(interface.at("source").attribute("address"), Some("127.0.0.1"));
        assert_eq!(interface.at("source").attribute("port"), Some("41234"));
        assert_eq!(interface.at("model").attribute("type"), Some("virtio"));
        assert_eq!(interface.at("rom").attribute("enabled"), Some("no"));
        assert_eq!(interface.at("address").attribute("bus"), Some("0x00"));
        assert_eq!(interface.at("address").attribute("slot"), Some("0x1d"));
        let arguments: Vec<&str> =
            domain.at("qemu:commandline").all("qemu:arg").iter().map(|argument| argument.attribute("value").unwrap()).collect();
        assert_eq!(
            arguments[6..],
            [
                "-chardev",
                "socket,id=hfqmp,server=on,wait=off,path=/state/p-2/qmp.sock",
                "-mon",
                "chardev=hfqmp,mode=control",
                "-chardev",
                "socket,id=hfevents,server=on,wait=off,path=/state/p-2/events,,1.sock",
                "-mon",
                "chardev=hfevents,mode=control",
            ]
        );
        let mut long = spec(Accelerator::Tcg);
        long.name = format!("holdfast-pair-{}-1-0123abcd", "n".repeat(62));
        assert!(long.to_xml().is_ok(), "a pair's longest domain name");
    }
}
