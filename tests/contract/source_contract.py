"""The Source contract: what the engine relies on from every source (core/protocols.py).

A source's test module subclasses ``SourceContract`` and provides a ``harness`` fixture: a
``SourceHarness`` over one database (PostgreSQL and MariaDB in
tests/integration/test_source_contract.py, the in-memory database in
tests/unit/test_source_contract_memory.py). The harness holds everything database-specific
(creating a table, one transaction of writes, dropping a table, a row filter's text); the
tests here name no SQL. Each test makes tables of its own, so tests do not interfere.

What is checked, and where the engine relies on it:

- open/close, ``tables()``, ``table_schema`` / ``catalog_schema`` (key columns, key types the
  key checks understand), RequestError for an unknown table (engine ``_schema``, dumps);
- ``select_chunk`` in key order with an exclusive lower and inclusive upper bound and at most
  ``limit`` rows, with a row filter; ``select_keys`` (missing keys absent); ``max_key``
  (core/chunk_step.py); RequestError for a dropped table or a bad filter (the dump fails, the
  capture goes on);
- the log: watermark writes come back in commit order between the changes around them,
  inserts/updates/deletes/key updates with their row values, strictly increasing positions,
  one transaction id per transaction; ``start_log`` from a checkpoint gives exactly what
  follows it (events at or below it may come again: the engine drops them);
- the capabilities a source declares: ``ParallelChunkReaders`` (the ranges covered exactly
  once), ``RangeDigests`` (equal for equal rows, different when a row differs, and equal to the
  Python ``row_hasher``'s sum), ``RowTextChunks`` and ``RowTextLog`` (the same rows as text).
"""

from __future__ import annotations

import abc
import concurrent.futures
import time
import uuid
from typing import Any, Optional, Sequence

import pytest

from airflow_provider_dblog.core.batch import LogRows
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import ChangeEvent, Op, Position, SchemaEvent, WatermarkEvent
from airflow_provider_dblog.core.key_types import check_key_value, orders_like_python
from airflow_provider_dblog.core.protocols import (
    ParallelChunkReaders,
    RangeDigests,
    RowTextChunks,
    RowTextLog,
    Source,
)
from airflow_provider_dblog.core.row_text import as_row, loads_row

# The two table shapes a harness creates (the types in the database's own names):
ITEMS = "items"  # id integer PRIMARY KEY, v text (NULL allowed)
PAIRS = "pairs"  # region varchar(8), n integer, v text, PRIMARY KEY (region, n)

Change = tuple  # ("insert", row) | ("update", key columns, new values) | ("delete", key columns)


def insert(**row: Any) -> Change:
    return ("insert", row)


def update(key: dict, **values: Any) -> Change:
    return ("update", key, values)


def delete(**key: Any) -> Change:
    return ("delete", key)


class SourceHarness(abc.ABC):
    """The database-specific part of the contract (the state store contract's ``reopen``)."""

    missing_table: str  # a table name no table has
    bad_filter: str  # a row filter the database refuses (e.g. naming no column of the table)

    @abc.abstractmethod
    def create_table(self, name: str, shape: str) -> str:
        """Create table ``name`` of ``shape`` (ITEMS or PAIRS), empty; its qualified name."""

    @abc.abstractmethod
    def write(self, table: str, *changes: Change) -> None:
        """Commit ``changes`` (insert / update / delete) as one transaction, in this order."""

    @abc.abstractmethod
    def drop_table(self, table: str) -> None: ...

    @abc.abstractmethod
    def equals(self, column: str, value: str) -> str:
        """A row filter (``select_chunk``'s ``where``): ``column`` equals the string ``value``."""

    @abc.abstractmethod
    def source(self, tables: Sequence[str]) -> Source:
        """A new, opened source capturing ``tables``, with this harness's one source id (a
        second call is the same source in another process); the fixture closes it."""


# -- helpers -----------------------------------------------------------------------------------
def _mark() -> str:
    return f"contract-{uuid.uuid4().hex[:12]}"


def read_log(src: Any, until: str, timeout: float = 30.0) -> list:
    """Poll until the watermark ``until`` arrived; the ChangeEvents (``LogRows`` blocks as
    their events) and WatermarkEvents read, without SchemaEvents."""
    items: list = []
    deadline = time.monotonic() + timeout
    while True:
        for item in src.poll(500, 0.2):
            if isinstance(item, LogRows):
                items.extend(item.events())
            elif not isinstance(item, SchemaEvent):
                items.append(item)
        if any(isinstance(i, WatermarkEvent) and i.uuid == until for i in items):
            return items
        assert time.monotonic() < deadline, f"watermark {until} did not arrive in {timeout}s; got {items!r}"


def between(items: list, start: Optional[str], end: str) -> list:
    """The items after the watermark ``start`` (None: from the first) and before ``end``."""
    uuids = [i.uuid if isinstance(i, WatermarkEvent) else None for i in items]
    return items[(0 if start is None else uuids.index(start) + 1) : uuids.index(end)]


def rows_of(result: Any) -> list[dict]:
    return [dict(r) for r in result.rows]


def items_rows(n: int, first: int = 1, step: int = 1) -> list[dict]:
    return [{"id": i, "v": f"v{i}"} for i in range(first, first + n * step, step)]


class SourceContract:
    # -- open / close, tables, schemas ----------------------------------------------------------
    def test_tables_and_schemas(self, harness):
        items = harness.create_table("sc_schema_items", ITEMS)
        pairs = harness.create_table("sc_schema_pairs", PAIRS)
        src = harness.source([items, pairs])
        assert sorted(src.tables()) == sorted([items, pairs])
        schema = src.table_schema(items)
        assert schema.table == items
        assert schema.column_names() == ["id", "v"] and schema.key == ("id",)
        key_column = schema.columns[0]
        assert not key_column.nullable and schema.columns[1].nullable
        # The key's type is one the key checks and range repairs understand: an integer.
        assert orders_like_python([key_column])
        assert check_key_value(items, key_column, 7) == 7
        with pytest.raises(RequestError):
            check_key_value(items, key_column, "seven")
        composite = src.table_schema(pairs)
        assert composite.column_names() == ["region", "n", "v"] and composite.key == ("region", "n")
        assert check_key_value(pairs, composite.columns[0], "eu") == "eu"
        # The catalog read afresh agrees with the schema the source holds.
        for table, known in ((items, schema), (pairs, composite)):
            fresh = src.catalog_schema(table)
            assert (fresh.table, fresh.columns, fresh.key) == (known.table, known.columns, known.key)
            assert fresh.schema_id() == known.schema_id()

    def test_unknown_table_is_a_request_error(self, harness):
        items = harness.create_table("sc_unknown", ITEMS)
        src = harness.source([items])
        with pytest.raises(RequestError):
            src.table_schema(harness.missing_table)

    def test_close_then_open_again(self, harness):
        """The engine reconnects by ``close()`` and ``open()`` on the same object."""
        items = harness.create_table("sc_reopen", ITEMS)
        harness.write(items, insert(id=1, v="a"))
        src = harness.source([items])
        schema = src.table_schema(items)
        src.close()
        src.close()  # closing twice is harmless
        src.open()
        assert rows_of(src.select_chunk(schema, None, 10)) == [{"id": 1, "v": "a"}]
        start, end = _mark(), _mark()
        src.start_log(None)
        src.write_watermark(start)
        harness.write(items, insert(id=2, v="b"))
        src.write_watermark(end)
        got = between(read_log(src, end), start, end)
        assert [(e.op, e.key) for e in got] == [(Op.CREATE, (2,))]

    # -- chunk selects ---------------------------------------------------------------------------
    def test_select_chunk_in_key_order_between_bounds(self, harness):
        items = harness.create_table("sc_chunk", ITEMS)
        rows = items_rows(10, first=2, step=2)  # keys 2, 4, .., 20
        harness.write(items, *[insert(**r) for r in reversed(rows)])  # inserted out of key order
        src = harness.source([items])
        schema = src.table_schema(items)
        assert rows_of(src.select_chunk(schema, None, 100)) == rows
        assert rows_of(src.select_chunk(schema, (6,), 100)) == rows[3:]  # lower bound exclusive
        assert rows_of(src.select_chunk(schema, (5,), 100)) == rows[2:]  # between two keys
        assert rows_of(src.select_chunk(schema, None, 100, (12,))) == rows[:6]  # upper bound inclusive
        assert rows_of(src.select_chunk(schema, (6,), 100, (13,))) == rows[3:6]
        assert rows_of(src.select_chunk(schema, (6,), 3)) == rows[3:6]  # at most limit rows
        assert rows_of(src.select_chunk(schema, None, 1)) == rows[:1]
        assert rows_of(src.select_chunk(schema, (6,), 3, (8,))) == rows[3:4]
        assert rows_of(src.select_chunk(schema, (20,), 10)) == []
        assert rows_of(src.select_chunk(schema, (8,), 10, (8,))) == []
        # Walking the table chunk by chunk, as a dump does, gives every row once.
        walked, after = [], None
        while True:
            got = rows_of(src.select_chunk(schema, after, 3))
            walked += got
            if len(got) < 3:
                break
            after = schema.key_of(got[-1])
        assert walked == rows

    def test_select_chunk_of_a_composite_key(self, harness):
        pairs = harness.create_table("sc_pairs", PAIRS)
        rows = [{"region": r, "n": n, "v": f"{r}{n}"} for r in ("ap", "eu", "us") for n in (1, 2, 10)]
        harness.write(pairs, *[insert(**r) for r in reversed(rows)])
        src = harness.source([pairs])
        schema = src.table_schema(pairs)
        assert rows_of(src.select_chunk(schema, None, 100)) == rows
        assert rows_of(src.select_chunk(schema, ("eu", 2), 100)) == rows[5:]  # (eu, 10), (us, ..)
        assert rows_of(src.select_chunk(schema, ("eu", 2), 2)) == rows[5:7]
        assert rows_of(src.select_chunk(schema, ("ap", 10), 100, ("eu", 2))) == rows[3:5]
        assert src.max_key(schema) == ("us", 10)
        got = src.select_keys(schema, [("us", 1), ("eu", 3), ("ap", 10)])
        assert sorted(schema.key_of(r) for r in rows_of(got)) == [("ap", 10), ("us", 1)]

    def test_select_chunk_with_a_row_filter(self, harness):
        items = harness.create_table("sc_filter", ITEMS)
        rows = items_rows(6)
        rows[1]["v"] = rows[4]["v"] = "x"
        harness.write(items, *[insert(**r) for r in rows])
        src = harness.source([items])
        schema = src.table_schema(items)
        where = harness.equals("v", "x")
        src.check_predicate(schema, where)
        assert rows_of(src.select_chunk(schema, None, 10, None, where)) == [rows[1], rows[4]]
        assert rows_of(src.select_chunk(schema, (2,), 10, None, where)) == [rows[4]]
        assert rows_of(src.select_chunk(schema, None, 10, (4,), where)) == [rows[1]]
        with pytest.raises(RequestError):
            src.check_predicate(schema, harness.bad_filter)
        with pytest.raises(RequestError):
            src.select_chunk(schema, None, 10, None, harness.bad_filter)

    def test_select_keys_gives_the_rows_that_exist(self, harness):
        items = harness.create_table("sc_keys", ITEMS)
        rows = items_rows(5)
        harness.write(items, *[insert(**r) for r in rows])
        src = harness.source([items])
        schema = src.table_schema(items)
        got = rows_of(src.select_keys(schema, [(4,), (99,), (2,)]))
        assert sorted(got, key=schema.key_of) == [rows[1], rows[3]]
        assert rows_of(src.select_keys(schema, [(99,)])) == []
        assert rows_of(src.select_keys(schema, [])) == []

    def test_max_key(self, harness):
        items = harness.create_table("sc_max", ITEMS)
        src = harness.source([items])
        schema = src.table_schema(items)
        assert src.max_key(schema) is None
        harness.write(items, insert(id=3, v="a"), insert(id=12, v="b"), insert(id=7, v=None))
        assert src.max_key(schema) == (12,)
        harness.write(items, delete(id=12))
        assert src.max_key(schema) == (7,)

    def test_a_dropped_table_is_a_request_error(self, harness):
        items = harness.create_table("sc_dropped", ITEMS)
        keep = harness.create_table("sc_kept", ITEMS)
        harness.write(items, insert(id=1, v="a"))
        harness.write(keep, insert(id=1, v="a"))
        src = harness.source([items, keep])
        schema, kept = src.table_schema(items), src.table_schema(keep)
        harness.drop_table(items)
        with pytest.raises(RequestError):
            src.select_chunk(schema, None, 10)
        with pytest.raises(RequestError):
            src.select_keys(schema, [(1,)])
        with pytest.raises(RequestError):
            src.max_key(schema)
        assert rows_of(src.select_chunk(kept, None, 10)) == [{"id": 1, "v": "a"}]  # the source goes on

    # -- the log ---------------------------------------------------------------------------------
    def test_watermarks_arrive_in_commit_order_between_the_changes(self, harness):
        items = harness.create_table("sc_watermarks", ITEMS)
        src = harness.source([items])
        src.start_log(None)
        start, lw, hw, end = _mark(), _mark(), _mark(), _mark()
        src.write_watermark(start)
        harness.write(items, insert(id=1, v="a"))
        src.write_watermark(lw)
        harness.write(items, insert(id=2, v="b"), update({"id": 1}, v="a2"))
        src.write_watermark(hw)
        harness.write(items, delete(id=2))
        src.write_watermark(end)
        got = between(read_log(src, end), start, end)
        shape = [("w", i.uuid) if isinstance(i, WatermarkEvent) else (i.op, i.key) for i in got]
        assert shape == [
            (Op.CREATE, (1,)),
            ("w", lw),
            (Op.CREATE, (2,)),
            (Op.UPDATE, (1,)),
            ("w", hw),
            (Op.DELETE, (2,)),
        ]
        positions = [i.position for i in got]
        assert all(isinstance(p, Position) for p in positions)
        assert positions == sorted(positions) and len(set(positions)) == len(positions)

    def test_log_events_carry_the_rows(self, harness):
        items = harness.create_table("sc_log", ITEMS)
        src = harness.source([items])
        src.start_log(None)
        start, end = _mark(), _mark()
        src.write_watermark(start)
        harness.write(items, insert(id=1, v="a"), insert(id=2, v="b"))  # one transaction
        harness.write(items, update({"id": 1}, v="a2"))
        harness.write(items, update({"id": 2}, v=None))
        harness.write(items, delete(id=2))
        harness.write(items, update({"id": 1}, id=10))  # a key update
        src.write_watermark(end)
        got = between(read_log(src, end), start, end)
        assert all(isinstance(e, ChangeEvent) for e in got), got
        assert [(e.op, e.key) for e in got] == [
            (Op.CREATE, (1,)),
            (Op.CREATE, (2,)),
            (Op.UPDATE, (1,)),
            (Op.UPDATE, (2,)),
            (Op.DELETE, (2,)),
            (Op.UPDATE, (10,)),
        ]
        c1, c2, u1, u2, d, k = got
        assert all(e.table == items and e.source_id == src.source_id for e in got)
        assert (as_row(c1.after), c1.before) == ({"id": 1, "v": "a"}, None)
        assert as_row(c2.after) == {"id": 2, "v": "b"}
        assert as_row(u1.after) == {"id": 1, "v": "a2"}
        assert as_row(u2.after) == {"id": 2, "v": None}
        assert d.after is None and as_row(d.before)["id"] == 2  # the old image has the key at least
        assert as_row(k.after) == {"id": 10, "v": "a2"} and as_row(k.before)["id"] == 1  # the old key
        for e, old in ((u1, {"id": 1, "v": "a"}), (u2, {"id": 2, "v": "b"}), (d, {"id": 2, "v": None})):
            before = as_row(e.before) or {}
            assert all(before[c] == old[c] for c in before), (e, old)  # what it has is the old row
        positions = [e.position for e in got]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
        txids = [e.txid for e in got]
        if any(t is not None for t in txids):
            assert txids[0] == txids[1] and len(set(txids[1:])) == 5  # one id per transaction

    def test_start_log_from_a_checkpoint_gives_exactly_what_follows(self, harness):
        items = harness.create_table("sc_resume", ITEMS)
        src = harness.source([items])
        src.start_log(None)
        start, mid, end = _mark(), _mark(), _mark()
        src.write_watermark(start)
        harness.write(items, insert(id=1, v="a"))
        harness.write(items, insert(id=2, v="b"), insert(id=3, v="c"), update({"id": 1}, v="a2"))
        src.write_watermark(mid)
        harness.write(items, delete(id=3), update({"id": 2}, id=20))
        src.write_watermark(end)
        first = between(read_log(src, end), start, end)
        src.close()

        def seen(items: list) -> list:
            return [
                ("w", i.uuid, i.position)
                if isinstance(i, WatermarkEvent)
                else (i.op, i.key, as_row(i.before), as_row(i.after), i.position)
                for i in items
            ]

        # A checkpoint inside a transaction, at a watermark, at a change after it, at the end.
        for checkpoint in (first[1].position, first[4].position, first[5].position, first[-1].position):
            again = harness.source([items])
            again.start_log(checkpoint)
            rest = [i for i in between(read_log(again, end), None, end) if i.position > checkpoint]
            assert seen(rest) == seen([i for i in first if i.position > checkpoint]), checkpoint
            again.close()

    def test_start_log_from_the_end_skips_what_came_before(self, harness):
        """A reset (``--reset-position``): ``from_end`` reads only what commits afterwards."""
        items = harness.create_table("sc_from_end", ITEMS)
        src = harness.source([items])
        src.start_log(None)
        before, start, end = _mark(), _mark(), _mark()
        harness.write(items, insert(id=1, v="a"))
        src.write_watermark(before)
        read_log(src, before)
        src.close()
        again = harness.source([items])
        again.start_log(None, from_end=True)
        again.write_watermark(start)
        harness.write(items, insert(id=2, v="b"))
        again.write_watermark(end)
        got = between(read_log(again, end), None, end)
        assert [(i.op, i.key) if isinstance(i, ChangeEvent) else i.uuid for i in got] == [start, (Op.CREATE, (2,))]

    def test_status_estimates_and_acknowledgements(self, harness):
        """What the engine asks besides the log and the chunks: cheap answers of the right kind."""
        items = harness.create_table("sc_status", ITEMS)
        harness.write(items, *[insert(**r) for r in items_rows(5)])
        src = harness.source([items])
        src.start_log(None)
        mark = _mark()
        src.write_watermark(mark)
        last = read_log(src, mark)[-1]
        src.acknowledge(last.position)
        n = src.estimate_rows(items)
        assert isinstance(n, int) and n >= 0
        assert isinstance(src.log_status(), dict)
        assert src.take_unchanged_toast() == []
        lag = src.replication_lag()
        assert lag is None or isinstance(lag, float)

    # -- capabilities, when declared ---------------------------------------------------------------
    def test_parallel_readers_cover_the_ranges_exactly_once(self, harness):
        items = harness.create_table("sc_parallel", ITEMS)
        rows = items_rows(30)
        harness.write(items, *[insert(**r) for r in rows])
        src = harness.source([items])
        if not isinstance(src, ParallelChunkReaders):
            pytest.skip("the source declares no ParallelChunkReaders")
        schema = src.table_schema(items)
        readers = src.chunk_readers(2)
        assert len(readers) == 2
        lows, uppers = [None, (10,), (21,)], [(10,), (21,), None]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(read, schema, lo, 100, up)
                for read, lo, up in zip([src.select_chunk, *readers], lows, uppers)
            ]
            parts = [rows_of(f.result()) for f in futures]
        assert [len(p) for p in parts] == [10, 11, 9]
        assert [r for p in parts for r in p] == rows  # each row once, each range in key order
        again = src.chunk_readers(2)  # kept for the next chunk, and still good
        assert rows_of(again[1](schema, (5,), 3)) == rows[5:8]
        assert rows_of(again[0](schema, None, 100, (2,))) == rows[:2]

    def test_range_digests_tell_equal_rows_from_different_ones(self, harness):
        a = harness.create_table("sc_digest_a", ITEMS)
        b = harness.create_table("sc_digest_b", ITEMS)
        rows = items_rows(20)
        rows[3]["v"] = None
        for table in (a, b):
            harness.write(table, *[insert(**r) for r in rows])
        src = harness.source([a, b])
        if not isinstance(src, RangeDigests):
            pytest.skip("the source declares no RangeDigests")
        sa, sb = src.table_schema(a), src.table_schema(b)
        hash_a = src.row_hasher(sa)

        def python_digest(chosen: list[dict]) -> tuple[int, int]:
            return len(chosen), sum(hash_a(r) for r in chosen)

        for low, high, chosen in ((None, None, rows), ((5,), (15,), rows[5:15]), ((20,), None, [])):
            assert src.range_digest(sa, low, high) == src.range_digest(sb, low, high) == python_digest(chosen)
        harness.write(b, update({"id": 7}, v="changed"))
        assert src.range_digest(sa, None, None) != src.range_digest(sb, None, None)
        assert src.range_digest(sa, (5,), (6,)) == src.range_digest(sb, (5,), (6,))  # elsewhere: alike
        assert src.range_digest(sa, (6,), (7,)) != src.range_digest(sb, (6,), (7,))
        changed = [dict(r, v="changed") if r["id"] == 7 else r for r in rows]
        assert src.range_digest(sb, None, None) == (20, sum(src.row_hasher(sb)(r) for r in changed))

    def test_row_text_chunks_are_the_same_rows(self, harness):
        items = harness.create_table("sc_texts", ITEMS)
        rows = items_rows(8)
        rows[2]["v"] = None
        harness.write(items, *[insert(**r) for r in rows])
        src = harness.source([items])
        if not (isinstance(src, RowTextChunks) and src.selects_row_text):
            pytest.skip("the source declares no RowTextChunks")
        schema = src.table_schema(items)
        for after, limit, upper in ((None, 100, None), ((3,), 2, None), ((2,), 100, (6,))):
            dicts = src.select_chunk(schema, after, limit, upper)
            texts = src.select_chunk(schema, after, limit, upper, None, texts=True)
            assert texts.texts and texts.keys == schema.keys_of(rows_of(dicts))
            assert [loads_row(t) for t in texts.rows] == rows_of(dicts)

    def test_row_text_log_gives_the_same_changes(self, harness):
        items = harness.create_table("sc_text_log", ITEMS)
        src = harness.source([items])
        if not (isinstance(src, RowTextLog) and src.logs_row_text):
            pytest.skip("the source declares no RowTextLog")
        src.start_log(None, texts=True)
        start, end = _mark(), _mark()
        src.write_watermark(start)
        harness.write(items, insert(id=1, v="a"), insert(id=2, v="b"), insert(id=3, v=None))
        harness.write(items, update({"id": 1}, v="a2"), update({"id": 2}, v="b2"))
        harness.write(items, delete(id=3), update({"id": 2}, id=20))
        src.write_watermark(end)
        got = between(read_log(src, end), start, end)
        assert [(e.op, e.key, as_row(e.after)) for e in got] == [
            (Op.CREATE, (1,), {"id": 1, "v": "a"}),
            (Op.CREATE, (2,), {"id": 2, "v": "b"}),
            (Op.CREATE, (3,), {"id": 3, "v": None}),
            (Op.UPDATE, (1,), {"id": 1, "v": "a2"}),
            (Op.UPDATE, (2,), {"id": 2, "v": "b2"}),
            (Op.DELETE, (3,), None),
            (Op.UPDATE, (20,), {"id": 20, "v": "b2"}),
        ]
        assert as_row(got[5].before)["id"] == 3
        assert isinstance(got[6].before, dict) and got[6].before["id"] == 2  # a key update's before: a dict
        positions = [e.position for e in got]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
