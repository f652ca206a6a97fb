package provider

// What the pair resource and data source share: the `holdfast pair` verbs they run, the
// supervisor's status they read, and where a pair keeps its things.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// pairStatus is what `holdfast pair status NAME --json` prints: the supervisor's answer
// (hypervisor-glue/holdfast/src/commands/pair/supervisor.rs, `status`). Only what the
// provider uses is here.
type pairStatus struct {
	Name        string `json:"name"`
	Endpoint    string `json:"endpoint"`
	Mode        string `json:"mode"`
	LagBytesMax int64  `json:"lag_bytes_max"`
	Term        int64  `json:"term"`
	Primary     int64  `json:"primary"`
	Promotions  int64  `json:"promotions"`
	// The libvirt URI the VMs run under (`pair up --libvirt`), null for QEMU children.
	Libvirt *string `json:"libvirt"`
	Nodes   []struct {
		Node     int64  `json:"node"`
		VM       string `json:"vm"`
		Role     string `json:"role"`
		State    string `json:"state"`
		LagBytes *int64 `json:"lag_bytes"`
		// The node's libvirt domain (holdfast-pair-NAME-N-HASH) under --libvirt.
		Domain *string `json:"domain"`
	} `json:"nodes"`
}

// domains are the pair's libvirt domains as its supervisor names them (none without
// --libvirt).
func (s *pairStatus) domains() []string {
	var names []string
	for _, node := range s.Nodes {
		if node.Domain != nil && *node.Domain != "" {
			names = append(names, *node.Domain)
		}
	}
	return names
}

// node returns the first node whose role is role ("primary", "standby").
func (s *pairStatus) node(role string) (vm, state string, ok bool) {
	for _, node := range s.Nodes {
		if node.Role == role {
			return node.VM, node.State, true
		}
	}
	return "", "", false
}

// pairRecord is the part of pairs/NAME/pair.json (state.rs) that says what a pair is while
// no supervisor runs: its mode and its stores' size.
type pairRecord struct {
	Mode        string `json:"mode"`
	LagBytesMax int64  `json:"lag_bytes_max"`
	StoreMiB    int64  `json:"store_mib"`
}

// stateDirOf is the holdfast CLI's state directory for a pair whose state_dir is dir
// (empty: the CLI's default, hypervisor-glue/holdfast/src/paths.rs).
func stateDirOf(dir string) string {
	if dir != "" {
		return dir
	}
	if dir := os.Getenv("HOLDFAST_STATE_DIR"); dir != "" {
		return dir
	}
	if dir := os.Getenv("XDG_STATE_HOME"); dir != "" {
		return filepath.Join(dir, "holdfast")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "holdfast")
}

func pairDirOf(stateDir, name string) string {
	return filepath.Join(stateDirOf(stateDir), "pairs", name)
}

func readPairRecord(stateDir, name string) (*pairRecord, error) {
	text, err := os.ReadFile(filepath.Join(pairDirOf(stateDir, name), "pair.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var record pairRecord
	if err := json.Unmarshal(text, &record); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(pairDirOf(stateDir, name), "pair.json"), err)
	}
	return &record, nil
}

// runPair runs `holdfast pair ...` with the pair's state directory.
func (c *client) runPair(ctx context.Context, stateDir string, arguments ...string) (string, error) {
	var environment []string
	if stateDir != "" {
		environment = append(environment, "HOLDFAST_STATE_DIR="+stateDir)
	}
	return c.runHoldfastWith(ctx, environment, append([]string{"pair"}, arguments...)...)
}

// errPairDown: no supervisor answers for the pair (the CLI's "is not up").
var errPairDown = errors.New("the pair is not up")

// pairStatusOf asks the pair's supervisor; errPairDown when none answers.
func (c *client) pairStatusOf(ctx context.Context, stateDir, name string) (*pairStatus, error) {
	output, err := c.runPair(ctx, stateDir, "status", name, "--json")
	if err != nil {
		if strings.Contains(output, "is not up") {
			return nil, errPairDown
		}
		return nil, err
	}
	var status pairStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(output)), &status); err != nil {
		return nil, fmt.Errorf("holdfast pair status %s --json printed what is not its status (%v):\n%s", name, err, output)
	}
	return &status, nil
}

// waitForPair polls the supervisor until the primary serves and, when standby is true, the
// standby holds a whole copy ("consistent"), at most until deadline.
func (c *client) waitForPair(ctx context.Context, stateDir, name string, standby bool, deadline time.Time) (*pairStatus, error) {
	for {
		status, err := c.pairStatusOf(ctx, stateDir, name)
		if err != nil && !errors.Is(err, errPairDown) {
			return nil, err
		}
		var primaryState, standbyState string
		if status != nil {
			_, primaryState, _ = status.node("primary")
			_, standbyState, _ = status.node("standby")
			if strings.HasPrefix(primaryState, "serving") && (!standby || standbyState == "consistent") {
				return status, nil
			}
		}
		if time.Now().After(deadline) {
			if status == nil {
				return nil, fmt.Errorf("pair %s: no supervisor answered in time", name)
			}
			return nil, fmt.Errorf("pair %s: not ready in time (primary %q, standby %q; the standby must be \"consistent\")", name, primaryState, standbyState)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitForPairDown waits until no supervisor answers for the pair, at most until deadline.
func (c *client) waitForPairDown(ctx context.Context, stateDir, name string, deadline time.Time) error {
	socket := filepath.Join(pairDirOf(stateDir, name), "supervisor.sock")
	for {
		_, err := c.pairStatusOf(ctx, stateDir, name)
		if errors.Is(err, errPairDown) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pair %s: its supervisor still answers on %s after `holdfast pair down`", name, socket)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// libvirtDomains looks the named domains up at uri and returns those that are running and
// those libvirt knows at all (defined or running).
func libvirtDomains(uri string, names []string) (running, known []string, err error) {
	parsed, err := url.Parse(uri)
	if err != nil {
		return nil, nil, fmt.Errorf("libvirt URI %q does not parse: %w", uri, err)
	}
	l, err := libvirt.ConnectToURI(parsed)
	if err != nil {
		return nil, nil, explainConnectError(uri, parsed, err)
	}
	defer func() { _ = l.Disconnect() }()
	for _, name := range names {
		domain, err := l.DomainLookupByName(name)
		if libvirt.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		known = append(known, name)
		if active, err := isActive(l, domain); err != nil {
			return nil, nil, err
		} else if active {
			running = append(running, name)
		}
	}
	return running, known, nil
}
