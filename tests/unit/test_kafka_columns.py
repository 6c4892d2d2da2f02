"""Kafka records built column by column (outputs/kafka_columns.py) must be the records
``Formatter.message`` builds one by one, in both formats: same topic, key, partition key and
headers byte for byte, the same JSON value (parsed: JSON allows other spellings of the same
text)."""

import orjson
import pytest

from airflow_provider_dblog.core.batch import DumpRows, EventBatch, LogRows
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.core.toast import unchanged_toast_value
from airflow_provider_dblog.outputs.kafka_columns import dblog_records, debezium_records
from airflow_provider_dblog.outputs.kafka_format import Formatter, topic_name

HW = Position("0000000000000A00", 0)
WRITTEN_AT_TOLERANCE_US = 10_000_000  # both take the wall clock: compared apart


def ev(coord, key, op=Op.UPDATE, table="public.t", **kw):
    before = None if op in (Op.CREATE, Op.TRUNCATE) else {"id": key, "v": "old"}
    after = None if op in (Op.DELETE, Op.TRUNCATE) else {"id": key, "v": "x"}
    fields = dict(commit_ts=1_700_000_000_123_456, txid="77")
    fields.update(kw)
    return ChangeEvent("src", table, op, () if op is Op.TRUNCATE else (key,), before, after, Position(coord), **fields)


def dump_block(n, first_sub=1, texts=False):
    keys = [(i,) for i in range(n)]
    rows = [{"id": i, "v": f'q"uote\\ {i} é', "big": 2**63 - 1 - i} for i in range(n)]
    if texts:
        rows = [orjson.dumps(r).decode() for r in rows]
    return DumpRows("src", "public.t", "d1", "sch1", HW, first_sub, keys, rows, texts=texts)


def log_block(op, n, coord="0000000000000B"):
    keys = [(100 + i,) for i in range(n)]
    before = [None if op is Op.CREATE else f'{{"id":{100 + i}}}' for i in range(n)]
    after = [None if op is Op.DELETE else f'{{"id":{100 + i},"v":"new \\u00e9"}}' for i in range(n)]
    positions = [Position(f"{coord}{i:04d}") for i in range(n)]
    return LogRows("src", "public.t", op, "sch1", 1_700_000_000_000_000, "77", keys, before, after, positions)


def topic_of(table):
    return topic_name(f"src.{table}")


SCHEMAS = {
    "sch1": TableSchema("public.t", (Column("id", "int4"), Column("v", "text")), ("id",)),
    "sch2": TableSchema("public.t", (Column("id", "int4"), Column("k", "text")), ("id", "k")),
}
FORMATTERS = {
    "dblog": lambda: Formatter("dblog"),
    "debezium-postgresql": lambda: Formatter("debezium", "postgresql", "shop"),
    "debezium-mysql": lambda: Formatter("debezium", "mysql", tombstones=True),
    "debezium-plain": lambda: Formatter("debezium"),
}


def one_by_one(events, epoch, fmt):
    out = []
    for e in events:
        m = fmt.message(e, epoch, NOW, SCHEMAS.get(e.schema_id), topic_of(e.table))
        if m is None:
            continue
        value = orjson.loads(m.value)
        broadcast = m.partition_key is None
        pkey = None if broadcast or m.key == m.partition_key else m.partition_key
        out.append((topic_of(e.table), m.key, value, m.headers, broadcast, pkey, m.tombstone))
    return out


def column_wise(events, epoch, fmt):
    if fmt.fmt == "dblog":
        r = dblog_records(events, epoch, topic_of)
    else:
        r = debezium_records(events, epoch, topic_of, fmt, SCHEMAS)
    n = len(r.topics)
    assert len(r.keys) == len(r.values) == len(r.headers) == len(r.broadcast) == n
    pkeys = r.partition_keys or [None] * n
    stones = r.tombstones or [False] * n
    return [
        (t, k, orjson.loads(v), [(name, bytes(x)) for name, x in h], b, None if b else pk, ts)
        for t, k, v, h, b, pk, ts in zip(r.topics, r.keys, r.values, r.headers, r.broadcast, pkeys, stones)
    ]


NOW = 1_800_000_000_000_000  # one_by_one's write time; column_wise takes the wall clock


def without_write_times(fast, slow):
    """Both values without the fields that hold the write's time (checked for presence):
    where an event has no commit time, Debezium's ``source`` takes the write's."""
    no_commit_time = "source" in slow and slow["source"]["ts_us"] == NOW
    for value in (fast, slow):
        for field in ("written_at", "ts_us", "ts_ms"):
            if field in value:
                assert value.pop(field) is not None
        if no_commit_time:
            del value["source"]["ts_us"], value["source"]["ts_ms"]


def same(fast, slow):
    assert len(fast) == len(slow)
    for f, s in zip(fast, slow):
        without_write_times(f[2], s[2])
        assert f == s


BATCHES = {
    "events": [
        ev("0000000000000900", 9),
        ev("0000000000000901", 10, Op.CREATE, commit_ts=None, txid=None),
        ev("0000000000000902", 11, Op.DELETE, table='s."odd""na\\me"'),
        ev("0000000000000903", 0, Op.TRUNCATE),
        ChangeEvent(
            "src",
            "public.t",
            Op.UPDATE,
            (12, "k é"),
            {"id": 12, "doc": unchanged_toast_value()},
            {"id": 12, "doc": unchanged_toast_value(), "n": 2**70},
            Position("0000000000000904", 3),
            commit_ts=1,
            txid="78",
            schema_id="sch2",
        ),
        ChangeEvent("src", "public.t", Op.RANGE, (), None, None, Position("0000000000000905")),
        ev("0000000000000906", 13, Op.DELETE, schema_id="sch1", origin=Origin.LOG),
    ],
    "blocks": EventBatch(
        [
            [ev("0000000000000900", 9, schema_id="sch1")],
            dump_block(4, first_sub=3),
            log_block(Op.CREATE, 3),
            dump_block(2, texts=True),
            log_block(Op.DELETE, 2, coord="0000000000000C"),
            [ev("0000000000000D00", 0, Op.TRUNCATE)],
        ]
    ),
}


@pytest.mark.parametrize("fmt", list(FORMATTERS))
@pytest.mark.parametrize("epoch", [None, 7])
@pytest.mark.parametrize("batch", list(BATCHES))
def test_records_equal_those_built_one_by_one(batch, epoch, fmt):
    events = BATCHES[batch]
    same(column_wise(events, epoch, FORMATTERS[fmt]()), one_by_one(list(events), epoch, FORMATTERS[fmt]()))


def test_a_dump_event_carries_its_origin_and_no_commit_time():
    (rec,) = column_wise(EventBatch([dump_block(1)]), None, Formatter("dblog"))
    assert rec[2]["origin"] == Origin.DUMP.value and rec[2]["commit_ts"] is None and rec[2]["epoch"] is None
    assert rec[2]["after"]["v"] == 'q"uote\\ 0 é' and rec[4] is False


def test_debezium_keys_name_their_columns_and_a_dump_range_has_no_record():
    fmt = Formatter("debezium", "postgresql", "shop")
    events = [ev("0000000000000900", 2**70, schema_id="sch1"), ev("0000000000000901", 5, schema_id="nope")]
    events.append(ChangeEvent("src", "public.t", Op.RANGE, (), None, None, Position("0000000000000902")))
    r = debezium_records(events, None, topic_of, fmt, SCHEMAS)
    assert r.keys == [b'{"id":1180591620717411303424}', b'{"key":[5]}']
    assert r.partition_keys == [b"[1180591620717411303424]", b"[5]"] and r.tombstones is None


@pytest.mark.parametrize("fmt", list(FORMATTERS))
def test_an_empty_batch_has_no_records(fmt):
    assert column_wise([], 3, FORMATTERS[fmt]()) == []


@pytest.mark.parametrize("sep_in_values", [False, True])
def test_rows_group_by_their_values_nulls_apart_from_empty_texts(sep_in_values):
    import pyarrow as pa

    from airflow_provider_dblog.outputs.kafka_columns import _per_group

    a = ["", None, "x", "", "x\x1f" if sep_in_values else "x"]
    b = [None, "", "y", None, "y"]
    cols = [pa.chunked_array([pa.array(a, pa.string())]), pa.chunked_array([pa.array(b, pa.string())])]
    texts = _per_group(cols, lambda i: repr((a[i], b[i]))).to_pylist()
    assert texts == [repr((x, y)) for x, y in zip(a, b)]
