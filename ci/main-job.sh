#!/usr/bin/env bash
# Builds the appliance image and boots it: the kernel prints its self-test report on the
# serial console, which `holdfast run` copies here. Exits 0 only if the self-test passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash ci/setup.sh
./holdfast image build
./holdfast run
