"""The Kafka output's records without a broker: partitions, headers, the dblog value, and
Debezium's envelope field by field (docs/kafka.md), for PostgreSQL and MySQL sources."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dblog import __version__
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.hooks.kafka import kafka_output, kafka_output_config
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.outputs.kafka import KafkaOutput, client_config, parse_url
from airflow_provider_dblog.outputs.kafka_format import (
    DEBEZIUM_UNAVAILABLE,
    Formatter,
    event_from_message,
    header_map,
    murmur2_partition,
    murmur2_partitions,
    topic_name,
)

WRITTEN_AT = 1_700_000_000_123_456  # µs
COMMIT_TS = 1_699_999_999_654_321

PG = TableSchema("shop.orders", (Column("id", "integer"), Column("total", "numeric")), ("id",))
MY = TableSchema("shop.orders", (Column("id", "int"), Column("total", "decimal(10,2)")), ("id",))


def event(op: Op, key=(7,), before=None, after=None, origin=Origin.LOG, sub=0, txid="1234", schema=PG):
    return ChangeEvent(
        source_id="pg1",
        table="shop.orders",
        op=op,
        key=key,
        before=before,
        after=after,
        position=Position("00000001A2B3C5F00000000000", sub),
        commit_ts=None if origin is Origin.DUMP else COMMIT_TS,
        txid=None if origin is Origin.DUMP else txid,
        origin=origin,
        dump_id="d-1" if origin is Origin.DUMP else None,
        schema_id=schema.schema_id(),
    )


ROW0, ROW1 = {"id": 7, "total": "9.90"}, {"id": 7, "total": "12.30"}
CASES = {
    "insert": (Op.CREATE, None, ROW1, Origin.LOG),
    "update": (Op.UPDATE, ROW0, ROW1, Origin.LOG),
    "delete": (Op.DELETE, ROW0, None, Origin.LOG),
    "snapshot read": (Op.READ, None, ROW1, Origin.DUMP),
}


# Kafka's Java client (Utils.toPositive(Utils.murmur2(key)) % n), run on these keys: (3, 7)
KAFKA_MURMUR2 = {
    "": (0, 2),
    "a": (1, 5),
    "ab": (2, 0),
    "abc": (0, 4),
    "[42]": (2, 1),
    '[7,"eu"]': (1, 5),
    "hello kafka!": (0, 1),
    "Zoë": (1, 1),
}


def test_partitions_are_kafkas_murmur2():
    for text, (p3, p7) in KAFKA_MURMUR2.items():
        assert (murmur2_partition(text.encode(), 3), murmur2_partition(text.encode(), 7)) == (p3, p7), text


def test_compiled_partitions_are_kafkas_murmur2_too():
    from airflow_provider_dblog.sources.native import extension

    keys = [t.encode() for t in KAFKA_MURMUR2]
    for i in (0, 1):  # (3, 7) partitions
        counts = [(3, 7)[i]] * len(keys)
        assert murmur2_partitions(keys, counts) == [p[i] for p in KAFKA_MURMUR2.values()]
    more = [bytes(range(n)) for n in range(40)]
    counts = [3, 7, 1, 12] * 10
    slow = [murmur2_partition(k, n) for k, n in zip(more, counts)]
    assert murmur2_partitions(more, counts) == slow
    if extension is None:
        pytest.skip("the compiled extension is not built here: the Python one was compared")
    assert (
        extension.murmur2_partitions(keys + more, [7] * len(keys) + counts)
        == [p[1] for p in KAFKA_MURMUR2.values()] + slow
    )
    with pytest.raises(ValueError):
        extension.murmur2_partitions(keys[:1], [0])


def test_topic_names_are_legal():
    assert topic_name("pg1.shop.orders") == "pg1.shop.orders"
    assert topic_name("pg1.shop.Bestellungen Zoë$") == "pg1.shop.Bestellungen_Zo__"


@pytest.mark.parametrize("fmt", ["dblog", "debezium"])
def test_headers_carry_position_epoch_schema_and_the_partition_follows_the_key(fmt):
    m = Formatter(fmt, "postgresql", "shopdb").message(event(Op.UPDATE, before=ROW0, after=ROW1), 5, WRITTEN_AT, PG)
    h = header_map(m.headers)
    assert h["dblog.position"] == "00000001A2B3C5F00000000000.000000000"
    assert h["dblog.epoch"] == "5"
    assert h["dblog.schema_id"] == PG.schema_id()
    assert (h["dblog.source_id"], h["dblog.table"], h["dblog.key"], h["dblog.op"]) == ("pg1", "shop.orders", "[7]", "u")
    assert m.partition_key == b"[7]"  # the same in both formats: one partition per key
    assert m.key == (b"[7]" if fmt == "dblog" else b'{"id":7}')


def test_dblog_value_is_the_changelog_record():
    m = Formatter("dblog").message(event(Op.UPDATE, before=ROW0, after=ROW1), 5, WRITTEN_AT, PG)
    rec = json.loads(m.value)
    assert list(rec) == [
        "source_id",
        "table",
        "op",
        "key",
        "before",
        "after",
        "position",
        "origin",
        "dump_id",
        "schema_id",
        "commit_ts",
        "txid",
        "epoch",
        "written_at",
    ]
    assert rec["key"] == [7] and rec["before"] == ROW0 and rec["after"] == ROW1 and rec["epoch"] == 5
    assert rec["written_at"] == "2023-11-14T22:13:20.123456+00:00"


@pytest.mark.parametrize("case", list(CASES))
def test_debezium_envelope_postgresql(case):
    op, before, after, origin = CASES[case]
    e = event(op, before=before, after=after, origin=origin)
    value = json.loads(Formatter("debezium", "postgresql", "shopdb").message(e, 3, WRITTEN_AT, PG).value)
    assert set(value) == {"before", "after", "source", "op", "ts_ms", "ts_us", "transaction"}
    assert value["op"] == op.value
    assert value["before"] == before and value["after"] == after
    assert value["ts_ms"] == WRITTEN_AT // 1000 and value["transaction"] is None
    src = value["source"]
    assert src["version"] == __version__ and src["connector"] == "postgresql" and src["name"] == "pg1"
    assert (src["db"], src["schema"], src["table"]) == ("shopdb", "shop", "orders")
    assert src["snapshot"] == ("incremental" if origin is Origin.DUMP else "false")
    assert src["ts_ms"] == (WRITTEN_AT if origin is Origin.DUMP else COMMIT_TS) // 1000
    assert src["position"] == "00000001A2B3C5F00000000000.000000000"
    if origin is Origin.LOG:
        assert src["txId"] == 1234 and "gtid" not in src
    else:
        assert "txId" not in src and src["dump_id"] == "d-1"


@pytest.mark.parametrize("case", list(CASES))
def test_debezium_envelope_mysql(case):
    op, before, after, origin = CASES[case]
    e = event(op, before=before, after=after, origin=origin, txid="3e11fa47-71ca-11e1-9e33-c80aa9429562:23", schema=MY)
    value = json.loads(Formatter("debezium", "mysql").message(e, None, WRITTEN_AT, MY).value)
    assert value["op"] == op.value and value["before"] == before and value["after"] == after
    src = value["source"]
    assert src["connector"] == "mysql" and (src["db"], src["table"]) == ("shop", "orders") and "schema" not in src
    assert src["snapshot"] == ("incremental" if origin is Origin.DUMP else "false")
    if origin is Origin.LOG:
        assert src["gtid"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23" and "txId" not in src


@pytest.mark.parametrize("connector", ["postgresql", "mysql"])
def test_debezium_truncate_goes_to_every_partition_without_a_key(connector):
    e = event(Op.TRUNCATE, key=())
    m = Formatter("debezium", connector, "shopdb").message(e, 1, WRITTEN_AT, PG)
    value = json.loads(m.value)
    assert value["op"] == "t" and value["before"] is None and value["after"] is None
    assert value["source"]["table"] == "orders"
    assert m.key is None and m.partition_key is None  # None: every partition of the topic


def test_dump_ranges_only_in_the_dblog_format():
    rng = event(Op.RANGE, key=(), after={"from": None, "to": [9], "since": "x"}, origin=Origin.DUMP)
    assert Formatter("debezium", "mysql").message(rng, 1, WRITTEN_AT, MY) is None
    m = Formatter("dblog").message(rng, 1, WRITTEN_AT, MY)
    assert m.partition_key is None and json.loads(m.value)["op"] == "k"


def test_unchanged_toast_is_debeziums_unavailable_value_and_reads_back():
    e = event(Op.UPDATE, before=None, after={"id": 7, "total": {"$unchanged_toast": True}})
    m = Formatter("debezium", "postgresql", "shopdb").message(e, 1, WRITTEN_AT, PG)
    assert json.loads(m.value)["after"] == {"id": 7, "total": DEBEZIUM_UNAVAILABLE}
    back = event_from_message(header_map(m.headers), m.value)
    assert back.after == e.after


@pytest.mark.parametrize("fmt", ["dblog", "debezium"])
def test_records_read_back_as_the_events(fmt):
    for op, before, after, origin in CASES.values():
        e = event(op, before=before, after=after, origin=origin)
        m = Formatter(fmt, "postgresql", "db").message(e, 2, WRITTEN_AT, PG)
        assert event_from_message(header_map(m.headers), m.value) == e


def test_url_options_and_their_errors(monkeypatch):
    assert parse_url("b1:9092,b2:9092?topic_prefix=cdc&format=debezium") == (
        "b1:9092,b2:9092",
        {"topic_prefix": "cdc", "format": "debezium"},
    )
    for bad in ("?topic=x", "b:1/topic", "b:1?sasl.password=x", "b:1?format=avro", "b:1?connector=oracle"):
        with pytest.raises(ConfigurationError):
            parse_url(bad)
    out = make_output("kafka://b:1?topic_prefix=cdc")
    assert isinstance(out, KafkaOutput)
    assert out.topic_for("pg1", "shop.orders") == "cdc.shop.orders"
    assert out.schema_topic("pg1") == "cdc.dblog_schemas"
    one = make_output("kafka://b:1?topic=all")
    assert one.topic_for("pg1", "shop.orders") == "all" and one.schema_topic("pg1") == "all.dblog_schemas"
    assert make_output("kafka://b:1").topic_for("pg1", "a.b") == "pg1.a.b"  # Debezium-like default
    monkeypatch.setenv("DBLOG_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.password": "s3cret"}')
    assert client_config("b:1", "DBLOG_KAFKA_CONFIG")["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(out)
    monkeypatch.setenv("DBLOG_KAFKA_CONFIG", '{"transactional.id": "mine"}')
    with pytest.raises(ConfigurationError, match="transactional.id"):
        client_config("b:1", "DBLOG_KAFKA_CONFIG")
    # the partitioner places a key where Kafka's Java client does (docs/kafka.md): ours too
    monkeypatch.setenv("DBLOG_KAFKA_CONFIG", '{"partitioner": "consistent_random"}')
    with pytest.raises(ConfigurationError, match="partitioner"):
        client_config("b:1", "DBLOG_KAFKA_CONFIG")
    monkeypatch.setenv("DBLOG_KAFKA_CONFIG", '{"sasl.password": "s3cret"')
    with pytest.raises(ConfigurationError) as err:
        client_config("b:1", "DBLOG_KAFKA_CONFIG")
    assert "s3cret" not in str(err.value)


class _Conn:
    conn_type = "kafka"
    host = None
    port = None
    extra_dejson = {
        "bootstrap.servers": "k1:9093",
        "security.protocol": "SASL_SSL",
        "sasl.username": "dblog",
        "sasl.password": "s3cret",
        "group.id": "someone-elses-consumers",
        "topic_prefix": "cdc",
        "format": "debezium",
    }


def test_airflow_kafka_connection_keeps_secrets_out_of_the_url():
    out_cfg, env = kafka_output_config("kafka_default", _Conn())
    assert out_cfg == {"url": "kafka://k1:9093?topic_prefix=cdc&format=debezium&config_env=DBLOG_KAFKA_CONFIG"}
    assert "s3cret" not in out_cfg["url"]
    settings = json.loads(env["DBLOG_KAFKA_CONFIG"])
    assert settings == {"security.protocol": "SASL_SSL", "sasl.username": "dblog", "sasl.password": "s3cret"}
    out = kafka_output("kafka_default", _Conn())
    assert out.topic_for("pg1", "a.b") == "cdc.a.b" and out.formatter.fmt == "debezium"
    assert "s3cret" not in repr(out)

    class NotKafka(_Conn):
        conn_type = "postgres"

    with pytest.raises(ConfigurationError, match="not 'kafka'"):
        kafka_output_config("pg", NotKafka())


def test_create_topics_from_a_connection_extra_as_a_json_boolean():
    """Connection forms store true/false as JSON booleans: the URL gets create_topics=false,
    which the output accepts (Python's "False" it would refuse)."""

    class AdminMadeTopics(_Conn):
        extra_dejson = {"bootstrap.servers": "k1:9093", "create_topics": False}

    out_cfg, _ = kafka_output_config("kafka_default", AdminMadeTopics())
    assert out_cfg["url"] == "kafka://k1:9093?create_topics=false&config_env=DBLOG_KAFKA_CONFIG"
    assert kafka_output("kafka_default", AdminMadeTopics()).create_topics is False
