package provider

import (
	"os"
	"strings"
	"testing"
)

func testSpec() applianceSpec {
	return applianceSpec{
		Name: "hf-unit", DomainType: "qemu", MemoryMiB: 256, ImageDir: "/images/persist",
		KernelAppend: "holdfast.checkpoint-interval-ms=2000",
		Disks:        []string{"/pool/a-mirror0.img", "/pool/a-mirror1.img"},
		TP1Port:      47100, ConsoleLog: "/state/hf-unit/console.log", ControlSocket: "/state/hf-unit/control.sock",
		ReadyLine: "HOLDFAST-READY", ReadyTimeoutSeconds: 120, ShutdownTimeoutSeconds: 30, StateDir: "/state",
	}
}

func TestDomainXMLReadsBackWhatItWrote(t *testing.T) {
	spec := testSpec()
	text, err := spec.DomainXML()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("HOLDFAST_PRINT_XML") != "" {
		t.Log(text)
	}
	for _, want := range []string{
		`<domain type="qemu" xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0">`,
		`<kernel>/images/persist/holdfast-kernel.elf</kernel>`,
		`<initrd>/images/persist/initial.hfi</initrd>`,
		`<feature policy="require" name="smap"></feature>`,
		`<address type="pci" domain="0x0000" bus="0x00" slot="0x04" function="0x0"></address>`,
		`<qemu:arg value="user,id=hfnet0,restrict=on,net=10.0.2.0/24,host=10.0.2.2,hostfwd=tcp:127.0.0.1:47100-10.0.2.15:7100"></qemu:arg>`,
		`<qemu:arg value="virtio-net-pci,netdev=hfnet0,mac=52:54:00:12:34:56,romfile=,bus=pcie.0,addr=0x5"></qemu:arg>`,
		`<qemu:arg value="isa-debug-exit,iobase=0xf4,iosize=0x04"></qemu:arg>`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the domain XML lacks %s:\n%s", want, text)
		}
	}
	back, err := parseDomainXML(text)
	if err != nil {
		t.Fatal(err)
	}
	if back.restartDiffers(spec) || back.ReadyLine != spec.ReadyLine || back.StateDir != spec.StateDir ||
		back.ConsoleLog != spec.ConsoleLog || back.ControlSocket != spec.ControlSocket ||
		back.ShutdownTimeoutSeconds != 30 || back.ReadyTimeoutSeconds != 120 {
		t.Errorf("read back %+v, wrote %+v", back, spec)
	}
}

func TestADomainWithoutHoldfastMetadataIsRefused(t *testing.T) {
	_, err := parseDomainXML(`<domain type="kvm"><name>other</name><memory unit="KiB">1048576</memory></domain>`)
	if err == nil || !strings.Contains(err.Error(), "not a Holdfast appliance") {
		t.Errorf("want a refusal naming the domain as not an appliance, got %v", err)
	}
}

func TestAKVMDomainRunsTheHostCPU(t *testing.T) {
	spec := testSpec()
	spec.DomainType = "kvm"
	text, err := spec.DomainXML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<domain type="kvm"`, `<cpu mode="host-passthrough" check="none">`,
		`<feature policy="disable" name="arch-capabilities"></feature>`} {
		if !strings.Contains(text, want) {
			t.Errorf("the kvm domain XML lacks %s", want)
		}
	}
	if strings.Contains(text, "<model") {
		t.Errorf("the kvm domain XML names a CPU model:\n%s", text)
	}
}
