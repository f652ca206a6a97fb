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
trap 'rm -rf "$work"' EXIT

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
