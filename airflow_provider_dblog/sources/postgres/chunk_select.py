"""A PostgreSQL chunk's SELECT: one REPEATABLE READ snapshot, the transactions it cannot see,
and its rows as canonical values (or their JSON texts).

Every value but bool/ints is kept as the server's text and made canonical the way the log's
text is (postgres/values.py), by the compiled extension where it is built
(postgres/pgoutput_native.py) or per column in Python; chunks of texts are read by COPY
(postgres/chunk_copy.py) where that path can, else a part at a time from a cursor.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Optional

import psycopg2
import psycopg2.extensions

from ...core.protocols import ChunkResult
from ...core.row_text import PART_ROWS, ChunkTexts
from .catalog import TableInfo
from .chunk_copy import ChunkCopy
from .pgoutput_native import NativePgRows
from .values import RAW_TEXT_OIDS, converter, pg_kind

# bool, int8, int2, int4, text, bpchar, varchar: psycopg2's C casters already give the
# canonical value (what from_pg_text makes of the text), so chunk SELECTs convert nothing
# in Python for them (not even the raw-text caster's per-value call).
_C_CANONICAL_OIDS = frozenset((16, 20, 21, 23, 25, 1042, 1043))
RAW_TEXT = psycopg2.extensions.new_type(
    tuple(sorted((set(RAW_TEXT_OIDS) | set(psycopg2.extensions.string_types)) - _C_CANONICAL_OIDS)),
    "DBLOG_PG_TEXT",
    lambda v, _c: v,
)


class ChunkSelect:
    """``info(table)``: the table's catalog facts (its columns' base types)."""

    def __init__(self, info: Callable[[str], TableInfo]):
        self._info = info
        self.native_rows = NativePgRows()  # chunk rows made canonical by the extension
        self.copy = ChunkCopy(self.native_rows)  # or read by COPY into their texts
        # Read-only watermarks (postgres/log_markers.py): the SELECT takes no xid either, so
        # the transactions it cannot see are its snapshot's list and every xid from its xmax.
        self.writes_nothing = False

    def rows(self, cur, schema, sql: str, params: list) -> list[dict]:
        """One autocommit statement's rows, canonical (the max key, a partition's keys)."""
        psycopg2.extensions.register_type(RAW_TEXT, cur)
        cur.execute(sql, [to_param(p) for p in params] or None)
        return self.canonical(schema, cur.fetchall(), [d.type_code for d in cur.description])

    def select(self, conn, schema, sql: str, params: list, read_only: bool = False, texts: bool = False) -> ChunkResult:
        """One REPEATABLE READ snapshot for the chunk, plus the transactions it cannot see.

        PostgreSQL's WAL commit order and visibility order may differ: a transaction whose
        commit record precedes LW can still be invisible to a snapshot taken after LW
        committed. Its events must remove keys from the chunk like window events do
        (ChunkResult). Invisible are the snapshot's in-progress list (xip) and every xid
        from its xmax on; the latter cannot be listed from the snapshot, so the statement
        also takes an xid of its own, N: every transaction running at the snapshot has an
        xid below N, and [xmax, N) covers them. ``conn``: the source's connection or a parallel reader's.
        ``texts``: the rows as JSON texts, read by COPY in the same transaction
        (sources/postgres/chunk_copy.py) or, where that path cannot, made a part at a time
        (core/row_text.py) from a cursor of it; either way the chunk is never in memory all at
        once as the server's result, tuples or dicts (only its texts are)."""
        with conn.cursor() as cur:
            # Keep every value but bool/ints as the server's text: from_pg_text then treats
            # it exactly like the text the log carries.
            psycopg2.extensions.register_type(RAW_TEXT, cur)
            writes_nothing = self.writes_nothing
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ" + (" READ ONLY" if writes_nothing else ""))
            try:
                # The snapshot is taken when this statement starts, the xid while it runs.
                if writes_nothing:
                    cur.execute("SELECT pg_current_snapshot()::text, NULL")
                else:
                    cur.execute("SELECT pg_current_snapshot()::text, pg_current_xact_id()::text")
                snapshot, own = cur.fetchone()
                if read_only and not writes_nothing:  # a filtered chunk runs operator-given SQL: it may write nothing
                    cur.execute("SET TRANSACTION READ ONLY")
                copied = self._copy_chunk(conn, cur, schema, sql, params) if texts else None
                if copied is not None:
                    keys, rows, key_texts = copied
                elif texts:
                    collected = ChunkTexts(schema)
                    # A cursor by SQL: psycopg2's named cursors refuse an autocommit connection,
                    # and this transaction is begun by hand.
                    cur.execute(f"DECLARE dblog_chunk NO SCROLL CURSOR FOR {sql}", [to_param(p) for p in params])
                    while True:
                        cur.execute(f"FETCH FORWARD {PART_ROWS} FROM dblog_chunk")
                        part = cur.fetchall()
                        if not part:
                            break
                        collected.add(self.canonical(schema, part, [d.type_code for d in cur.description]))
                else:
                    cur.execute(sql, [to_param(p) for p in params])
                    raw = cur.fetchall()
                    oids = [d.type_code for d in cur.description]
            finally:
                # Nothing was written: ROLLBACK ends it (and also clears an error).
                cur.execute("ROLLBACK")
        invisible = invisible_xids(snapshot, int(own)) if own is not None else SnapshotInvisible.of(snapshot)
        if copied is not None:
            return ChunkResult(rows, invisible, keys, texts=True, key_texts=key_texts)
        if texts:
            return ChunkResult(collected.rows, invisible, collected.keys, texts=True)
        return ChunkResult(self.canonical(schema, raw, oids), invisible)

    def _copy_chunk(self, conn, cur, schema, sql: str, params: list) -> Optional[tuple[list, Any, Any]]:
        """(keys, row texts, key texts) of the chunk by COPY (sources/postgres/chunk_copy.py), or
        None: read it with the cursor."""
        if not self.copy.on:
            return None
        names = [c.name for c in schema.columns]
        key = [names.index(k) for k in schema.key]
        params = [to_param(p) for p in params]
        return self.copy.read(conn, cur, schema.table, names, self._kinds(schema), key, sql, params)

    def _kinds(self, schema) -> list[str]:
        """Each column's pg_kind (of its base type for a domain)."""
        info = self._info(schema.table)
        return [pg_kind(info.base_types.get(c.name, c.type)) for c in schema.columns]

    def canonical(self, schema, raw: list, oids: list) -> list[dict]:
        """Rows as dicts of canonical values (the server's text as the log carries it)."""
        info = self._info(schema.table)
        names = [c.name for c in schema.columns]
        kinds = self._kinds(schema)
        # Per column, not per value: which columns still need a text -> canonical step.
        convert = [oid not in _C_CANONICAL_OIDS and k != "text" for oid, k in zip(oids, kinds)]
        if self.native_rows.on:
            native = self.native_rows.chunk_rows(names, kinds, convert, raw)
            if native is not None:
                return native
        todo = [(n, converter(info.base_types.get(n, c.type))) for n, c, f in zip(names, schema.columns, convert) if f]
        rows = [dict(zip(names, r)) for r in raw]
        for n, conv in todo:
            for row in rows:
                v = row[n]
                if v is not None:
                    row[n] = conv(v)
        return rows


def invisible_xids(snapshot: str, own_xid: int) -> frozenset[str]:
    """The transactions a snapshot ('xmin:xmax:xip,...') does not see that were running when
    it was taken, as the 32-bit xids the log carries (``own_xid`` was assigned after it)."""
    _xmin, xmax, xip = snapshot.split(":")
    xids = {int(x) for x in xip.split(",") if x}
    xids.update(range(int(xmax), own_xid))
    return frozenset(str(x & 0xFFFFFFFF) for x in xids)


class SnapshotInvisible(frozenset):
    """The transactions a snapshot ('xmin:xmax:xip,...') does not see, without an xid of the
    SELECT's own to close the range: its in-progress list (the members, which the window
    looks for among the transactions already passed on) and every xid from its xmax on
    (``in``, modulo 2**32 as PostgreSQL compares 32-bit xids; such a transaction began after
    the snapshot, so none was passed on before it)."""

    xmax: int

    @classmethod
    def of(cls, snapshot: str) -> "SnapshotInvisible":
        _xmin, xmax, xip = snapshot.split(":")
        out = cls(str(int(x) & 0xFFFFFFFF) for x in xip.split(",") if x)
        out.xmax = int(xmax) & 0xFFFFFFFF
        return out

    def __or__(self, other: Any) -> "SnapshotInvisible":
        """Missed by either snapshot (parallel readers, core/parallel.py): both lists, and
        every xid from the older xmax on."""
        out = SnapshotInvisible(frozenset.__or__(self, other))
        xmax = self.xmax
        if isinstance(other, SnapshotInvisible) and (other.xmax - xmax) & 0xFFFFFFFF >= 0x80000000:
            xmax = other.xmax
        out.xmax = xmax
        return out

    __ror__ = __or__

    def __contains__(self, txid: object) -> bool:
        if frozenset.__contains__(self, txid):
            return True
        if not isinstance(txid, str) or not txid.isdigit():
            return False
        return (int(txid) - self.xmax) & 0xFFFFFFFF < 0x80000000


def to_param(value: Any) -> Any:
    """Canonical key value -> query parameter (the placeholder casts it to the column type)."""
    if isinstance(value, dict) and "$b64" in value:
        return psycopg2.Binary(base64.b64decode(value["$b64"]))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value
