"""The landing job's --lake/--mirrors/--checkpoint forms (issue 12 part 9): what Spark is given."""

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
