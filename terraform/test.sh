#!/usr/bin/env bash
# The Terraform provider's checks (ci/test.sh runs this): go vet and the unit tests, the
# examples (terraform fmt -check, and validate against the provider built here through a
# dev_overrides CLI configuration: no registry), then the acceptance tests (TF_ACC=1)
# against the local libvirtd, which they start when none runs, with real Holdfast guests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# $HOLDFAST_TERRAFORM, else terraform, else tofu (which ci/setup.sh builds when neither is here).
terraform_binary="${HOLDFAST_TERRAFORM:-$(command -v terraform || command -v tofu || true)}"
if [[ -z $terraform_binary ]]; then
    echo "terraform/test.sh: no terraform or tofu on PATH: run ci/setup.sh" >&2
    exit 1
fi
work="$(mktemp -d)"
deploy_cleanup() { :; }
trap 'deploy_cleanup; rm -rf "$work"' EXIT

echo "== terraform provider: go vet, unit tests"
go vet ./...
go test -count=1 ./...

echo "== terraform examples: fmt -check, validate"
"$terraform_binary" fmt -check -recursive -diff examples
go build -o "$work/bin/terraform-provider-holdfast" .
cat > "$work/terraformrc" <<CONFIG
provider_installation {
  dev_overrides {
    "holdfast/holdfast" = "$work/bin"
  }
  direct {}
}
CONFIG
# The per-resource examples are fragments of one configuration: validate them together.
mkdir "$work/resources"
cp examples/provider/provider.tf "$work/resources/"
for example in examples/resources/*/resource.tf examples/data-sources/*/data-source.tf; do
    cp "$example" "$work/resources/$(basename "$(dirname "$example")").tf"
done
cat > "$work/resources/versions.tf" <<'CONFIG'
terraform {
  required_providers {
    holdfast = {
      source = "holdfast/holdfast"
    }
  }
}
CONFIG
for module in examples/tp1-appliance examples/tp1-pair "$work/resources"; do
    echo "terraform validate $module"
    (cd "$module" && TF_CLI_CONFIG_FILE="$work/terraformrc" "$terraform_binary" validate -no-color >/dev/null)
done

echo "== terraform acceptance tests (TF_ACC=1, the local libvirtd, guests under TCG)"
# The images the tests boot: the self-test system, the persistent one and the TP1 appliance
# (the pair's; incremental).
(cd .. && ./holdfast image build >/dev/null 2>&1 &&
    ./holdfast image build --manifest services/persist-manifest.toml --out build/persist >/dev/null 2>&1 &&
    ./holdfast image build --manifest services/tp1-manifest.toml --out build/tp1-image >/dev/null 2>&1)
# An empty CLI configuration: a TF_CLI_CONFIG_FILE naming a missing file makes the binary
# print a warning that OpenTofu puts where the test harness reads its version.
: >"$work/empty.tfrc"
# OpenTofu knows the in-process provider's legacy address only on its own registry host.
provider_host=registry.terraform.io
if [[ $("$terraform_binary" version 2>&1) == *OpenTofu* ]]; then provider_host=registry.opentofu.org; fi
if ! TF_ACC=1 TF_ACC_TERRAFORM_PATH="$terraform_binary" TF_ACC_PROVIDER_HOST="$provider_host" TF_CLI_CONFIG_FILE="$work/empty.tfrc" go test -count=1 -timeout 10m -v -run '^TestAcc' ./internal/provider \
    >"$work/acceptance.log" 2>&1; then
    cat "$work/acceptance.log"
    exit 1
fi
grep -E '^(--- |ok)' "$work/acceptance.log"

echo "== deploy/README.md's Terraform blocks: the example's monitored pair, TP1 through it, destroy"
# The blocks run as written, from the repository's root. Around them, only the tools' own
# environment: the test's state directory (HOLDFAST_STATE_DIR, and TF_VAR_state_dir for the
# example), free ports (TF_VAR_*), a CLI configuration of its own (TF_CLI_CONFIG_FILE, which
# the README's printf writes), and, where only OpenTofu is installed, `terraform` running it.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
deploy_state="$work/deploy-state"
mkdir -p "$deploy_state"
deploy_environment=(
    HOLDFAST_STATE_DIR="$deploy_state" TF_VAR_state_dir="$deploy_state" TF_CLI_CONFIG_FILE="$work/deploy.tfrc"
    TF_VAR_tp1_port="$(free_port)" TF_VAR_exporter_port="$(free_port)" TF_VAR_prometheus_port="$(free_port)"
)
prelude=""
if [[ $(basename "$terraform_binary") != terraform ]]; then prelude="terraform() { \"$terraform_binary\" \"\$@\"; }"$'\n'; fi
readme_block="$(cd .. && pwd)/deploy/readme-block.sh"
# Runs README block $1 in directory $2 (default the repository's root), where the README's
# reader would be.
run_block() {
    local block
    block="$("$readme_block" "$1")"
    (cd "${2:-..}" && env "${deploy_environment[@]}" bash -euo pipefail -c "$prelude$block")
}
deploy_cleanup() {
    # Whatever the blocks left if they failed half-way: destroy, then the CLI's own stops.
    run_block terraform-destroy examples/tp1-pair >/dev/null 2>&1 || true
    HOLDFAST_STATE_DIR="$deploy_state" ../holdfast monitor down >/dev/null 2>&1 || true
    HOLDFAST_STATE_DIR="$deploy_state" ../holdfast pair down tp1 >/dev/null 2>&1 || true
    rm -f examples/tp1-pair/terraform.tfstate examples/tp1-pair/terraform.tfstate.backup
}
started=$SECONDS
if ! run_block terraform >"$work/deploy.log" 2>&1; then
    cat "$work/deploy.log"
    echo "terraform/test.sh: deploy/README.md's Terraform block failed" >&2
    exit 1
fi
applied=$((SECONDS - started))
grep -E '^(check passed|holdfast_exporter_vm_up)' "$work/deploy.log"
if ! grep -q 'holdfast_exporter_vm_up{vm="tp1-1",role="primary"} 1' "$work/deploy.log"; then
    echo "terraform/test.sh: the exporter did not see the pair's primary answer" >&2
    exit 1
fi
if ! run_block terraform-destroy examples/tp1-pair >"$work/destroy.log" 2>&1; then
    cat "$work/destroy.log"
    echo "terraform/test.sh: deploy/README.md's terraform destroy failed" >&2
    exit 1
fi
if HOLDFAST_STATE_DIR="$deploy_state" ../holdfast pair status tp1 >/dev/null 2>&1 || [[ -e $deploy_state/pairs/tp1 ]]; then
    echo "terraform/test.sh: the pair is still there after terraform destroy" >&2
    exit 1
fi
echo "deploy/README.md's Terraform blocks: applied, loaded, checked in $applied s, destroyed in $((SECONDS - started - applied)) s"
