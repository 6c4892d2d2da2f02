"""The tables of a micro-batch landed side by side (issue 39 part 4), real Spark + Delta:
the mirrors are those of landing one table after another, every mirror commit carries its
own source's positions and transaction id (each worker has a Spark session of its own), a
replayed batch commits nothing, and the tables' landings really overlap.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from tests.e2e.test_landing import Changelog, spark, version  # noqa: F401 - spark: the shared fixture

pytestmark = [pytest.mark.integration, pytest.mark.soak]  # make soak: a long run (README)

from airflow_provider_dblog.core.events import Position  # noqa: E402
from airflow_provider_dblog.spark import land_changelog, mirror_commits  # noqa: E402
from airflow_provider_dblog.spark.verify_mirror import mirror_rows  # noqa: E402

CUT = Position(f"{1000:016X}{0:010d}", 0).encode()  # batch 0's positions are below, batch 1's above


class Gauged(land_changelog.Lander):
    """Counts the tables being landed at one moment: ``peak`` > 1 means two tables' landings
    overlapped (a fact of the run, whatever the clock says)."""

    gauge = threading.Lock()
    active = peak = 0

    def land_table(self, *args, **kwargs):
        with self.gauge:
            type(self).active += 1
            type(self).peak = max(type(self).peak, type(self).active)
        try:
            super().land_table(*args, **kwargs)
        finally:
            with self.gauge:
                type(self).active -= 1


def lander(spark, lake, mirrors, checkpoint, parallel):  # noqa: F811
    Gauged.active = Gauged.peak = 0
    job = Gauged(spark, str(lake), mirrors=str(mirrors), register=False, log=lambda m: None, parallel_tables=parallel)
    job.checkpoint = str(checkpoint)  # its metadata's id names the landing in the transaction ids
    return job


def batch(spark, lake, n: int):  # noqa: F811
    from functools import reduce

    from airflow_provider_dblog.spark.changelog_tables import changelog_tables

    # both sources' tables in one micro-batch, as a lake of the layout before gave them
    tables = [spark.read.format("delta").load(t.path) for t in changelog_tables(spark, str(lake))]
    cl = reduce(lambda x, y: x.unionByName(y), tables)
    return cl.where(cl.position < CUT) if n == 0 else cl.where(cl.position > CUT)


def history(spark, path: str) -> list:  # noqa: F811
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history().orderBy("version").collect()


def test_tables_of_a_batch_land_in_parallel_as_they_would_in_series(spark, tmp_path):  # noqa: F811
    a, b = (Changelog(tmp_path, f"{p}_" + uuid.uuid4().hex[:6]) for p in ("pa", "pb"))
    b.n = 500  # the sources' positions apart: each commit must carry its own source's
    tables = {
        a: [a.schema(f"s.t{i}", [("id", "integer"), ("v", "text")]) for i in range(4)],
        b: [b.schema(f"s.u{i}", [("id", "integer"), ("v", "text")]) for i in range(2)],
    }
    for log, schemas in tables.items():  # batch 0: new mirrors (appends)
        log.append(*[log.ev(s, "c", {"id": k, "v": f"{s.table}-{k}"}) for s in schemas for k in range(20)])
    a.n, b.n = 1000, 1500
    batch_1 = {log: [] for log in tables}
    for log, schemas in tables.items():  # batch 1: merges, and a TRUNCATE's update in each source
        events = [log.ev(s, "u", {"id": k, "v": "u"}) for s in schemas for k in range(0, 20, 3)]
        events += [log.ev(s, "d", key=[1]) for s in schemas]
        events += [log.ev(schemas[0], "t", key=[]), log.ev(schemas[0], "c", {"id": 7, "v": "after the truncate"})]
        log.append(*events)
        batch_1[log] = events
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "landing-" + uuid.uuid4().hex}))

    landed = {}
    for parallel, mirrors in ((1, tmp_path / "serial"), (4, tmp_path / "parallel")):
        job = lander(spark, tmp_path, mirrors, checkpoint, parallel)
        job.land_batch(batch(spark, tmp_path, 0), 0)
        job.land_batch(batch(spark, tmp_path, 1), 1)
        assert job.events == sum(len(log.events) for log in tables) and not job.stopped
        landed[parallel] = Gauged.peak
    assert landed[1] == 1
    assert landed[4] > 1, "no two tables' landings overlapped"

    for log, schemas in tables.items():
        for s in schemas:
            paths = {m: f"{tmp_path / m}/{log.source_id}/{s.table}" for m in ("serial", "parallel")}
            # (1) The same mirror as one table after another: rows, tombstones and positions.
            serial, parallel = (
                sorted(
                    (r.asDict() | {"_landed_at": None} for r in spark.read.format("delta").load(p).collect()),
                    key=lambda r: r["_key"],
                )
                for p in paths.values()
            )
            assert parallel == serial
            assert mirror_rows(spark, paths["parallel"], s) == log.expected(s.table)
            # (2) Every data commit carries its own source's positions of its batch.
            mine = [e.position.encode() for e in batch_1[log]]
            commits = [h for h in history(spark, paths["parallel"]) if h.userMetadata]
            assert commits, s.table
            for h in commits:
                meta = json.loads(h.userMetadata)
                assert meta[mirror_commits.SOURCE] == log.source_id, (s.table, meta)
                if meta[mirror_commits.BATCH] == 1:
                    assert (meta[mirror_commits.FROM], meta[mirror_commits.POSITION]) == (min(mine), max(mine))
            assert {h.operation for h in commits if json.loads(h.userMetadata)[mirror_commits.BATCH] == 1} == (
                {"MERGE", "UPDATE"} if s is schemas[0] else {"MERGE"}
            )

    # (2) Idempotent: batch 1 landed again (a job restarted after its commits, before its
    # checkpoint's) commits nothing; its transaction ids were each worker session's own.
    paths = [f"{tmp_path}/parallel/{log.source_id}/{s.table}" for log, schemas in tables.items() for s in schemas]
    versions = {p: version(spark, p) for p in paths}
    again = lander(spark, tmp_path, tmp_path / "parallel", checkpoint, 4)
    again.land_batch(batch(spark, tmp_path, 1), 1)
    assert {p: version(spark, p) for p in paths} == versions
