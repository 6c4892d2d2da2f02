"""The landing job's pure parts: the --lake/--mirrors/--checkpoint forms (issue 12 part 9: what Spark
is given) and the per-table facts of a micro-batch."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark")

from airflow_provider_dblog.spark.land_changelog import absolute  # noqa: E402


@pytest.mark.parametrize(
    "given, expected",
    [
        ("/data/lake/", "/data/lake"),
        ("delta:///data/lake", "/data/lake"),  # the capture's output URL, as docs/cli.md writes it
        ("file:///data/lake/", "file:///data/lake"),
        ("s3a://bucket/dblog/", "s3a://bucket/dblog"),
        ("abfss://c@acct.dfs.core.windows.net/dblog", "abfss://c@acct.dfs.core.windows.net/dblog"),
    ],
)
def test_urls_and_absolute_paths(given, expected):
    assert absolute(given) == expected


def test_relative_paths_and_home(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert absolute("lake") == str(tmp_path / "lake")
    assert absolute("delta://lake") == str(tmp_path / "lake")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert absolute("~/lake") == os.path.join(str(tmp_path), "lake")


def test_table_facts_merge_a_tables_groups_and_range_only_groups_keep_the_key_range():
    from decimal import Decimal

    from pyspark.sql import Row

    from airflow_provider_dblog.spark.land_changelog import TableFacts

    def g(count, row_events, lo, hi, ranges=False, toast=False):
        return Row(count=count, row_events=row_events, has_ranges=ranges, has_toast=toast, key_lo=lo, key_hi=hi)

    one, two = Decimal(1), Decimal(2)
    facts = TableFacts.of([g(3, 3, Decimal(5), Decimal(9)), g(2, 2, one, two, toast=True), g(1, 0, None, None, True)])
    assert facts == TableFacts(6, True, True, one, Decimal(9))
    # A group whose keys do not all start with an integer: no range for the table
    assert TableFacts.of([g(3, 3, one, two), g(2, 2, None, None)]).key_lo is None
    assert TableFacts.of([g(1, 0, None, None, True)]) == TableFacts(1, True, False, None, None)
