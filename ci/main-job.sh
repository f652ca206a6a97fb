#!/usr/bin/env bash
# The main job: brings up the TP1 appliance as a hot-standby pair (`holdfast pair up`: the
# primary on a fresh 2 GiB store, the standby given a full copy over the link), mints an
# admin token, loads TP1 at scale 1, runs 30 s of closed-loop load from 8 clients through
# the pair's endpoint (a progress line each second), prints the run's report, checks the
# database against everything the run was told, then runs one failover drill (the primary
# SIGKILLed under load, the standby promoted, the clients' outage measured, the new primary
# checked, the old one rejoined) and prints its report. Exits 0 only if both checks pass.
# Everything it opens is on 127.0.0.1; the pair is stopped at the end, whatever happens.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash ci/setup.sh
./holdfast image build --manifest services/tp1-manifest.toml --out build/tp1-image

work="$(mktemp -d)"
# The pair's stores, sockets and ledger live in the job's own state directory.
export HOLDFAST_STATE_DIR="$work/state"
name="main"
stop() {
    ./holdfast pair down "$name" >/dev/null 2>&1 || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

echo "main job: bringing up the pair (the supervisor's output in $work/pair.log)"
./holdfast pair up "$name" --memory-mib 512 --store-mib 2048 >"$work/pair.log" 2>&1 &
supervisor=$!

# Ready when the primary serves and the standby holds a whole copy.
wait_for() {
    local pattern="$1" what="$2"
    for _ in $(seq 1 600); do
        if grep -q "$pattern" "$work/pair.log"; then return 0; fi
        if ! kill -0 "$supervisor" 2>/dev/null; then
            echo "main job: the pair stopped before $what:" >&2
            tail -40 "$work/pair.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "main job: no $what after 300 s:" >&2
    tail -40 "$work/pair.log" >&2
    exit 1
}
wait_for "^pair $name: node 1 ($name-1) ready, primary" "a serving primary"
wait_for "^pair $name: node 2 ($name-2) standby: consistent" "a consistent standby"
address="$(sed -n "s/^pair $name: endpoint \(127\.0\.0\.1:[0-9]*\)$/\1/p" "$work/pair.log")"
echo "main job: the pair serves TP1 at $address"
./holdfast pair status "$name"

# The drill's ledger is the run's: its check covers every transaction of both.
token="$(./holdfast tp1 token "$name-1" operator --admin)"
target=(--address "$address" --token "$token" --state-dir "$HOLDFAST_STATE_DIR/pairs/$name/drill-ledger")
./holdfast tp1 load --scale 1 "${target[@]}"
./holdfast tp1 run --clients 8 --duration 30 "${target[@]}"
./holdfast tp1 check "${target[@]}"

echo "main job: one failover drill under load"
./holdfast pair drill "$name" --count 1 --kinds kill --clients 8
./holdfast pair status "$name"
