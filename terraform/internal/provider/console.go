package provider

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// waitForReadyLine waits until a line of the console log contains readyLine, returning an
// error with the log's tail when stillRunning says the VM stopped or the time limit
// passes. This is how the provider knows an appliance is up: Holdfast says so on its
// console (the kernel's HOLDFAST-READY, or a service's own line such as the TP1 service's
// "tp1: serving on 7100"). Upstream's wait for a DHCP lease (#246) can never end for a VM
// on QEMU's user network, which has no lease libvirt sees.
func waitForReadyLine(ctx context.Context, logPath, readyLine string, limit time.Duration, stillRunning func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		text, _ := os.ReadFile(logPath)
		for _, line := range strings.Split(string(text), "\n") {
			if strings.Contains(line, readyLine) {
				return nil
			}
		}
		running, err := stillRunning()
		if err != nil {
			return err
		}
		if !running {
			return fmt.Errorf("the VM stopped before its console said %q; the end of its console log (%s):\n%s", readyLine, logPath, tail(string(text), 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the console did not say %q within %d s (ready_timeout_seconds); the end of its console log (%s):\n%s",
				readyLine, int(limit.Seconds()), logPath, tail(string(text), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func tail(text string, lines int) string {
	all := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// controlRequest sends one request to the admin service on the VM's control channel (COM2)
// and returns its `ok` line, as `holdfast checkpoint` does (services/admin/src/main.rs):
// a line out, lines back until one that starts with `ok` or `error`.
//
// A line holding only the byte 0x18 (CAN) goes first. A client that hung up mid-request
// leaves the part the guest read to be glued to the front of the next request
// ("checkpoint stcheckpoint status"). The admin service drops a line holding 0x18 whole,
// unanswered, so the fragment ends there and is never carried out. An admin service from
// older images answers that line "unknown request", which a well-formed request never
// gets, and it is skipped.
func controlRequest(socket, request string, deadline time.Time, expected func(reply string) bool) (string, error) {
	connection, err := net.DialTimeout("unix", socket, time.Until(deadline))
	if err != nil {
		return "", err
	}
	defer connection.Close()
	if err := connection.SetDeadline(deadline); err != nil {
		return "", err
	}
	if _, err := connection.Write([]byte("\x18\n" + request + "\n")); err != nil {
		return "", err
	}
	reader := bufio.NewReader(connection)
	// Three replies at most: the 0x18 line's, one left by a client that gave up (which
	// expected tells from ours), then ours.
	for replies := 0; replies < 3; {
		line, err := reader.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("no answer to %q: %w (is the admin service in the appliance's system?)", request, err)
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "error unknown request"):
			replies++
		case strings.HasPrefix(line, "ok") && expected(line):
			return line, nil
		case strings.HasPrefix(line, "ok"):
			replies++
		case strings.HasPrefix(line, "error"):
			return "", fmt.Errorf("%s: %s", request, line)
		}
	}
	return "", fmt.Errorf("%s: the admin service does not know this request", request)
}

// checkpointGeneration is the generation in a `checkpoint status` reply
// ("ok generation 12 interval-ms 5000 ...").
func checkpointGeneration(socket string, deadline time.Time) (uint64, error) {
	reply, err := controlRequest(socket, "checkpoint status", deadline, func(reply string) bool {
		return strings.HasPrefix(reply, "ok generation ")
	})
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(reply)
	for index := 0; index+1 < len(fields); index++ {
		if fields[index] == "generation" {
			return strconv.ParseUint(fields[index+1], 10, 64)
		}
	}
	return 0, fmt.Errorf("checkpoint status: no generation in %q", reply)
}

// checkpointAndWait takes a checkpoint and waits until it is committed (the generation
// moves past the one before), so that stopping the VM afterwards loses nothing.
func checkpointAndWait(ctx context.Context, socket string, deadline time.Time) error {
	before, err := checkpointGeneration(socket, deadline)
	if err != nil {
		return err
	}
	if _, err := controlRequest(socket, "checkpoint now", deadline, func(reply string) bool { return reply == "ok" }); err != nil {
		return err
	}
	for {
		generation, err := checkpointGeneration(socket, deadline)
		if err != nil {
			return err
		}
		if generation > before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the checkpoint after generation %d was not committed in time", before)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
