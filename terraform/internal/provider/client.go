package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// client is the provider's connection to libvirtd, made on first use and shared by every
// resource, and the holdfast CLI it runs.
type client struct {
	uri             string
	holdfastCommand string

	mutex   sync.Mutex
	libvirt *libvirt.Libvirt
}

func newClient(uri, holdfastCommand string) *client {
	return &client{uri: uri, holdfastCommand: holdfastCommand}
}

// connect returns the connection, making it (again, if libvirtd went away) when needed.
// Its errors name the fix: the two that users hit are a daemon that is not running and a
// socket they may not open.
func (c *client) connect() (*libvirt.Libvirt, error) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	if c.libvirt != nil && c.libvirt.IsConnected() {
		return c.libvirt, nil
	}
	parsed, err := url.Parse(c.uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt URI %q does not parse: %w", c.uri, err)
	}
	connection, err := libvirt.ConnectToURI(parsed)
	if err != nil {
		return nil, explainConnectError(c.uri, parsed, err)
	}
	c.libvirt = connection
	return connection, nil
}

func explainConnectError(uri string, parsed *url.URL, err error) error {
	socket := parsed.Query().Get("socket")
	if socket == "" {
		socket = "/var/run/libvirt/libvirt-sock"
	}
	switch {
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || strings.Contains(err.Error(), "permission denied"):
		return fmt.Errorf("cannot connect to libvirt at %s: permission denied on %s. Fix: add this user to the "+
			"'libvirt' group (adduser $USER libvirt, then log in again), or run Terraform as root: %w", uri, socket, err)
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot connect to libvirt at %s: no libvirtd listens on %s. Fix: start it "+
			"(systemctl start libvirtd; where there is no systemd, virtlogd -d && libvirtd -d): %w", uri, socket, err)
	}
	return fmt.Errorf("cannot connect to libvirt at %s: %w", uri, err)
}

// pool finds a running storage pool, or says how to make one.
func (c *client) pool(name string) (*libvirt.Libvirt, libvirt.StoragePool, error) {
	l, err := c.connect()
	if err != nil {
		return nil, libvirt.StoragePool{}, err
	}
	pool, err := l.StoragePoolLookupByName(name)
	if err != nil {
		if libvirt.IsNotFound(err) || isLibvirtError(err, libvirt.ErrNoStoragePool) {
			return nil, pool, fmt.Errorf("libvirt at %s has no storage pool %q. Fix: create it, e.g. "+
				"virsh pool-define-as %s dir --target /var/lib/libvirt/%s && virsh pool-build %s && virsh pool-start %s && virsh pool-autostart %s "+
				"(or name an existing pool: virsh pool-list --all)", c.uri, name, name, name, name, name, name)
		}
		return nil, pool, fmt.Errorf("looking up storage pool %q: %w", name, err)
	}
	state, _, _, _, err := l.StoragePoolGetInfo(pool)
	if err != nil {
		return nil, pool, fmt.Errorf("storage pool %q: %w", name, err)
	}
	if libvirt.StoragePoolState(state) != libvirt.StoragePoolRunning {
		return nil, pool, fmt.Errorf("storage pool %q exists but is not active. Fix: virsh pool-start %s (and virsh pool-autostart %s)", name, name, name)
	}
	return l, pool, nil
}

func isLibvirtError(err error, code libvirt.ErrorNumber) bool {
	var libvirtError libvirt.Error
	return errors.As(err, &libvirtError) && libvirtError.Code == uint32(code)
}

// runHoldfast runs the holdfast CLI (a binary, or a source tree's ./holdfast) and returns
// its output, or an error that carries it.
func (c *client) runHoldfast(ctx context.Context, arguments ...string) (string, error) {
	return c.runHoldfastWith(ctx, nil, arguments...)
}

// runHoldfastWith is runHoldfast with environment variables added (NAME=VALUE).
func (c *client) runHoldfastWith(ctx context.Context, environment []string, arguments ...string) (string, error) {
	command := c.holdfastCommand
	if info, err := os.Stat(command); err == nil && info.IsDir() {
		command = filepath.Join(command, "holdfast")
	}
	if _, err := exec.LookPath(command); err != nil {
		return "", fmt.Errorf("the holdfast CLI %q cannot be run (%v). Fix: set the provider's holdfast_command "+
			"(or $%s) to the holdfast binary or to a Holdfast source tree", c.holdfastCommand, err, holdfastCommandVariable)
	}
	cmd := exec.CommandContext(ctx, command, arguments...)
	if len(environment) > 0 {
		cmd.Env = append(os.Environ(), environment...)
	}
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	// A process the command leaves running (`pair up --detach`'s supervisor) may hold its
	// output open: stop reading a little after the command itself has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil && !(errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success()) {
		return output.String(), fmt.Errorf("%s %s: %w\n%s", command, strings.Join(arguments, " "), err, strings.TrimSpace(output.String()))
	}
	return output.String(), nil
}
