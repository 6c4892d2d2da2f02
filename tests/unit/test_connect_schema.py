"""Kafka Connect schemas of the Debezium envelope (``format=debezium&schemas=true``,
outputs/connect_schema.py): each source type's Connect type and Debezium logical name, the
value each canonical value becomes (compared with what Debezium's connectors write for the
same stored value), the values that have no form (a clear stop), and records whose payload
matches their schema field by field, as Kafka Connect's JsonConverter requires."""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.core.toast import unchanged_toast_value
from airflow_provider_dblog.outputs.connect_schema import (
    UNAVAILABLE,
    UnrepresentableValue,
    column_field,
    schema_name,
)
from airflow_provider_dblog.outputs.kafka import parse_url
from airflow_provider_dblog.outputs.kafka_format import Formatter

# (source type, canonical value), (Connect type, logical name, parameters, payload value)
CASES = [
    (("smallint", 7), ("int16", None, None, 7)),
    (("integer", -2147483648), ("int32", None, None, -2147483648)),
    (("bigint", 2**63 - 1), ("int64", None, None, 2**63 - 1)),
    (("numeric(10,2)", "12.30"), ("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "BM4=")),
    (("numeric(10,2)", "-1.00"), ("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "nA==")),
    (("numeric", "12.30"), ("struct", "io.debezium.data.VariableScaleDecimal", None, {"scale": 2, "value": "BM4="})),
    (("real", 290509.125), ("float32", None, None, 290509.125)),
    (("double precision", 0.1), ("float64", None, None, 0.1)),
    (("boolean", True), ("boolean", None, None, True)),
    (("text", "Zoë"), ("string", None, None, "Zoë")),
    (("character varying(20)", "x"), ("string", None, None, "x")),
    (("bytea", {"$b64": "AAH/"}), ("bytes", None, None, "AAH/")),
    (
        ("uuid", "0f8e6a4e-0000-4000-8000-000000000001"),
        (
            "string",
            "io.debezium.data.Uuid",
            None,
            "0f8e6a4e-0000-4000-8000-000000000001",
        ),
    ),
    (("jsonb", {"tags": ["a"], "n": 1}), ("string", "io.debezium.data.Json", None, '{"tags":["a"],"n":1}')),
    (("date", "2024-02-29"), ("int32", "io.debezium.time.Date", None, 19782)),
    (
        ("timestamp without time zone", "2024-02-29T23:59:59.5"),
        (
            "int64",
            "io.debezium.time.MicroTimestamp",
            None,
            1709251199500000,
        ),
    ),
    (
        ("timestamp(3) without time zone", "2024-02-29T23:59:59.5"),
        (
            "int64",
            "io.debezium.time.Timestamp",
            None,
            1709251199500,
        ),
    ),
    (
        ("timestamp with time zone", "2024-02-29T23:59:59+00:00"),
        (
            "string",
            "io.debezium.time.ZonedTimestamp",
            None,
            "2024-02-29T23:59:59Z",
        ),
    ),
    (("time without time zone", "23:59:59.000001"), ("int64", "io.debezium.time.MicroTime", None, 86399000001)),
    (("integer[]", [1, 2]), ("string", None, None, "[1,2]")),
    (("interval", "1 day 02:00:00"), ("string", None, None, "1 day 02:00:00")),
    (("tinyint(1)", 1), ("int16", None, None, 1)),
    (("int unsigned", 4294967295), ("int64", None, None, 4294967295)),
    (
        ("bigint unsigned", 2**64 - 1),
        (
            "bytes",
            "org.apache.kafka.connect.data.Decimal",
            {"scale": "0"},
            "AP//////////",
        ),
    ),
    (("decimal(10,2)", "12.30"), ("bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}, "BM4=")),
    (("float", 290509.125), ("float32", None, None, 290509.125)),
    (("datetime", "2024-02-29T23:59:59"), ("int64", "io.debezium.time.Timestamp", None, 1709251199000)),
    (
        ("datetime(6)", "2024-02-29T23:59:59.000001"),
        (
            "int64",
            "io.debezium.time.MicroTimestamp",
            None,
            1709251199000001,
        ),
    ),
    (
        ("timestamp", "2024-02-29T23:59:59+00:00"),
        (
            "string",
            "io.debezium.time.ZonedTimestamp",
            None,
            "2024-02-29T23:59:59Z",
        ),
    ),
    (("time", "-838:59:59"), ("int64", "io.debezium.time.MicroTime", None, -3020399000000)),
    (("year", 2024), ("int32", "io.debezium.time.Year", None, 2024)),
    (("bit(1)", 1), ("boolean", None, None, True)),
    (("enum('a','b''c')", "b'c"), ("string", "io.debezium.data.Enum", {"allowed": "a,b'c"}, "b'c")),
    (("set('x','y')", "x,y"), ("string", "io.debezium.data.EnumSet", {"allowed": "x,y"}, "x,y")),
    (("varbinary(16)", {"$b64": "AAH/"}), ("bytes", None, None, "AAH/")),
    (("json", [1, {"a": None}]), ("string", "io.debezium.data.Json", None, '[1,{"a":null}]')),
]


@pytest.mark.parametrize(("source", "connect"), CASES, ids=[f"{t}={v!r}" for (t, v), _ in CASES])
def test_each_source_type_has_debeziums_connect_type_and_value(source, connect):
    """PostgreSQL's types first, then MySQL's/MariaDB's."""
    type_name, value = source
    kind, name, params, payload = connect
    f = column_field("shop.t", Column("c", type_name))
    assert f.schema["type"] == kind and f.schema.get("name") == name
    for k, v in (params or {}).items():
        assert f.schema["parameters"][k] == v
    assert f.convert(value) == payload
    assert f.convert(None) is None and f.schema["optional"] is True
    if name == "org.apache.kafka.connect.data.Decimal":  # the unscaled value, big-endian two's complement
        unscaled = int.from_bytes(base64.b64decode(payload), "big", signed=True)
        assert unscaled == decimal.Decimal(str(value)).scaleb(int(params["scale"]))


def test_decimal_handling_modes_and_a_value_precise_cannot_hold():
    assert column_field("t", Column("c", "numeric(10,2)"), "string").convert("12.30") == "12.30"
    assert column_field("t", Column("c", "numeric(10,2)"), "double").convert("12.30") == 12.3
    assert column_field("t", Column("c", "numeric"), "string").convert("NaN") == "NaN"
    with pytest.raises(UnrepresentableValue) as stop:
        column_field("shop.t", Column("price", "numeric")).convert("NaN")
    assert "shop.t.price (numeric)" in str(stop.value) and "decimal_handling_mode=string" in stop.value.fix


@pytest.mark.parametrize(
    ("type_name", "value"),
    [("date", "infinity"), ("timestamp without time zone", "-infinity"), ("date", "0044-03-15 BC")],
)
def test_a_value_debeziums_temporal_types_cannot_hold_stops_with_the_column(type_name, value):
    with pytest.raises(UnrepresentableValue) as stop:
        column_field("shop.t", Column("due", type_name)).convert(value)
    assert f"'{value}' of shop.t.due" in str(stop.value) and "format=dblog" in stop.value.fix


def test_an_unchanged_toast_value_is_debeziums_placeholder_where_the_type_holds_it():
    toast = unchanged_toast_value()
    assert column_field("t", Column("c", "text")).convert(toast) == UNAVAILABLE
    assert column_field("t", Column("c", "jsonb")).convert(toast) == UNAVAILABLE
    assert base64.b64decode(column_field("t", Column("c", "bytea")).convert(toast)) == UNAVAILABLE.encode()
    with pytest.raises(UnrepresentableValue, match="REPLICA IDENTITY FULL"):
        column_field("t", Column("c", "numeric(10,2)")).convert(toast)


def test_key_columns_alone_are_required():
    """A delete's old row on PostgreSQL without REPLICA IDENTITY FULL holds the key alone, so
    a NOT NULL column is null there: Connect's JsonConverter refuses a null in a required
    field (found by Debezium's JDBC sink, tests/integration/test_kafka_connect_sink.py)."""
    assert column_field("t", Column("id", "integer", nullable=True), key=True).schema["optional"] is False
    assert column_field("t", Column("v", "text", nullable=False)).schema["optional"] is True
    fmt = Formatter("debezium", "postgresql", "shopdb", schemas=True)
    schema = TableSchema("shop.t", (Column("id", "integer", False), Column("v", "text", False)), ("id",))
    e = dataclasses.replace(change(Op.DELETE, before={"id": 7}), schema_id=schema.schema_id())
    value = json.loads(fmt.message(e, 1, 1_700_000_000_123_456, schema, "cdc.shop.t").value)
    conforms(value["schema"], value["payload"])
    assert value["payload"]["before"] == {"id": 7, "v": None}


def test_schema_names_are_avro_names():
    assert schema_name("pg1.shop.order-lines.Value") == "pg1.shop.order_lines.Value"
    assert schema_name("2024.shop.t.Key") == "_2024.shop.t.Key"


# -- whole records -------------------------------------------------------------------------

PG = TableSchema(
    "shop.orders",
    (
        Column("id", "integer", nullable=False),
        Column("total", "numeric(10,2)"),
        Column("placed", "timestamp with time zone"),
        Column("body", "bytea"),
    ),
    ("id",),
)
ROW = {"id": 7, "total": "12.30", "placed": "2024-02-29T23:59:59+00:00", "body": {"$b64": "AAH/"}}
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def conforms(schema: dict, value) -> None:
    """What JsonConverter.toConnectData checks: null only where optional, each primitive of
    its JSON kind and width, and a struct's fields exactly the schema's (missing = null)."""
    if value is None:
        assert schema.get("optional"), f"null in the required {schema.get('field')}"
        return
    kind = schema["type"]
    if kind in _INT_BITS:
        assert isinstance(value, int) and not isinstance(value, bool)
        assert -(2 ** (_INT_BITS[kind] - 1)) <= value < 2 ** (_INT_BITS[kind] - 1)
    elif kind in ("float32", "float64"):
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "boolean":
        assert isinstance(value, bool)
    elif kind == "string":
        assert isinstance(value, str)
    elif kind == "bytes":
        base64.b64decode(value, validate=True)
    elif kind == "struct":
        assert isinstance(value, dict)
        names = [f["field"] for f in schema["fields"]]
        assert set(value) <= set(names), set(value) - set(names)
        for f in schema["fields"]:
            conforms(f, value.get(f["field"]))
    else:
        raise AssertionError(f"unexpected Connect type {kind}")


def change(op, before=None, after=None, origin=Origin.LOG):
    return ChangeEvent(
        source_id="pg1",
        table="shop.orders",
        op=op,
        key=(7,),
        before=before,
        after=after,
        position=Position("00000001A2B3C5F00000000000", 0),
        commit_ts=1_699_999_999_654_321,
        txid="1234",
        origin=origin,
        dump_id=None,
        schema_id=PG.schema_id(),
    )


@pytest.mark.parametrize("connector", ["postgresql", "mysql", None])
@pytest.mark.parametrize(
    ("op", "before", "after"),
    [(Op.CREATE, None, ROW), (Op.UPDATE, ROW, {**ROW, "total": "-1.00"}), (Op.DELETE, ROW, None)],
)
def test_records_carry_a_schema_their_payload_conforms_to(connector, op, before, after):
    fmt = Formatter("debezium", connector, "shopdb", schemas=True)
    m = fmt.message(change(op, before, after), 3, 1_700_000_000_123_456, PG, "cdc.shop.orders")
    value, key = json.loads(m.value), json.loads(m.key)
    assert set(value) == {"schema", "payload"} and set(key) == {"schema", "payload"}
    conforms(value["schema"], value["payload"])
    conforms(key["schema"], key["payload"])
    assert value["schema"]["name"] == "cdc.shop.orders.Envelope"
    assert [f["field"] for f in value["schema"]["fields"]] == [
        "before",
        "after",
        "source",
        "op",
        "ts_ms",
        "ts_us",
        "transaction",
    ]
    assert value["schema"]["fields"][0]["name"] == "cdc.shop.orders.Value"
    assert key == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
            "optional": False,
            "name": "cdc.shop.orders.Key",
        },
        "payload": {"id": 7},
    }
    payload = value["payload"]
    assert payload["op"] == op.value and payload["source"]["position"] == change(op).position.encode()
    row = payload["after"] or payload["before"]
    assert row["placed"] == "2024-02-29T23:59:59Z" and row["body"] == "AAH/"


def test_a_truncate_has_no_key_and_an_unregistered_schema_stops_with_the_cause():
    from airflow_provider_dblog.core.errors import DBLogError

    fmt = Formatter("debezium", "postgresql", "shopdb", schemas=True)
    m = fmt.message(change(Op.TRUNCATE), 1, 1_700_000_000_123_456, PG, "cdc.shop.orders")
    assert m.key is None and json.loads(m.value)["payload"]["op"] == "t"
    with pytest.raises(DBLogError, match="never registered"):
        fmt.message(change(Op.CREATE, after=ROW), 1, 1_700_000_000_123_456, None, "cdc.shop.orders")


def test_without_schemas_the_envelope_is_unchanged():
    """schemas is off by default: the payload-only envelope (canonical values) as before."""
    m = Formatter("debezium", "postgresql", "shopdb").message(
        change(Op.CREATE, after=ROW), 1, 1_700_000_000_123_456, PG, "cdc.shop.orders"
    )
    value = json.loads(m.value)
    assert "schema" not in value and value["after"] == ROW and json.loads(m.key) == {"id": 7}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("schemas=true", "needs format=debezium"),
        ("format=debezium&schemas=yes", "neither true nor false"),
        ("format=debezium&schemas=true&decimal_handling_mode=exact", "unknown decimal_handling_mode"),
        ("partitions=0", "not a whole number of at least 1"),
        ("tombstones=true", "needs format=debezium"),
        ("format=debezium&tombstones=1", "neither true nor false"),
        ("replication_factor=three", "not a whole number of at least 1"),
    ],
)
def test_url_options_of_the_schemas_are_checked(query, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_url(f"b:9092?{query}")


def test_a_delete_is_followed_by_a_tombstone_when_asked():
    fmt = Formatter("debezium", "postgresql", "shopdb", tombstones=True)
    assert fmt.message(change(Op.DELETE, before=ROW), 1, 1, PG, "t").tombstone
    assert not fmt.message(change(Op.CREATE, after=ROW), 1, 1, PG, "t").tombstone
    assert not Formatter("debezium", "postgresql").message(change(Op.DELETE, before=ROW), 1, 1, PG, "t").tombstone


@pytest.mark.parametrize("decimal_mode", ["precise", "string"])
def test_dblog_verify_reads_schemas_true_records_back_in_their_own_form(decimal_mode):
    """``scan`` of a schemas=true topic gives Debezium's types; ``source_form`` puts the
    source's rows into that form, keyed as the record keys are: a replay of the records equals
    the source, and a value that differs in the topic is a mismatch. Every source type of
    CASES is a column, and one of them (a numeric without a scale: a struct) is in the key."""
    from airflow_provider_dblog.core.verify import compare, replay
    from airflow_provider_dblog.outputs.connect_schema import table_connect_schema
    from airflow_provider_dblog.outputs.kafka_format import event_from_message, header_map

    columns = tuple(Column(f"c{i}", t) for i, ((t, _), _) in enumerate(CASES))
    schema = TableSchema("shop.t", (Column("id", "integer"), Column("k", "numeric"), *columns), ("id", "k"))
    values = {f"c{i}": v for i, ((_, v), _) in enumerate(CASES)}
    source = {(n, f"{n}.5"): {"id": n, "k": f"{n}.5", **values} for n in (1, 2, 3)}
    fmt = Formatter("debezium", "postgresql", "shopdb", schemas=True, decimal_mode=decimal_mode)

    def record(op, key, before, after, sub):
        e = ChangeEvent(
            source_id="pg1",
            table="shop.t",
            op=op,
            key=key,
            before=before,
            after=after,
            position=Position("00000001A2B3C5F00000000000", sub),
            commit_ts=1_699_999_999_654_321,
            txid="1234",
            origin=Origin.LOG,
            dump_id=None,
            schema_id=schema.schema_id(),
        )
        m = fmt.message(e, 1, 1_700_000_000_123_456, schema, "cdc.shop.t")
        return event_from_message(header_map(m.headers), m.value, m.key)

    gone = {"id": 9, "k": "9.5", **values}
    events = [
        record(Op.CREATE, (9, "9.5"), None, gone, 1),
        record(Op.TRUNCATE, (), None, None, 2),  # removes key 9 (and nothing after it)
        *(record(Op.CREATE, k, None, {**r, "c9": "old"}, 3 + i) for i, (k, r) in enumerate(source.items())),
        *(record(Op.UPDATE, k, None, r, 10 + i) for i, (k, r) in enumerate(source.items())),
        record(Op.DELETE, (4, "4.5"), {"id": 4, "k": "4.5", **values}, None, 20),
    ]
    form = table_connect_schema(schema, decimal_mode).source_form
    assert compare(form(source), replay(events)) == []
    assert CASES[14][0][0] == "date"
    changed = {**source, (2, "2.5"): {**source[(2, "2.5")], "c14": "2024-03-01"}}
    (mismatch,) = compare(form(changed), replay(events))
    key = '{"scale":1,"value":"GQ=="}' if decimal_mode == "precise" else "2.5"  # VariableScaleDecimal or text
    assert mismatch.kind == "different" and mismatch.key == (2, key)
    assert (mismatch.source["c14"], mismatch.changelog["c14"]) == (19783, 19782)  # days since 1970


def test_the_kafka_output_says_which_format_verify_compares_in():
    from airflow_provider_dblog.core.protocols import OwnRowForm
    from airflow_provider_dblog.core.verify import source_form
    from airflow_provider_dblog.outputs.kafka import KafkaOutput

    with_schemas = KafkaOutput("b:9092", {"format": "debezium", "schemas": "true"})
    assert isinstance(with_schemas, OwnRowForm) and source_form(with_schemas, PG) is not None
    assert source_form(KafkaOutput("b:9092", {"format": "debezium"}), PG) is None  # canonical values
    assert source_form(KafkaOutput("b:9092", {}), PG) is None
