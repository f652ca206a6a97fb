#!/usr/bin/env bash
# Installs what building, testing and benchmarking Holdfast needs. Idempotent: anything
# already there is left alone, so a second run costs a few seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian packages: QEMU; GRUB and the ISO tools grub-mkrescue uses (the GRUB boot disk);
# the Linux kernel and busybox the benchmarks compare against; gcc and glibc's libc.a
# (libc6-dev, which gcc only recommends) for the micro benchmark's static Linux program;
# PostgreSQL 15, the TP1 peer (tests/tp1_postgres.rs starts private clusters with its
# initdb and pg_ctl from /usr/lib/postgresql/15/bin; the package's own cluster is not used);
# mmdebstrap and e2fsprogs, with which bench/peers/postgres-guest/build-image.sh builds the
# Debian guest with PostgreSQL 15 that `holdfast bench tp1` compares against (about two
# minutes, once: the image is cached in ~/.cache/holdfast).
# Prometheus and promtool: the alert rules' tests (monitoring/rules) and the exporter's test
# against a real Prometheus (the package's own service is not used); headless Chromium for
# the picture `holdfast monitor snapshot` takes of the dashboards. libvirt, whose daemons
# the Terraform provider's acceptance tests and tests/libvirt.rs (`holdfast run --libvirt`)
# start themselves (no systemd here); virsh (libvirt-clients) is tests/libvirt.rs's witness
# that a domain is gone; libvirt-dev and pkg-config, which the `virt` crate (libvirt's Rust
# bindings, hypervisor-glue/libvirt) builds and links against, as pip's libvirt-python
# for Ansible does.
packages=(
    qemu-system-x86 qemu-utils
    grub-pc-bin grub-common xorriso mtools
    linux-image-cloud-amd64 busybox-static
    gcc libc6-dev
    postgresql-15
    mmdebstrap e2fsprogs
    prometheus chromium-headless-shell
    libvirt-daemon-system libvirt-clients libvirt-dev pkg-config
)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
if ((${#missing[@]})); then
    echo "ci/setup: installing ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Rust: the toolchain pinned in rust-toolchain.toml, with the guest target and clippy.
if ! command -v rustup >/dev/null; then
    echo "ci/setup: rustup not found: install Rust with rustup (https://rustup.rs)" >&2
    exit 1
fi
toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
if ! rustup toolchain list | grep -q "^$toolchain"; then
    rustup toolchain install "$toolchain" --profile minimal --component clippy,rustfmt
fi
if ! rustup target list --installed --toolchain "$toolchain" | grep -qx x86_64-unknown-none; then
    rustup target add --toolchain "$toolchain" x86_64-unknown-none
fi
if ! rustup component list --installed --toolchain "$toolchain" | grep -q '^clippy'; then
    rustup component add --toolchain "$toolchain" clippy
fi
# The Terraform provider (terraform/, terraform/test.sh): Go from the machine (Debian's is
# too old for terraform-plugin-framework); the provider's Go modules; and a terraform
# binary: when neither terraform nor tofu is on PATH, OpenTofu built from its Go module
# source.
if ! command -v go >/dev/null; then
    echo "ci/setup: go not found: the Terraform provider needs Go 1.25 or newer (https://go.dev/dl)" >&2
    exit 1
fi
(cd terraform && go mod download)
if ! command -v terraform >/dev/null && ! command -v tofu >/dev/null; then
    opentofu_version=v1.12.6
    echo "ci/setup: no terraform or tofu on PATH: building OpenTofu $opentofu_version from its Go module source (minutes, once)"
    # Built inside its own module, not by `go install`, which refuses a module with replace
    # directives (OpenTofu replaces hcl with its fork).
    opentofu_dir="$(go mod download -json "github.com/opentofu/opentofu@$opentofu_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    opentofu_binary="$(mktemp -d)/tofu"
    (cd "$opentofu_dir" && go build -o "$opentofu_binary" ./cmd/tofu)
    "${sudo[@]}" install -m 0755 "$opentofu_binary" /usr/local/bin/tofu
fi

# Ansible (ansible/, ansible/test.sh): pip's `ansible` package (ansible-core with the
# community.libvirt collection; Galaxy is not reachable from here), ansible-lint, and the
# libvirt-python and lxml that community.libvirt's modules import.
if ! python3 -m pip show -q ansible ansible-lint libvirt-python lxml >/dev/null 2>&1; then
    echo "ci/setup: installing ansible, ansible-lint, libvirt-python and lxml with pip"
    python3 -m pip install -q ansible ansible-lint libvirt-python lxml
fi

echo "ci/setup: ready (Rust $toolchain, $(qemu-system-x86_64 --version | head -1))"
