package provider

// The check behind the upstream provider's most common complaint (terraform-provider-libvirt
// #1163: "Permission denied" when QEMU opens a kernel or disk): QEMU under qemu:///system
// runs as an unprivileged user, and libvirt gives that user the files it names (dynamic
// ownership) but not the directories above them. A kernel under /root or a private build
// directory fails when QEMU starts, with an error that names neither the user nor the
// directory. This check says both, and the fix, before anything is defined.

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const qemuConfigurationFile = "/etc/libvirt/qemu.conf"

// qemuUser is the user QEMU runs as under qemu:///system: qemu.conf's `user`, else the
// distribution's default (Debian's libvirt-qemu, Fedora's qemu), else nil (root: nothing to
// check).
func qemuUser() *user.User {
	name := ""
	if file, err := os.Open(qemuConfigurationFile); err == nil {
		scanner := bufio.NewScanner(file)
		for scanner.Scan() {
			key, value, found := strings.Cut(scanner.Text(), "=")
			if found && strings.TrimSpace(key) == "user" {
				name = strings.Trim(strings.TrimSpace(value), `"`)
			}
		}
		file.Close()
	}
	candidates := []string{"libvirt-qemu", "qemu"}
	if name != "" {
		candidates = []string{strings.TrimPrefix(name, "+")}
	}
	for _, candidate := range candidates {
		var found *user.User
		var err error
		if uid, convertErr := strconv.Atoi(candidate); convertErr == nil {
			found, err = user.LookupId(strconv.Itoa(uid))
		} else {
			found, err = user.Lookup(candidate)
		}
		if err == nil {
			if found.Uid == "0" {
				return nil
			}
			return found
		}
	}
	return nil
}

// checkQemuCanReach says, for a local libvirt, which directory keeps QEMU's user from
// reaching path, and how to fix it; nil when it can (or QEMU runs as root).
func checkQemuCanReach(path, what string) error {
	qemu := qemuUser()
	if qemu == nil {
		return nil
	}
	uid, _ := strconv.Atoi(qemu.Uid)
	groups := map[uint32]bool{}
	if ids, err := qemu.GroupIds(); err == nil {
		for _, id := range ids {
			if gid, err := strconv.Atoi(id); err == nil {
				groups[uint32(gid)] = true
			}
		}
	}
	absolute, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// Every directory in the way, outermost first, so that one fix clears them all.
	var blocking []string
	for directory := filepath.Dir(absolute); ; directory = filepath.Dir(directory) {
		info, err := os.Stat(directory)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		stat := info.Sys().(*syscall.Stat_t)
		mode := info.Mode().Perm()
		searchable := mode&0o001 != 0 ||
			(stat.Uid == uint32(uid) && mode&0o100 != 0) ||
			(groups[stat.Gid] && mode&0o010 != 0)
		if !searchable {
			owner := strconv.Itoa(int(stat.Uid))
			if found, err := user.LookupId(owner); err == nil {
				owner = found.Username
			}
			blocking = append([]string{fmt.Sprintf("%s (mode %04o, owner %s)", directory, mode, owner)}, blocking...)
		}
		if directory == "/" {
			break
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	var names []string
	for _, each := range blocking {
		names = append(names, each[:strings.Index(each, " (mode")])
	}
	return fmt.Errorf("permission denied ahead: QEMU runs as user %q here and cannot reach %s %s: %s "+
		"not let it through. Fix: chmod o+x %s, or keep the file somewhere QEMU can read (e.g. /var/lib/holdfast)",
		qemu.Username, what, path, strings.Join(blocking, ", ")+map[bool]string{true: " does", false: " do"}[len(blocking) == 1],
		strings.Join(names, " "))
}
