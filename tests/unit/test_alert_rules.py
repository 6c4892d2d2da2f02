"""The alert rules (docs/alerts/dblog-rules.yml, shown in docs/operations.md) run through
Prometheus's own rule tester, ``promtool test rules`` (Debian's prometheus package, installed by
scripts/promtool): each alert fires on series past its threshold for its ``for`` time, under
the labels of the series (the source, dump or table it names), and stays quiet just below the
threshold or before the ``for`` time is up. A rule whose expression, threshold or duration no
longer matches its documented reason fails here. The Grafana dashboard's queries go through
the same tool's parser."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "alerts" / "dblog-rules.yml"

SRC = 'dblog_source_id="shop"'

# alert -> (input series, [(eval time, firing?)]), with 1-minute samples.
CASES: dict[str, tuple[list[tuple[str, str]], list[tuple[str, bool]]]] = {
    # report age over 2 minutes, at once
    "DBLogCaptureStuck": (
        [(f"dblog_capture_report_age_seconds{{{SRC}}}", "0 60 120 180")],
        [("2m", False), ("3m", True)],
    ),
    # a scrape target down for 5 minutes
    "DBLogCaptureDown": ([('up{job="dblog", instance="t:9464"}', "1 0x10")], [("5m", False), ("6m", True)]),
    # lag over 5 minutes for 10 minutes
    "DBLogCaptureLag": ([(f"dblog_capture_lag_seconds{{{SRC}}}", "400x20")], [("9m", False), ("10m", True)]),
    "DBLogSlotRetention": (
        [(f"dblog_capture_log_retained_bytes{{{SRC}}}", "49e9 51e9")],
        [("0m", False), ("1m", True)],
    ),
    "DBLogSourceWarning": ([(f"dblog_capture_warnings{{{SRC}}}", "1x20")], [("14m", False), ("15m", True)]),
    "DBLogOutputDown": (
        [(f"dblog_capture_output_outage_seconds{{{SRC}}}", "0 120 180")],
        [("1m", False), ("2m", True)],
    ),
    # four takeovers within the hour (three are not flapping)
    "DBLogLeaseFlapping": ([(f"dblog_capture_leader_epoch{{{SRC}}}", "1 2 3 4 5")], [("3m", False), ("4m", True)]),
    # a dump delivering nothing for 30 minutes and not paused
    "DBLogDumpStalled": (
        [
            (f'dblog_dump_rate_per_second{{{SRC}, dblog_dump_id="d1"}}', "0x40"),
            (f'dblog_dump_paused{{{SRC}, dblog_dump_id="d1"}}', "0x40"),
            (f'dblog_dump_rate_per_second{{{SRC}, dblog_dump_id="d2"}}', "0x40"),  # paused: no alert
            (f'dblog_dump_paused{{{SRC}, dblog_dump_id="d2"}}', "1x40"),
        ],
        [("29m", False), ("30m", True)],
    ),
    "DBLogMirrorStopped": (
        [(f'dblog_landing_stopped{{{SRC}, dblog_table="public.t"}}', "0 1")],
        [("0m", False), ("1m", True)],
    ),
    # the newest landed commit at t=0: over an hour old from 1h on, firing 15 minutes later
    "DBLogMirrorStale": (
        [(f'dblog_landing_commit_newest_seconds{{{SRC}, dblog_table="public.t"}}', "0x100")],
        [("74m", False), ("76m", True)],
    ),
}


def labels_of(series: str) -> dict[str, str]:
    inner = series[series.index("{") + 1 : series.rindex("}")]
    return {k.strip(): v.strip().strip('"') for k, v in (p.split("=", 1) for p in inner.split(","))}


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    out = subprocess.run([str(ROOT / "scripts" / "promtool")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def rule_test(rules: Path) -> dict:
    tests = []
    for alert, (series, evals) in CASES.items():
        fired = labels_of(series[0][0])
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [
                    {"eval_time": t, "alertname": alert, "exp_alerts": [{"exp_labels": fired}] if firing else []}
                    for t, firing in evals
                ],
            }
        )
    return {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}


def run_promtool(tmp_path: Path, rules: Path) -> subprocess.CompletedProcess:
    spec = tmp_path / "dblog_rules_test.yml"
    spec.write_text(yaml.safe_dump(rule_test(rules), sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", str(spec)], capture_output=True, text=True)


def test_every_rule_fires_past_its_threshold_and_for_time_and_not_before(tmp_path):
    rules = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert sorted(rules) == sorted(CASES), "each rule needs a case here"
    done = run_promtool(tmp_path, RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_tester_catches_a_changed_threshold(tmp_path):
    """The same cases against a rule file with one threshold moved fail: the test can fail."""
    moved = tmp_path / "moved.yml"
    moved.write_text(RULES.read_text().replace("dblog_capture_lag_seconds > 300", "dblog_capture_lag_seconds > 500"))
    done = run_promtool(tmp_path, moved)
    assert done.returncode != 0 and "DBLogCaptureLag" in done.stdout + done.stderr


def test_operations_md_shows_the_rule_file():
    """docs/operations.md's block and the rule file hold the same rules."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Alert rules to start from") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```", section.index("```yaml") + 7)]
    shown = yaml.safe_load(block)
    filed = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert shown == filed


def test_every_dashboard_query_is_valid_promql(tmp_path):
    """The Grafana dashboard's queries, its ``$source`` variable filled in, parse as PromQL
    (``promtool check rules`` on them as recording rules); a broken one is named."""
    import json

    dashboard = json.loads((ROOT / "docs" / "dashboards" / "dblog-grafana.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 15

    def check(queries: list[str]) -> subprocess.CompletedProcess:
        rules = [{"record": f"dblog:panel_{i}", "expr": q.replace("$source", "shop")} for i, q in enumerate(queries)]
        path = tmp_path / "panels.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
        return subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)

    done = check(exprs)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = check(
        [
            *exprs[:1],
            "histogram_quantile(0.99, sum by (le) (rate(dblog_capture_output_commit_duration_seconds_bucket[5m]))",
        ]
    )
    assert broken.returncode != 0 and "panel_1" in broken.stdout + broken.stderr
