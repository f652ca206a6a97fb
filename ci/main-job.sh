#!/usr/bin/env bash
# The main job: brings up the TP1 appliance (the network service, the TP1 service and the
# admin service on a fresh 2 GiB store), mints an admin token, loads TP1 at scale 1, runs 30 s
# of closed-loop load from 8 clients (a progress line each second), prints the run's report,
# then checks the database against everything the run was told. Exits 0 only if the check
# passes. Everything it opens is on 127.0.0.1; the VM is stopped at the end, whatever happens.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash ci/setup.sh
./holdfast image build --manifest services/tp1-manifest.toml --out build/tp1-image

work="$(mktemp -d)"
name="holdfast-main-$$"
stop() {
    ./holdfast vm kill "$name" >/dev/null 2>&1 || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

./holdfast store format --size-mib 2048 "$work/store.img"
echo "main job: booting the appliance (console in $work/console.log)"
./holdfast run --name "$name" --memory-mib 512 --disk "$work/store.img" --tp1-port \
    --image-dir build/tp1-image >"$work/console.log" 2>"$work/run.err" &

# Ready when the TP1 service says so; the port QEMU forwards is on `holdfast run`'s stderr.
for _ in $(seq 1 360); do
    if grep -q '^tp1: serving on 7100' "$work/console.log"; then break; fi
    if ! kill -0 $! 2>/dev/null; then
        echo "main job: the appliance stopped before serving:" >&2
        cat "$work/run.err" "$work/console.log" >&2
        exit 1
    fi
    sleep 0.5
done
grep -q '^tp1: serving on 7100' "$work/console.log" || { echo "main job: no TP1 service after 180 s" >&2; exit 1; }
address="$(sed -n 's/^holdfast: tp1 port \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$work/run.err")"
echo "main job: the TP1 service is at $address"

token="$(./holdfast tp1 token "$name" operator --admin)"
target=(--address "$address" --token "$token" --state-dir "$work/ledger")
./holdfast tp1 load --scale 1 "${target[@]}"
./holdfast tp1 run --clients 8 --duration 30 "${target[@]}"
./holdfast tp1 check "${target[@]}"
