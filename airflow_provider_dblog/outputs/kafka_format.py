"""What the Kafka output writes, without any Kafka client: topic names, message keys,
partitions, headers and the two value formats (docs/kafka.md is the contract).

``dblog``: the changelog record of the JSON lines output (docs/changelog-format.md).
``debezium``: Debezium's change-event envelope (``before``, ``after``, ``source``, ``op``,
``ts_ms``) as Debezium's JSON converter writes it with ``schemas.enable=false``; with
``schemas=True`` as it writes it with ``schemas.enable=true``: ``{"schema", "payload"}``,
Debezium's types (outputs/connect_schema.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

import orjson

from .. import __version__ as _version
from ..core import names
from ..core.errors import DBLogError
from ..core.events import ChangeEvent, Op, Origin, TableSchema
from ..core.row_text import as_row
from ..core.toast import is_unchanged_toast, unchanged_toast_value
from ..sources import descriptors
from ..sources.source_descriptor import DebeziumSource
from ._common import dumps, micros_to_iso
from .connect_schema import (
    UNAVAILABLE,
    UNAVAILABLE_B64,
    TableConnectSchema,
    connect_key,
    envelope_schema,
    source_fields,
    table_connect_schema,
)
from .jsonl import _event as jsonl_event
from .jsonl import _record as jsonl_record

FORMATS = ("dblog", "debezium")
CONNECTORS = tuple(d.kafka_connector for d in descriptors())  # each source's (sources/<db>/descriptor.py)
# Debezium's stand-in for a value the log did not carry (an unchanged TOASTed column).
DEBEZIUM_UNAVAILABLE = UNAVAILABLE
# ... and as a bytes column's payload (base64 of its UTF-8 bytes, connect_schema.py)
_UNAVAILABLE_FORMS = (UNAVAILABLE, UNAVAILABLE_B64)

H_SOURCE = "dblog.source_id"
H_TABLE = "dblog.table"
H_KEY = "dblog.key"
H_OP = "dblog.op"
H_POSITION = "dblog.position"
H_EPOCH = "dblog.epoch"
H_SCHEMA = "dblog.schema_id"

# Table-level events: one copy in every partition of the table's topic (they concern keys in
# all of them), at the same position.
BROADCAST_OPS = (Op.TRUNCATE.value, Op.RANGE.value)

_TOPIC_BAD = re.compile(r"[^A-Za-z0-9._-]")


def topic_name(text: str) -> str:
    """A legal Kafka topic name: characters Kafka refuses become ``_`` (as Debezium does)."""
    return _TOPIC_BAD.sub("_", text)[:249]


def _json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):  # integers beyond 64 bits
        return dumps(value).encode()


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client (and librdkafka's ``murmur2`` partitioner) gives
    ``key``: so any producer keyed by the same text agrees with ours."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    full = length - length % 4
    for i in range(0, full, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = key[full:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def murmur2_partitions(keys: list[bytes], counts: list[int]) -> list[int]:
    """``murmur2_partition`` of each key among ``counts[i]`` partitions: in the compiled
    extension where it is built (native/src/murmur2.rs), else one by one."""
    from ..sources.native import extension

    if extension is not None:
        return extension.murmur2_partitions(keys, counts)
    return [murmur2_partition(k, n) for k, n in zip(keys, counts)]


@dataclasses.dataclass(frozen=True)
class Message:
    """One Kafka record: ``partition`` None means every partition of the topic (a TRUNCATE or
    a dump chunk's key range concerns keys in all of them)."""

    key: Optional[bytes]
    value: bytes
    headers: list[tuple[str, bytes]]
    partition_key: Optional[bytes]
    # followed by a tombstone (same key, null value, no headers) for log compaction
    tombstone: bool = False


def _table_only(first: str, rest: str, database: Optional[str], txid: Optional[str]) -> dict[str, Any]:
    """No connector: "database.table" as MySQL's names it, no transaction field."""
    return {"db": first, "table": rest}


@dataclasses.dataclass
class Formatter:
    fmt: str = "dblog"
    connector: Optional[str] = None  # postgresql | mysql: how ``source`` names db/schema/table
    database: Optional[str] = None  # PostgreSQL: the database (table names lack it)
    schemas: bool = False  # debezium: {"schema", "payload"} records (JsonConverter schemas.enable=true)
    decimal_mode: str = "precise"  # debezium with schemas: Debezium's decimal.handling.mode
    # debezium: a tombstone after each delete, as Debezium's tombstones.on.delete
    tombstones: bool = False
    _written_iso: tuple[Optional[int], Optional[str]] = dataclasses.field(
        default=(None, None), init=False, repr=False, compare=False
    )
    # (schema id, topic) -> the envelope's and the key's Connect schema as JSON
    _schema_cache: dict[tuple[str, str], tuple[bytes, bytes]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The connector's table and transaction fields of ``source`` (its source's descriptor).
    _debezium_source: DebeziumSource = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        imitated = {d.kafka_connector: d.debezium_source for d in descriptors()}
        self._debezium_source = imitated.get(self.connector or "", _table_only)

    def message(
        self,
        e: ChangeEvent,
        epoch: Optional[int],
        written_at: int,
        schema: Optional[TableSchema],
        topic: Optional[str] = None,
    ) -> Optional[Message]:
        """The record of one event; None when the format has no form for it (``k`` in
        Debezium's envelope). ``topic`` names the Connect schemas (``<topic>.Envelope``).
        The output builds ``schemas=true`` records here; the others as a batch
        (outputs/kafka_columns.py), which tests/unit/test_kafka_columns.py holds to this."""
        canonical_key = dumps(list(e.key)).encode()
        broadcast = e.op.value in BROADCAST_OPS
        headers = [
            (H_SOURCE, e.source_id.encode()),
            (H_TABLE, e.table.encode()),
            (H_OP, e.op.value.encode()),
            (H_POSITION, e.position.encode().encode()),
        ]
        if not self.schemas:
            # Not for Kafka Connect: its default header converter reads '["eu",7]' as an
            # array without one element type, which Debezium's JDBC sink refuses (the
            # record's key holds the key there).
            headers.insert(2, (H_KEY, canonical_key))
        if epoch is not None:
            headers.append((H_EPOCH, str(epoch).encode()))
        if e.schema_id is not None:
            headers.append((H_SCHEMA, e.schema_id.encode()))
        if self.fmt == "dblog":
            value = _json(jsonl_record(e, epoch, self._iso(written_at)))
            key: Optional[bytes] = canonical_key
        else:
            if e.op is Op.RANGE:
                return None
            envelope = self.envelope(e, written_at)
            if self.schemas:
                value, key = self._with_schemas(e, envelope, schema, topic or e.table, broadcast)
            else:
                value = _json(envelope)
                key = None if broadcast else _json(self.key_object(e, schema))
        tombstone = self.tombstones and self.fmt == "debezium" and e.op is Op.DELETE
        return Message(key, value, headers, None if broadcast else canonical_key, tombstone)

    def _iso(self, micros: int) -> Optional[str]:
        """``micros_to_iso`` of the batch's one ``written_at``, computed once per batch."""
        last = self._written_iso
        if last[0] != micros:
            last = self._written_iso = (micros, micros_to_iso(micros))
        return last[1]

    def _with_schemas(
        self, e: ChangeEvent, envelope: dict[str, Any], schema: Optional[TableSchema], name: str, broadcast: bool
    ) -> tuple[bytes, Optional[bytes]]:
        """(value, key) as JsonConverter writes them with schemas.enable=true."""
        if schema is None:
            raise DBLogError(
                f"an event of {e.table} names schema {e.schema_id}, which this process never registered, "
                "so its Kafka Connect schema is unknown.",
                "report this as a bug; format=debezium without schemas=true does not need it.",
            )
        table = table_connect_schema(schema, self.decimal_mode)
        envelope["before"] = table.row_payload(envelope["before"])
        envelope["after"] = table.row_payload(envelope["after"])
        source = envelope["source"]
        envelope["source"] = {k: source.get(k) for k in source_fields(self.connector)}
        value_text, key_text = self._schema_texts(schema, name, table)
        value = b'{"schema":' + value_text + b',"payload":' + _json(envelope) + b"}"
        if broadcast:
            return value, None
        return value, b'{"schema":' + key_text + b',"payload":' + _json(table.key_payload(e.key)) + b"}"

    def _schema_texts(self, schema: TableSchema, name: str, table: TableConnectSchema) -> tuple[bytes, bytes]:
        """The envelope's and the key's schema as JSON, once per table version and topic."""
        cache = self._schema_cache
        found = cache.get((schema.schema_id(), name))
        if found is None:
            found = cache[(schema.schema_id(), name)] = (
                _json(envelope_schema(table, name, self.connector)),
                _json(table.key_schema(name)),
            )
        return found

    def source_head(self, source_id: str, table: str, txid: Optional[str], ts_us: int, dump: bool) -> dict[str, Any]:
        """The envelope's ``source`` up to its DBLog fields (position, txid, dump, schema)."""
        first, rest = names.split_table(table)
        source: dict[str, Any] = {
            "version": _version,
            "connector": self.connector or "dblog",
            "name": source_id,
            "ts_ms": ts_us // 1000,
            "ts_us": ts_us,
            # DBLog's dumps are what Debezium calls incremental snapshots (the same paper).
            "snapshot": "incremental" if dump else "false",
        }
        source.update(self._debezium_source(first, rest, self.database, txid))
        return source

    def key_object(self, e: ChangeEvent, schema: Optional[TableSchema]) -> dict[str, Any]:
        """Debezium's key: the key columns by name (``{"id": 42}``); ``{"key": [...]}`` only
        for a schema this process never saw (partitioning does not depend on it)."""
        if schema is not None and len(schema.key) == len(e.key):
            return dict(zip(schema.key, e.key))
        return {"key": list(e.key)}

    def envelope(self, e: ChangeEvent, written_at: int) -> dict[str, Any]:
        ts_us = e.commit_ts if e.commit_ts is not None else written_at
        source = self.source_head(e.source_id, e.table, e.txid, ts_us, e.origin is Origin.DUMP)
        source.update(position=e.position.encode(), txid=e.txid, dump_id=e.dump_id, schema_id=e.schema_id)
        return {
            "before": debezium_row(as_row(e.before)),
            "after": debezium_row(as_row(e.after)),
            "source": source,
            "op": e.op.value,
            "ts_ms": written_at // 1000,
            "ts_us": written_at,
            "transaction": None,
        }


def debezium_row(row: Optional[dict]) -> Optional[dict]:
    if row is None or not any(is_unchanged_toast(v) for v in row.values()):
        return row
    return {k: DEBEZIUM_UNAVAILABLE if is_unchanged_toast(v) else v for k, v in row.items()}


def header_map(headers: Optional[list]) -> dict[str, str]:
    return {k: v.decode() for k, v in headers or () if v is not None}


def event_from_message(headers: dict[str, str], value: bytes, key: Optional[bytes] = None) -> ChangeEvent:
    """The event a record holds, whatever its format (``scan`` and tests read them back).

    A Debezium envelope with Kafka Connect schemas (``schemas=true``) comes back in its own
    form: its rows are the payload's values (Debezium's types, not the canonical values) and its
    key is ``connect_key`` of the record key's payload. ``TableConnectSchema.source_form`` puts
    a source's rows into the same form, which is how ``dblog verify`` compares them."""
    rec = orjson.loads(value)
    if "payload" in rec and "schema" in rec:
        rec = rec["payload"]
        if headers.get(H_OP) in BROADCAST_OPS:
            event_key: list = []
        elif key is None:
            raise DBLogError(
                "a record with Kafka Connect schemas (schemas=true) was read without its record key, "
                "which holds its table key.",
                "report this as a bug.",
            )
        else:
            event_key = list(connect_key(orjson.loads(key)["payload"]))
        return _debezium_event(headers, rec, event_key)
    if "source" not in rec:  # dblog
        return jsonl_event(rec)
    return _debezium_event(headers, rec, orjson.loads(headers[H_KEY]))


def _debezium_event(headers: dict[str, str], rec: dict[str, Any], key: list) -> ChangeEvent:
    src = rec["source"]
    origin = Origin.DUMP if src.get("snapshot") == "incremental" else Origin.LOG
    return jsonl_event(
        {
            "source_id": headers[H_SOURCE],
            "table": headers[H_TABLE],
            "op": rec["op"],
            "key": key,
            "before": _from_debezium_row(rec["before"]),
            "after": _from_debezium_row(rec["after"]),
            "position": headers[H_POSITION],
            "origin": origin.value,
            "dump_id": src.get("dump_id"),
            "schema_id": src.get("schema_id"),
            "commit_ts": None if origin is Origin.DUMP else micros_to_iso(src.get("ts_us")),
            "txid": src.get("txid"),
        }
    )


def _from_debezium_row(row: Optional[dict]) -> Optional[dict]:
    if row is None:
        return None
    return {k: unchanged_toast_value() if v in _UNAVAILABLE_FORMS else v for k, v in row.items()}


def schema_record(schema: TableSchema, registered_at: int) -> bytes:
    """A ``schemas`` row of the changelog format, for the compacted schema topic."""
    return _json(
        {
            "schema_id": schema.schema_id(),
            "table": schema.table,
            "schema_json": schema.to_json(),
            "registered_at": micros_to_iso(registered_at),
        }
    )
