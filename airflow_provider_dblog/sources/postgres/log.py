"""Turns PostgreSQL logical replication messages (pgoutput or wal2json) into DBLog log items.

No I/O of its own: the source hands it each message's payload plus catalog look-ups (a
table's schema, a type OID's name, format_type()), so both plugins go through the same rules.

Positions: ``coord`` is the transaction's commit LSN (16 hex digits) followed by the
change's 1-based index in the transaction (10 digits). Both plugins announce the commit LSN
when a transaction starts (pgoutput Begin.final_lsn; wal2json format 2 "B" record "lsn"
with include-lsn), so a change gets its position without buffering its transaction, and
positions sort in commit order. The index counts every row change the plugin sends (the
publication / add-tables filter is fixed), so a transaction sent again after a restart gets
the same positions.

Schemas come from the log, not from today's catalog: the log may be decoded long after a
table changed (a restart with lag), and each event must reference the columns it carries.
pgoutput's Relation message gives the column names, types and modifiers as of the change;
wal2json prints each column's type with its modifier. Only what the log does not carry
(nullability, the key when its columns still exist) is taken from the catalog.

Partitioned tables: pgoutput publishes a partition's changes under its captured root's name
(publish_via_partition_root). wal2json, and pgoutput decoding changes made before the
publication published via the root, name the partition: ``root_of`` maps such a name to the
captured root. A TRUNCATE of the root names its partitions too (counted, not repeated); a
TRUNCATE of partitions alone removes rows the log does not list, so it is reported in
``partial_truncates`` (the source warns; pgoutput via the root does not even send it).
"""

from __future__ import annotations

import struct
from collections import deque
from itertools import repeat
from typing import Any, Callable, Optional

from ...core import names
from ...core.batch import LogRows
from ...core.errors import ConfigurationError
from ...core.events import ChangeEvent, Column, Op, Origin, Position, SchemaEvent, TableSchema, WatermarkEvent
from ...core.row_text import loads_row
from ...core.toast import fill_from_before, unchanged_columns
from . import pgoutput
from .catalog import TableInfo, quote_table, type_label
from .log_markers import LogMarkers
from .pgoutput import Relation  # annotations: the name `pgoutput` is also a method below
from .pgoutput_native import NativePgRows
from .values import (
    UNCHANGED_TOAST_VALUE,
    converter,
    from_pg_text,
    keep_text,
    parse_wal2json,
    timestamp_us,
    wal2json_text,
)

_ROW_TAGS = frozenset(b"IUD")  # Insert, Update, Delete, as payload[0]: no slice per message
# Begin: final LSN, commit time (µs since 2000-01-01), xid; Commit: flags and two LSNs, time.
_BEGIN, _BEGIN_LEN, _COMMIT_LEN = struct.Struct("!QqI"), 21, 26
_new_tuple = tuple.__new__  # Position.unchecked without its Python call
_OP_OF_TAG = {ord("I"): Op.CREATE, ord("U"): Op.UPDATE, ord("D"): Op.DELETE}


def make_position(commit_lsn: int, index: int) -> Position:
    # Hex and digits only (never a '.'), sub 0: Position's checks cannot fail, so skip them
    # (this runs for every captured change).
    return Position.unchecked(f"{commit_lsn:016X}{index:010d}")


def commit_lsn_of(position: Position) -> int:
    return int(position.coord[:16], 16)


def parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class _Txn:
    __slots__ = ("commit_lsn", "commit_ts", "txid", "index", "truncated", "_coord")

    def __init__(self, commit_lsn: int, commit_ts: Optional[int], txid: str):
        self.commit_lsn, self.commit_ts, self.txid, self.index = commit_lsn, commit_ts, txid, 0
        self.truncated: set[str] = set()  # captured tables truncated so far in this transaction
        self._coord = f"{commit_lsn:016X}%010d".__mod__  # make_position's coordinate, one C call

    def next_position(self) -> Position:
        self.index += 1
        return _new_tuple(Position, (self._coord(self.index), 0))

    def next_positions(self, n: int) -> list[Position]:
        """``next_position`` ``n`` times, without a Python call per position."""
        if n == 1:  # a one-row transaction's change: no iterators to build
            self.index += 1
            return [_new_tuple(Position, (self._coord(self.index), 0))]
        first = self.index + 1
        self.index += n
        coords = map(self._coord, range(first, first + n))
        return list(map(_new_tuple, repeat(Position), zip(coords, repeat(0))))


class LogDecoder:
    """State of one replication stream: open transaction, relations, announced schemas."""

    def __init__(
        self,
        source_id: str,
        watermark_table: str,
        captured: set[str],
        table_info: Callable[[str, bool], TableInfo],
        type_name: Callable[[int], str],
        format_type: Callable[[int, int], str],
        encoding: str = "utf-8",  # the database's, as a Python codec name
        root_of: Callable[[str], Optional[str]] = lambda table: None,
        texts: bool = False,  # row images as their changelog JSON text where it can (start_log)
    ):
        self.source_id = source_id
        self.watermark_table = watermark_table
        self.captured = captured
        self._table_info = table_info  # (table, refresh) -> TableInfo
        self._type_name = type_name  # OID -> base type name (how to convert values)
        self._format_type = format_type  # (OID, modifier) -> the column's type as format_type()
        self.encoding = encoding
        self._root_of = root_of  # a partition's name -> its captured partitioned table, or None
        self.pending: deque = deque()
        self._txn: Optional[_Txn] = None
        self._relations: dict[int, pgoutput.Relation] = {}
        self._row_converters: dict[int, tuple[pgoutput.Relation, list]] = {}
        self._schemas: dict[str, TableSchema] = {}  # table -> its schema as of the log
        self._announced: dict[str, str] = {}  # table -> schema id announced in this stream
        # (table, key, position) of each change whose `after` still holds an unchanged-TOAST
        # placeholder (no REPLICA IDENTITY FULL): the engine queues a key-list dump for them.
        self.unchanged_toast: list[tuple[str, tuple, Position]] = []
        # (partition, root, position) of TRUNCATEs of partitions without their root.
        self.partial_truncates: list[tuple[str, str, Position]] = []
        self._native = NativePgRows(self._type_name)
        self._texts = texts
        # The LogRows block text changes are added to, and how many changes the blocks in
        # ``pending`` hold beyond one each (poll counts changes, not items).
        self._block: Optional[LogRows] = None
        self.block_extra = 0
        # relid -> (its Relation, the table's schema id, the key's column indices or None)
        self._key_columns: dict[int, tuple[Relation, str, Optional[list[int]]]] = {}
        # Read-only watermarks not yet in the stream (postgres/log_markers.py).
        self.markers = LogMarkers()

    def _target(self, name: str) -> Optional[str]:
        """The captured table (or the watermark table) a change of ``name`` belongs to: the
        table itself, or the partitioned table it is a partition of; None: not captured."""
        if name in self.captured or name == self.watermark_table:
            return name
        return self._root_of(name)

    # -- pgoutput ---------------------------------------------------------------------
    def pgoutput_many(self, payloads: list[bytes]) -> None:
        """``pgoutput`` for each payload in order; with row images as text, a run of changes of
        one relation and op is decoded by the extension in one call (``_text_run``)."""
        i, n = 0, len(payloads)
        texts = self._texts and self._native.on
        while i < n:
            payload = payloads[i]
            tag = payload[0] if payload else 0
            if texts and tag in _ROW_TAGS:
                took = self._text_run(payloads, i)
                if took:
                    i += took
                    continue
            # Begin and Commit without a message object: with one-row transactions they are
            # two of every three messages.
            elif tag == 66 and len(payload) == _BEGIN_LEN:  # b"B"
                final_lsn, ts, xid = _BEGIN.unpack_from(payload, 1)
                if self.markers:
                    self.pending.extend(self.markers.due(None, before_commit=final_lsn))
                self._txn = _Txn(final_lsn, ts + pgoutput.PG_EPOCH_OFFSET_US, str(xid))
                i += 1
                continue
            elif tag == 67 and len(payload) == _COMMIT_LEN:  # b"C"
                self._txn = None
                i += 1
                continue
            self.pgoutput(payload)
            i += 1

    def markers_passed(self, wal_end: int) -> None:
        """The server's decoding passed ``wal_end``: the markers up to it go into the stream,
        unless a transaction is open (they follow its commit then)."""
        if self.markers and self._txn is None:
            self.pending.extend(self.markers.due(wal_end))

    def pgoutput(self, payload: bytes) -> None:
        if payload and payload[0] in _ROW_TAGS and self._native.on and self._native_change(payload):
            return
        # pgoutput converts text to the client encoding, which the source sets to UTF8.
        m = pgoutput.decode(payload, "utf-8")
        if isinstance(m, pgoutput.Begin):
            if self.markers:
                self.pending.extend(self.markers.due(None, before_commit=m.final_lsn))
            self._txn = _Txn(m.final_lsn, m.commit_ts, str(m.xid))
        elif isinstance(m, pgoutput.Commit):
            self._txn = None
        elif isinstance(m, pgoutput.Relation):
            self._relations[m.relid] = m
            if m.qualified_name in self.captured:
                # Sent before a table's first change in a stream and after its schema changed.
                cols = [(c.name, self._format_type(c.type_oid, c.type_modifier)) for c in m.columns]
                self._use_schema(self._log_schema(m.qualified_name, cols, [c.name for c in m.columns if c.is_key]))
        elif isinstance(m, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)):
            rel = self._relation(m.relid)
            txn = self._in_txn()
            pos = txn.next_position()
            table = self._target(rel.qualified_name)
            if table is None:
                return
            if isinstance(m, pgoutput.Insert):
                self._change(table, Op.CREATE, None, self._pg_row(rel, m.new), pos, txn)
            elif isinstance(m, pgoutput.Update):
                # 'K' (key changed) carries the identity columns, the others are NULL fillers.
                before = self._pg_row(rel, m.old, key_only=m.old_kind == "K") if m.old is not None else None
                after = self._pg_row(rel, m.new)
                if pgoutput.UNCHANGED_TOAST in m.new:
                    if m.old_kind == "O":  # REPLICA IDENTITY FULL: the old row has the value
                        fill_from_before(after, before)
                    self._change(table, Op.UPDATE, before, after, pos, txn)
                    self._note_unchanged_toast(table, after)
                else:
                    self._change(table, Op.UPDATE, before, after, pos, txn)
            else:
                before = self._pg_row(rel, m.old, key_only=m.old_kind == "K")
                self._change(table, Op.DELETE, before, None, pos, txn)
        elif isinstance(m, pgoutput.Truncate):
            # One message names every table of a multi-table or CASCADE truncate.
            self._truncate([self._relation(r).qualified_name for r in m.relids])
        # Origin, Type and logical Message carry nothing DBLog needs.

    def _native_change(self, payload: bytes) -> bool:
        """An Insert/Update/Delete through the compiled decoder, with the same effects as the
        Python path below; False: nothing done, decode it in Python."""
        rel = self._relations.get(int.from_bytes(payload[1:5], "big"))
        if rel is None or self._txn is None:
            return False  # the Python path names the error
        table = self._target(rel.qualified_name)
        if table is None:
            self._txn.next_position()  # numbered like every change of the transaction
            return True
        if self._texts and table != self.watermark_table and self._text_change(table, rel, payload):
            return True
        decoded = self._native.change(rel, payload)
        if decoded is None:
            return False
        tag, before, after = decoded
        self._change(table, _OP_OF_TAG[tag], before, after, self._txn.next_position(), self._txn)
        return True

    def _text_run(self, payloads: list[bytes], start: int) -> int:
        """The run of changes from ``payloads[start]`` that the extension decodes in one call
        (PgRowPlan.run_text: one relation, one op, no key change), added to the log block as
        ``_text_change`` adds them one by one; the number taken (0: decode it alone)."""
        txn = self._txn
        rel = self._relations.get(int.from_bytes(payloads[start][1:5], "big"))
        if rel is None or txn is None:
            return 0
        table = self._target(rel.qualified_name)
        if table is None or table == self.watermark_table:
            return 0
        sid, key = self._text_key(table, rel)
        run = self._native.run_text(rel, payloads, start, key) if key is not None else None
        if run is None:
            return 0
        n, tag, keys, befores, afters = run
        op = _OP_OF_TAG[tag]
        self._to_block(table, op, sid, txn, keys, befores, afters, txn.next_positions(n))
        return int(n)

    def _to_block(
        self, table: str, op: Op, sid: str, txn: _Txn, keys: list, befores: list, afters: list, positions: list
    ) -> None:
        """Text changes (lists, in order) into the log block: consecutive changes of one table
        and op in a transaction make one block (core/batch.py), extended only while it is the
        last item queued (never once poll handed it out)."""
        block, pending = self._block, self.pending
        if (
            block is not None
            and pending
            and pending[-1] is block
            and block.op is op
            and block.table == table
            and block.txid == txn.txid
            and block.schema_id == sid
        ):
            block.keys.extend(keys)  # type: ignore[attr-defined]  # lists while open
            block.befores.extend(befores)  # type: ignore[attr-defined]
            block.afters.extend(afters)  # type: ignore[attr-defined]
            block.positions.extend(positions)  # type: ignore[attr-defined]
            self.block_extra += len(keys)
        else:
            self._block = LogRows(
                self.source_id, table, op, sid, txn.commit_ts, txn.txid, keys, befores, afters, positions
            )
            pending.append(self._block)
            self.block_extra += len(keys) - 1

    def _text_key(self, table: str, rel: Relation) -> tuple[str, Optional[list[int]]]:
        """The table's schema id (announced first if it was not yet in this stream) and its
        key's column indices in ``rel`` (None: a key column the relation lacks)."""
        if table not in self._announced:
            self._use_schema(self._schema(table))
        schema = self._schema(table)
        sid = schema.schema_id()
        cached = self._key_columns.get(rel.relid)
        if cached is not None and cached[0] is rel and cached[1] == sid:
            return sid, cached[2]
        names = [c.name for c in rel.columns]
        key = [names.index(k) for k in schema.key] if all(k in names for k in schema.key) else None
        self._key_columns[rel.relid] = (rel, sid, key)
        return sid, key

    def _text_change(self, table: str, rel: Relation, payload: bytes) -> bool:
        """``_native_change`` with the images as JSON text (start_log's ``texts``); False:
        make dicts. An update that changes the key keeps dict images (the engine splits it)."""
        sid, key = self._text_key(table, rel)
        decoded = self._native.change_text(rel, payload, key) if key is not None else None
        if decoded is None:
            return False
        tag, before_key, after_key, before, after = decoded
        op = _OP_OF_TAG[tag]
        key_update = op is Op.UPDATE and before_key is not None and before_key != after_key
        if key_update:
            before, after = loads_row(before), loads_row(after)
        txn = self._txn
        assert txn is not None  # _native_change checked
        key_value = before_key if op is Op.DELETE else after_key
        if key_update:  # an event of dicts, which the engine splits
            self.pending.append(
                ChangeEvent(
                    self.source_id,
                    table,
                    op,
                    key_value,
                    before,
                    after,
                    txn.next_position(),
                    txn.commit_ts,
                    txn.txid,
                    Origin.LOG,
                    None,
                    sid,
                )
            )
            return True
        self._to_block(table, op, sid, txn, [key_value], [before], [after], [txn.next_position()])
        return True

    def _relation(self, relid: int) -> Relation:
        rel = self._relations.get(relid)
        if rel is None:
            raise pgoutput.DecodeError(f"change for relation {relid} before its Relation message")
        return rel

    def _in_txn(self) -> _Txn:
        if self._txn is None:
            raise pgoutput.DecodeError("row change outside a transaction (no Begin seen)")
        return self._txn

    def _pg_row(self, rel: Relation, values, key_only: bool = False) -> dict:
        row: dict[str, Any] = {}
        for col, conv, v in zip(rel.columns, self._converters(rel), values):
            if key_only and not col.is_key:
                continue
            if v.__class__ is str:
                row[col.name] = v if conv is None else conv(v)
            elif v is None:
                row[col.name] = None
            elif v is pgoutput.UNCHANGED_TOAST:
                row[col.name] = dict(UNCHANGED_TOAST_VALUE)
            else:
                raise pgoutput.DecodeError("binary tuple data received although text was requested")
        return row

    def _converters(self, rel: Relation) -> list:
        """Per column of a relation: its text -> canonical function, or None when the text is
        canonical already. Looked up once per Relation message, not once per value."""
        cached = self._row_converters.get(rel.relid)
        if cached is None or cached[0] is not rel:
            convs = [converter(self._type_name(c.type_oid)) for c in rel.columns]
            cached = (rel, [None if f is keep_text else f for f in convs])
            self._row_converters[rel.relid] = cached
        return cached[1]

    # -- wal2json (format-version 2) ----------------------------------------------------------
    def wal2json(self, payload: Any) -> None:
        # wal2json writes JSON in the database encoding.
        m = parse_wal2json(payload.decode(self.encoding) if isinstance(payload, bytes) else payload)
        action = m.get("action")
        if action == "B":
            self._txn = _Txn(parse_lsn(m["lsn"]), timestamp_us(m.get("timestamp")), str(m.get("xid")))
        elif action == "C":
            self._txn = None
        elif action in ("I", "U", "D"):
            txn = self._in_txn()
            pos = txn.next_position()
            name = names.table_name(m["schema"], m["table"])
            table = self._target(name)
            if table is None:
                return
            after = self._w2j_row(table, m.get("columns")) if action != "D" else None
            before = self._w2j_row(table, m["identity"]) if "identity" in m else None
            if table in self.captured:
                if after is not None:
                    cols = m["columns"] if name == table else self._in_root_order(table, m["columns"])
                    after = self._w2j_schema_check(table, cols, after, action == "U")
                if action == "U" and before is not None and after is not None:
                    # REPLICA IDENTITY FULL: the identity is the old row, unchanged TOASTed
                    # values included (wal2json leaves them out of "columns" only).
                    fill_from_before(after, before)
                    key = self._schema(table).key
                    # wal2json sends the identity with every update, pgoutput only when the
                    # key changed or the identity is FULL: keep both plugins' events alike.
                    if set(before) == set(key) and all(before[c] == after.get(c) for c in key):
                        before = None
            op = {"I": Op.CREATE, "U": Op.UPDATE, "D": Op.DELETE}[action]
            self._change(table, op, before, after, pos, txn)
            if action == "U" and table in self.captured:
                self._note_unchanged_toast(table, after)
        elif action == "T":
            self._truncate([names.table_name(m["schema"], m["table"])])
        # "M" (logical messages) carries nothing DBLog needs.

    def _w2j_row(self, table: str, cols: Optional[list]) -> dict:
        row: dict[str, Any] = {}
        for c in cols or ():
            oid = c.get("typeoid")
            if oid is not None:
                type_name = self._type_name(int(oid))
            else:  # a wal2json without include-type-oids: fall back to the catalog
                type_name = (
                    self._table_info(table, False).base_types.get(c["name"], "text")
                    if table in self.captured
                    else "text"
                )
            row[c["name"]] = from_pg_text(type_name, wal2json_text(type_name, c.get("value")))
        return row

    def _in_root_order(self, root: str, cols: list) -> list:
        """A partition's columns in its root's order: a table attached as a partition may
        order them differently (names and types always match the root's)."""
        order = {c: i for i, c in enumerate(self._schema(root).column_names())}
        return sorted(cols, key=lambda c: order.get(c["name"], len(order)))

    def _w2j_schema_check(self, table: str, cols: list, after: dict, is_update: bool) -> dict:
        """wal2json has no Relation messages: a column list that differs from the schema in
        use means the table changed. An UPDATE leaves out its unchanged TOASTed columns."""
        current = self._schema(table)
        have = [(c.name, c.type) for c in current.columns]
        got = [(c["name"], type_label(c["type"])) for c in cols if "type" in c]
        if len(got) == len(cols) and got != have and not (is_update and _subsequence(got, have)):
            if is_update:  # which columns are TOASTed and which were dropped: ask the catalog
                self._use_schema(self._table_info(table, True).schema)
            else:
                self._use_schema(self._log_schema(table, got, []))
        elif table not in self._announced:
            self._use_schema(current)
        if is_update:
            for c in self._schema(table).column_names():
                if c not in after:
                    after[c] = dict(UNCHANGED_TOAST_VALUE)
        return after

    # -- both --------------------------------------------------------------------------
    def _schema(self, table: str) -> TableSchema:
        schema = self._schemas.get(table)
        return schema if schema is not None else self._table_info(table, False).schema

    def _log_schema(self, table: str, cols: list[tuple[str, str]], identity: list[str]) -> TableSchema:
        """The schema of the columns a message carries; nullability and the key from the
        catalog (the key from the replica identity if the catalog's key columns are gone)."""
        catalog = self._table_info(table, True).schema
        nullable = {c.name: c.nullable for c in catalog.columns}
        names = [n for n, _ in cols]
        key = catalog.key if all(k in names for k in catalog.key) else tuple(identity)
        if not key:
            raise ConfigurationError(
                f"the log's columns of table {table} ({names}) no longer include its key {list(catalog.key)}.",
                "restart the capture from a fresh position and run a full dump of the table.",
            )
        return TableSchema(table, tuple(Column(n, t, nullable.get(n, True)) for n, t in cols), key)

    def _use_schema(self, schema: TableSchema) -> None:
        """Use ``schema`` for the table's next events; announce it if it is new here."""
        self._schemas[schema.table] = schema
        sid = schema.schema_id()
        if self._announced.get(schema.table) != sid:
            self._announced[schema.table] = sid
            self.pending.append(SchemaEvent(schema))

    def _change(self, table: str, op: Op, before, after, pos: Position, txn: _Txn) -> None:
        if table == self.watermark_table:
            # Only this source's row; other sources share the table.
            if after is not None and after.get("source_id") == self.source_id:
                self.pending.append(WatermarkEvent(uuid=after.get("value"), position=pos, txid=txn.txid))
            return
        if table not in self._announced:
            self._use_schema(self._schema(table))
        schema = self._schema(table)
        key_row = after if op is not Op.DELETE else before
        try:
            key = schema.key_getter()(key_row)
        except (KeyError, TypeError):
            missing = [c for c in schema.key if key_row is None or c not in key_row]
            raise ConfigurationError(
                f"a {op.name.lower()} of table {table} reached the log without its key column(s) {missing}.",
                f"give the table a replica identity that includes its key (ALTER TABLE "
                f"{quote_table(table)} REPLICA IDENTITY FULL), then restart the capture.",
            ) from None
        self.pending.append(
            ChangeEvent(
                self.source_id,
                table,
                op,
                key,
                before,
                after,
                pos,
                txn.commit_ts,
                txn.txid,
                Origin.LOG,
                None,
                schema.schema_id(),
            )
        )

    def _note_unchanged_toast(self, table: str, after: Optional[dict]) -> None:
        """Remember the change just queued if its ``after`` still holds a placeholder."""
        if unchanged_columns(after):
            event = self.pending[-1]
            self.unchanged_toast.append((table, event.key, event.position))

    def _truncate(self, tables: list[str]) -> None:
        """A table-level event (op t, key (), no images) per captured table, each at a
        position of its own in the transaction. The watermark table needs nothing: its row is
        written with an upsert. A partition named after its root (TRUNCATE of the root lists
        every partition) adds nothing; a partition truncated without its root is reported."""
        txn = self._in_txn()
        for name in tables:
            pos = txn.next_position()  # every table named counts, so a resend gets the same positions
            table = self._target(name)
            if table is None or table == self.watermark_table:
                continue
            if table != name:
                if table not in txn.truncated and table not in tables:
                    self.partial_truncates.append((name, table, pos))
                continue
            txn.truncated.add(table)
            if table not in self._announced:
                self._use_schema(self._schema(table))
            self.pending.append(
                ChangeEvent(
                    self.source_id,
                    table,
                    Op.TRUNCATE,
                    (),
                    None,
                    None,
                    pos,
                    txn.commit_ts,
                    txn.txid,
                    Origin.LOG,
                    None,
                    self._schema(table).schema_id(),
                )
            )


def _subsequence(part: list, whole: list) -> bool:
    it = iter(whole)
    return all(x in it for x in part)
