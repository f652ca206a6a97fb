#!/usr/bin/env bash
# The project's tests: unit and integration tests (the latter boot the kernel under QEMU
# through the holdfast CLI), clippy on every crate, then the benchmarks (boot, services, store,
# tp1 and pair quick, micro in full), which print figures and never fail on their goals.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The install step is deploy/README.md's setup block, run as written (it calls ci/setup.sh),
# so that on a bare machine CI is the fresh host the deploy guide starts from; the block's
# export of the state directory ends with its shell, and the deploy tests set their own.
# setup.sh says "installing ..." for whatever the machine lacked.
bash -euo pipefail -c "$(deploy/readme-block.sh setup)"

# Each section's heading says when it started, so a slow run shows where its time went.
section() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

section "kernel layers: no import cycle among the kernel's modules, arch/ and drivers/ import nothing above them"
python3 ci/check-kernel-layers.py --self-test
python3 ci/check-kernel-layers.py

section "alert and recording rules: promtool check, then the fixtures (each alert firing and not)"
promtool check rules monitoring/rules/holdfast.rules.yml
promtool test rules monitoring/rules/holdfast.rules.test.yml
section "Grafana dashboards: the JSON is what monitoring/grafana/generate.py writes"
python3 monitoring/grafana/generate.py --check

section "cargo test"
# Two test threads: each integration test boots a guest under TCG, which takes a core, and
# more guests than cores make their timers late.
RUST_TEST_THREADS=2 cargo test

# tests/monitoring.rs leaves the picture of its pair under TP1 load (the dashboards drawn by
# `holdfast monitor snapshot` from its real Prometheus): the run's artifact to look at.
section "the dashboards' picture: target/monitoring-snapshot.png (and .html beside it)"
test -s target/monitoring-snapshot.png

section "holdfast exporter: what a scrape of ten VMs and five pairs costs (fails above 10 ms)"
cargo test -q -p holdfast --bin holdfast benchmark_a_scrape -- --nocapture

section "cargo clippy (host crates, then guest crates for the guest target)"
cargo clippy -q --all-targets -- -D warnings
cargo clippy -q --release --target x86_64-unknown-none -p holdfast-kernel -p holdfast-selftest -p holdfast-admin -p holdfast-net -p holdfast-tp1 -p holdfast-userlib -p holdfast-tp1-protocol -p holdfast-tp1-ledger -p holdfast-space-bank -p holdfast-bank-accounts -p holdfast-constructor -p holdfast-virtual-copy -p holdfast-meter-keeper -p holdfast-keysafe -p holdfast-keysafe-policy -- -D warnings

section "terraform provider: go vet, the examples' fmt -check and validate, acceptance tests against libvirtd"
bash terraform/test.sh

section "ansible: ansible-lint, site.yml against localhost and libvirtd (check mode, twice for idempotence, check mode)"
bash ansible/test.sh

section "store simulator: a campaign of seeds beyond the unit tests' (prints its crash points)"
cargo run -q --release -p holdfast-store-sim -- --campaign --seed 1000 --crash-points 50000 --jobs 2

section "holdfast bench boot --quick"
./holdfast image build
./holdfast bench boot --quick --accel tcg

# The micro benchmark's full run: its medians over three boots per guest, because a quick
# run's single boots swing by a third on a shared host and its goals are ratios.
section "holdfast bench micro (three boots per guest)"
./holdfast bench micro --accel tcg

# Issue 17's services: a constructor's process against fork and exec, a bank's page against
# mmap and first touch, a call through a forwarder against a direct one; one boot per guest
# (about 10 s of TCG, the guest crates already built above).
section "holdfast bench services --quick (reports its goals, never fails on them)"
./holdfast bench services --quick --accel tcg

section "holdfast bench store --quick (reports its goals, never fails on them)"
./holdfast bench store --quick --accel tcg

# TP1 against PostgreSQL 15 in a Debian guest under the same QEMU and on the host: 75 s to
# 2 min, plus 2 to 3.5 min the first time on a machine (or after build-image.sh changes) to
# build the guest's image from Debian's packages into ~/.cache/holdfast.
section "holdfast bench tp1 --quick (reports its goals, never fails on them)"
./holdfast bench tp1 --quick --accel tcg

# The pair: TP1 on the single appliance and on one pair in sync-durable, sync-received and
# async, the lag under that load, and a failover drill (SIGKILL of the primary under load);
# fails only if something breaks (a lost transaction, a pair that does not come up). 100 to
# 130 s on 2 cores under TCG.
section "holdfast bench pair --quick (reports its goals, never fails on them)"
./holdfast bench pair --quick --accel tcg

section "done"
