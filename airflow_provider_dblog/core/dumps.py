"""Dump requests (all tables / one table / a list of keys), their control and progress.

A dump is split in three records with one writer each, so that the CLI and the engine never
overwrite each other's fields:
  DumpSpec     what to dump (written once, by whoever requests it)
  DumpControl  pause / cancel / chunk size / delay (written by users, read by the engine)
  status + TableProgress  lifecycle and the last key of the last *durable* chunk (engine)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
import uuid
from typing import Any, Optional, Sequence

from .errors import RequestError
from .events import Key, TableSchema
from .key_types import check_key_value
from .predicates import check_predicate

DEFAULT_CHUNK_SIZE = 10_000
MAX_CHUNK_SIZE = 1_000_000
# Parallel chunk readers of one dump (--readers): connections, each selecting a key range.
MAX_READERS = 16


class DumpStatus(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (DumpStatus.DONE, DumpStatus.CANCELLED, DumpStatus.FAILED)


@dataclasses.dataclass(frozen=True)
class DumpSpec:
    dump_id: str
    source_id: str
    tables: Optional[tuple[str, ...]]  # None: every captured table
    keys: Optional[tuple[Key, ...]] = None  # only with exactly one table
    created_at: float = 0.0
    where: Optional[str] = None  # a row filter (core/predicates.py): one table, no keys
    # Requested by the capture to repair its changelog (a schema change's re-dump): scheduled
    # with the key-list dumps, before table dumps (core/scheduler.py).
    repair: bool = False
    # Requested by the capture for keys whose rows the log did not carry (unchanged TOAST
    # values, core/toast.py): such dumps not started yet are merged into one at a start.
    toast_repair: bool = False

    @classmethod
    def new(
        cls,
        source_id: str,
        tables: Optional[Sequence[str]] = None,
        keys: Optional[Sequence[Key]] = None,
        where: Optional[str] = None,
        repair: bool = False,
        toast_repair: bool = False,
    ) -> "DumpSpec":
        check_key_request(tables, keys)
        check_where_request(tables, keys, where)
        return cls(
            dump_id=uuid.uuid4().hex[:12],
            source_id=source_id,
            tables=tuple(tables) if tables else None,
            keys=tuple(tuple(k) for k in keys) if keys is not None else None,
            created_at=time.time(),
            where=check_predicate(where) if where is not None else None,
            repair=repair,
            toast_repair=toast_repair,
        )

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "DumpSpec":
        d = json.loads(text)
        return cls(
            dump_id=d["dump_id"],
            source_id=d["source_id"],
            tables=tuple(d["tables"]) if d["tables"] is not None else None,
            keys=tuple(tuple(k) for k in d["keys"]) if d["keys"] is not None else None,
            created_at=d.get("created_at", 0.0),
            where=d.get("where"),
            repair=d.get("repair", False),
            toast_repair=d.get("toast_repair", False),
        )


def check_where_request(tables: Optional[Sequence[str]], keys: Optional[Sequence[Any]], where: Optional[str]) -> None:
    """A filtered dump names exactly one table (its columns are what the filter names) and
    no keys (a key list is a filter already)."""
    if where is None:
        return
    if not tables or len(tables) != 1:
        raise RequestError(
            "a filtered dump (--where) needs exactly one table.",
            "pass one --table together with --where (the filter names that table's columns).",
        )
    if keys is not None:
        raise RequestError(
            "a dump takes a key list or a row filter (--where), not both.",
            "list the keys, or filter the table's rows, in one request.",
        )
    check_predicate(where)


def check_key_request(tables: Optional[Sequence[str]], keys: Optional[Sequence[Any]]) -> None:
    """A key-list dump names exactly one table and at least one key (no keys: no check)."""
    if keys is None:
        return
    if not tables or len(tables) != 1:
        raise RequestError(
            "a key-list dump needs exactly one table.",
            "pass one table together with the keys (dblog dump: one --table with the --key values).",
        )
    if not keys:
        raise RequestError("the key list is empty.", "pass at least one key.")


@dataclasses.dataclass(frozen=True)
class DumpControl:
    """User-side knobs, changeable while the dump runs. Frozen: the ``as_*`` and
    ``throttled`` methods return the changed copy that ``StateStore.set_control`` stores."""

    paused: bool = False
    cancelled: bool = False
    chunk_size: int = DEFAULT_CHUNK_SIZE
    delay_ms: int = 0
    adaptive: bool = False  # chunk size and delay paced by the source's health (core/pacing.py)
    # Table-dump chunks selected by this many connections at once, over disjoint key ranges
    # of ``chunk_size`` rows each, inside one watermark window (engine._select_parallel).
    readers: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_size <= MAX_CHUNK_SIZE:
            raise RequestError(
                f"chunk size {self.chunk_size} is out of range.",
                f"use a chunk size between 1 and {MAX_CHUNK_SIZE}.",
            )
        if not 1 <= self.readers <= MAX_READERS:
            raise RequestError(
                f"{self.readers} readers is out of range.",
                f"use between 1 and {MAX_READERS} readers (one connection to the source each).",
            )
        if self.delay_ms < 0:
            raise RequestError(f"delay {self.delay_ms} ms is negative.", "use a delay >= 0.")

    def to_json(self) -> str:
        """What the state stores keep (read back with ``DumpControl(**json.loads(text))``)."""
        return json.dumps(dataclasses.asdict(self))

    def as_paused(self) -> "DumpControl":
        return dataclasses.replace(self, paused=True)

    def as_resumed(self) -> "DumpControl":
        return dataclasses.replace(self, paused=False)

    def as_cancelled(self) -> "DumpControl":
        return dataclasses.replace(self, cancelled=True)

    def throttled(self, chunk_size: Optional[int] = None, delay_ms: Optional[int] = None) -> "DumpControl":
        """A new chunk size and/or delay (None keeps the current one); range-checked again."""
        return dataclasses.replace(
            self,
            chunk_size=self.chunk_size if chunk_size is None else chunk_size,
            delay_ms=self.delay_ms if delay_ms is None else delay_ms,
        )


@dataclasses.dataclass(frozen=True)
class TableProgress:
    """Where a table's dump stands; saved only once the output made it durable."""

    last_key: Optional[Key] = None  # key of the last row of the last finished chunk
    rows: int = 0
    chunks: int = 0
    done: bool = False
    keys_done: int = 0  # key-list dumps: how many of the requested keys are finished
    # Table dumps: the table's greatest key when its dump started (the engine reads it before
    # the first chunk). Chunks stop there; later inserts reach the changelog through the log.
    # None: not fixed yet (progress stored before bounds existed fixes it at the next chunk).
    upper_key: Optional[Key] = None
    # Table dumps: the capture's log position when the upper bound was fixed (encoded). Every
    # key committed before it was visible to the bound's query, so a key above the bound
    # whose last event is older than it is gone (range repair of the table's last chunk).
    # Set with the bound; an empty table has it without an upper key.
    bound_at: Optional[str] = None

    @property
    def bounded(self) -> bool:
        """Whether the table dump's upper bound is fixed (``upper_key``; None for an empty table)."""
        return self.upper_key is not None or self.bound_at is not None

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["last_key"] = list(self.last_key) if self.last_key is not None else None
        d["upper_key"] = list(self.upper_key) if self.upper_key is not None else None
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "TableProgress":
        d = json.loads(text)
        lk, uk = d.get("last_key"), d.get("upper_key")
        return cls(
            tuple(lk) if lk is not None else None,
            d["rows"],
            d["chunks"],
            d["done"],
            d.get("keys_done", 0),
            tuple(uk) if uk is not None else None,
            d.get("bound_at"),
        )


@dataclasses.dataclass(frozen=True)
class Dump:
    spec: DumpSpec
    control: DumpControl
    status: DumpStatus
    progress: dict[str, TableProgress]
    error: Optional[str] = None
    updated_at: float = 0.0

    @property
    def dump_id(self) -> str:
        return self.spec.dump_id

    def next_table(
        self, all_tables: Sequence[str], progress: Optional[dict[str, "TableProgress"]] = None
    ) -> Optional[str]:
        """The first requested table whose dump is not finished, in request order, judged by
        ``progress`` (the engine's emitted progress) or else the stored one."""
        progress = self.progress if progress is None else progress
        for t in self.spec.tables or all_tables:
            if not progress.get(t, TableProgress()).done:
                return t
        return None

    def to_dict(self, estimates: Optional[dict[str, int]] = None) -> dict[str, Any]:
        tables = {}
        for t, p in self.progress.items():
            entry: dict[str, Any] = {
                "rows": p.rows,
                "chunks": p.chunks,
                "done": p.done,
                "last_key": list(p.last_key) if p.last_key is not None else None,
                "upper_key": list(p.upper_key) if p.upper_key is not None else None,
            }
            # a key-list dump reads at most its keys; a table dump about the table's rows
            est = len(self.spec.keys) if self.spec.keys is not None else (estimates or {}).get(t, 0)
            if est > 0:
                entry["estimated_rows"] = est
                entry["percent"] = 100.0 if p.done else round(min(99.9, 100 * p.rows / est), 1)
            tables[t] = entry
        return {
            "dump_id": self.dump_id,
            "source_id": self.spec.source_id,
            "tables": list(self.spec.tables) if self.spec.tables else "all",
            "keys": len(self.spec.keys) if self.spec.keys is not None else None,
            "where": self.spec.where,
            "repair": self.spec.repair,
            "status": self.status.value,
            "paused": self.control.paused,
            "chunk_size": self.control.chunk_size,
            "delay_ms": self.control.delay_ms,
            "adaptive": self.control.adaptive,
            "readers": self.control.readers,
            "rows": sum(p.rows for p in self.progress.values()),
            "chunks": sum(p.chunks for p in self.progress.values()),
            "progress": tables,
            "error": self.error,
            "created_at": self.spec.created_at,
        }


def parse_key(text: str, schema: TableSchema) -> Key:
    """Parse one ``--key`` (JSON) against a table's key columns.

    Accepted: a scalar for a single-column key (``42``, ``"abc"``), a JSON array in key
    order (``[1, "x"]``), or an object naming every key column (``{"a": 1, "b": "x"}``).
    Each value must be a value of its column's type (``check_key_value``).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"key {text!r} for table {schema.table} is not valid JSON ({exc.msg}).",
            f"give each key as JSON: a scalar, an array in key order {list(schema.key)}, "
            "or an object naming the key columns, e.g. --key '42' or --key '{\"id\": 42}'.",
        ) from None
    return key_from_value(value, schema, text)


def key_from_value(value: Any, schema: TableSchema, shown: Any = None) -> Key:
    shown = shown if shown is not None else json.dumps(value)
    cols = schema.key
    if isinstance(value, dict):
        missing = [c for c in cols if c not in value]
        extra = [c for c in value if c not in cols]
        if missing or extra:
            raise RequestError(
                f"key {shown} for table {schema.table} does not match its key columns "
                f"{list(cols)} (missing {missing}, unknown {extra}).",
                f"name exactly the key columns {list(cols)}.",
            )
        parts = [value[c] for c in cols]
    elif isinstance(value, list):
        parts = value
    else:
        parts = [value]
    if len(parts) != len(cols):
        raise RequestError(
            f"key {shown} for table {schema.table} has {len(parts)} value(s) but the key has "
            f"{len(cols)} column(s) {list(cols)}.",
            f"give one value per key column, in order {list(cols)}.",
        )
    for c, v in zip(cols, parts):
        if v is None or isinstance(v, (dict, list)):
            raise RequestError(
                f"key {shown} for table {schema.table}: column {c} must be a scalar, got {json.dumps(v)}.",
                "key values are numbers or strings (dates, decimals and uuids as strings).",
            )
    # Each value must be one of its column's type, as is: no cast (core/key_types.py).
    columns = {col.name: col for col in schema.columns}
    return tuple(check_key_value(schema.table, columns[c], v) if c in columns else v for c, v in zip(cols, parts))
