"""A big table dumped under a write load with a SIGKILL part way (issue 33, make soak): the
capture's peak RSS stays under the 500 MB budget in both processes, and the restarted
process goes on from the last finished chunk: no chunk is written twice (the rows the chunks
wrote never exceed the table's) and none is skipped (they fall short only by rows the load
changed inside a chunk's window, which come from the log instead). The 50-million-row run and
its throughput over time are bench/huge_dump.py's (docs/benchmarks.md)."""

from __future__ import annotations

import os
import tempfile

import pytest

from .databases import env

pytestmark = [pytest.mark.integration, pytest.mark.soak]

ROWS = int(os.environ.get("DBLOG_HUGE_DUMP_ROWS", "5000000"))
BUDGET_MIB = 500e6 / 2**20


def test_a_huge_dump_killed_at_60_percent_resumes_within_the_memory_budget():
    env("DBLOG_PG_HOST")
    from bench.huge_dump import run

    with tempfile.TemporaryDirectory(prefix="dblog-huge-dump-") as workdir:
        r = run(ROWS, 50_000, 0.6, 200, workdir)
    assert len(r["peak_rss_mib"]) == 2 and max(r["peak_rss_mib"]) < BUDGET_MIB, r["peak_rss_mib"]
    assert r["killed_at_rows"] >= 0.6 * ROWS
    assert r["first_rows_after"] > r["killed_at_rows"]  # the count went on; not from zero
    assert ROWS - r["load_writes"] <= r["rows_dumped"] <= ROWS, r
