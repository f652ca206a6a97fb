package provider

// The libvirt domain XML of a Holdfast appliance, with our own encoding/xml structs
// (libvirt's libvirtxml module is not available here). It gives QEMU what `holdfast run`
// gives it (hypervisor-glue/qemu/src/command_line.rs): q35, PVH direct kernel boot of the
// kernel `holdfast image build` makes with its initial image as the module, the TCG CPU
// model the kernel needs, the store's disks as virtio-blk on bus 0 in order, the serial
// console to a file, the control channel (COM2) on a unix socket, isa-debug-exit, and the
// TP1 port forwarded from 127.0.0.1 only.

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	qemuNamespace     = "http://libvirt.org/schemas/domain/qemu/1.0"
	holdfastNamespace = "https://holdfast.invalid/terraform/appliance/1"

	// The guest's address on QEMU's user network and its TP1 port (command_line.rs's
	// GUEST_ADDRESS and GUEST_TP1_PORT), and the MAC of its virtio-net device.
	guestAddress    = "10.0.2.15"
	guestTP1Port    = 7100
	guestMACAddress = "52:54:00:12:34:56"

	// command_line.rs's TCG_CPU_MODEL: qemu64 plus SMEP and SMAP (the kernel's W^X needs
	// them), the x86-64-v2 features (SSE4.2's crc32 checks the initial image) and RDRAND
	// (the admin service's tokens).
	tcgCPUModel = "qemu64"

	kernelFileName       = "holdfast-kernel.elf"
	initialImageFileName = "initial.hfi"

	// The isa-debug-exit port (holdfast_abi::exit::DEBUG_EXIT_PORT).
	debugExitPort = 0xf4

	// The first PCI slot of bus 0 the store's disks take; the network device comes after
	// them. Why bus 0: the kernel looks for virtio devices on bus 0 only
	// (guest-kernel/kernel/src/drivers/pci.rs), and libvirt would put them behind
	// pcie-root-ports on q35 unless told where.
	firstDiskSlot = 0x03
)

var tcgCPUFeatures = []string{"ssse3", "sse4.1", "sse4.2", "popcnt", "smep", "smap", "rdrand"}

// applianceSpec is everything that makes one Holdfast VM under libvirt.
type applianceSpec struct {
	Name          string
	UUID          string // empty for a new domain; a redefinition must name the one it has
	DomainType    string // "qemu" (TCG) or "kvm"
	MemoryMiB     int64
	ImageDir      string
	KernelAppend  string
	Disks         []string
	TP1Port       int64 // 0: no network device
	ConsoleLog    string
	ControlSocket string
	// What only the provider uses, kept in the domain's metadata so that an import finds it.
	ReadyLine              string
	ReadyTimeoutSeconds    int64
	ShutdownTimeoutSeconds int64
	StateDir               string
	Running                bool // not in the XML: whether libvirt runs the domain
}

func (s applianceSpec) kernelPath() string { return filepath.Join(s.ImageDir, kernelFileName) }
func (s applianceSpec) initialImagePath() string {
	return filepath.Join(s.ImageDir, initialImageFileName)
}

// restartDiffers says whether the VM must be restarted to go from s to other: anything
// QEMU was started with. The provider-only settings change without a restart.
func (s applianceSpec) restartDiffers(other applianceSpec) bool {
	return s.DomainType != other.DomainType || s.MemoryMiB != other.MemoryMiB ||
		s.ImageDir != other.ImageDir || s.KernelAppend != other.KernelAppend ||
		s.TP1Port != other.TP1Port || strings.Join(s.Disks, "\n") != strings.Join(other.Disks, "\n")
}

type domainXML struct {
	XMLName xml.Name `xml:"domain"`
	Type    string   `xml:"type,attr"`
	// Written as a literal attribute: encoding/xml cannot declare a prefix itself.
	QemuNamespaceDecl string `xml:"xmlns:qemu,attr,omitempty"`
	Name              string `xml:"name"`
	UUID              string `xml:"uuid,omitempty"`
	Metadata          *domainMetadata
	Memory            domainMemory `xml:"memory"`
	VCPU              int          `xml:"vcpu"`
	OS                domainOS     `xml:"os"`
	CPU               *domainCPU   `xml:"cpu"`
	OnPoweroff        string       `xml:"on_poweroff"`
	OnReboot          string       `xml:"on_reboot"`
	OnCrash           string       `xml:"on_crash"`
	Devices           domainDevices
	// Marshalled with the literal prefix; read back through the namespace (the field
	// below), since encoding/xml resolves prefixes when it parses.
	QemuCommandline     *qemuCommandline     `xml:"qemu:commandline,omitempty"`
	QemuCommandlineRead *qemuCommandlineRead `xml:"http://libvirt.org/schemas/domain/qemu/1.0 commandline,omitempty"`
}

type domainMetadata struct {
	XMLName   xml.Name               `xml:"metadata"`
	Appliance *applianceMetadata     `xml:"holdfast:appliance,omitempty"`
	Read      *applianceMetadataRead `xml:"https://holdfast.invalid/terraform/appliance/1 appliance,omitempty"`
}

type applianceMetadata struct {
	NamespaceDecl          string `xml:"xmlns:holdfast,attr"`
	ReadyLine              string `xml:"holdfast:ready-line"`
	ReadyTimeoutSeconds    int64  `xml:"holdfast:ready-timeout-seconds"`
	ShutdownTimeoutSeconds int64  `xml:"holdfast:shutdown-timeout-seconds"`
	StateDir               string `xml:"holdfast:state-dir"`
	ImageDir               string `xml:"holdfast:image-dir"`
}

type applianceMetadataRead struct {
	ReadyLine              string `xml:"https://holdfast.invalid/terraform/appliance/1 ready-line"`
	ReadyTimeoutSeconds    int64  `xml:"https://holdfast.invalid/terraform/appliance/1 ready-timeout-seconds"`
	ShutdownTimeoutSeconds int64  `xml:"https://holdfast.invalid/terraform/appliance/1 shutdown-timeout-seconds"`
	StateDir               string `xml:"https://holdfast.invalid/terraform/appliance/1 state-dir"`
	ImageDir               string `xml:"https://holdfast.invalid/terraform/appliance/1 image-dir"`
}

type domainMemory struct {
	Unit  string `xml:"unit,attr"`
	Value int64  `xml:",chardata"`
}

type domainOS struct {
	Type    domainOSType `xml:"type"`
	Kernel  string       `xml:"kernel"`
	Initrd  string       `xml:"initrd,omitempty"`
	Cmdline string       `xml:"cmdline,omitempty"`
}

type domainOSType struct {
	Arch    string `xml:"arch,attr"`
	Machine string `xml:"machine,attr"`
	Value   string `xml:",chardata"`
}

type domainCPU struct {
	Mode     string          `xml:"mode,attr"`
	Match    string          `xml:"match,attr,omitempty"`
	Check    string          `xml:"check,attr,omitempty"`
	Model    *domainCPUModel `xml:"model"`
	Features []domainFeature `xml:"feature"`
}

type domainCPUModel struct {
	Fallback string `xml:"fallback,attr,omitempty"`
	Value    string `xml:",chardata"`
}

type domainFeature struct {
	Policy string `xml:"policy,attr"`
	Name   string `xml:"name,attr"`
}

type domainDevices struct {
	XMLName     xml.Name           `xml:"devices"`
	Disks       []domainDisk       `xml:"disk"`
	Controllers []domainController `xml:"controller"`
	Serials     []domainSerial     `xml:"serial"`
	Memballoon  *domainMemballoon  `xml:"memballoon"`
}

type domainDisk struct {
	Type    string            `xml:"type,attr"`
	Device  string            `xml:"device,attr"`
	Driver  domainDiskDriver  `xml:"driver"`
	Source  domainDiskSource  `xml:"source"`
	Target  domainDiskTarget  `xml:"target"`
	Address *domainPCIAddress `xml:"address"`
}

type domainDiskDriver struct {
	Name         string `xml:"name,attr"`
	Type         string `xml:"type,attr"`
	ErrorPolicy  string `xml:"error_policy,attr,omitempty"`
	RerrorPolicy string `xml:"rerror_policy,attr,omitempty"`
}

type domainDiskSource struct {
	File string `xml:"file,attr"`
}

type domainDiskTarget struct {
	Dev string `xml:"dev,attr"`
	Bus string `xml:"bus,attr"`
}

type domainPCIAddress struct {
	Type     string `xml:"type,attr"`
	Domain   string `xml:"domain,attr"`
	Bus      string `xml:"bus,attr"`
	Slot     string `xml:"slot,attr"`
	Function string `xml:"function,attr"`
}

type domainController struct {
	Type  string `xml:"type,attr"`
	Index *int   `xml:"index,attr"`
	Model string `xml:"model,attr,omitempty"`
}

type domainSerial struct {
	Type   string             `xml:"type,attr"`
	Source domainSerialSource `xml:"source"`
	Target domainSerialTarget `xml:"target"`
}

type domainSerialSource struct {
	Path   string `xml:"path,attr"`
	Mode   string `xml:"mode,attr,omitempty"`
	Append string `xml:"append,attr,omitempty"`
}

type domainSerialTarget struct {
	Port int `xml:"port,attr"`
}

type domainMemballoon struct {
	Model string `xml:"model,attr"`
}

type qemuCommandline struct {
	Args []qemuArg `xml:"qemu:arg"`
}

type qemuArg struct {
	Value string `xml:"value,attr"`
}

type qemuCommandlineRead struct {
	Args []qemuArgRead `xml:"http://libvirt.org/schemas/domain/qemu/1.0 arg"`
}

type qemuArgRead struct {
	Value string `xml:"value,attr"`
}

func pciSlot(slot int) *domainPCIAddress {
	return &domainPCIAddress{Type: "pci", Domain: "0x0000", Bus: "0x00", Slot: fmt.Sprintf("0x%02x", slot), Function: "0x0"}
}

// netdevArgument is QEMU's user network with the TP1 port forwarded from 127.0.0.1 only;
// restrict=on keeps the guest from reaching anything but the forward (command_line.rs).
func netdevArgument(port int64) string {
	return fmt.Sprintf("user,id=hfnet0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:%d-%s:%d",
		port, guestAddress, guestTP1Port)
}

// DomainXML is the libvirt domain definition of the appliance.
func (s applianceSpec) DomainXML() (string, error) {
	domain := domainXML{
		Type:              s.DomainType,
		QemuNamespaceDecl: qemuNamespace,
		Name:              s.Name,
		UUID:              s.UUID,
		Metadata: &domainMetadata{Appliance: &applianceMetadata{
			NamespaceDecl:          holdfastNamespace,
			ReadyLine:              s.ReadyLine,
			ReadyTimeoutSeconds:    s.ReadyTimeoutSeconds,
			ShutdownTimeoutSeconds: s.ShutdownTimeoutSeconds,
			StateDir:               s.StateDir,
			ImageDir:               s.ImageDir,
		}},
		Memory: domainMemory{Unit: "MiB", Value: s.MemoryMiB},
		VCPU:   1,
		OS: domainOS{
			Type:    domainOSType{Arch: "x86_64", Machine: "q35", Value: "hvm"},
			Kernel:  s.kernelPath(),
			Initrd:  s.initialImagePath(),
			Cmdline: s.KernelAppend,
		},
		// A guest reset or crash ends the domain, as `holdfast run`'s -no-reboot does,
		// rather than boot it again behind the operator's back.
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
	}
	if s.DomainType == "qemu" {
		cpu := &domainCPU{Mode: "custom", Match: "exact", Check: "none", Model: &domainCPUModel{Fallback: "forbid", Value: tcgCPUModel}}
		for _, feature := range tcgCPUFeatures {
			cpu.Features = append(cpu.Features, domainFeature{Policy: "require", Name: feature})
		}
		domain.CPU = cpu
	} else {
		// The host's CPU; command_line.rs also drops arch-capabilities for QEMU 7.2 on AMD.
		domain.CPU = &domainCPU{Mode: "host-passthrough", Check: "none",
			Features: []domainFeature{{Policy: "disable", Name: "arch-capabilities"}}}
	}
	if len(s.Disks) > 20 {
		return "", fmt.Errorf("%d disks: at most 20 fit on PCI bus 0 beside the other devices", len(s.Disks))
	}
	for index, path := range s.Disks {
		domain.Devices.Disks = append(domain.Devices.Disks, domainDisk{
			Type:   "file",
			Device: "disk",
			// A host error is reported to the guest, which marks that mirror failed and
			// goes on with the other, rather than pausing the VM (command_line.rs).
			Driver:  domainDiskDriver{Name: "qemu", Type: "raw", ErrorPolicy: "report", RerrorPolicy: "report"},
			Source:  domainDiskSource{File: path},
			Target:  domainDiskTarget{Dev: "vd" + string(rune('a'+index)), Bus: "virtio"},
			Address: pciSlot(firstDiskSlot + index),
		})
	}
	zero := 0
	// No USB controller and no balloon: the kernel's PCI probe must see only the store's
	// disks and the network device (QEMU's -nodefaults, which libvirt passes, does not
	// stop libvirt adding these two).
	domain.Devices.Controllers = []domainController{{Type: "usb", Index: &zero, Model: "none"}}
	domain.Devices.Memballoon = &domainMemballoon{Model: "none"}
	domain.Devices.Serials = []domainSerial{
		{Type: "file", Source: domainSerialSource{Path: s.ConsoleLog, Append: "off"}, Target: domainSerialTarget{Port: 0}},
		// COM2 is the control channel to the admin service (`holdfast checkpoint`, `holdfast
		// vm counters`): the same socket name `holdfast run` uses, so that with
		// HOLDFAST_STATE_DIR set to state_dir those verbs reach this VM too.
		{Type: "unix", Source: domainSerialSource{Mode: "bind", Path: s.ControlSocket}, Target: domainSerialTarget{Port: 1}},
	}
	args := []string{"-device", fmt.Sprintf("isa-debug-exit,iobase=%#x,iosize=0x04", debugExitPort)}
	if s.TP1Port != 0 {
		// Through qemu:commandline because libvirt 9's <interface type='user'> forwards ports
		// only with the passt backend, and its slirp one cannot bind the forward to
		// 127.0.0.1 or set restrict=on. The host side is 127.0.0.1 only; libvirt's NAT
		// 'default' network is never used.
		args = append(args, "-netdev", netdevArgument(s.TP1Port), "-device",
			fmt.Sprintf("virtio-net-pci,netdev=hfnet0,mac=%s,romfile=,bus=pcie.0,addr=%#x", guestMACAddress, firstDiskSlot+len(s.Disks)))
	}
	domain.QemuCommandline = &qemuCommandline{}
	for _, arg := range args {
		domain.QemuCommandline.Args = append(domain.QemuCommandline.Args, qemuArg{Value: arg})
	}
	text, err := xml.MarshalIndent(domain, "", "  ")
	if err != nil {
		return "", err
	}
	return string(text), nil
}

// parseDomainXML reads back what DomainXML wrote (as libvirt returns it), for Read and
// import.
func parseDomainXML(text string) (applianceSpec, error) {
	var domain domainXML
	if err := xml.Unmarshal([]byte(text), &domain); err != nil {
		return applianceSpec{}, fmt.Errorf("the domain's XML does not parse: %w", err)
	}
	spec := applianceSpec{Name: domain.Name, DomainType: domain.Type, KernelAppend: domain.OS.Cmdline}
	switch domain.Memory.Unit {
	case "KiB", "":
		spec.MemoryMiB = domain.Memory.Value / 1024
	case "MiB":
		spec.MemoryMiB = domain.Memory.Value
	default:
		return spec, fmt.Errorf("the domain's memory is in unit %q", domain.Memory.Unit)
	}
	if domain.Metadata == nil || domain.Metadata.Read == nil {
		return spec, fmt.Errorf("domain %q is not a Holdfast appliance: it has no holdfast metadata", domain.Name)
	}
	metadata := domain.Metadata.Read
	spec.ReadyLine = metadata.ReadyLine
	spec.ReadyTimeoutSeconds = metadata.ReadyTimeoutSeconds
	spec.ShutdownTimeoutSeconds = metadata.ShutdownTimeoutSeconds
	spec.StateDir = metadata.StateDir
	spec.ImageDir = metadata.ImageDir
	if filepath.Dir(domain.OS.Kernel) != filepath.Clean(spec.ImageDir) {
		return spec, fmt.Errorf("domain %q boots %s, not the kernel of its image directory %s", domain.Name, domain.OS.Kernel, spec.ImageDir)
	}
	for _, disk := range domain.Devices.Disks {
		spec.Disks = append(spec.Disks, disk.Source.File)
	}
	for _, serial := range domain.Devices.Serials {
		switch serial.Target.Port {
		case 0:
			spec.ConsoleLog = serial.Source.Path
		case 1:
			spec.ControlSocket = serial.Source.Path
		}
	}
	if domain.QemuCommandlineRead != nil {
		for _, arg := range domain.QemuCommandlineRead.Args {
			if rest, ok := strings.CutPrefix(arg.Value, "user,id=hfnet0,"); ok {
				_, forward, found := strings.Cut(rest, "hostfwd=tcp:127.0.0.1:")
				port, _, _ := strings.Cut(forward, "-")
				number, err := strconv.ParseInt(port, 10, 64)
				if !found || err != nil {
					return spec, fmt.Errorf("domain %q forwards its TP1 port as %q, not from 127.0.0.1", domain.Name, arg.Value)
				}
				spec.TP1Port = number
			}
		}
	}
	return spec, nil
}
