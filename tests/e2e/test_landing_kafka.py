"""End to end over Kafka: PostgreSQL -> DBLog engine -> kafka:// output (the real broker) ->
Spark's Kafka source -> the landing job -> mirrors (spark/kafka_changelog.py, docs/kafka.md).

The capture writes a random workload, a dump of every table (chunk ranges: one copy per
partition), a TRUNCATE and typed values (bytea, jsonb with edge values and SQL NULL, numeric,
timestamptz) to the topics; an aborted Kafka transaction of another producer puts records into
the same topics that would delete and add rows. Each landing must give mirrors equal to the
source (spark/verify_mirror.py, typed values), the second landing exactly the records written
since the first (offsets in the checkpoint), and the aborted records never.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

from airflow_provider_dblog.core.events import ChangeEvent, Op, Origin, Position
from airflow_provider_dblog.outputs.kafka import KafkaOutput
from airflow_provider_dblog.outputs.kafka_format import H_SOURCE, Formatter, header_map
from airflow_provider_dblog.outputs.kafka_tail import read_all
from tests.e2e.test_landing import spark  # noqa: F401 - the shared SparkSession fixture
from tests.e2e.test_landing_sources import Engine, create_typed, verify_all, workload
from tests.integration.databases import ADAPTERS, env

pytestmark = pytest.mark.integration

# Positions above any the capture writes: were these aborted records landed, they would win.
ABORTED_COORD = "F" * 16


def committed_records(bootstrap: str, source_id: str) -> list[str]:
    """The ops of the source's records in its table topics that a read_committed consumer
    sees (the copies of a TRUNCATE or chunk range in each partition one by one, as landed)."""
    out = KafkaOutput(bootstrap)
    out.open()
    try:
        topics = out.topics_of(source_id)
        headers = [header_map(h) for h, _ in read_all({"bootstrap.servers": bootstrap}, topics)]
        return [h["dblog.op"] for h in headers if h.get(H_SOURCE) == source_id]
    finally:
        out.close()


def produce_aborted(bootstrap: str, source_id: str, table: str, delete_keys: list[int], new_key: int) -> int:
    """A transaction of dblog records (deletes of ``delete_keys``, an insert of ``new_key``) in
    the table's topic, produced, flushed to the broker, then aborted. Returns their count."""
    import confluent_kafka

    fmt = Formatter("dblog")
    events = [
        ChangeEvent(source_id, table, Op.DELETE, (k,), None, None, Position(f"{ABORTED_COORD}{i:010d}"))
        for i, k in enumerate(delete_keys)
    ]
    events.append(
        ChangeEvent(
            source_id,
            table,
            Op.CREATE,
            (new_key,),
            None,
            {"id": new_key, "name": "aborted"},
            Position(f"{ABORTED_COORD}{len(delete_keys):010d}"),
            origin=Origin.LOG,
        )
    )
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"dblog-test-aborter-{source_id}",
            "partitioner": "murmur2_random",  # the output's partitioning: the key's partition
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    topic = KafkaOutput(bootstrap).topic_for(source_id, table)
    for e in events:
        msg = fmt.message(e, None, int(time.time() * 1e6), None)
        producer.produce(topic, value=msg.value, key=msg.key, headers=msg.headers)
    assert producer.flush(30) == 0  # in the partitions' logs: a read_uncommitted reader sees them
    producer.abort_transaction(30)
    return len(events)


def test_kafka_records_give_the_delta_changelog_columns(spark):  # noqa: F811
    """spark/kafka_changelog.py turns the Kafka output's records into exactly the rows the
    Delta changelog holds for the same events: every column, ``after`` byte for byte (JSON
    numbers as written, the TOAST placeholder, a nested ``position``, integers beyond 64 bits)
    - except where a JSON column has a key ``after``: then it is equal as JSON."""
    import json

    from pyspark.sql import functions as F

    from airflow_provider_dblog.core.toast import unchanged_toast_value
    from airflow_provider_dblog.outputs.delta import changelog_batch
    from airflow_provider_dblog.spark.kafka_changelog import changelog_columns

    def pos(n: int, sub: int = 0) -> Position:
        return Position(f"{n:016X}{0:010d}", sub)

    def ev(op, key, after, n, before=None, origin=Origin.LOG, commit_ts=1_700_000_000_123_456, dump_id=None):
        return ChangeEvent(
            "pg1", "app.t", Op(op), tuple(key), before, after, pos(n), commit_ts, "77", origin, dump_id, "sid1"
        )

    odd = {"j": {"f": [1e16, 10000000.0, -0.0, 0.1, 1.5e-300], "s": 'é🚀"q\\', "doc": {"a": 1, "position": "x"}}}
    events = [
        ev("c", [1], {"id": 1, **odd}, 1),
        ev("c", [2], {"id": 2, "big": 2**70, "u": 18446744073709551615}, 2),  # orjson refuses: the stdlib writes
        ev("u", [1], {"id": 1, "t": unchanged_toast_value(), "d": "12.30"}, 3, before={"id": 1, "t": "old"}),
        ev("d", [7, "eu"], None, 4, before={"id": 7}),
        ev("t", [], None, 5),
        ev("k", [], {"from": [1], "to": [5], "since": pos(5).encode()}, 6, origin=Origin.DUMP, dump_id="d1"),
        ev("r", [3], {"id": 3, "x": None}, 7, origin=Origin.DUMP, commit_ts=None, dump_id="d1"),
        ev("c", [4], {"id": 4, "j": {"after": {"a": 1.0}}}, 8),  # "after": twice in the record
    ]
    delta = changelog_batch(events, 3)
    written_at = delta.column("written_at").cast("int64")[0].as_py()
    fmt = Formatter("dblog")
    records = [(m.key, m.value) for m in (fmt.message(e, 3, written_at, None) for e in events)]
    kafka = spark.createDataFrame(records, "key binary, value binary").select(
        *changelog_columns(F.col("value"), F.col("key"))
    )
    micros = {c: F.unix_micros(c).alias(c) for c in ("commit_ts", "written_at")}
    got = [r.asDict() for r in kafka.select(*[micros.get(c, F.col(c)) for c in kafka.columns]).collect()]
    for c in micros:  # the Delta changelog's timestamps as microseconds too
        delta = delta.set_column(delta.schema.get_field_index(c), c, delta.column(c).cast("int64"))
    want = delta.to_pylist()
    assert [list(r) for r in got] == [list(r) for r in want]  # the same columns, in the same order
    for g, w in zip(got, want):
        if w["key"] == "[4]":  # the ambiguous record: Jackson's text, the same JSON
            assert json.loads(g.pop("after")) == json.loads(w.pop("after"))
            g.pop("before"), w.pop("before")
        assert g == w


@pytest.mark.soak  # make soak: one of the longest runs (README)
def test_capture_to_kafka_landed_by_spark(spark, tmp_path):  # noqa: F811
    from pyspark.sql import functions as F

    from airflow_provider_dblog.spark.kafka_changelog import KafkaChangelog
    from airflow_provider_dblog.spark.land_changelog import land, mirror_path

    bootstrap = env("DBLOG_KAFKA_BOOTSTRAP")
    rng = random.Random(14)
    db = ADAPTERS["postgres"]()
    db.approx_rows = 60
    source_id = f"landk_{uuid.uuid4().hex[:6]}"
    url = f"kafka://{bootstrap}"  # topics <source id>.<table>, the output's default prefix
    lake, state = str(tmp_path / "lake"), str(tmp_path / "state.db")
    mirrors = f"{lake}/mirrors"
    db.create()
    engine = None
    try:
        create_typed(
            db,
            12,
            # jsonb edge values: the exact text of a nested value must survive the Kafka record
            f"""INSERT INTO {db.ns}.typed (id, j, big) VALUES (100, '{{"n": 18446744073709551615, "x": -0.5, """
            f""""s": "é🚀\\"q", "a": [1, null, true, {{}}], "z": null}}', '-1.000000000000000000001')""",
        )
        db.seed(rng, 60)  # rows from before the capture: only the dump delivers them
        cfg = db.source_config(source_id)
        cfg["tables"] = cfg["tables"] + [f"{db.ns}.typed"]
        engine = Engine(cfg, url, state)
        workload(db, rng, 30)
        engine.dump_all()  # chunk ranges (op k), one copy in every partition
        with db.connect() as c:
            db.truncate(c, ["orders"])  # op t, one copy in every partition
            for no in range(1, 6):
                db._insert_order(c, "eu", 10_000 + no, rng)  # after the TRUNCATE: they stay
            c.commit()
        workload(db, rng, 30)
        engine.sync(db)
        engine.stop()
        engine = None

        # Another producer's transaction in the same topics, aborted: never to be landed.
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"SELECT id FROM {db.ns}.accounts ORDER BY id LIMIT 5")
            victims = [r[0] for r in cur.fetchall()]
        assert victims
        produce_aborted(bootstrap, source_id, f"{db.ns}.accounts", victims, 987_654_321)

        source = KafkaChangelog.from_url(url, source_id)
        t0 = time.time()
        first = land(spark, lake, source=source_id, log=lambda m: None, kafka=source)
        first_seconds = time.time() - t0
        ops = committed_records(bootstrap, source_id)
        assert {"t", "k", "r", "c", "u", "d"} <= set(ops)  # a TRUNCATE and chunk ranges among them
        assert first["events"] == len(ops)  # every committed record, once
        counts = verify_all(spark, db, cfg, mirrors)
        assert counts[f"{db.ns}.typed"] == 13 and counts[f"{db.ns}.accounts"] > 0

        accounts = spark.read.format("delta").load(mirror_path(mirrors, source_id, f"{db.ns}.accounts"))
        assert accounts.where(F.col("_position").startswith(ABORTED_COORD)).count() == 0
        assert accounts.where("_origin = 'log' AND _commit_ts IS NULL").count() == 0  # typed from the record
        orders = spark.read.format("delta").load(mirror_path(mirrors, source_id, f"{db.ns}.orders"))
        assert orders.where("order_no <= 60 AND NOT _deleted").count() == 0  # the seeded rows: truncated

        # More changes, by a restarted capture: the next run lands exactly what came since.
        before = len(committed_records(bootstrap, source_id))
        engine = Engine(cfg, url, state)
        workload(db, rng, 20)
        with db.connect() as c:
            c.cursor().execute(f'UPDATE {db.ns}.typed SET j = \'{{"k": [2.50, "ü"]}}\', d = NULL WHERE id = 3')
            c.cursor().execute(f"DELETE FROM {db.ns}.typed WHERE id = 4")
            c.commit()
        engine.sync(db)
        engine.stop()
        engine = None
        after = len(committed_records(bootstrap, source_id))
        assert after > before

        second = land(spark, lake, source=source_id, log=lambda m: None, kafka=source)
        assert second["events"] == after - before  # the offsets in the checkpoint: nothing twice
        counts = verify_all(spark, db, cfg, mirrors)
        assert counts[f"{db.ns}.typed"] == 12
        assert land(spark, lake, source=source_id, log=lambda m: None, kafka=source)["events"] == 0
        print(f"first landing from Kafka: {first['events']} records in {first_seconds:.1f} s")
    finally:
        if engine is not None:
            engine.stop_event.set()
            engine.thread.join(60)
        db.drop(source_id)
