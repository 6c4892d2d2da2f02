"""The Spark landing job on hand-made changelogs (real Spark + Delta, no database needed).

Each changelog is written with the capture's own Arrow layout (outputs/delta.py), but
appended directly, without the capture's bookkeeping, so that a test can place events the
capture would never write in that order (a late, older repair dump row; a replayed batch).
Expected mirrors come from core/verify.replay: the changelog's public replay rule.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

pyspark = pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema  # noqa: E402
from airflow_provider_dblog.core.verify import replay  # noqa: E402
from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput, changelog_batch  # noqa: E402
from airflow_provider_dblog.outputs.lake_layout import changelog_path  # noqa: E402
from tests.support.otel import collected  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def spark_jars() -> str:
    """The cached Delta jars (scripts/spark-jars resolves them through Maven once)."""
    if not os.environ.get("DBLOG_SPARK_JARS"):
        out = subprocess.run(
            [str(REPO / "scripts" / "spark-jars")],
            capture_output=True,
            text=True,
            env={**os.environ, "PY": sys.executable},
        )
        if out.returncode != 0:
            pytest.fail(f"scripts/spark-jars failed:\n{out.stderr}")
        os.environ["DBLOG_SPARK_JARS"] = out.stdout.strip()
    return os.environ["DBLOG_SPARK_JARS"]


@pytest.fixture(scope="module")
def spark():
    from airflow_provider_dblog.spark.session import get_session

    spark_jars()
    # One session for the whole pytest process: starting Spark costs ~10 s on 2 cores.
    return get_session("dblog-tests", master="local[2]")


class Changelog:
    """A changelog + schema store under ``root``; events appended one commit per ``append``."""

    def __init__(self, root: Path, source_id: str, shared: bool = False):
        self.root, self.source_id = root, source_id
        self.shared = shared  # into the one table of a lake written before the table per source
        self.out = DeltaChangelogOutput(str(root))
        self.out.open()
        self.events: list[ChangeEvent] = []
        self.n = 0

    def schema(self, table: str, cols: list[tuple[str, str]], key=("id",)) -> TableSchema:
        s = TableSchema(table, tuple(Column(n, t) for n, t in cols), tuple(key))
        self.out.register_schema(s)
        return s

    def pos(self, coord: int | None = None, sub: int = 0) -> Position:
        if coord is None:
            self.n += 1
            coord = self.n
        return Position(f"{coord:016X}{0:010d}", sub)

    def ev(
        self, schema: TableSchema, op: str, row: dict | None = None, key=None, position=None, origin: str = "log"
    ) -> ChangeEvent:
        key = tuple(key) if key is not None else schema.key_of(row)
        return ChangeEvent(
            self.source_id,
            schema.table,
            Op(op),
            key,
            None,
            None if op == "d" else row,
            position or self.pos(),
            commit_ts=1_700_000_000_000_000 + self.n,
            origin=Origin(origin),
            dump_id="d-1" if origin == "dump" else None,
            schema_id=schema.schema_id(),
        )

    def append(self, *events: ChangeEvent) -> None:
        # the source's table (outputs/lake_layout.py), or the lake's one table of the layout before
        path = changelog_path(str(self.root), None if self.shared else self.source_id)
        deltalake.write_deltalake(path, changelog_batch(list(events), None), mode="append")
        self.events += events

    def expected(self, table: str) -> dict:
        return replay(e for e in self.events if e.table == table)


def mirror(lake: Path, source_id: str, table: str) -> str:
    return f"{lake}/mirrors/{source_id}/{table}"


def land(spark, lake, **kw):
    from airflow_provider_dblog.spark.land_changelog import land as run

    return run(spark, str(lake), log=lambda m: None, **kw)


def rows(spark, lake, source_id, schema):
    from airflow_provider_dblog.spark.verify_mirror import mirror_rows

    return mirror_rows(spark, mirror(lake, source_id, schema.table), schema)


def version(spark, path: str) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).first()["version"]


PG_TYPES = [
    ("id", "bigint"),
    ("i2", "smallint"),
    ("i4", "integer"),
    ("d", "numeric(12,2)"),
    ("big", "numeric"),
    ("f", "double precision"),
    ("r", "real"),
    ("t", "text"),
    ("vc", "character varying(20)"),
    ("b", "bytea"),
    ("bo", "boolean"),
    ("dt", "date"),
    ("ts", "timestamp(6) without time zone"),
    ("tz", "timestamp with time zone"),
    ("j", "jsonb"),
    ("u", "uuid"),
    ("arr", "integer[]"),
]
MY_TYPES = [
    ("id", "int unsigned"),
    ("ti", "tinyint(1)"),
    ("bu", "bigint unsigned"),
    ("d", "decimal(10,3)"),
    ("f", "float"),
    ("t", "varchar(10)"),
    ("b", "varbinary(8)"),
    ("dt", "date"),
    ("ts", "datetime(6)"),
    ("tz", "timestamp(6)"),
    ("j", "json"),
    ("e", "enum('a','b')"),
    ("y", "year"),
]


def pg_row(i: int, **over) -> dict:
    row = {
        "id": i,
        "i2": -i,
        "i4": 100000 + i,
        "d": f"{i}.{i % 100:02d}",
        "big": "123456789012345678901234567890.5",
        "f": 1.5 + i,
        "r": 0.1,
        "t": 'Zoë "quoted" ✓',
        "vc": None,
        "b": {"$b64": "AAH/"},
        "bo": i % 2 == 0,
        "dt": "2024-02-29",
        "ts": "2024-02-29T23:59:59.500000",
        "tz": "1999-12-31T23:00:00+00:00",
        "j": {"k": [1, "x", None], "s": "a"},
        "u": str(uuid.UUID(int=i)),
        "arr": "{1,2}",
    }
    row.update(over)
    return row


def my_row(i: int, **over) -> dict:
    row = {
        "id": i,
        "ti": 2,
        "bu": 18446744073709551615,
        "d": "-0.500",
        "f": 1.25,
        "t": "çé",
        "b": {"$b64": "AA=="},
        "dt": "2000-01-01",
        "ts": "2024-05-06T07:08:09.123456",
        "tz": "2024-05-06T07:08:09+00:00",
        "j": "just a string",
        "e": "b",
        "y": 2024,
    }
    row.update(over)
    return row


def test_a_lake_of_the_shared_layout_lands_as_before(spark, tmp_path):
    """A lake written before the table per source (both sources in ``<lake>/changelog``) is
    landed from that table: every source (checkpoint ``_all``) and one source alone; a table
    per source is not looked for there, and the consistent cut reads the shared table."""
    from airflow_provider_dblog.spark.changelog_tables import changelog_tables
    from airflow_provider_dblog.spark.consistent_cut import consistent_cut

    a, b = (Changelog(tmp_path, f"old{p}_" + uuid.uuid4().hex[:6], shared=True) for p in ("a", "b"))
    b.n = 100
    sa, sb = a.schema("s.t", [("id", "integer"), ("v", "text")]), b.schema("s.u", [("id", "integer"), ("v", "text")])
    a.append(*[a.ev(sa, "c", {"id": i, "v": f"a{i}"}) for i in range(4)])
    b.append(*[b.ev(sb, "c", {"id": i, "v": f"b{i}"}) for i in range(3)])
    assert changelog_tables(spark, str(tmp_path)) == [(None, changelog_path(str(tmp_path)))]
    stats = land(spark, tmp_path, source=b.source_id)
    assert stats["events"] == 3 and stats["checkpoint"].endswith(f"/_checkpoints/{b.source_id}")
    a.append(a.ev(sa, "d", key=[0]))
    stats = land(spark, tmp_path)
    assert stats["events"] == 8 and stats["checkpoint"].endswith("/_checkpoints/_all")
    assert rows(spark, tmp_path, a.source_id, sa) == a.expected("s.t")
    assert rows(spark, tmp_path, b.source_id, sb) == b.expected("s.u")
    landed = max(e.position for e in a.events).encode()
    a.append(a.ev(sa, "c", {"id": 9, "v": "later"}))  # the next event, in the shared table, ends the landed one
    assert consistent_cut(spark, str(tmp_path), a.source_id).position == landed
    assert not (tmp_path / "changelogs").exists()


def test_typed_mirrors_follow_the_replay_rule(spark, tmp_path):
    src = "pg_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    pg = log.schema("shop.items", PG_TYPES)
    my = log.schema("db.things", MY_TYPES)
    log.append(
        *[log.ev(pg, "r", pg_row(i), origin="dump") for i in range(1, 6)],
        *[log.ev(my, "c", my_row(i)) for i in range(1, 4)],
    )
    log.append(
        log.ev(pg, "u", pg_row(2, t="updated", d="-7.05", j=[1, 2], bo=None)),
        log.ev(pg, "d", key=[3]),
        # a primary-key update arrives as delete + create
        log.ev(pg, "d", key=[4]),
        log.ev(pg, "c", pg_row(40, t="was 4")),
        log.ev(my, "u", my_row(1, j={"nested": {"x": 1.5}}, tz=None)),
        log.ev(my, "d", key=[2]),
        log.ev(pg, "c", pg_row(3, t="back again")),  # re-insert after a delete
    )
    stats = land(spark, tmp_path)
    assert stats["events"] == 15 and stats["tables"] == ["db.things", "shop.items"]

    assert rows(spark, tmp_path, src, pg) == log.expected("shop.items")
    assert rows(spark, tmp_path, src, my) == log.expected("db.things")

    df = spark.read.format("delta").load(mirror(tmp_path, src, "shop.items"))
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["d"] == "decimal(12,2)" and types["big"] == "string" and types["i2"] == "smallint"
    assert types["ts"] == "timestamp_ntz" and types["tz"] == "timestamp" and types["b"] == "binary"
    assert types["dt"] == "date" and types["bo"] == "boolean" and types["j"] == "string" and types["r"] == "double"
    assert {"_position", "_op", "_commit_ts", "_origin", "_landed_at", "_deleted", "_key"} <= set(types)
    my_types = {
        f.name: f.dataType.simpleString()
        for f in spark.read.format("delta").load(mirror(tmp_path, src, "db.things")).schema.fields
    }
    assert my_types["bu"] == "decimal(20,0)" and my_types["ti"] == "tinyint" and my_types["id"] == "bigint"

    # The deleted key 4 is a tombstone with its typed key, hidden by the current view.
    tomb = df.where("_deleted").select("id", "_op", "_origin").collect()
    assert [(r.id, r._op) for r in tomb] == [(4, "d")]
    r5 = df.where("id = 5").first()
    assert r5._origin == "dump" and r5._op == "r" and r5._commit_ts is not None
    from airflow_provider_dblog.spark.land_changelog import catalog_names

    _, table, view = catalog_names(src, "shop.items")
    assert spark.table(table).count() == 6
    assert sorted(r.id for r in spark.table(view).collect()) == [1, 2, 3, 5, 40]
    assert "_deleted" not in spark.table(view).columns


def landing_metrics():
    """The landing's instruments on an in-memory reader (the exporters are the capture's)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from airflow_provider_dblog.metrics.landing import LandingMetrics

    reader = InMemoryMetricReader()  # read with tests.support.otel.collected
    return LandingMetrics(MeterProvider(metric_readers=[reader])), reader


def test_landing_is_incremental_and_idempotent(spark, tmp_path, monkeypatch):
    src = "inc_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    s = log.schema("s.t", [("id", "integer"), ("v", "text")])
    log.append(*[log.ev(s, "c", {"id": i, "v": f"a{i}"}) for i in range(20)])
    metrics, reader = landing_metrics()
    assert land(spark, tmp_path, metrics=metrics)["events"] == 20
    # the landing's metrics (docs/operations.md): events, one commit, the newest source commit
    attrs = (("dblog.source.id", src), ("dblog.table", "s.t"))
    seen = collected(reader)
    assert seen["dblog.landing.events"][attrs].value == 20 and seen["dblog.landing.batches"][attrs].value == 1
    assert seen["dblog.landing.commit.newest"][attrs].value == max(e.commit_ts for e in log.events) / 1e6
    latency = seen["dblog.landing.latency"][attrs]
    assert latency.count == 1 and latency.sum >= time.time() - 1_700_000_000 - 120  # commits of 2023
    assert seen["dblog.landing.merge.duration"][attrs].count == 1
    path = mirror(tmp_path, src, "s.t")
    v1 = version(spark, path)
    snapshot = sorted(spark.read.format("delta").load(path).collect())

    assert land(spark, tmp_path)["events"] == 0  # nothing new: no batch, no commit
    assert version(spark, path) == v1
    assert sorted(spark.read.format("delta").load(path).collect()) == snapshot

    log.append(log.ev(s, "u", {"id": 1, "v": "b1"}), log.ev(s, "d", key=[2]))
    assert land(spark, tmp_path, metrics=metrics)["events"] == 2  # only the new version is read
    seen = collected(reader)
    assert seen["dblog.landing.events"][attrs].value == 22 and seen["dblog.landing.batches"][attrs].value == 2
    assert seen["dblog.landing.commit.newest"][attrs].value == max(e.commit_ts for e in log.events) / 1e6
    assert rows(spark, tmp_path, src, s) == log.expected("s.t")
    after = {r.id: r for r in spark.read.format("delta").load(path).collect()}
    before = {r.id: r for r in snapshot}
    assert after[3] == before[3]  # untouched rows keep their _landed_at

    # Landing the same versions again from scratch (a lost checkpoint) changes no row; the
    # lake and the checkpoint given as relative paths, as a newcomer types them (issue 12).
    monkeypatch.chdir(tmp_path.parent)
    again = land(spark, tmp_path.name, checkpoint=f"{tmp_path.name}/other-checkpoint")
    assert again["events"] == 22
    assert {r.id: r for r in spark.read.format("delta").load(path).collect()} == after


@pytest.mark.soak  # make soak: kept out of make test for its time (README)
def test_mirror_never_moves_back_in_time(spark, tmp_path):
    src = "mono_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    s = log.schema("s.acc", [("id", "bigint"), ("bal", "numeric(10,2)")])
    log.append(
        log.ev(s, "c", {"id": 1, "bal": "1.00"}, position=log.pos(10)),
        log.ev(s, "c", {"id": 2, "bal": "2.00"}, position=log.pos(10, 1)),
        log.ev(s, "u", {"id": 1, "bal": "5.00"}, position=log.pos(20)),
        log.ev(s, "d", key=[2], position=log.pos(21)),
    )
    land(spark, tmp_path)
    # A repair dump whose rows are older than what the mirror holds arrives in a later commit
    # (its chunk's high watermark at 15 < 20, 21): neither the update nor the delete is undone.
    log.append(
        log.ev(s, "r", {"id": 1, "bal": "1.00"}, position=log.pos(15, 1), origin="dump"),
        log.ev(s, "r", {"id": 2, "bal": "2.00"}, position=log.pos(15, 2), origin="dump"),
        log.ev(s, "r", {"id": 3, "bal": "3.00"}, position=log.pos(15, 3), origin="dump"),
    )
    land(spark, tmp_path)
    got = rows(spark, tmp_path, src, s)
    assert got == {(1,): {"id": 1, "bal": "5.00"}, (3,): {"id": 3, "bal": "3.00"}}
    assert got == log.expected("s.acc")
    # The same inside one batch: an older dump row after a newer update of the same key.
    s2 = log.schema("s.acc2", [("id", "bigint"), ("bal", "numeric(10,2)")])
    log.append(
        log.ev(s2, "u", {"id": 7, "bal": "9.00"}, position=log.pos(40)),
        log.ev(s2, "r", {"id": 7, "bal": "0.00"}, position=log.pos(30, 1), origin="dump"),
    )
    land(spark, tmp_path)
    assert rows(spark, tmp_path, src, s2) == {(7,): {"id": 7, "bal": "9.00"}}

    # Maintenance: tombstones past the horizon go, compaction merges the small files, the
    # current rows stay.
    from airflow_provider_dblog.spark.maintenance import maintain

    path = mirror(tmp_path, src, "s.acc")
    assert spark.read.format("delta").load(path).where("_deleted").count() == 1
    report = maintain(spark, str(tmp_path), tombstone_horizon_hours=0, log=lambda m: None)
    assert report["tombstones_removed"][path] == 1
    assert spark.read.format("delta").load(path).where("_deleted").count() == 0
    assert rows(spark, tmp_path, src, s) == log.expected("s.acc")
    from delta.tables import DeltaTable

    assert DeltaTable.forPath(spark, changelog_path(str(tmp_path), src)).detail().first().numFiles == 1


def test_schema_evolution_adds_columns_and_a_type_change_stops_only_that_table(spark, tmp_path):
    from airflow_provider_dblog.spark.land_changelog import catalog_names

    src = "evo_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    v1 = log.schema("s.orders", [("id", "integer"), ("amount", "numeric(12,3)")])
    log.append(*[log.ev(v1, "c", {"id": i, "amount": f"{i}.125"}) for i in range(3)])
    land(spark, tmp_path)
    v2 = log.schema(
        "s.orders",
        [("id", "integer"), ("amount", "numeric(12,3)"), ("note", "text"), ("seen", "timestamp with time zone")],
    )
    log.append(
        log.ev(v2, "u", {"id": 1, "amount": "9.000", "note": "new", "seen": "2024-01-01T00:00:00+00:00"}),
        log.ev(v2, "c", {"id": 5, "amount": "5.000", "note": None, "seen": None}),
    )
    land(spark, tmp_path)
    path = mirror(tmp_path, src, "s.orders")
    cols = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert cols["note"] == "string" and cols["seen"] == "timestamp"
    assert rows(spark, tmp_path, src, v2) == {
        (0,): {"id": 0, "amount": "0.125", "note": None, "seen": None},
        (1,): {"id": 1, "amount": "9.000", "note": "new", "seen": "2024-01-01T00:00:00+00:00"},
        (2,): {"id": 2, "amount": "2.125", "note": None, "seen": None},
        (5,): {"id": 5, "amount": "5.000", "note": None, "seen": None},
    }
    assert "note" in spark.table(catalog_names(src, "s.orders")[2]).columns  # the view follows

    before = rows(spark, tmp_path, src, v2)
    other = log.schema("s.other", [("id", "integer"), ("v", "text")])
    v3 = log.schema(
        "s.orders", [("id", "integer"), ("amount", "text"), ("note", "text"), ("seen", "timestamp with time zone")]
    )
    log.append(
        log.ev(v3, "u", {"id": 1, "amount": "lots", "note": "x", "seen": None}), log.ev(other, "c", {"id": 1, "v": "a"})
    )
    stats = land(spark, tmp_path)
    msg = stats["stopped"][f"{src} s.orders"]
    assert "incompatible schema change in s.orders, column 'amount'" in msg and "Fix:" in msg, msg
    assert rows(spark, tmp_path, src, v2) == before  # the mirror is left as it was
    assert rows(spark, tmp_path, src, other) == {(1,): {"id": 1, "v": "a"}}  # the other table goes on
    # Later runs keep the table stopped (they do not see the skipped events again) and land the rest.
    log.append(
        log.ev(v2, "u", {"id": 2, "amount": "1.000", "note": None, "seen": None}),
        log.ev(other, "c", {"id": 2, "v": "b"}),
    )
    stats = land(spark, tmp_path)
    assert f"{src} s.orders" in stats["stopped"] and rows(spark, tmp_path, src, v2) == before
    assert set(rows(spark, tmp_path, src, other)) == {(1,), (2,)}


@pytest.mark.soak  # make soak: one of the longest runs (README)
def test_killed_mid_job_then_landed_again(spark, tmp_path):
    """SIGKILL the job (driver and JVM) between two tables' merges of one micro-batch; the
    next run replays that batch and every mirror ends up exactly as the replay rule says."""
    src = "crash_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    schemas = [log.schema(f"s.t{i}", [("id", "integer"), ("v", "text")]) for i in range(3)]
    for s in schemas:
        log.append(*[log.ev(s, "c", {"id": k, "v": f"{s.table}-{k}"}) for k in range(30)])
        log.append(*[log.ev(s, "u", {"id": k, "v": "u"}) for k in range(0, 30, 3)], log.ev(s, "d", key=[1]))
    out = tmp_path / "job.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DBLOG_SPARK_JARS": spark_jars()}
    with open(out, "w") as f:  # the job, one table at a time, pausing 120 s between two tables' merges
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.slow_landing",
                "--delay-s",
                "120",
                "--",
                "--lake",
                str(tmp_path),
                "--parallel-tables",
                "1",
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        end = time.time() + 180
        while "landed batch 0" not in out.read_text():
            assert job.poll() is None, out.read_text()[-3000:]
            assert time.time() < end, "the job did not land its first table in time"
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job's own process group: python + its JVM
        job.wait(30)
    landed = [s for s in schemas if os.path.isdir(mirror(tmp_path, src, s.table))]
    assert len(landed) == 1, "the kill should fall between two tables' merges"
    assert rows(spark, tmp_path, src, landed[0]) == log.expected(landed[0].table)

    stats = land(spark, tmp_path)  # same checkpoint: the interrupted batch is replayed
    assert stats["events"] == 3 * 41
    for s in schemas:
        assert rows(spark, tmp_path, src, s) == log.expected(s.table)
    snap = {s.table: sorted(spark.read.format("delta").load(mirror(tmp_path, src, s.table)).collect()) for s in schemas}
    assert land(spark, tmp_path)["events"] == 0
    for s in schemas:
        assert sorted(spark.read.format("delta").load(mirror(tmp_path, src, s.table)).collect()) == snap[s.table]


@pytest.mark.soak  # make soak: kept out of make test for its time (PostgreSQL's oracle lands TRUNCATEs too)
def test_truncate_tombstones_older_rows_and_later_rows_survive(spark, tmp_path):
    """A TRUNCATE (op t) inside a batch, across batches, and twice in one batch: every mirror
    row older than the table's latest TRUNCATE becomes a tombstone at its position, rows
    written after it survive, another table is untouched, and landing it all again from
    scratch changes nothing."""
    src = "trunc_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    s = log.schema("s.t", [("id", "bigint"), ("v", "text")])
    other = log.schema("s.other", [("id", "bigint"), ("v", "text")])

    def t():
        return log.ev(s, "t", key=[])

    log.append(*[log.ev(s, "c", {"id": i, "v": f"a{i}"}) for i in range(1, 6)], log.ev(other, "c", {"id": 1, "v": "o"}))
    land(spark, tmp_path)
    # One batch: an update before the TRUNCATE (moot), the TRUNCATE, rows after it.
    log.append(log.ev(s, "u", {"id": 1, "v": "b1"}), t(), log.ev(s, "c", {"id": 2, "v": "after"}))
    log.append(log.ev(s, "c", {"id": 6, "v": "after"}), log.ev(other, "u", {"id": 1, "v": "o2"}))
    land(spark, tmp_path)
    assert (
        rows(spark, tmp_path, src, s)
        == log.expected("s.t")
        == {
            (2,): {"id": 2, "v": "after"},
            (6,): {"id": 6, "v": "after"},
        }
    )
    path = mirror(tmp_path, src, "s.t")
    gone = spark.read.format("delta").load(path).where("_op = 't'").collect()
    assert sorted(r.id for r in gone) == [1, 3, 4, 5] and all(r._deleted and r.v is None for r in gone)
    # Two TRUNCATEs in one batch with a dump row between them (moot) and one after (kept).
    log.append(
        t(),
        log.ev(s, "r", {"id": 7, "v": "dumped"}, origin="dump"),
        t(),
        log.ev(s, "r", {"id": 8, "v": "dumped"}, origin="dump"),
    )
    land(spark, tmp_path)
    assert rows(spark, tmp_path, src, s) == log.expected("s.t") == {(8,): {"id": 8, "v": "dumped"}}
    assert rows(spark, tmp_path, src, other) == log.expected("s.other") == {(1,): {"id": 1, "v": "o2"}}

    snapshot = {r._key: r for r in spark.read.format("delta").load(path).collect()}
    land(spark, tmp_path, checkpoint=str(tmp_path / "other-checkpoint"))  # a lost checkpoint
    assert {r._key: r for r in spark.read.format("delta").load(path).collect()} == snapshot


def test_range_events_remove_keys_deleted_while_nothing_was_captured(spark, tmp_path):
    """Range repair (issue 11, part 6): a dump chunk's range event (op k) tombstones the
    mirror rows of its key range older than its LW, in the same batch as its rows or before
    them; a key inserted inside the window and keys outside the range survive."""
    src = "range_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    s = log.schema("s.t", [("id", "bigint"), ("v", "text")])

    def rng(low, high, since, hw):
        body = {"from": low, "to": high, "since": since.encode()}
        e = log.ev(s, "k", key=[], position=hw.with_sub(0), origin="dump")
        return dataclasses.replace(e, after=body)

    log.append(*[log.ev(s, "c", {"id": i, "v": f"a{i}"}) for i in (1, 2, 3, 4, 40, 41, 60, 99)])
    land(spark, tmp_path)
    # Gap: 2, 4 and 41 deleted unseen. Chunk 1 (-inf, 30] with 20 inserted inside its window.
    lw, inserted, hw = log.pos(), log.ev(s, "c", {"id": 20, "v": "in window"}), log.pos()
    chunk = [
        log.ev(s, "r", {"id": i, "v": f"a{i}"}, position=hw.with_sub(n), origin="dump") for n, i in ((1, 1), (2, 3))
    ]
    log.append(inserted, rng(None, [30], lw, hw), *chunk)
    # Chunk 2 (30, 50]: its range in one batch, its row in the next.
    lw2, hw2 = log.pos(), log.pos()
    log.append(rng([30], [50], lw2, hw2))
    land(spark, tmp_path)
    log.append(log.ev(s, "r", {"id": 40, "v": "a40"}, position=hw2.with_sub(1), origin="dump"))
    land(spark, tmp_path)
    want = {(i,): {"id": i, "v": f"a{i}"} for i in (1, 3, 40, 60, 99)} | {(20,): {"id": 20, "v": "in window"}}
    assert rows(spark, tmp_path, src, s) == log.expected("s.t") == want
    # A key-list chunk listing 60 (deleted unseen) and 61 (never there); then the table's last
    # chunk, open above (50, ...): 99 was deleted unseen too.
    lw3, hw3, lw4, hw4 = log.pos(), log.pos(), log.pos(), log.pos()
    listed = dataclasses.replace(rng(None, None, lw3, hw3), after={"keys": [[60], [61]], "since": lw3.encode()})
    log.append(listed, rng([50], None, lw4, hw4))
    land(spark, tmp_path)
    del want[(60,)], want[(99,)]
    assert rows(spark, tmp_path, src, s) == log.expected("s.t") == want
    gone = spark.read.format("delta").load(mirror(tmp_path, src, "s.t")).where("_op = 'k'").collect()
    assert sorted(r.id for r in gone) == [2, 4, 41, 60, 99] and all(r._deleted for r in gone)


# The landing job, stopped for good after its first micro-batch's merges committed and before
# the streaming query commits that batch to its checkpoint.
PAUSED_AFTER_MERGES = """
import sys, time
from airflow_provider_dblog.spark import land_changelog

class Paused(land_changelog.Lander):
    def land_batch(self, batch, batch_id):
        super().land_batch(batch, batch_id)
        print(f"merged batch {batch_id}", flush=True)
        time.sleep(600)

sys.exit(land_changelog.main(sys.argv[1:], Paused))
"""


def files_under(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "killed",
    [pytest.param(k, marks=pytest.mark.soak) for k in (0, 1)],
    ids=["first batch appends", "later batch merges"],
)
def test_batch_replayed_after_a_kill_writes_nothing(spark, tmp_path, killed):
    """Exactly once, no rewrite (issue 12 part 4): SIGKILL the job between a micro-batch's
    mirror commits (merges, a TRUNCATE's update; or the appends into mirrors the batch
    created) and its checkpoint commit; the next run replays the batch and Delta skips every
    command of it (transaction ids): no new mirror version, no new file, the rows as the
    replay rule says."""
    src = "once_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    a, b = (log.schema(t, [("id", "integer"), ("v", "text")]) for t in ("s.a", "s.b"))
    batch_0 = [log.ev(s, "c", {"id": k, "v": f"{s.table}-{k}"}) for s in (a, b) for k in range(20)]
    log.append(*batch_0)
    if killed == 1:
        land(spark, tmp_path)  # batch 0
    batch_1 = [
        *[log.ev(a, "u", {"id": k, "v": "u"}) for k in range(0, 20, 2)],
        log.ev(a, "d", key=[1]),
        log.ev(a, "c", {"id": 99, "v": "new"}),
        log.ev(b, "u", {"id": 3, "v": "u"}),
        log.ev(b, "t", key=[]),
        log.ev(b, "c", {"id": 5, "v": "after the truncate"}),
    ]
    if killed == 1:
        log.append(*batch_1)
    replayed = batch_0 if killed == 0 else batch_1
    out = tmp_path / "job.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DBLOG_SPARK_JARS": spark_jars()}
    with open(out, "w") as f:
        job = subprocess.Popen(
            [sys.executable, "-c", PAUSED_AFTER_MERGES, "--lake", str(tmp_path)],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        end = time.time() + 180
        while f"merged batch {killed}" not in out.read_text():
            assert job.poll() is None, out.read_text()[-3000:]
            assert time.time() < end, "the job did not merge its batch in time"
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job's own process group: python + its JVM
        job.wait(30)
    checkpoint = tmp_path / "mirrors" / "_checkpoints" / src  # the source table's stream
    assert (checkpoint / "offsets" / str(killed)).exists() and not (checkpoint / "commits" / str(killed)).exists()
    paths = [mirror(tmp_path, src, s.table) for s in (a, b)]
    for s in (a, b):  # the killed run did land the batch
        assert rows(spark, tmp_path, src, s) == log.expected(s.table)
    versions = {p: version(spark, p) for p in paths}
    files = {p: files_under(p) for p in paths}

    stats = land(spark, tmp_path)  # same checkpoint: the batch is replayed
    assert stats["events"] == len(replayed) and (checkpoint / "commits" / str(killed)).exists()
    assert {p: version(spark, p) for p in paths} == versions
    assert {p: files_under(p) for p in paths} == files
    for s in (a, b):
        assert rows(spark, tmp_path, src, s) == log.expected(s.table)


def test_continuous_landing_follows_new_commits_until_stopped(spark, tmp_path, monkeypatch):
    """Continuous mode (issue 12 part 3): one streaming query lands each new changelog commit
    within its trigger interval, without a new run, and stops when asked; a source whose
    first commit comes while it runs (a table of its own) gets its query too."""
    import threading

    from airflow_provider_dblog.spark import land_changelog
    from airflow_provider_dblog.spark.land_changelog import land as run

    monkeypatch.setattr(land_changelog, "DISCOVER_SECONDS", 1.0)

    src = "cont_" + uuid.uuid4().hex[:6]
    log = Changelog(tmp_path, src)
    s = log.schema("s.t", [("id", "integer"), ("v", "text")])
    log.append(*[log.ev(s, "c", {"id": i, "v": f"a{i}"}) for i in range(5)])
    stop, result = threading.Event(), {}
    landing = threading.Thread(
        target=lambda: result.update(run(spark, str(tmp_path), log=lambda m: None, trigger_seconds=1, stop=stop)),
        daemon=True,
    )
    landing.start()
    try:

        def landed() -> bool:
            try:
                return rows(spark, tmp_path, src, s) == log.expected("s.t")
            except Exception:  # noqa: BLE001 - the mirror does not exist before the first batch
                return False

        from scripts.polling import wait_for

        wait_for(landed, 120, "the first commit in the mirror", interval=0.5)
        for round_ in range(2):  # later commits: landed by the same running query
            log.append(log.ev(s, "u", {"id": round_, "v": f"b{round_}"}), log.ev(s, "d", key=[4 - round_]))
            wait_for(landed, 60, f"commit {round_ + 2} in the mirror", interval=0.5)
        late = Changelog(tmp_path, "late_" + uuid.uuid4().hex[:6])
        t = late.schema("s.t", [("id", "integer"), ("v", "text")])
        late.append(*[late.ev(t, "c", {"id": i, "v": f"late{i}"}) for i in range(3)])

        def late_landed() -> bool:
            try:
                return rows(spark, tmp_path, late.source_id, t) == late.expected("s.t")
            except Exception:  # noqa: BLE001 - the mirror does not exist before the first batch
                return False

        wait_for(late_landed, 120, "the new source's first commit in its mirror", interval=0.5)
        assert landing.is_alive()
    finally:
        stop.set()
        landing.join(120)
    assert not landing.is_alive() and result["events"] == 9 + 3
    assert len(result["checkpoint"]) == 2  # a stream, and a checkpoint, per source
