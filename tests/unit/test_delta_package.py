"""The Delta Lake Maven coordinate has one source of truth, spark/session.py's DELTA_PACKAGE:
scripts/spark-jars reads it, the landing DAG imports it, and every coordinate written in the
docs and docstrings is that one (or its documented un-suffixed alias, the same build)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from airflow_provider_dblog.spark.session import DELTA_PACKAGE

REPO = Path(__file__).resolve().parents[2]
COORDINATE = re.compile(r"io\.delta:delta-spark_[0-9A-Za-z._]+:[0-9A-Za-z._-]+")


def test_spark_jars_resolves_the_same_coordinate():
    env = {"PATH": "/usr/bin:/bin"}  # no DBLOG_DELTA_PACKAGE override
    out = subprocess.run(
        [str(REPO / "scripts" / "spark-jars"), "--package"], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == DELTA_PACKAGE


def test_every_written_coordinate_is_the_constant():
    group, artifact, version = DELTA_PACKAGE.split(":")
    scala = artifact.rsplit("_", 1)[1]
    alias = f"{group}:delta-spark_{scala}:{version}"  # Maven's un-suffixed name of the same jar
    files = [
        REPO / "pyproject.toml",
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "airflow_provider_dblog").rglob("*.py"),
        *(REPO / "dags").glob("*.py"),
        *(REPO / "docker").glob("*"),
    ]
    seen = {}
    for f in files:
        if f.is_file():
            for c in COORDINATE.findall(f.read_text(errors="replace")):
                seen.setdefault(c, []).append(str(f.relative_to(REPO)))
    assert DELTA_PACKAGE in seen
    assert set(seen) <= {DELTA_PACKAGE, alias}, {c: fs for c, fs in seen.items() if c not in (DELTA_PACKAGE, alias)}
