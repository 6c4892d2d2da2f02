"""bench/debezium.py's pure helpers: the Java result line, rates and ratios, the markdown rows."""

import pytest

from bench import debezium, wide

LINE = (
    '{"connector": "postgres", "consumer": "count", "engine": "x.AsyncEmbeddedEngine", "events": 1001, '
    '"seconds": 2.0, "first_event_s": 0.5, "cpu_s": 3.0, "jvm_start_s": 0.4, "jvm_start_cpu_s": 0.9, '
    '"json_bytes": 0}'
)


def test_parse_result_takes_the_last_json_line():
    out = debezium.parse_result("[main] WARN something\n" + LINE + "\n")
    assert out["events"] == 1001 and out["seconds"] == 2.0


def test_parse_result_raises_on_error_or_nothing():
    with pytest.raises(RuntimeError, match="after 12 events: timeout"):
        debezium.parse_result('{"error": "timeout after 5 s", "events": 12}\n')
    with pytest.raises(RuntimeError, match="no result line"):
        debezium.parse_result("only logs\n")


def test_rate_counts_the_written_events_not_the_sentinel():
    r = debezium.rate(debezium.parse_result(LINE), 1000)
    assert r == {"seconds": 2.0, "events_per_s": 500.0, "cpu_s": 3.0, "cpu_us_per_event": 3000.0, "startup_s": 0.5}
    r = debezium.rate(dict(debezium.parse_result(LINE), json_bytes=3 * 2**20), 1000)
    assert r["json_mb"] == 3.0


def test_ratios():
    assert debezium.ratio(20_000, 10_000) == 2.0
    assert debezium.ratio(5_000, 20_000) == 0.25
    assert debezium.ratio(None, 1.0) is None and debezium.ratio(1.0, 0) is None
    # Debezium spends 60 µs per event, we 30: we are 2x as frugal.
    assert debezium.cpu_ratio(30.0, 60.0) == 2.0
    assert debezium.cpu_ratio(0, 60.0) is None


def test_wide_markdown_shows_debezium_rows_only_when_measured():
    base = {
        "label": "PostgreSQL 15 (pgoutput)",
        "events": 1000,
        "log_bytes": 2**20,
        "baseline": {"name": "pg_recvlogical", "events_per_s": 10_000.0, "mb_per_s": 10.0},
        "dblog": {"events_per_s": 2_000.0, "mb_per_s": 2.0, "changelog_bytes": 2**20},
        "ratio": 0.2,
    }
    assert "Debezium" not in wide.markdown({"pg": base})
    dbz = dict(
        base,
        dblog=dict(base["dblog"], cpu_s=1.5, cpu_us_per_event=1500.0),
        debezium={
            "count": {
                "name": debezium.CONSUMERS["count"],
                "events_per_s": 1_000.0,
                "cpu_s": 3.0,
                "cpu_us_per_event": 3000.0,
                "startup_s": 0.5,
                "ratio": 2.0,
                "cpu_ratio": 2.0,
            }
        },
    )
    md = wide.markdown({"pg": dbz})
    assert "#### Against Debezium (same run)" in md
    assert "| ″ | Debezium embedded, count-only consumer | 1,000 | 3.0 | 3000.0 | 0.5 | 2.00× | 2.00× |" in md


def test_vs_debezium_table_marks_each_workload_against_the_two_times_goal():
    from bench import vs_debezium

    def workload(ours, count, js):
        d = {
            "count": {"events_per_s": count, "cpu_us_per_event": 40.0},
            "json": {"events_per_s": js, "cpu_us_per_event": 80.0},
        }
        for v in d.values():
            v["ratio"] = debezium.ratio(ours, v["events_per_s"])
        return {"units": 1000, "ours": {"per_s": ours, "cpu_us": 10.0}, "debezium": d}

    results = {
        "pg": {
            "workloads": {
                "capture_wide": workload(40_000, 13_200, 10_000),
                "dump_narrow": workload(250_000, 56_000, 200_000),
            }
        },
        "mysql": {"error": "RuntimeError: boom"},
    }
    text = vs_debezium.markdown(results)
    capture, dump = [line for line in text.splitlines() if line.startswith("| PostgreSQL")]
    assert "3.03× | 4.00× |" in capture and capture.endswith("| met |")
    assert "4.46× | 1.25× |" in dump and dump.endswith("| **missed** |")
    assert "| MariaDB: failed: RuntimeError: boom |" in text
