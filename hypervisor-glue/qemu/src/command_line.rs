//! What a Holdfast VM is, and the QEMU command line that makes it.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use holdfast_abi::exit::DEBUG_EXIT_PORT;

use crate::accel::Accelerator;

/// Guest memory when the caller does not say.
pub const DEFAULT_MEMORY_MIB: u32 = 256;

/// The MAC address of the guest's virtio-net device (QEMU's customary first address).
pub const GUEST_MAC_ADDRESS: &str = "52:54:00:12:34:56";

/// The CPU model under TCG: QEMU's default (qemu64), plus SMEP and SMAP, which the kernel's
/// W^X needs (it refuses to run without them), plus what x86-64-v2 adds: SSE4.2, whose
/// `crc32` instruction the kernel uses to check the initial image at boot (so that TCG runs
/// the path hardware and KVM take), and the features software assumes come with it (the
/// Linux peer's busybox uses SSSE3 once it sees SSE4.2, and died of #UD with SSE4.2 alone);
/// and RDRAND, from which the admin service mints the TP1 service's tokens.
pub const TCG_CPU_MODEL: &str = "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+smep,+smap,+rdrand";

/// How the kernel gets into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boot {
    /// QEMU loads the kernel ELF itself and enters it through its PVH note; the initial
    /// image (if any) is the PVH module and `command_line` the kernel's command line.
    Pvh {
        kernel: PathBuf,
        initial_image: Option<PathBuf>,
        command_line: String,
    },
    /// The firmware boots this disk (GRUB, which loads kernel and initial image by
    /// multiboot2 with the command line fixed in its `grub.cfg`). The disk is attached
    /// with `snapshot=on`, so the file is never written and several VMs may share it.
    Disk { boot_disk: PathBuf },
}

/// The guest's address on QEMU's user-mode network (its network service's static address).
pub const GUEST_ADDRESS: &str = "10.0.2.15";
/// The guest TCP port the host's `--tp1-port` is forwarded to.
pub const GUEST_TP1_PORT: u16 = 7100;

/// A TCP endpoint the guest's virtio-net device connects to (QEMU's `-netdev stream`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConnect {
    pub host: String,
    pub port: u16,
}

impl FromStr for NetConnect {
    type Err = String;

    /// `HOST:PORT`, with an IPv6 host in brackets (`[::1]:5000`).
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || format!("'{text}' is not HOST:PORT");
        let (host, port) = text.rsplit_once(':').ok_or_else(invalid)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = port.parse::<u16>().map_err(|_| invalid())?;
        if host.is_empty() || port == 0 || host.contains(',') {
            return Err(invalid());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for NetConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The first five bytes of a pair's link MAC addresses: the kernel takes the NIC whose MAC
/// starts so for the replication link (guest-kernel/replication), never for its network.
pub const LINK_MAC_PREFIX: &str = "52:54:00:48:46";

/// A second virtio-net device, the pair's replication link: a `-netdev stream` client
/// socket to the host supervisor, which relays each VM's frames to the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConnect {
    pub connect: NetConnect,
    /// The VM's number in its pair, 1 to 9: the last digit of its link MAC address
    /// ([`LINK_MAC_PREFIX`]`:0N`; the supervisor itself sends as 0).
    pub node: u8,
}

impl LinkConnect {
    /// `52:54:00:48:46:0N`.
    pub fn mac_address(&self) -> String {
        format!("{LINK_MAC_PREFIX}:{:02x}", self.node)
    }
}

/// Everything that makes one Holdfast VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSpec {
    pub boot: Boot,
    /// Raw disk images, attached in order as virtio-blk PCI devices.
    pub disks: Vec<PathBuf>,
    /// A test aid: (index into `disks`, QEMU `blkdebug` configuration file) for disks whose
    /// I/O passes through QEMU's error-injecting `blkdebug` driver.
    pub blkdebug: Vec<(usize, PathBuf)>,
    pub net_connect: Option<NetConnect>,
    /// The pair's replication link, beside the network device (`holdfast pair up`).
    pub link_connect: Option<LinkConnect>,
    /// QEMU user-mode networking with this host port on 127.0.0.1 forwarded to the guest's
    /// TCP port [`GUEST_TP1_PORT`] at [`GUEST_ADDRESS`] (`holdfast run --tp1-port`). The
    /// guest reaches nothing outside QEMU (`restrict=on`).
    pub tp1_port: Option<u16>,
    pub accelerator: Accelerator,
    pub memory_mib: u32,
    /// Where QEMU listens for QMP clients, if anywhere.
    pub qmp_socket: Option<PathBuf>,
    /// Where QEMU listens for the host's end of the guest's control channel (its second
    /// serial port, COM2), if anywhere.
    pub control_socket: Option<PathBuf>,
    /// Where QEMU listens on a second QMP monitor that only reports events
    /// ([`crate::events`]), if anywhere.
    pub event_socket: Option<PathBuf>,
}

impl VmSpec {
    /// A VM with no disks, no network, no QMP socket and [`DEFAULT_MEMORY_MIB`].
    pub fn new(boot: Boot, accelerator: Accelerator) -> Self {
        Self {
            boot,
            disks: Vec::new(),
            blkdebug: Vec::new(),
            net_connect: None,
            link_connect: None,
            tp1_port: None,
            accelerator,
            memory_mib: DEFAULT_MEMORY_MIB,
            qmp_socket: None,
            control_socket: None,
            event_socket: None,
        }
    }

    /// The arguments to give `qemu-system-x86_64`. The serial console is QEMU's stdio
    /// (the launcher pipes it); there is no display, no default device and no reboot, so a
    /// guest reset ends QEMU instead of looping.
    pub fn qemu_arguments(&self) -> Vec<OsString> {
        let mut arguments = Arguments::default();
        arguments.add([
            "-machine",
            "q35",
            "-nodefaults",
            "-no-reboot",
            "-display",
            "none",
        ]);
        match self.accelerator {
            // The host's CPU, less IA32_ARCH_CAPABILITIES: QEMU 7.2 fails to set that MSR
            // on AMD hosts whose KVM emulates it ("failed to set MSR 0x10a") and aborts.
            // Holdfast does not read it.
            Accelerator::Kvm => arguments.add(["-accel", "kvm", "-cpu", "host,-arch-capabilities"]),
            // The Linux peers of the benchmarks run on the same model.
            Accelerator::Tcg => arguments.add(["-accel", "tcg", "-cpu", TCG_CPU_MODEL]),
        }
        arguments.add(["-m".to_owned(), self.memory_mib.to_string()]);
        // signal=off: a ^C on the serial console is a byte for the guest, not a QEMU exit.
        arguments.add([
            "-chardev",
            "stdio,id=serial0,signal=off",
            "-serial",
            "chardev:serial0",
        ]);
        arguments.add([
            "-device".to_owned(),
            format!("isa-debug-exit,iobase={DEBUG_EXIT_PORT:#x},iosize=0x04"),
        ]);
        if let Some(socket) = &self.qmp_socket {
            arguments.add_with_path("-chardev", "socket,id=qmp,server=on,wait=off,path=", socket);
            arguments.add(["-mon", "chardev=qmp,mode=control"]);
        }
        if let Some(socket) = &self.event_socket {
            arguments.add_with_path("-chardev", "socket,id=events,server=on,wait=off,path=", socket);
            arguments.add(["-mon", "chardev=events,mode=control"]);
        }
        if let Some(socket) = &self.control_socket {
            arguments.add_with_path("-chardev", "socket,id=control,server=on,wait=off,path=", socket);
            arguments.add(["-serial", "chardev:control"]);
        }
        match &self.boot {
            Boot::Pvh {
                kernel,
                initial_image,
                command_line,
            } => {
                arguments.add_os(["-kernel".into(), kernel.into()]);
                if let Some(initial_image) = initial_image {
                    arguments.add_os(["-initrd".into(), initial_image.into()]);
                }
                if !command_line.is_empty() {
                    arguments.add(["-append", command_line]);
                }
            }
            Boot::Disk { boot_disk } => {
                // The q35 board's built-in AHCI controller, not virtio: the kernel's
                // virtio-blk driver must see only the store's disks.
                arguments.add_with_path(
                    "-drive",
                    "format=raw,if=none,id=bootdisk,snapshot=on,file=",
                    boot_disk,
                );
                arguments.add(["-device", "ide-hd,drive=bootdisk,bus=ide.0,bootindex=0"]);
            }
        }
        // A host error on a disk (its file system full, the file gone) is reported to the
        // guest, which marks that mirror failed and goes on with the others, rather than
        // pausing the VM (QEMU's default for a full disk: a frozen appliance that says
        // nothing). The event socket tells the host.
        //
        // Blocks written as zeros become holes in the image file (detect-zeroes with
        // discard=unmap): a standby's full copy writes every block of the store, most of
        // them zero, and would otherwise make its images as large on the host as the store.
        for (index, disk) in self.disks.iter().enumerate() {
            let drive = format!("format=raw,if=none,id=disk{index},werror=report,rerror=report,discard=unmap,detect-zeroes=unmap,");
            let blkdebug = self.blkdebug.iter().find(|(disk_index, _)| *disk_index == index);
            if let Some((_, config)) = blkdebug {
                // Raw over blkdebug over the file: the raw format's reads and writes raise
                // blkdebug's read_aio and write_aio events, which the rules match.
                let mut value = OsString::from(format!("{drive}file.driver=blkdebug,file.config="));
                value.push(escape_commas(config));
                value.push(",file.image.filename=");
                value.push(escape_commas(disk));
                arguments.add_os(["-drive".into(), value]);
            } else {
                arguments.add_with_path("-drive", &format!("{drive}file="), disk);
            }
            arguments.add([
                "-device".to_owned(),
                format!("virtio-blk-pci,drive=disk{index}"),
            ]);
        }
        if let Some(port) = self.tp1_port {
            arguments.add([
                "-netdev".to_owned(),
                // Only 127.0.0.1 on the host; `restrict=on` keeps the guest from reaching
                // anything but the forward.
                format!(
                    "user,id=net0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:{port}-{GUEST_ADDRESS}:{GUEST_TP1_PORT}"
                ),
                "-device".to_owned(),
                format!("virtio-net-pci,netdev=net0,mac={GUEST_MAC_ADDRESS},romfile="),
            ]);
        }
        if let Some(NetConnect { host, port }) = &self.net_connect {
            arguments.add([
                "-netdev".to_owned(),
                format!(
                    "stream,id=net0,server=off,addr.type=inet,addr.host={host},addr.port={port}"
                ),
                "-device".to_owned(),
                // No option ROM: the guest never boots from the network, and loading
                // iPXE costs BIOS boots time.
                format!("virtio-net-pci,netdev=net0,mac={GUEST_MAC_ADDRESS},romfile="),
            ]);
        }
        if let Some(link) = &self.link_connect {
            let NetConnect { host, port } = &link.connect;
            assert!((1..=9).contains(&link.node), "a pair's node number is 1 to 9");
            arguments.add([
                "-netdev".to_owned(),
                format!(
                    "stream,id=link0,server=off,addr.type=inet,addr.host={host},addr.port={port}"
                ),
                "-device".to_owned(),
                format!("virtio-net-pci,netdev=link0,mac={},romfile=", link.mac_address()),
            ]);
        }
        arguments.0
    }
}

#[derive(Default)]
struct Arguments(Vec<OsString>);

impl Arguments {
    fn add<S: Into<OsString>>(&mut self, words: impl IntoIterator<Item = S>) {
        self.0.extend(words.into_iter().map(Into::into));
    }

    fn add_os(&mut self, words: impl IntoIterator<Item = OsString>) {
        self.0.extend(words);
    }

    /// `option prefix<path>`, with the path's commas doubled as QEMU's option syntax
    /// requires inside `key=value,...` lists (so the path must come last).
    fn add_with_path(&mut self, option: &str, prefix: &str, path: &Path) {
        let mut value = OsString::from(prefix);
        value.push(escape_commas(path));
        self.0.push(option.into());
        self.0.push(value);
    }
}

fn escape_commas(path: &Path) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut escaped = Vec::with_capacity(path.as_os_str().len());
    for &byte in path.as_os_str().as_bytes() {
        escaped.push(byte);
        if byte == b',' {
            escaped.push(b',');
        }
    }
    OsString::from_vec(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(spec: &VmSpec) -> Vec<String> {
        spec.qemu_arguments()
            .into_iter()
            .map(|w| w.into_string().unwrap())
            .collect()
    }

    fn contains_pair(words: &[String], option: &str, value: &str) -> bool {
        words
            .windows(2)
            .any(|pair| pair[0] == option && pair[1] == value)
    }

    #[test]
    fn pvh_boot_passes_kernel_module_and_command_line() {
        let spec = VmSpec::new(
            Boot::Pvh {
                kernel: "k.elf".into(),
                initial_image: Some("i.hfi".into()),
                command_line: "holdfast.after=stay".into(),
            },
            Accelerator::Tcg,
        );
        let words = words(&spec);
        assert!(contains_pair(&words, "-kernel", "k.elf"));
        assert!(contains_pair(&words, "-initrd", "i.hfi"));
        assert!(contains_pair(&words, "-append", "holdfast.after=stay"));
        assert!(contains_pair(&words, "-machine", "q35"));
        assert!(contains_pair(&words, "-accel", "tcg"));
        assert!(contains_pair(&words, "-cpu", TCG_CPU_MODEL));
        assert!(contains_pair(
            &words,
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04"
        ));
        assert!(
            words.iter().any(|w| w == "-nodefaults") && words.iter().any(|w| w == "-no-reboot")
        );
    }

    #[test]
    fn a_blkdebug_disk_is_raw_over_blkdebug_over_its_image() {
        let mut spec = VmSpec::new(Boot::Disk { boot_disk: "boot.img".into() }, Accelerator::Tcg);
        spec.disks = vec!["a.img".into(), "b,1.img".into()];
        spec.blkdebug = vec![(1, "rules,1.conf".into())];
        let words = words(&spec);
        assert!(contains_pair(&words, "-drive", "format=raw,if=none,id=disk0,werror=report,rerror=report,discard=unmap,detect-zeroes=unmap,file=a.img"));
        assert!(contains_pair(
            &words,
            "-drive",
            "format=raw,if=none,id=disk1,werror=report,rerror=report,discard=unmap,detect-zeroes=unmap,file.driver=blkdebug,file.config=rules,,1.conf,file.image.filename=b,,1.img"
        ));
        assert!(contains_pair(&words, "-device", "virtio-blk-pci,drive=disk1"));
    }

    #[test]
    fn disk_boot_has_no_kernel_option() {
        let mut spec = VmSpec::new(
            Boot::Disk {
                boot_disk: "boot.img".into(),
            },
            Accelerator::Kvm,
        );
        spec.disks = vec!["a,b.img".into(), "c.img".into()];
        spec.qmp_socket = Some("/run/q.sock".into());
        let words = words(&spec);
        assert!(!words.iter().any(|w| w == "-kernel" || w == "-append"));
        assert!(contains_pair(&words, "-cpu", "host,-arch-capabilities"));
        assert!(contains_pair(
            &words,
            "-drive",
            "format=raw,if=none,id=bootdisk,snapshot=on,file=boot.img"
        ));
        assert!(contains_pair(
            &words,
            "-drive",
            "format=raw,if=none,id=disk0,werror=report,rerror=report,discard=unmap,detect-zeroes=unmap,file=a,,b.img"
        ));
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-blk-pci,drive=disk0"
        ));
        assert!(contains_pair(
            &words,
            "-drive",
            "format=raw,if=none,id=disk1,werror=report,rerror=report,discard=unmap,detect-zeroes=unmap,file=c.img"
        ));
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-blk-pci,drive=disk1"
        ));
        assert!(contains_pair(
            &words,
            "-chardev",
            "socket,id=qmp,server=on,wait=off,path=/run/q.sock"
        ));
    }

    #[test]
    fn tp1_port_is_a_user_network_forward_on_loopback_only() {
        let mut spec = VmSpec::new(
            Boot::Disk {
                boot_disk: "b".into(),
            },
            Accelerator::Tcg,
        );
        spec.tp1_port = Some(47100);
        let words = words(&spec);
        assert!(contains_pair(
            &words,
            "-netdev",
            "user,id=net0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:47100-10.0.2.15:7100"
        ));
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,romfile="
        ));
    }

    #[test]
    fn net_connect_is_a_stream_client() {
        let mut spec = VmSpec::new(
            Boot::Disk {
                boot_disk: "b".into(),
            },
            Accelerator::Tcg,
        );
        spec.net_connect = Some("127.0.0.1:7000".parse().unwrap());
        let words = words(&spec);
        assert!(contains_pair(
            &words,
            "-netdev",
            "stream,id=net0,server=off,addr.type=inet,addr.host=127.0.0.1,addr.port=7000"
        ));
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,romfile="
        ));
    }

    #[test]
    fn a_pair_link_is_a_second_stream_client_with_the_link_mac() {
        let mut spec = VmSpec::new(
            Boot::Disk {
                boot_disk: "b".into(),
            },
            Accelerator::Tcg,
        );
        spec.tp1_port = Some(47100);
        spec.link_connect = Some(LinkConnect {
            connect: "127.0.0.1:41234".parse().unwrap(),
            node: 2,
        });
        let words = words(&spec);
        assert!(contains_pair(
            &words,
            "-netdev",
            "stream,id=link0,server=off,addr.type=inet,addr.host=127.0.0.1,addr.port=41234"
        ));
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-net-pci,netdev=link0,mac=52:54:00:48:46:02,romfile="
        ));
        // The network device stays: the kernel tells the two apart by MAC address.
        assert!(contains_pair(
            &words,
            "-device",
            "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,romfile="
        ));
    }

    #[test]
    fn net_connect_parses_host_and_port() {
        assert_eq!(
            "[::1]:80".parse::<NetConnect>().unwrap(),
            NetConnect {
                host: "::1".into(),
                port: 80
            }
        );
        assert_eq!(
            "[::1]:80".parse::<NetConnect>().unwrap().to_string(),
            "[::1]:80"
        );
        assert!("nohost".parse::<NetConnect>().is_err());
        assert!(":80".parse::<NetConnect>().is_err());
        assert!("h:99999".parse::<NetConnect>().is_err());
    }
}
