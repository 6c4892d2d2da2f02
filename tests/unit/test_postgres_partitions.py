"""Partitioned tables without a server: which partitions joined or left, and how the log
decoder names a partition's changes and truncates (issue 10 part 3)."""

from __future__ import annotations

from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, SchemaEvent, TableSchema
from airflow_provider_dblog.sources.postgres.catalog import TableInfo
from airflow_provider_dblog.sources.postgres.log import LogDecoder, make_position
from airflow_provider_dblog.sources.postgres.partitions import Partitions, diff_leaves

from .test_pgoutput import begin, commit, delete, insert, relation, truncate

READINGS = TableSchema(
    "public.readings",
    (Column("id", "bigint", False), Column("bucket", "integer", False), Column("note", "text")),
    ("id", "bucket"),
)
LEAF = {"public.readings_p0": "public.readings", "public.readings_p1": "public.readings"}


def _decoder() -> LogDecoder:
    info = TableInfo(READINGS, 1, {"id": "bigint", "bucket": "integer", "note": "text"}, "d", None, True)
    return LogDecoder(
        "src1",
        "dblog.watermarks",
        {"public.readings"},
        lambda t, refresh=False: info,
        {20: "bigint", 23: "integer", 25: "text"}.__getitem__,
        lambda oid, mod: {20: "bigint", 23: "integer", 25: "text"}[oid],
        root_of=LEAF.get,
    )


def _feed(dec: LogDecoder, *messages) -> list[ChangeEvent]:
    for m in messages:
        dec.pgoutput(m)
    out = [i for i in dec.pending if isinstance(i, ChangeEvent)]
    dec.pending.clear()
    return out


ROOT_REL = relation(10, "public", "readings", [(1, "id", 20, -1), (1, "bucket", 23, -1), (0, "note", 25, -1)])
# A partition attached with its columns in another order.
P0_REL = relation(11, "public", "readings_p0", [(0, "note", 25, -1), (1, "bucket", 23, -1), (1, "id", 20, -1)])
OTHER_REL = relation(12, "public", "other", [(1, "id", 23, -1)])


def test_changes_published_under_a_partitions_name_are_the_tables():
    """pgoutput decoding changes made before the publication published via the root names
    the partition: they become the partitioned table's, by column name; other tables' stay
    out. Positions count every change."""
    items = _feed(
        _decoder(),
        begin(0x500, 10, 77),
        P0_REL,
        OTHER_REL,
        insert(11, "x", "3", "1"),
        insert(12, "5"),
        delete(11, (None, "3", "1")),
        commit(0x500, 0x530, 10),
    )
    assert [(e.table, e.op, e.key) for e in items] == [
        ("public.readings", Op.CREATE, (1, 3)),
        ("public.readings", Op.DELETE, (1, 3)),
    ]
    assert items[0].after == {"note": "x", "bucket": 3, "id": 1}
    assert [e.position for e in items] == [make_position(0x500, 1), make_position(0x500, 3)]


def test_a_truncate_of_the_table_is_one_event_and_of_a_partition_alone_is_reported():
    dec = _decoder()
    items = _feed(
        dec,
        begin(0x500, 10, 77),
        ROOT_REL,
        P0_REL,
        truncate(10, 11),  # the table and its partition: one truncate of the table
        commit(0x500, 0x530, 10),
        begin(0x600, 11, 78),
        truncate(11),  # the partition alone: its rows are gone, which ones the log does not say
        commit(0x600, 0x630, 11),
    )
    assert [(e.table, e.op, e.position) for e in items] == [("public.readings", Op.TRUNCATE, make_position(0x500, 1))]
    assert dec.partial_truncates == [("public.readings_p0", "public.readings", make_position(0x600, 1))]


def test_wal2json_names_the_partition_and_lists_the_table_before_its_partitions():
    dec = _decoder()
    dec.wal2json('{"action":"B","xid":77,"timestamp":"2000-01-01 00:00:00+00","lsn":"0/500"}')
    dec.wal2json(
        '{"action":"I","schema":"public","table":"readings_p1","columns":[{"name":"note","type":"text",'
        '"typeoid":25,"value":"n"},{"name":"bucket","type":"integer","typeoid":23,"value":12},'
        '{"name":"id","type":"bigint","typeoid":20,"value":7}]}'
    )
    for table in ("readings", "readings_p0", "readings_p1"):  # TRUNCATE readings
        dec.wal2json(f'{{"action":"T","schema":"public","table":"{table}"}}')
    dec.wal2json('{"action":"T","schema":"public","table":"readings_p0"}')  # later, alone
    items = [i for i in dec.pending if isinstance(i, ChangeEvent)]
    assert [(e.table, e.op, e.key) for e in items] == [
        ("public.readings", Op.CREATE, (7, 12)),
        ("public.readings", Op.TRUNCATE, ()),
    ]
    # The partition's column order is not the table's shape: the table's schema is announced.
    assert [i.schema for i in dec.pending if isinstance(i, SchemaEvent)] == [READINGS]
    # In the same transaction the table was truncated already: nothing is reported.
    assert dec.partial_truncates == []


def test_partitions_that_joined_and_left_by_oid():
    old = {"s.t": {1: "s.t_a", 2: "s.t_b"}, "s.u": {5: "s.u_a"}}
    new = {"s.t": {1: "s.t_a_renamed", 3: "s.t_c"}, "s.new": {9: "s.new_a"}}  # u gone, new first seen
    joined, left = diff_leaves(old, new)
    assert [(s.root, s.oid, s.name, s.change) for s in joined] == [("s.t", 3, "s.t_c", "joined")]
    assert [(s.root, s.oid, s.name, s.change) for s in left] == [("s.t", 2, "s.t_b", "left")]


def test_readings_update_the_partition_map_and_queue_key_lists():
    """The first reading is only remembered; later ones queue the partitions that joined
    or left, and the decoder's map follows: a partition that left is no longer the table's."""
    parts = Partitions(cursor=None, read_keys=None, position=None)  # type: ignore[arg-type]
    parts.roots = {"s.t": 100}
    parts.compare({"s.t": {1: ("s.t_a", "r"), 2: ("s.t_b", "r")}})
    assert not parts.scans and parts.root_of("s.t_a") == "s.t"
    parts.compare({"s.t": {1: ("s.t_a", "r"), 3: ("s.t_c", "r")}})
    assert [(s.name, s.change) for s in parts.scans] == [("s.t_c", "joined"), ("s.t_b", "left")]
    assert parts.root_of("s.t_c") == "s.t" and parts.root_of("s.t_b") is None
    parts.compare({"s.t": {1: ("s.t_a", "r"), 3: ("s.t_c", "r"), 4: ("s.t_f", "f")}})
    assert "s.t_f of s.t is a foreign table" in parts.warnings[-1]


class _NameCursor:
    """Answers table_name_of (the only statement _list_keys runs itself) with one name."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params=None):
        pass

    def fetchone(self):  # (schema, table), as pg_namespace and pg_class give them
        return tuple(self.name.split(".")) if self.name else None


def test_listed_keys_come_in_batches_each_at_a_position_of_its_own(monkeypatch):
    """Every key of a partition that joined gets its own position (the engine tells hits
    apart by position), after the log's end and unlike any log event's (index 0); a
    partition with more keys than a batch is listed over several steps."""
    monkeypatch.setattr("airflow_provider_dblog.sources.postgres.partitions.KEY_BATCH", 3)
    keys = [(i, 30) for i in range(1, 8)]
    calls = []

    def read_keys(root, table, after, limit):
        calls.append((table, after))
        rest = [k for k in keys if after is None or k > after]
        return rest[:limit]

    end = make_position(0x900, 0)
    parts = Partitions(lambda: _NameCursor("s.t_new"), read_keys, lambda: end)
    parts.roots = {"s.t": 100}
    parts.compare({"s.t": {}})
    parts.compare({"s.t": {7: ("s.t_c", "r")}})  # renamed since: found again by OID
    hits = []
    for _ in range(3):
        parts._list_keys(parts.scans[0])
        hits += parts.take_hits()
    assert not parts.scans
    assert [k for _, k, _ in hits] == keys and {t for t, _, _ in hits} == {"s.t"}
    positions = [p for _, _, p in hits]
    assert len(set(positions)) == 7 and all(p > end and p.coord == end.coord for p in positions)
    assert calls == [("s.t_new", None), ("s.t_new", (3, 30)), ("s.t_new", (6, 30))]
