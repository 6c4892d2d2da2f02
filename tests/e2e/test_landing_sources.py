"""End to end: PostgreSQL / MariaDB -> DBLog engine -> Delta changelog -> Spark job -> mirrors.

The engine runs in-process (as in tests/integration/test_engine.py) against the real servers
while a random workload writes and a dump of all tables runs; the job lands the changelog
while the capture is still running, then again after a column was added at the source. Each
time every mirror must equal its source table row for row, typed columns compared
(spark/verify_mirror.py turns the mirror's typed values back into canonical values).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
import uuid

import pytest
from pyspark.sql import functions as F

from airflow_provider_dblog.core.dump_requests import status_key
from tests.e2e.test_landing import spark  # noqa: F401 - the shared SparkSession fixture
from tests.integration.databases import ADAPTERS

pytestmark = pytest.mark.integration

TYPED_DDL = {
    "postgres": "CREATE TABLE {ns}.typed (id int PRIMARY KEY, b bytea, d date, s smallint, f double precision, "
    "r real, ts timestamptz, big numeric, flag boolean, j jsonb, sd numeric(20,12))",
    "mysql": "CREATE TABLE {ns}.typed (id int unsigned PRIMARY KEY, b varbinary(16), d date, ti tinyint(1), "
    "f double, bu bigint unsigned, tz timestamp(6) NULL, e enum('x','y'), j json, sd decimal(20,12))",
}
TYPED_ROWS = {
    "postgres": (
        "INSERT INTO {ns}.typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        lambda i: (
            i,
            bytes([0, i, 255]),
            f"20{i % 30:02d}-02-28",
            -i,
            i / 3,
            0.25,
            "2024-03-01 10:00:00.5+02",
            "12345678901234567890.123",
            i % 2 == 0,
            None if i == 4 else json.dumps({"n": i}),  # a SQL NULL in a json column
            "0.000000000100",  # a small decimal (1.00E-10 in Spark)
        ),
    ),
    "mysql": (
        "INSERT INTO {ns}.typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        lambda i: (
            i,
            bytes([0, i, 255]),
            f"20{i % 30:02d}-02-28",
            i % 3,
            i / 3,
            2**64 - i,
            "2024-03-01 10:00:00.500000",
            "y",
            None if i == 4 else json.dumps({"n": i}),  # a SQL NULL in a json column
            "0.000000000100",  # a small decimal (1.00E-10 in Spark)
        ),
    ),
}


class Engine:
    """The capture engine in a background thread (stoppable, surfaces its exception)."""

    def __init__(self, cfg: dict, lake: str, state_path: str):
        from airflow_provider_dblog.config import make_source
        from airflow_provider_dblog.core.engine import Engine as DBLogEngine
        from airflow_provider_dblog.core.engine import EngineConfig
        from airflow_provider_dblog.outputs import make_output
        from airflow_provider_dblog.state.local import LocalStateStore

        self.source_id, self.lake = cfg["id"], lake
        self.state = LocalStateStore(state_path)
        self.engine = DBLogEngine(
            make_source(cfg), make_output(lake), self.state, EngineConfig(status_interval=0.5, control_interval=0.1)
        )
        self.stop_event, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, daemon=True)
        t0 = time.time()
        self.thread.start()
        self.wait(
            lambda: json.loads(self.state.get_value(status_key(self.source_id)) or "{}").get("updated_at", 0) >= t0,
            60,
            "the engine to start",
        )

    def _run(self):
        try:
            self.engine.run(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait()/stop()
            self.error = exc

    def wait(self, cond, timeout, what):
        end = time.time() + timeout
        while time.time() < end:
            if self.error is not None:
                raise self.error
            if cond():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def dump_all(self, chunk_size: int = 13) -> None:
        from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus

        spec = DumpSpec.new(self.source_id, None, None)
        self.state.add_dump(spec, DumpControl(chunk_size=chunk_size))
        self.wait(lambda: self.state.get_dump(spec.dump_id).status is DumpStatus.DONE, 120, "the dump")

    def sync(self, db) -> None:
        """Write a sentinel row and wait until it is in the changelog (then so is all before it)."""
        from airflow_provider_dblog.outputs import make_output

        uid = str(uuid.uuid4())
        with db.connect() as c:
            c.cursor().execute(f"INSERT INTO {db.ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (uid, "{}", True))
            c.commit()
        out = make_output(self.lake)
        out.open()
        self.wait(
            lambda: any(e.key == (uid,) for e in out.scan(self.source_id, f"{db.ns}.notes")),
            60,
            "the sentinel row in the changelog",
        )

    def stop(self):
        self.stop_event.set()
        self.thread.join(60)
        if self.error is not None:
            raise self.error


_IDS = itertools.count(10**6)  # fresh keys for inserts and key updates, across calls


def workload(db, rng: random.Random, n: int) -> None:
    ids = _IDS
    c = db.connect()
    try:
        for _ in range(n):
            db.random_transaction(c, rng, lambda: next(ids))
    finally:
        c.close()


def verify_all(spark, db, cfg, mirrors) -> dict:  # noqa: F811
    from airflow_provider_dblog.config import make_source
    from airflow_provider_dblog.spark.verify_mirror import verify_table

    source = make_source(cfg)
    source.open()
    try:
        counts = {}
        for t in cfg["tables"]:
            n_src, n_mir, mism = verify_table(spark, source, mirrors, t)
            assert not mism, f"{t}: {len(mism)} mismatches, e.g. " + "; ".join(m.describe() for m in mism[:3])
            assert n_src == n_mir
            counts[t] = n_src
        return counts
    finally:
        source.close()


def create_typed(db, n: int, *then: str) -> None:
    """The typed table with rows 1..n, then the statements ``then``."""
    with db.connect() as c:
        cur = c.cursor()
        cur.execute(TYPED_DDL[db.kind].format(ns=db.ns))
        sql, values = TYPED_ROWS[db.kind]
        for i in range(1, n + 1):
            cur.execute(sql.format(ns=db.ns), values(i))
        for statement in then:
            cur.execute(statement)
        c.commit()


def corruptions(session, path: str) -> dict[str, str]:
    """One planted corruption per column of the typed mirror, as a Spark SQL expression,
    chosen by the column's mirror type (row 5 has no NULLs; row 4's json is SQL NULL)."""
    out = {}
    for f in session.read.format("delta").load(path).schema.fields:
        name, t = f.name, f.dataType.simpleString()
        if name == "id" or name.startswith("_"):
            continue
        if name == "j":
            out[name] = "'null'"  # the text 'null' where the source has SQL NULL (row 4)
        elif t == "binary":
            out[name] = "unhex('FF')"
        elif t == "date":
            out[name] = f"date_add(`{name}`, 1)"
        elif t.startswith("timestamp"):
            out[name] = f"`{name}` + INTERVAL 1 SECOND"
        elif t == "boolean":
            out[name] = f"NOT `{name}`"
        elif t == "string":
            out[name] = f"concat(`{name}`, 'x')"
        elif t.startswith("decimal"):
            scale = int(t.rstrip(")").split(",")[1])
            out[name] = f"`{name}` + {10**-scale if scale else 1}BD"
        else:  # integers and floating point
            out[name] = f"`{name}` + 1"
    return out


# make test plants a random half of the columns' corruptions per database (each column
# checked about every other run; the seed is printed, DBLOG_CORRUPT_SEED replays it); make
# soak plants every column's.
CORRUPT_SEED = int(os.environ.get("DBLOG_CORRUPT_SEED") or random.SystemRandom().randrange(10**9))


@pytest.mark.parametrize(
    "every_column",
    [pytest.param(False, marks=pytest.mark.soak), pytest.param(True, marks=pytest.mark.soak)],
    ids=["half-the-columns", "every-column"],
)
def test_verify_mirror_catches_a_planted_corruption_of_each_column_type(spark, tmp_path, every_column):  # noqa: F811
    """spark/verify_mirror.py compares typed values: one changed value in any column (a
    timestamp a second off, a decimal one unit of its scale off, a byte, a date, a boolean,
    a JSON SQL NULL turned into the text 'null') is a mismatch naming that column; the
    untouched mirror has none (no false mismatch on a small decimal like 1.00E-10)."""
    pick = random.Random(CORRUPT_SEED)
    if not every_column:
        print(f"\ncorrupted columns: seed {CORRUPT_SEED} (rerun with DBLOG_CORRUPT_SEED={CORRUPT_SEED})")
    from delta.tables import DeltaTable

    from airflow_provider_dblog.config import make_source
    from airflow_provider_dblog.spark.land_changelog import land, mirror_path
    from airflow_provider_dblog.spark.verify_mirror import verify_table

    for kind in ("postgres", "mysql"):
        db = ADAPTERS[kind]()
        source_id = f"corrupt_{kind}_{uuid.uuid4().hex[:6]}"
        db.create()
        engine = None
        try:
            create_typed(db, 7)
            cfg = {**db.source_config(source_id), "tables": [f"{db.ns}.typed", f"{db.ns}.notes"]}
            lake = str(tmp_path / kind)
            engine = Engine(cfg, f"delta://{lake}", str(tmp_path / f"{kind}.db"))
            engine.dump_all()
            engine.sync(db)
            engine.stop()
            engine = None
            land(spark, lake, source=source_id, log=lambda m: None)
            table, mirrors = f"{db.ns}.typed", f"{lake}/mirrors"
            path = mirror_path(mirrors, source_id, table)
            source = make_source(cfg)
            source.open()
            try:
                assert verify_table(spark, source, mirrors, table)[2] == []
                mirror = DeltaTable.forPath(spark, path)
                clean = mirror.history(1).first().version
                planted = list(corruptions(spark, path).items())
                if not every_column:
                    planted = pick.sample(planted, (len(planted) + 1) // 2)
                for column, expr in planted:
                    row = 4 if column == "j" else 5
                    mirror.update(f"id = {row}", {f"`{column}`": F.expr(expr)})
                    mism = verify_table(spark, source, mirrors, table)[2]
                    mirror.restoreToVersion(clean)
                    assert [m.kind for m in mism] == ["different"], (kind, column, mism)
                    assert f"{column}:" in mism[0].describe(), (kind, column, mism[0].describe())
                assert verify_table(spark, source, mirrors, table)[2] == []
            finally:
                source.close()
        finally:
            if engine is not None:
                engine.stop_event.set()
                engine.thread.join(60)
            db.drop(source_id)


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_source_to_mirrors(kind, spark, tmp_path):  # noqa: F811
    from airflow_provider_dblog.spark.land_changelog import catalog_names, land

    rng = random.Random(7)
    db = ADAPTERS[kind]()
    db.approx_rows = 60
    source_id = f"land_{kind}_{uuid.uuid4().hex[:6]}"
    db.create()
    engine = None
    try:
        create_typed(db, 20, f"UPDATE {db.ns}.typed SET b = NULL, d = NULL WHERE id = 3")
        db.seed(rng, 60)  # rows from before the capture: only the dump delivers them
        cfg = db.source_config(source_id)
        cfg["tables"] = cfg["tables"] + [f"{db.ns}.typed"]
        lake = str(tmp_path / "lake")
        engine = Engine(cfg, f"delta://{lake}", str(tmp_path / "state.db"))
        workload(db, rng, 40)
        engine.dump_all()
        workload(db, rng, 40)  # log events after the dump, incl. deletes and key updates
        engine.sync(db)

        first = land(spark, lake, source=source_id, log=lambda m: None)  # the capture keeps running
        assert first["events"] > 0
        counts = verify_all(spark, db, cfg, f"{lake}/mirrors")
        assert counts[f"{db.ns}.accounts"] > 0 and counts[f"{db.ns}.typed"] == 20

        # Schema evolution while capturing: a new nullable column reaches the mirror.
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"ALTER TABLE {db.ns}.accounts ADD COLUMN extra varchar(20)")
            c.commit()
            cur.execute(f"UPDATE {db.ns}.accounts SET extra = 'filled' WHERE id IN (1, 2, 3)")
            c.commit()
        workload(db, rng, 20)
        with db.connect() as c:  # after the random workload, which may delete any account
            c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name, extra) VALUES (424242, 'new', 'x')")
            c.commit()
        engine.sync(db)
        engine.stop()
        engine = None

        second = land(spark, lake, source=source_id, log=lambda m: None)
        assert 0 < second["events"] < first["events"] + 200  # only the new changelog versions
        verify_all(spark, db, cfg, f"{lake}/mirrors")
        view = catalog_names(source_id, f"{db.ns}.accounts")[2]
        assert spark.sql(f"SELECT extra FROM {view} WHERE id = 424242").first().extra == "x"
        assert land(spark, lake, source=source_id, log=lambda m: None)["events"] == 0
    finally:
        if engine is not None:
            engine.stop_event.set()
            engine.thread.join(60)
        db.drop(source_id)


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.soak) for k in ("postgres", "mysql")])
def test_drift_in_a_mirror_is_found_by_ranges_and_repaired_by_small_dumps(kind, spark, tmp_path, monkeypatch):  # noqa: F811
    """Issue 15 part 4 for mirrors: rows removed from, changed in and added to a mirror behind
    the landing's back are found by range digests (SQL on the source, Spark on the mirror)
    exactly as the whole comparison finds them, reading a small part of the source; the
    VerifyOperator (dblog_verify_repair with DBLOG_VERIFY_MIRRORS) requests a key-list dump
    of them, which reads < 1 % of the table, and after the next landing the mirror equals its
    source again."""
    from delta.tables import DeltaTable

    from airflow_provider_dblog.config import make_source
    from airflow_provider_dblog.core.dumps import DumpStatus
    from airflow_provider_dblog.spark.land_changelog import land, mirror_path
    from airflow_provider_dblog.spark.verify_mirror import verify_table, verify_table_by_ranges

    db = ADAPTERS[kind]()
    source_id = f"drift_{kind}_{uuid.uuid4().hex[:6]}"
    db.create()
    engine = None
    try:
        db.seed(random.Random(5), 50)
        accounts = f"{db.ns}.accounts"
        with db.connect() as c:
            bulk = (
                "SELECT seq, 'bulk ' || seq, seq / 7.0, '{\"k\": 1}', '2024-01-02 03:04:05.678' FROM generate_series(1000, 20999) seq"
                if kind == "postgres"
                else f"SELECT seq, CONCAT('bulk ', seq), seq / 7, '{{\"k\": 1}}', '2024-01-02 03:04:05.678' FROM {db.ns}.seq_1000_to_20999"
            )
            c.cursor().execute(f"INSERT INTO {accounts} (id, name, balance, meta, updated) {bulk}")
            c.commit()
        cfg = db.source_config(source_id)
        lake, state = str(tmp_path / "lake"), str(tmp_path / "state.db")
        engine = Engine(cfg, f"delta://{lake}", state)
        engine.dump_all(chunk_size=5000)
        engine.sync(db)
        engine.stop()
        engine = None
        land(spark, lake, source=source_id, log=lambda m: None)
        mirrors = f"{lake}/mirrors"
        path = mirror_path(mirrors, source_id, accounts)

        source = make_source(cfg)
        source.open()
        try:
            n_src, n_mir, mism, stats = verify_table_by_ranges(spark, source, mirrors, accounts, span=2000)
            assert mism == [] and n_src == n_mir == 20_050
            assert stats is not None and stats.rows_read == 0, stats  # every column hashed alike
            assert stats.digests == 11  # one per 2,000 rows

            mirror = DeltaTable.forPath(spark, path)  # drift the landing never made
            mirror.delete("id IN (1003, 9000, 20999)")
            mirror.update("id IN (5, 12345)", {"name": F.lit("tampered")})
            mirror.update("id = 15000", {"balance": F.expr("balance + 0.01")})
            extra = spark.read.format("delta").load(path).where("id IN (1500, 1501)")
            extra = extra.withColumn("id", F.col("id") + 10**9)  # rows whose delete never landed
            extra = extra.withColumn("_key", F.to_json(F.array("id")))
            extra.write.format("delta").mode("append").save(path)

            whole = verify_table(spark, source, mirrors, accounts)[2]
            n_src, n_mir, ranged, stats = verify_table_by_ranges(spark, source, mirrors, accounts, span=2000)
            assert sorted((m.key, m.kind) for m in ranged) == sorted((m.key, m.kind) for m in whole)
            assert sorted((m.key, m.kind) for m in ranged) == sorted(
                [((k,), "missing") for k in (1003, 9000, 20999)]
                + [((k,), "different") for k in (5, 12345, 15000)]
                + [((10**9 + k,), "extra") for k in (1500, 1501)]
            )
            assert n_src == 20_050 and n_mir == 20_049
            assert stats.rows_read <= 64 * len(ranged) < n_src / 10, stats  # a small part of the source
        finally:
            source.close()

        from airflow_provider_dblog.operators.verify import VerifyOperator

        conn_id = f"src_{source_id}"
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            json.dumps(
                {
                    "conn_type": kind,
                    "host": db.host,
                    "port": db.port,
                    "login": db.user,
                    "password": db.password,
                    **({"schema": db.db} if kind == "postgres" else {}),
                    "extra": {"source_id": source_id, "tables": db.tables()},
                }
            ),
        )
        summary = VerifyOperator(
            task_id="verify", source_conn_id=conn_id, state=state, mirrors=mirrors, tables=[accounts]
        ).execute({})[accounts]
        assert summary["mismatches"] == 8 and summary["mirror_rows"] == 20_049, summary
        assert summary["range_digests"] > 0 and 0 < summary["source_rows_read"] <= 64 * 8, summary
        dump_id = summary["repair_dump_id"]
        engine = Engine(cfg, f"delta://{lake}", state)
        engine.wait(lambda: engine.state.get_dump(dump_id).status is DumpStatus.DONE, 120, "the repair dump")
        dumped = engine.state.get_dump(dump_id).progress[accounts].rows
        assert 0 < dumped < 20_050 / 100, dumped  # the repair read < 1 % of the table
        engine.sync(db)
        engine.stop()
        engine = None
        land(spark, lake, source=source_id, log=lambda m: None)
        source = make_source(cfg)
        source.open()
        try:
            assert verify_table(spark, source, mirrors, accounts)[2] == []
            assert verify_table_by_ranges(spark, source, mirrors, accounts, span=2000)[2] == []
        finally:
            source.close()
    finally:
        if engine is not None:
            engine.stop_event.set()
            engine.thread.join(60)
        db.drop(source_id)
