"""The verify use case shared by `dblog verify`, VerifyOperator and spark/verify_mirror.py:
its report lines, which tables it compares, and that a repair opens the state store only
for drift and asks for exactly the mismatched keys."""

from __future__ import annotations

from airflow_provider_dblog import verification
from airflow_provider_dblog.core.range_verify import RangeStats
from airflow_provider_dblog.core.verify import Mismatch


class Tables:
    def tables(self):
        return ["public.a", "public.b"]


def comparison(table, keys=(), by_ranges=False, ranges=None):
    mismatches = [Mismatch((k,), "missing", {"id": k}, None) for k in keys]
    return verification.TableComparison(table, 3, 3 - len(keys), mismatches, by_ranges, ranges)


def test_every_captured_table_by_default_each_reported_when_compared():
    seen = []
    results = verification.verify(Tables(), None, lambda t: comparison(t, [1] if t == "public.b" else []), seen.append)
    assert list(results) == ["public.a", "public.b"] == [r.table for r in seen]
    assert verification.drifted(results)
    assert verification.mismatched(results) == {"public.a": [], "public.b": [(1,)]}
    only = verification.verify(Tables(), ["public.a"], lambda t: comparison(t))
    assert list(only) == ["public.a"] and not verification.drifted(only)


def test_report_lines_are_the_commands_own(capsys):
    report = verification.printer("in the changelog replay", 1)
    report(comparison("public.a", [1, 2]))
    report(comparison("public.b", by_ranges=True, ranges=RangeStats(digests=4, rows_read=0)))
    report(comparison("public.c", by_ranges=True))
    assert capsys.readouterr().out.splitlines() == [
        "public.a: 3 rows in the source, 1 in the changelog replay, 2 mismatches",
        "  key [1]: missing in the changelog",
        "public.b: 3 rows in the source, 3 in the changelog replay, 0 mismatches"
        " (by ranges: 4 range digests, 0 source rows read)",
        "public.c: 3 rows in the source, 3 in the changelog replay, 0 mismatches"
        " (compared whole: no range digests for this source or key)",
    ]


def test_a_repair_asks_for_exactly_the_mismatched_keys_and_only_when_something_drifted(monkeypatch):
    asked, closed = [], []

    class State:
        def close(self):
            closed.append(True)

    def request_repairs(source, state, keys, chunk_size):
        asked.append((source, keys, chunk_size))
        return {t: f"spec-{t}" for t, k in keys.items() if k}

    monkeypatch.setattr(verification, "request_repairs", request_repairs)
    clean = {"public.a": comparison("public.a")}
    assert verification.repair(clean, lambda: 1 / 0, lambda: 1 / 0) == {}  # opens nothing

    reported = []
    results = {"public.a": comparison("public.a"), "public.b": comparison("public.b", [7, 8])}
    specs = verification.repair(results, lambda: "source", State, 50, lambda *a: reported.append(a))
    assert specs == {"public.b": "spec-public.b"}
    assert asked == [("source", {"public.a": [], "public.b": [(7,), (8,)]}, 50)]
    assert reported == [("public.b", "spec-public.b", 2)] and closed == [True]


def test_a_mirrors_duplicate_rows_are_drift_that_no_repair_dump_is_asked_for():
    dup = Mismatch((7,), "duplicate", None, None)
    results = {"public.a": verification.TableComparison("public.a", 3, 3, [dup])}
    assert verification.drifted(results)
    assert verification.mismatched(results) == {"public.a": []}
    assert verification.repair(results, lambda: 1 / 0, lambda: 1 / 0) == {}  # opens nothing
    assert dup.describe().startswith("key [7]: more than one row in the mirror")
