#!/usr/bin/env bash
# Builds the PostgreSQL peer of `holdfast bench tp1`: a Debian 12 guest with PostgreSQL 15
# from Debian's packages, booted by QEMU straight from its kernel and initrd.
#
#   build-image.sh OUT_DIR [MIRROR]
#
# (the security updates from $HOLDFAST_DEBIAN_SECURITY_MIRROR, else deb.debian.org)
#
# Writes into OUT_DIR (made, must not exist yet or be empty):
#   rootfs.img   raw ext4 file system (the guest's /dev/vda, sparse, 4 GiB: room for
#                scale 10 and its WAL); the bench boots a fresh copy of it every run
#   vmlinuz      the guest's kernel (Debian's linux-image-cloud-amd64, as the host's peers)
#   initrd.img   its initramfs (initramfs-tools, which loads virtio-blk and mounts /dev/vda)
#   packages.txt the installed packages and versions, for the record
#
# The guest's PID 1 is /sbin/holdfast-pg-init (below), not systemd: it mounts what
# PostgreSQL needs, configures the network QEMU's user-mode networking expects
# (10.0.2.15/24, gateway 10.0.2.2), starts PostgreSQL and prints `PG-GUEST-READY` on the
# serial console when it accepts connections. PostgreSQL runs with fsync=on,
# synchronous_commit=on and full_page_writes=on (durable commits, as the TP1 service's),
# listens on 5432 inside the guest and trusts only 10.0.2.2, the address QEMU gives
# connections forwarded from the host (the bench forwards 127.0.0.1:PORT only).
#
# Needs root (mmdebstrap's root mode, chroot), mmdebstrap and e2fsprogs (ci/setup.sh
# installs them) and a reachable Debian mirror (deb.debian.org unless MIRROR is given).
# Takes a few minutes, mostly downloading and unpacking; the bench caches the result keyed
# by this script's content, so changing the script rebuilds the image.
set -euo pipefail

out_dir=${1:?usage: build-image.sh OUT_DIR [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
security_mirror=${HOLDFAST_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
suite=bookworm
image_size=4G

if [[ $(id -u) -ne 0 ]]; then
    # mmdebstrap's root mode and chroot need root: as ci/setup.sh does, through sudo if it
    # needs no password; the files it makes are left readable by everyone.
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo -n HOLDFAST_DEBIAN_SECURITY_MIRROR="$security_mirror" bash "$0" "$@"
    fi
    echo "build-image.sh: needs root (mmdebstrap's root mode and chroot), or sudo without a password" >&2
    exit 1
fi
for tool in mmdebstrap mkfs.ext4; do
    if ! command -v "$tool" >/dev/null; then
        echo "build-image.sh: $tool not found: run ci/setup.sh (Debian packages mmdebstrap, e2fsprogs)" >&2
        exit 1
    fi
done

mkdir -p "$out_dir"
if [[ -n $(ls -A "$out_dir") ]]; then
    echo "build-image.sh: $out_dir is not empty" >&2
    exit 1
fi
root=$(mktemp -d "${TMPDIR:-/tmp}/holdfast-pg-guest-root.XXXXXX")
cleanup() { rm -rf "$root"; }
trap cleanup EXIT

# The guest's PID 1.
read -r -d '' init_script <<'INIT' || true
#!/bin/sh
# PID 1 of the PostgreSQL peer guest (bench/peers/postgres-guest/build-image.sh).
# No systemd: nothing runs beside PostgreSQL, as nothing runs beside the TP1 service in
# the Holdfast guest.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# The initramfs moved /proc, /sys and /dev here already; mount what it did not.
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -o remount,rw /
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
# PostgreSQL's dynamic shared memory (dynamic_shared_memory_type = posix) lives here.
mkdir -p /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mkdir -p /run/postgresql
chown postgres:postgres /run/postgresql
chmod 2775 /run/postgresql
# No systemd, so no poweroff(8): the kernel's SysRq power-off (QEMU then exits).
power_off() {
    sync
    echo o > /proc/sysrq-trigger
    sleep 60
}
fail() {
    echo "PG-GUEST-FAILED $*" > /dev/console
    power_off
}
modprobe virtio_net || fail "modprobe virtio_net"
ip link set lo up
ip link set eth0 up || fail "no eth0"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
runuser -u postgres -- /usr/lib/postgresql/15/bin/postgres \
    -c config_file=/etc/postgresql/15/main/postgresql.conf > /dev/console 2>&1 &
postgres_pid=$!
tries=0
until runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_isready -q -h /run/postgresql; do
    kill -0 "$postgres_pid" 2>/dev/null || fail "postgres exited"
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || fail "postgres not ready after 300 s"
    sleep 0.5
done
echo "PG-GUEST-READY" > /dev/console
wait "$postgres_pid"
echo "PG-GUEST-STOPPED" > /dev/console
power_off
INIT

# PostgreSQL's settings beyond the package's defaults (conf.d is read after
# postgresql.conf). Memory suits a small guest: the bench gives it the Holdfast guest's
# memory; 64 clients each have a backend.
read -r -d '' postgres_conf <<'CONF' || true
# bench/peers/postgres-guest/build-image.sh: durable commits, reachable from the host's
# forwarded port only.
listen_addresses = '*'
port = 5432
max_connections = 80
fsync = on
synchronous_commit = on
full_page_writes = on
wal_sync_method = fdatasync
shared_buffers = 32MB
logging_collector = off
log_destination = 'stderr'
CONF

read -r -d '' hba_conf <<'HBA' || true
# bench/peers/postgres-guest/build-image.sh: the guest's own socket, and connections QEMU's
# user-mode networking forwards from the host's 127.0.0.1 (they come from 10.0.2.2).
local all all trust
host all all 10.0.2.2/32 trust
HBA

echo "build-image.sh: bootstrapping Debian $suite with PostgreSQL 15 into $root"
# minbase: Essential packages and apt; docs, man pages and locales left out (smaller image,
# quicker copy per run). The kernel package's postinst builds the initrd (initramfs-tools,
# MODULES=most: virtio-blk and ext4 included) inside the chroot.
mmdebstrap --mode=root --variant=minbase \
    --include=postgresql-15,linux-image-cloud-amd64,initramfs-tools,iproute2,kmod \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='chroot "$1" dpkg-query -W -f="\${Package} \${Version}\n" > "$1/packages.txt"' \
    "$suite" "$root" "deb $mirror $suite main" "deb $mirror $suite-updates main" \
    "deb ${security_mirror} $suite-security main"

# Debian's postgresql-common made the main cluster (/var/lib/postgresql/15/main, its
# configuration in /etc/postgresql/15/main, including conf.d). Our settings and access rules.
conf_dir="$root/etc/postgresql/15/main"
if [[ ! -f $conf_dir/postgresql.conf ]]; then
    echo "build-image.sh: the package made no cluster ($conf_dir/postgresql.conf missing)" >&2
    exit 1
fi
printf '%s\n' "$postgres_conf" > "$conf_dir/conf.d/holdfast-bench.conf"
printf '%s\n' "$hba_conf" > "$conf_dir/pg_hba.conf"
chroot "$root" chown postgres:postgres /etc/postgresql/15/main/pg_hba.conf \
    /etc/postgresql/15/main/conf.d/holdfast-bench.conf
printf '%s\n' "$init_script" > "$root/sbin/holdfast-pg-init"
chmod 755 "$root/sbin/holdfast-pg-init"
echo "holdfast-pg-guest" > "$root/etc/hostname"
printf '/dev/vda / ext4 defaults 0 1\n' > "$root/etc/fstab"

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd="$root/boot/initrd.img-${kernel##*/vmlinuz-}"
if [[ ! -f $initrd ]]; then
    echo "build-image.sh: no initrd beside $kernel" >&2
    exit 1
fi
cp "$kernel" "$out_dir/vmlinuz"
cp "$initrd" "$out_dir/initrd.img"
mv "$root/packages.txt" "$out_dir/packages.txt"
# The kernel and initrd are booted from outside; the image need not carry them twice.
rm -f "$root"/boot/vmlinuz-* "$root"/boot/initrd.img-*
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

echo "build-image.sh: making the ext4 file system ($image_size, sparse)"
rm -f "$out_dir/rootfs.img"
truncate -s "$image_size" "$out_dir/rootfs.img"
# -d fills the file system from the directory without mounting it (no loop device).
mkfs.ext4 -q -F -L holdfast-pg -d "$root" "$out_dir/rootfs.img"
echo "build-image.sh: done: $(du -sh --apparent-size "$out_dir/rootfs.img" | cut -f1) image ($(du -sh "$out_dir/rootfs.img" | cut -f1) used), kernel ${kernel##*/}"
