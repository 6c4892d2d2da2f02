"""The Grafana dashboard (docs/dashboards/dblog-grafana.json) and the alert rules in
docs/operations.md query only metrics the capture and the landing job export, under the names
the metrics tables document (a renamed metric would leave a panel or an alert silently empty)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

DOCS = Path(__file__).resolve().parents[2] / "docs"
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")
LABELS = {"dblog_source_id", "dblog_dump_id", "dblog_table"}  # OpenTelemetry's attributes, as labels


def documented() -> tuple[set[str], set[str]]:
    """(Prometheus names in the metrics tables, those of histograms)."""
    names, histograms = set(), set()
    for line in (DOCS / "operations.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[2].startswith("`dblog_"):
            name = cells[2].strip("`")
            names.add(name)
            if cells[3].startswith("histogram"):
                histograms.add(name)
    return names, histograms


def queried(expr: str) -> set[str]:
    return set(re.findall(r"\b(dblog_[a-z0-9_]+)", expr)) - LABELS


def check(names: set[str]) -> list[str]:
    known, histograms = documented()
    missing = []
    for name in names:
        base = next((name[: -len(s)] for s in HISTOGRAM_SERIES if name.endswith(s)), None)
        if name not in known and base not in histograms:
            missing.append(name)
    return sorted(missing)


def test_every_dashboard_query_names_a_documented_metric():
    dashboard = json.loads((DOCS / "dashboards" / "dblog-grafana.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set().union(*map(queried, exprs))
    assert len(used) >= 15 and not check(used), check(used)
    histogram_queries = [e for e in exprs if "histogram_quantile" in e]
    assert histogram_queries and all("_bucket" in e and "by (le" in e for e in histogram_queries)


def test_every_alert_rule_names_a_documented_metric():
    text = (DOCS / "operations.md").read_text()
    block = text.split("## Alert rules to start from", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    rules = yaml.safe_load(block)
    used = set().union(*(queried(r["expr"]) for r in rules))
    assert {r["alert"] for r in rules} >= {"DBLogCaptureLag", "DBLogSlotRetention", "DBLogOutputDown"}
    assert not check(used), check(used)


def test_a_misspelt_metric_is_caught():
    assert check({"dblog_capture_lag_second", "dblog_capture_output_commit_duration_seconds_bucket"}) == [
        "dblog_capture_lag_second"
    ]
