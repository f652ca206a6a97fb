#!/usr/bin/env python3
"""Writes the Grafana dashboards in dashboards/ from the panel lists below (Python's standard
library only: run `python3 monitoring/grafana/generate.py`; `--check` fails if a file differs
from what it would write, which ci/test.sh runs). Every query names series `holdfast exporter`
serves or monitoring/rules records; tests/monitoring.rs runs each one against a real
Prometheus scraping a TP1 appliance and checks that it parses and (outside the pair
dashboard) returns data. The pair dashboard reads series only a pair serves (the
primary's replication series, by `vm`; the supervisor's roles, promotions and heartbeats, by
`pair`)."""

import json
import sys
from pathlib import Path

DATASOURCE = {"type": "prometheus", "uid": "holdfast-prometheus"}
VM = 'vm=~"$vm"'
PAIR = 'pair=~"$pair"'
# Grafana variables: name -> (label, the query that lists their values).
VARIABLES = {
    "vm": ("VM", "label_values(holdfast_exporter_vm_up, vm)"),
    "pair": ("Pair", "label_values(holdfast_pair_up, pair)"),
}


def panel(title, exprs, unit="short", kind="timeseries", legend="{{vm}}", description=""):
    """One panel: `exprs` is a list of PromQL strings or (PromQL, legend) pairs."""
    targets = []
    for index, expr in enumerate(exprs):
        expr, legend_format = expr if isinstance(expr, tuple) else (expr, legend)
        targets.append({"refId": chr(ord("A") + index), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend_format})
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }


def variable(name):
    label, definition = VARIABLES[name]
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": definition, "refId": name},
        "definition": definition,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        # "All" as `.*`, so that a series without the label (a pair's own series under the
        # VM variable) still matches.
        **({"allValue": ".*"} if name == "pair" else {}),
        "current": {"text": "All", "value": "$__all"},
    }


def dashboard(uid, title, description, panels, variables=("vm",)):
    """Lays the panels out two to a row, 12 columns by 8 rows each."""
    for index, one in enumerate(panels):
        one["id"] = index + 1
        one["gridPos"] = {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)}
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["holdfast"],
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "timezone": "utc",
        "templating": {"list": [variable(name) for name in variables]},
        "annotations": {"list": []},
        "panels": panels,
    }


OVERVIEW = dashboard(
    "holdfast-overview",
    "Holdfast: overview",
    "Health, TP1 throughput and latency, group commit.",
    [
        panel("VMs answering the exporter", [f"holdfast_exporter_vm_up{{{VM}}}", ('up{job="holdfast"}', "exporter")], kind="stat"),
        panel("Alerts firing", [('count(ALERTS{alertstate="firing"}) or vector(0)', "alerts firing")], kind="stat"),
        panel("TP1 transactions per second", [f"vm:holdfast_tp1_transactions:rate1m{{{VM}}}"], unit="reqps"),
        panel(
            "TP1 commit latency",
            [
                (f"vm:holdfast_tp1_commit_seconds:p99_5m{{{VM}}}", "p99 {{vm}}"),
                (f"histogram_quantile(0.5, sum by (vm, le) (rate(holdfast_tp1_commit_seconds_bucket{{{VM}}}[5m])))", "p50 {{vm}}"),
            ],
            unit="s",
        ),
        panel("TP1 errors per second by status", [(f"vm_code:holdfast_tp1_errors:rate5m{{{VM}}}", "{{vm}} {{code}}")], unit="reqps"),
        panel("TP1 connections open", [f"holdfast_tp1_connections_open{{{VM}}}"]),
        panel(
            "Transactions per journal write (group commit)",
            [f"holdfast_journal_commits_per_flush{{{VM}}}"],
            description="TP1 transactions made durable per journal flush since boot.",
        ),
        panel(
            "Journal commit time",
            [
                (f"histogram_quantile(0.99, sum by (vm, le) (rate(holdfast_journal_commit_seconds_bucket{{{VM}}}[5m])))", "p99 over 5 min {{vm}}"),
                (f"vm:holdfast_journal_commit_seconds:mean1m{{{VM}}}", "mean over 1 min {{vm}}"),
            ],
            unit="s",
            description="From a commit's request to its acknowledgement (the flush; on a pair, the standby's too).",
        ),
    ],
)

STORE = dashboard(
    "holdfast-store",
    "Holdfast: store",
    "Checkpoints, stabilization, the log, migration and mirrors.",
    [
        panel("Checkpoint generation", [f"holdfast_checkpoint_generation{{{VM}}}"]),
        panel(
            "Snapshot pause",
            [
                (f"histogram_quantile(0.99, sum by (vm, le) (rate(holdfast_checkpoint_snapshot_pause_seconds_bucket{{{VM}}}[5m])))", "p99 over 5 min {{vm}}"),
                (f"holdfast_checkpoint_snapshot_pause_last_seconds{{{VM}}}", "last {{vm}}"),
                (f"holdfast_checkpoint_snapshot_pause_seconds_max{{{VM}}}", "max since boot {{vm}}"),
            ],
            unit="s",
        ),
        panel(
            "Stabilization time against the interval",
            [
                (f"histogram_quantile(0.99, sum by (vm, le) (rate(holdfast_checkpoint_stabilization_seconds_bucket{{{VM}}}[5m])))", "p99 over 5 min {{vm}}"),
                (f"holdfast_checkpoint_stabilization_last_seconds{{{VM}}}", "last {{vm}}"),
                (f"holdfast_checkpoint_interval_seconds{{{VM}}}", "interval {{vm}}"),
            ],
            unit="s",
        ),
        panel(
            "Stabilization throughput",
            [
                (f"vm:holdfast_store_written_bytes:rate1m{{{VM}}}", "bytes {{vm}}"),
            ],
            unit="Bps",
        ),
        panel("Objects stabilized per second", [f"vm:holdfast_checkpoint_objects_written:rate1m{{{VM}}}"], unit="ops"),
        panel("Log fill", [f"holdfast_store_log_fill_ratio{{{VM}}}"], unit="percentunit"),
        panel("Migration backlog", [f"holdfast_migration_backlog_objects{{{VM}}}"]),
        panel(
            "Mirror state and repairs",
            [
                (f"holdfast_mirror_degraded{{{VM}}}", "degraded {{vm}}"),
                (f"increase(holdfast_mirror_repaired_blocks_total{{{VM}}}[5m])", "blocks repaired in 5 min {{vm}}"),
            ],
        ),
        panel(
            "Checkpoint failures",
            [
                (f"increase(holdfast_checkpoint_failures_total{{{VM}}}[5m])", "in 5 min {{vm}}"),
                (f"holdfast_checkpoint_failures_since_commit{{{VM}}}", "since the last commit {{vm}}"),
            ],
        ),
        panel(
            "Object cache: evictions and loads per second",
            [
                (f"rate(holdfast_evicted_pages_total{{{VM}}}[1m])", "pages evicted {{vm}}"),
                (f"rate(holdfast_loaded_nodes_total{{{VM}}}[1m])", "nodes loaded {{vm}}"),
                (f"rate(holdfast_loaded_pages_total{{{VM}}}[1m])", "pages loaded {{vm}}"),
            ],
        ),
    ],
)

PAIR_BOARD = dashboard(
    "holdfast-pair",
    "Holdfast: pair",
    "Roles, replication lag and promotions: the primary's kernel exports the replication series (by vm), the pair's supervisor the roles, promotions and heartbeats (by pair).",
    [
        panel(
            "Role",
            [(f"holdfast_pair_role{{{PAIR}}} == 1", "{{vm}} {{role}}")],
            kind="stat",
            description="Each node's role in its pair now (holdfast_pair_role is 1 for the current role, 0 for the others).",
        ),
        panel("Supervisors answering", [(f"holdfast_pair_up{{{PAIR}}}", "{{pair}}")], kind="stat"),
        panel(
            "Standby in step, pair degraded",
            [
                (f"holdfast_replication_standby_in_step{{{VM}}}", "in step {{vm}}"),
                (f"holdfast_replication_degraded{{{VM}}}", "degraded {{vm}}"),
            ],
            kind="stat",
        ),
        panel("Replication lag (time)", [f"holdfast_replication_lag_seconds{{{VM}}}"], unit="s"),
        panel("Replication lag (bytes)", [f"holdfast_replication_lag_bytes{{{VM}}}"], unit="bytes"),
        panel(
            "Promotions and term",
            [
                (f"increase(holdfast_pair_promotions_total{{{PAIR}}}[1h])", "promotions in 1 h {{pair}}"),
                (f"holdfast_pair_term{{{PAIR}}}", "term {{pair}}"),
            ],
        ),
        panel(
            "Heartbeats missed per minute",
            [(f"increase(holdfast_pair_heartbeats_missed_total{{{PAIR}}}[1m])", "{{vm}}")],
            description="Heartbeats come every 50 ms (1200 a minute); the supervisor counts those that did not come.",
        ),
        panel("Stream resent per minute", [f"increase(holdfast_replication_resent_messages_total{{{VM}}}[1m])"]),
    ],
    variables=("pair", "vm"),
)

DASHBOARDS = {"overview.json": OVERVIEW, "store.json": STORE, "pair.json": PAIR_BOARD}


def main():
    check = "--check" in sys.argv[1:]
    out = Path(__file__).resolve().parent / "dashboards"
    stale = []
    for name, board in DASHBOARDS.items():
        text = json.dumps(board, indent=2, sort_keys=True) + "\n"
        path = out / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        sys.exit("generate.py: out of date (run python3 monitoring/grafana/generate.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
