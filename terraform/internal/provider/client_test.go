package provider

import (
	"path/filepath"
	"strings"
	"testing"
)

// A libvirt socket nobody listens on is an error that says how to start the daemons.
func TestNoDaemonIsAnErrorNamingTheFix(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "libvirt-sock")
	_, err := newClient("qemu:///system?socket="+socket, "holdfast").connect()
	if err == nil {
		t.Fatal("connecting to a socket nobody listens on succeeded")
	}
	for _, want := range []string{"no libvirtd listens on " + socket, "virtlogd -d && libvirtd -d"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

// A holdfast_command that cannot be run says which setting to fix.
func TestAMissingHoldfastCommandNamesTheSetting(t *testing.T) {
	_, err := newClient(defaultURI, filepath.Join(t.TempDir(), "no-holdfast")).runHoldfast(t.Context(), "--version")
	if err == nil || !strings.Contains(err.Error(), "set the provider's holdfast_command") {
		t.Errorf("want an error naming holdfast_command, got %v", err)
	}
}
