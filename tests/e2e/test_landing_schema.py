"""Mirrors follow compatible type changes (Delta type widening), keep a change data feed,
and a MERGE reads, joins and rewrites in proportion to the change (real Spark + Delta)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.e2e.test_landing import Changelog, land, mirror, rows, spark, version  # noqa: F401 - spark: fixture

pytestmark = pytest.mark.integration


def merge_metrics(spark, path: str) -> dict:  # noqa: F811 - the fixture's name
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(5).where("operation = 'MERGE'").first()
    return {k: int(v) for k, v in row["operationMetrics"].items()}


def test_widening_lands_values_beyond_the_old_range_and_the_cdf_shows_the_batch(spark, tmp_path):  # noqa: F811
    src = "wid_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.acct", [("id", "integer"), ("n", "integer"), ("amount", "numeric(10,2)"), ("s", "smallint")])
    log.append(*[log.ev(v1, "c", {"id": i, "n": i, "amount": f"{i}.25", "s": i}) for i in range(1, 4)])
    land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.acct")
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert props["delta.enableChangeDataFeed"] == "true"
    # No widening yet: the typeWidening reader feature is not on, any Delta reader reads it.
    assert "delta.enableTypeWidening" not in props

    v2 = log.schema("s.acct", [("id", "integer"), ("n", "bigint"), ("amount", "numeric(14,2)"), ("s", "integer")])
    big = {"id": 4, "n": 5_000_000_000, "amount": "123456789012.34", "s": 70_000}
    log.append(
        log.ev(v1, "u", {"id": 3, "n": 33, "amount": "3.50", "s": 3}),  # old schema in the same batch
        log.ev(v2, "u", {"id": 1, "n": -9_000_000_000_000, "amount": "-99999999999.99", "s": -40_000}),
        log.ev(v2, "c", big),
        log.ev(v2, "d", key=[2]),
    )
    stats = land(spark, tmp_path)
    assert stats["stopped"] == {} and stats["events"] == 4
    types = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert (types["n"], types["amount"], types["s"]) == ("bigint", "decimal(14,2)", "int")
    assert rows(spark, tmp_path, src, v2) == log.expected("s.acct")  # exact, beyond the old ranges
    got = spark.read.format("delta").load(path).where("id = 4").first()
    assert got.n == 5_000_000_000 and str(got.amount) == "123456789012.34" and got.s == 70_000

    # The change data feed of the batch's MERGE: an insert, updates (pre/post images) and the
    # delete as an update to a tombstone (mirrors keep tombstones, docs/landing.md).
    merged = version(spark, path)
    cdf = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", merged)
        .load(path)
        .select("id", "n", "_deleted", "_change_type")
        .collect()
    )
    changes = sorted((r.id, r._change_type, r.n, r._deleted) for r in cdf)
    assert changes == [
        (1, "update_postimage", -9_000_000_000_000, False),
        (1, "update_preimage", 1, False),
        (2, "update_postimage", None, True),
        (2, "update_preimage", 2, False),
        (3, "update_postimage", 33, False),
        (3, "update_preimage", 3, False),
        (4, "insert", 5_000_000_000, False),
    ]


def test_an_incompatible_type_change_still_stops_only_that_mirror(spark, tmp_path):  # noqa: F811
    src = "inc_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.a", [("id", "integer"), ("n", "integer")])
    other = log.schema("s.b", [("id", "integer"), ("v", "text")])
    log.append(log.ev(v1, "c", {"id": 1, "n": 1}), log.ev(other, "c", {"id": 1, "v": "x"}))
    land(spark, tmp_path)
    before = rows(spark, tmp_path, src, v1)
    v2 = log.schema("s.a", [("id", "integer"), ("n", "text")])
    log.append(log.ev(v2, "u", {"id": 1, "n": "one"}), log.ev(other, "c", {"id": 2, "v": "y"}))
    stats = land(spark, tmp_path)
    msg = stats["stopped"][f"{src} s.a"]
    assert "column 'n'" in msg and "int" in msg and "string" in msg, msg
    assert rows(spark, tmp_path, src, v1) == before
    assert set(rows(spark, tmp_path, src, other)) == {(1,), (2,)}


def test_a_merge_of_new_keys_never_reads_the_mirror_files_outside_their_key_range(spark, tmp_path):  # noqa: F811
    """The MERGE condition bounds the target by the batch's key range, so Delta skips the other
    files by their statistics. Shown by deleting those files from disk: a MERGE that opened
    one would fail (and does, without the bound)."""
    src = "prn_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.t", [("id", "bigint"), ("v", "text")])
    for lo in range(0, 5000, 1000):  # a dump in chunks: one mirror file (or two) per key range
        log.append(*[log.ev(v1, "r", {"id": i, "v": "x"}, origin="dump") for i in range(lo, lo + 1000)])
        land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.t")
    gone = [
        f
        for f in spark.read.format("delta").load(path).inputFiles()
        if spark.read.parquet(f).agg({"id": "max"}).first()[0] < 4000
    ]
    assert len(gone) >= 4
    for f in gone:
        os.remove(f.removeprefix("file:"))
    log.append(
        *[log.ev(v1, "c", {"id": i, "v": "new"}) for i in range(5000, 5010)], log.ev(v1, "u", {"id": 4999, "v": "y"})
    )
    stats = land(spark, tmp_path)
    assert stats["events"] == 11
    got = {r.id: r.v for r in spark.read.format("delta").load(path).where("id >= 4990").collect()}
    assert got == {**{i: "x" for i in range(4990, 4999)}, 4999: "y", **{i: "new" for i in range(5000, 5010)}}


def last_query(spark) -> int:  # noqa: F811 - the fixture's name
    """The id of the newest query in the session's SQL status store (kept with the UI off too)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # the store is fed asynchronously
    runs = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((runs.apply(i).executionId() for i in range(runs.size())), default=-1)


def merge_join_plans(spark, since: int) -> list[str]:  # noqa: F811 - the fixture's name
    """The physical plans of the queries after ``since`` that join the mirror's rows (by
    ``_key``): the MERGE's passes."""
    last_query(spark)
    runs = spark._jsparkSession.sharedState().statusStore().executionsList()
    runs = [runs.apply(i) for i in range(runs.size())]
    plans = [r.physicalPlanDescription() for r in runs if r.executionId() > since]
    return [p for p in plans if "Join" in p and "_key#" in p]


def test_a_merge_of_keys_spread_over_the_mirror_joins_only_the_batchs_rows(spark, tmp_path, monkeypatch):  # noqa: F811
    """Text keys (no key range to prune by) changed all over the mirror: every file is
    touched, and the MERGE's joins see the mirror filtered to the batch's keys (``_key INSET``
    below the join) rather than all its rows. Above PRUNE_MAX_KEYS the condition names no keys;
    both land the same rows."""
    from airflow_provider_dblog.spark import merge_rows
    from airflow_provider_dblog.spark.verify_mirror import duplicates

    src = "set_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.t", [("code", "text"), ("v", "text")], key=("code",))
    # Keys the condition's SQL text must quote exactly: a miss would insert a second row.
    odd = ["it's", "back\\slash", 'dq"', "new\nline", "ü"]
    log.append(*[log.ev(v1, "r", {"code": c, "v": "x"}, origin="dump") for c in [f"c{i}" for i in range(5000)] + odd])
    land(spark, tmp_path)
    since = last_query(spark)
    log.append(
        *[log.ev(v1, "u", {"code": f"c{i}", "v": "y"}) for i in range(3, 5000, 500)],
        *[log.ev(v1, "u", {"code": c, "v": "y"}) for c in odd],
        log.ev(v1, "d", key=["c4999"]),
        log.ev(v1, "c", {"code": "new", "v": "z"}),
    )
    assert land(spark, tmp_path)["events"] == 17
    assert rows(spark, tmp_path, src, v1) == log.expected("s.t")
    assert duplicates(spark, mirror(tmp_path, src, "s.t")) == []  # rows() would not show a second row
    assert spark.read.format("delta").load(mirror(tmp_path, src, "s.t")).where("v = 'y'").count() == 15
    plans = merge_join_plans(spark, since)
    assert plans and all(" INSET " in p and '["c1003"]' in p and '["new"]' in p for p in plans), plans

    monkeypatch.setattr(merge_rows, "PRUNE_MAX_KEYS", 5)  # a bigger batch: no key set in the plan
    since = last_query(spark)
    log.append(*[log.ev(v1, "u", {"code": f"c{i}", "v": "w"}) for i in range(7, 5000, 700)])
    assert land(spark, tmp_path)["events"] == 8
    assert rows(spark, tmp_path, src, v1) == log.expected("s.t")
    plans = merge_join_plans(spark, since)
    assert plans and not any("INSET" in p for p in plans)


def test_the_mirror_check_reports_a_key_with_two_rows(spark, tmp_path):  # noqa: F811
    """A second row for a key (what a MERGE whose condition missed the key writes) is a
    mismatch of its own: compared by key, the mirror would look right."""
    from airflow_provider_dblog.spark.verify_mirror import duplicates

    src = "dup_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.t", [("id", "bigint"), ("v", "text")])
    log.append(*[log.ev(v1, "c", {"id": i, "v": "x"}) for i in range(5)], log.ev(v1, "d", key=[4]))
    land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.t")
    assert duplicates(spark, path) == []
    table = spark.read.format("delta").load(path)
    table.where("id IN (2, 4)").write.format("delta").mode("append").save(path)  # a live row and a tombstone
    found = duplicates(spark, path)
    assert [(m.key, m.kind) for m in found] == [((2,), "duplicate"), ((4,), "duplicate")]
    assert "more than one row in the mirror" in found[0].describe()
    assert rows(spark, tmp_path, src, v1) == log.expected("s.t")  # what the by-key comparison sees


def test_with_deletion_vectors_a_merge_copies_far_fewer_rows_than_the_mirror_holds(spark, tmp_path):  # noqa: F811
    """New mirrors get deletion vectors by default; --no-deletion-vectors keeps them off, and
    a default run does not turn them on for a mirror that has none (its readers may lack it)."""
    src = "dv_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.t", [("id", "bigint"), ("v", "text")])
    off = log.schema("s.off", [("id", "bigint"), ("v", "text")])
    log.append(*[log.ev(v1, "r", {"id": i, "v": "x"}, origin="dump") for i in range(20_000)])
    land(spark, tmp_path)
    log.append(log.ev(off, "c", {"id": 1, "v": "x"}))
    land(spark, tmp_path, deletion_vectors=False)
    # Updates and deletes spread over the whole key range: every file of the mirror is touched.
    log.append(
        *[log.ev(v1, "u", {"id": i, "v": "y"}) for i in range(7, 20_000, 1999)],
        *[log.ev(v1, "d", key=[i]) for i in range(11, 20_000, 4001)],
        log.ev(off, "c", {"id": 2, "v": "x"}),
    )
    land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.t")
    m = merge_metrics(spark, path)
    assert m["numTargetRowsUpdated"] == 16, m
    assert m["numTargetRowsCopied"] < 2_000, m  # < 10 % of the 20,000 rows
    assert rows(spark, tmp_path, src, v1) == log.expected("s.t")

    def dv(table: str) -> str:
        props = spark.sql(f"SHOW TBLPROPERTIES delta.`{mirror(tmp_path, src, table)}`").collect()
        return {r[0]: r[1] for r in props}.get("delta.enableDeletionVectors", "unset")

    assert (dv("s.t"), dv("s.off")) == ("true", "unset")
    assert rows(spark, tmp_path, src, off) == log.expected("s.off")


def test_maintenance_lays_a_mirror_out_in_key_ranges_that_a_merge_of_recent_keys_prunes(spark, tmp_path):  # noqa: F811
    """A first landing writes hash-partitioned files (each spans every key); the maintenance
    compaction rewrites the mirror ZORDER BY its key into files of at most --mirror-file-mb,
    each a key range of its own, so a MERGE of recent keys opens only the newest files."""
    from airflow_provider_dblog.spark.maintenance import maintain

    src = "lay_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.t", [("id", "bigint"), ("v", "text")])
    noise = [uuid.uuid4().hex + uuid.uuid4().hex + uuid.uuid4().hex for _ in range(40_000)]  # ~2.5 MB compressed
    log.append(*[log.ev(v1, "r", {"id": i, "v": noise[i]}, origin="dump") for i in range(40_000)])
    land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.t")
    maintain(spark, str(tmp_path), compact_changelog=False, log=lambda m: None, mirror_file_mb=1)
    files = spark.read.format("delta").load(path).inputFiles()
    spans = sorted(
        tuple(spark.read.parquet(f).agg({"id": "min"}).first())
        + tuple(spark.read.parquet(f).agg({"id": "max"}).first())
        for f in files
    )
    assert len(spans) >= 2, spans
    # key ranges of their own (Z-order's range partitioning lets neighbours overlap a little)
    assert all(hi - lo < 40_000 * 0.6 for lo, hi in spans), spans
    # Shown as in the test above: the files without the changed keys are gone from disk, and
    # the MERGE (which would fail opening one) never needs them.
    for f in files:
        if spark.read.parquet(f).agg({"id": "max"}).first()[0] < 39_990:
            os.remove(f.removeprefix("file:"))
    log.append(*[log.ev(v1, "u", {"id": i, "v": "y"}) for i in range(39_990, 40_000)])
    assert land(spark, tmp_path)["events"] == 10
    got = {r.id: r.v for r in spark.read.format("delta").load(path).where("id >= 39990").collect()}
    assert got == {i: "y" for i in range(39_990, 40_000)}
