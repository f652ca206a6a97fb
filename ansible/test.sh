#!/usr/bin/env bash
# The Ansible roles' checks (ci/test.sh runs this): ansible-lint, then site.yml against
# localhost and the local libvirtd: once in check mode on a host without the appliance,
# once for real, once more (which must change nothing), and once more in check mode (which
# must report nothing to change). Then the exporter must see the VM under libvirt. Everything
# made here (the domain, the store's mirrors, monitoring, the state directory) is removed
# at the end, and also at the start, after a killed run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source_dir="$(cd .. && pwd)"

name=ansible-test
state_dir=/var/lib/holdfast/ansible-test
store_dir=/var/lib/holdfast/ansible-test-stores
uri=qemu:///system
work="$(mktemp -d)"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tp1_port="$(free_port)"
exporter_port="$(free_port)"
prometheus_port="$(free_port)"

teardown() {
    HOLDFAST_STATE_DIR="$state_dir" "$source_dir/holdfast" monitor down >/dev/null 2>&1 || true
    virsh -c "$uri" destroy "$name" >/dev/null 2>&1 || true
    virsh -c "$uri" undefine "$name" >/dev/null 2>&1 || true
    rm -rf "$state_dir" "$store_dir"
}
trap 'teardown; rm -rf "$work"' EXIT
teardown

echo "== ansible-lint"
ansible-lint --offline -q site.yml roles

variables=(
    -e "holdfast_source=$source_dir"
    -e "holdfast_state_dir=$state_dir"
    -e "holdfast_appliance_name=$name"
    -e "holdfast_appliance_store_dir=$store_dir"
    -e "holdfast_appliance_tp1_port=$tp1_port"
    -e "holdfast_monitoring_exporter_port=$exporter_port"
    -e "holdfast_monitoring_prometheus_port=$prometheus_port"
)
# Runs site.yml (extra arguments appended), keeps its output, prints its recap and the
# number of tasks it changed on fd 3.
play() {
    local label=$1
    shift
    local log="$work/$label.log" started=$SECONDS
    if ! ansible-playbook site.yml "${variables[@]}" "$@" >"$log" 2>&1; then
        cat "$log"
        echo "ansible/test.sh: the $label run failed" >&2
        exit 1
    fi
    local changed
    changed="$(sed -n 's/^localhost *:.* changed=\([0-9]*\).*/\1/p' "$log")"
    echo "$label: changed=$changed in $((SECONDS - started)) s" >&2
    echo "$changed" >&3
}

echo "== site.yml: check mode on a host without the appliance, two runs, check mode again"
changed="$(play check-first --check 3>&1 >/dev/null)"
if ((changed == 0)); then
    echo "ansible/test.sh: check mode on a host without the appliance reported nothing to change" >&2
    exit 1
fi
play first 3>/dev/null
changed="$(play second 3>&1 >/dev/null)"
if ((changed != 0)); then
    grep -B1 -A3 '^changed:' "$work/second.log" >&2 || true
    echo "ansible/test.sh: the second run changed $changed tasks: the roles are not idempotent" >&2
    exit 1
fi
changed="$(play check-last --check 3>&1 >/dev/null)"
if ((changed != 0)); then
    grep -B1 -A3 '^changed:' "$work/check-last.log" >&2 || true
    echo "ansible/test.sh: check mode after two runs would change $changed tasks" >&2
    exit 1
fi

echo "== the appliance under libvirt: ready, serving TP1 on 127.0.0.1:$tp1_port, seen by the exporter"
grep -q 'tp1: serving on 7100' "$state_dir/$name/console.log"
if [[ $(virsh -c "$uri" domstate "$name") != running ]]; then
    echo "ansible/test.sh: domain $name is not running" >&2
    exit 1
fi
python3 -c "import socket; socket.create_connection(('127.0.0.1', $tp1_port), timeout=5).close()"
# The exporter polls every 5 s: wait (bounded) for its first answer from the VM.
for _ in $(seq 30); do
    if curl -fsS "http://127.0.0.1:$exporter_port/metrics" | grep -q "^holdfast_exporter_vm_up{vm=\"$name\",role=\"standalone\"} 1"; then
        echo "ansible/test.sh: passed"
        exit 0
    fi
    sleep 1
done
curl -fsS "http://127.0.0.1:$exporter_port/metrics" | grep holdfast_exporter_vm_up >&2 || true
echo "ansible/test.sh: the exporter does not see $name answer" >&2
exit 1
