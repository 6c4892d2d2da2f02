"""Kafka records built column by column (issue 34 part 1): ``format=dblog`` and
``format=debezium`` without Kafka Connect schemas.

The Delta changelog already builds every field of a batch as Arrow columns per block,
without making an event each (``outputs/delta.py`` ``changelog_batch``): the keys and row
images as their JSON text. Here those columns become the records' JSON values by Arrow
string joins; what needs Python is done once per distinct value (a table, a transaction, a
schema), and per record only the header list and the ``produce`` call remain.

The records equal ``Formatter.message``'s (tests/unit/test_kafka_columns.py compares them
record by record: key and headers byte for byte, the value as parsed JSON). ``schemas=true``
(Debezium's types per column) stays with ``Formatter.message``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..core.events import ChangeEvent, Op, Origin, TableSchema
from ..core.row_text import dumps, loads, loads_row
from ..core.toast import UNCHANGED_TOAST_KEY
from ._common import micros_to_iso
from .delta import changelog_batch
from .kafka_format import (
    BROADCAST_OPS,
    H_EPOCH,
    H_KEY,
    H_OP,
    H_POSITION,
    H_SCHEMA,
    H_SOURCE,
    H_TABLE,
    Formatter,
    Message,
    debezium_row,
)

# What orjson escapes in a string: a column with none of it is quoted by a join.
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'
_BINARY = pa.binary()
Header = tuple[str, Optional[bytes]]


@dataclasses.dataclass
class Records:
    """The records of one batch, in stream order: ``topics[i]``, ``keys[i]`` (None: no key),
    ``values[i]``, ``headers[i]``. ``broadcast[i]``: a table-level event, written to every
    partition of its topic. ``partition_keys``: None when librdkafka's murmur2 of the record
    key gives the partition (``dblog``: the key is the canonical key text); else the canonical
    key texts to hash (Debezium's key is the columns by name). ``tombstones[i]``: a
    tombstone follows the record (``tombstones=true``)."""

    topics: list[str]
    keys: list[Optional[bytes]]
    values: list[bytes]
    headers: Sequence[Sequence[Header]]
    broadcast: list[bool]
    partition_keys: Optional[list[bytes]] = None
    tombstones: Optional[list[bool]] = None

    @classmethod
    def of_messages(cls, messages: list[tuple[str, Message]]) -> "Records":
        """``Formatter.message``'s records (topic, message), as a batch."""
        return cls(
            [t for t, _ in messages],
            [m.key for _, m in messages],
            [m.value for _, m in messages],
            [m.headers for _, m in messages],
            [m.partition_key is None for _, m in messages],
            partition_keys=[m.partition_key or b"" for _, m in messages],  # a broadcast's is not used
            tombstones=[m.tombstone for _, m in messages],
        )


def _quoted(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each string as a JSON string literal (orjson's), a null as ``null``: each distinct
    value encoded once (a batch holds few tables, ops, schemas, transactions)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    codes = arr.dictionary_encode()
    texts = pa.array([orjson.dumps(v).decode() for v in codes.dictionary.to_pylist()], pa.string())
    return pc.fill_null(texts.take(codes.indices), "null")


def _quoted_distinct(col: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """``_quoted`` of a column whose values all differ (positions): quoted by a join, unless
    one holds a character JSON escapes (a binlog file name could)."""
    if pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
        return _quoted(col)
    return pc.fill_null(pc.binary_join_element_wise('"', col, '"', ""), "null")


def _per_distinct(col: pa.ChunkedArray | pa.Array, text: Callable[[Any], str]) -> pa.Array:
    """``text(value)`` of each value (a null included), computed once per distinct value."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    codes = arr.dictionary_encode(null_encoding="encode")
    texts = pa.array([text(v) for v in codes.dictionary.to_pylist()], pa.string())
    return texts.take(codes.indices)


def _per_group(cols: list[pa.ChunkedArray], text: Callable[[int], str]) -> pa.Array:
    """``text(i)`` of a row ``i`` of each group of rows with equal ``cols``, for every row:
    the rows grouped by Arrow on the columns' texts joined (with a separator none of them
    holds; else grouped in Python)."""
    sep = "\x1f"
    if any(pc.any(pc.match_substring(col, sep)).as_py() for col in cols):
        seen: dict[tuple, str] = {}
        rows = zip(*(col.to_pylist() for col in cols))
        return pa.array([seen[k] if k in seen else seen.setdefault(k, text(i)) for i, k in enumerate(rows)])
    # Each field "v<text>" or "n" (a null): joined by a character none holds, so equal joins
    # are equal rows.
    fields = [pc.fill_null(pc.binary_join_element_wise("v", col, ""), "n") for col in cols]
    codes = pc.binary_join_element_wise(*fields, sep).combine_chunks().dictionary_encode()
    _, first = np.unique(codes.indices.to_numpy(), return_index=True)
    return pa.array([text(int(i)) for i in first], pa.string()).take(codes.indices)


def _members(members: list[tuple[str, Any]]) -> list[Any]:
    """The parts of ``"name":value`` JSON members, comma-separated (values: JSON texts)."""
    parts: list[Any] = []
    for i, (name, value) in enumerate(members):
        parts += [("," if i else "") + f'"{name}":', value]
    return parts


def _joined(parts: list[Any]) -> pa.Array:
    """Texts and text columns joined row by row."""
    return pc.binary_join_element_wise(*parts, "")


def _bytes(col: pa.ChunkedArray | pa.Array) -> list:
    return pc.cast(col, _BINARY).to_pylist()


class _Columns:
    """A batch's changelog columns, and what both formats take from them."""

    def __init__(self, events: Sequence[ChangeEvent], epoch: Optional[int], drop_ranges: bool = False):
        t = changelog_batch(events, epoch)
        if drop_ranges:  # no Debezium form (Formatter.message gives None)
            t = t.filter(pc.not_equal(t.column("op"), Op.RANGE.value))
        self.t, self.epoch, self.n = t, epoch, len(t)
        self.written_at: int = t.column("written_at")[0].cast(pa.int64()).as_py() if len(t) else 0
        self.sources: list[str] = t.column("source_id").to_pylist()
        self.tables: list[str] = t.column("table").to_pylist()
        self.ops: list[str] = t.column("op").to_pylist()
        self.origins: list[str] = t.column("origin").to_pylist()
        self.keys: list[bytes] = _bytes(t.column("key"))

    def col(self, name: str) -> pa.ChunkedArray:
        return self.t.column(name)

    def headers(self) -> list[list[Header]]:
        """``Formatter.message``'s headers; the tuples of the same value shared."""
        table_h = {name: (H_TABLE, name.encode()) for name in set(self.tables)}
        op_h = {op: (H_OP, op.encode()) for op in set(self.ops)}
        source_h = {sid: (H_SOURCE, sid.encode()) for sid in set(self.sources)}
        epoch_h: list[Header] = [] if self.epoch is None else [(H_EPOCH, str(self.epoch).encode())]
        schema_ids = _bytes(self.col("schema_id"))
        tails = {x: epoch_h if x is None else [*epoch_h, (H_SCHEMA, x)] for x in set(schema_ids)}
        positions = _bytes(self.col("position"))
        cols = zip(self.sources, self.tables, self.keys, self.ops, positions, schema_ids)
        return [[source_h[s], table_h[t], (H_KEY, k), op_h[o], (H_POSITION, p), *tails[x]] for s, t, k, o, p, x in cols]

    def topics(self, topic_of: Callable[[str], str]) -> list[str]:
        topic = {name: topic_of(name) for name in set(self.tables)}
        return [topic[name] for name in self.tables]

    def broadcast(self) -> list[bool]:
        return [op in BROADCAST_OPS for op in self.ops]


def dblog_records(events: Sequence[ChangeEvent], epoch: Optional[int], topic_of: Callable[[str], str]) -> Records:
    """The ``format=dblog`` records of ``events``; ``topic_of`` maps a table to its topic."""
    if not len(events):
        return Records([], [], [], [], [])
    b = _Columns(events, epoch)
    c = b.col
    epoch_text = "null" if epoch is None else str(epoch)
    members = [
        ("source_id", _quoted(c("source_id"))),
        ("table", _quoted(c("table"))),
        ("op", _quoted(c("op"))),
        ("key", c("key")),
        ("before", pc.fill_null(c("before"), "null")),
        ("after", pc.fill_null(c("after"), "null")),
        ("position", _quoted_distinct(c("position"))),
        ("origin", _quoted(c("origin"))),
        ("dump_id", _quoted(c("dump_id"))),
        ("schema_id", _quoted(c("schema_id"))),
        (
            "commit_ts",
            _per_distinct(pc.cast(c("commit_ts"), pa.int64()), lambda us: orjson.dumps(micros_to_iso(us)).decode()),
        ),
        ("txid", _quoted(c("txid"))),
    ]
    end = f',"epoch":{epoch_text},"written_at":"{micros_to_iso(b.written_at)}"}}'
    values = _joined(["{", *_members(members), end])
    return Records(b.topics(topic_of), list(b.keys), _bytes(values), b.headers(), b.broadcast())


def _debezium_images(col: pa.ChunkedArray) -> pa.Array:
    """Row images as Debezium's ``before``/``after``: the changelog's JSON text, except that
    an unchanged TOASTed value becomes Debezium's placeholder (those rows parsed, rare)."""
    arr = pc.fill_null(col, "null").combine_chunks()
    marked = pc.match_substring(arr, UNCHANGED_TOAST_KEY)
    if not pc.any(marked).as_py():
        return arr
    texts = arr.to_pylist()
    for i in pc.indices_nonzero(marked).to_pylist():
        texts[i] = dumps(debezium_row(loads_row(texts[i])))
    return pa.array(texts, pa.string())


def debezium_records(
    events: Sequence[ChangeEvent],
    epoch: Optional[int],
    topic_of: Callable[[str], str],
    fmt: Formatter,
    schemas: dict[str, TableSchema],
) -> Records:
    """The ``format=debezium`` records (without Kafka Connect schemas) of ``events``: the
    envelope ``Formatter.envelope`` builds, the key ``Formatter.key_object`` gives, no record
    for a dump range; ``schemas``: the table versions by schema id (key column names)."""
    if fmt.schemas:
        raise ValueError("schemas=true records are built by Formatter.message")
    b = _Columns(events, epoch, drop_ranges=True)
    if not b.n:
        return Records([], [], [], [], [])
    c = b.col
    written_at = b.written_at
    # ``source`` up to its position: once per (source, table, transaction, time, origin) …
    ts = pc.fill_null(pc.cast(c("commit_ts"), pa.int64()), written_at)
    txids = c("txid").to_pylist()

    def head(i: int) -> str:
        source = fmt.source_head(b.sources[i], b.tables[i], txids[i], ts[i].as_py(), b.origins[i] == Origin.DUMP.value)
        return orjson.dumps(source).decode()[:-1]  # without its closing brace

    heads = _per_group([c("source_id"), c("table"), c("txid"), pc.cast(ts, pa.string()), c("origin")], head)
    source_rest = [
        ("position", _quoted_distinct(c("position"))),
        ("txid", _quoted(c("txid"))),
        ("dump_id", _quoted(c("dump_id"))),
        ("schema_id", _quoted(c("schema_id"))),
    ]
    envelope = [
        ("before", _debezium_images(c("before"))),
        ("after", _debezium_images(c("after"))),
        ("source", heads),  # its members up to the position: the rest follows
    ]
    end = f',"ts_ms":{written_at // 1000},"ts_us":{written_at},"transaction":null}}'
    values = _joined(
        ["{", *_members(envelope), ",", *_members(source_rest), "},", *_members([("op", _quoted(c("op")))]), end]
    )
    broadcast = b.broadcast()
    schema_ids = c("schema_id").to_pylist()
    key_names: dict[Optional[str], Optional[list[str]]] = {
        sid: (list(schemas[sid].key) if sid in schemas else None) for sid in set(schema_ids)
    }
    keys: list[Optional[bytes]] = [
        None if cast else _debezium_key(key_names[sid], k) for k, sid, cast in zip(b.keys, schema_ids, broadcast)
    ]
    tombstones = [op == Op.DELETE.value for op in b.ops] if fmt.tombstones else None
    return Records(
        b.topics(topic_of),
        keys,
        _bytes(values),
        b.headers(),
        broadcast,
        partition_keys=b.keys,
        tombstones=tombstones,
    )


def _debezium_key(key_names: Optional[list[str]], key_text: bytes) -> bytes:
    """``Formatter.key_object``'s JSON from the canonical key text (``[42]``): the value of
    one key column is the text between the brackets."""
    count = len(orjson.loads(key_text))  # the count only: an integer beyond 64 bits reads as a float
    if key_names is None or len(key_names) != count:
        return b'{"key":' + key_text + b"}"
    if count == 1:
        return b"{" + orjson.dumps(key_names[0]) + b":" + key_text[1:-1] + b"}"
    return dumps(dict(zip(key_names, loads(key_text)))).encode()
