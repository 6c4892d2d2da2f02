"""The compiled rows decoder (native/, a PyO3 extension) as the binlog reader uses it.

mysql-replication decodes each value of a rows event with several Python calls, and
``mysql_values.from_binlog`` converts it again; on 30-column rows that was most of the
capture's time (issue 13). ``NativeRows`` hands the event's row images (a slice of the packet
the library already holds: no copy) and a plan made once per table map to the extension,
which returns the rows' (before, after) images with canonical values directly.

It is an optimisation only, never a second source of truth: whenever the extension is not
built, a column has a type or a catalog kind it does not handle, or a value is one it does
not reproduce exactly (an invalid date, a byte sequence its character set rejects, ...), the
event is decoded by mysql-replication and ``from_binlog`` as before. Each such reason is
logged once. ``DBLOG_NATIVE_ROWS=0`` turns the decoder off (benchmarks, differential tests).
"""

from __future__ import annotations

import codecs
import functools
import logging
from typing import Any, Optional, Sequence

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from ...core.events import Column
from ..native import IMPORT_ERROR, LogOnce, enabled, extension
from .values import column_kind, set_members

log = logging.getLogger(__name__)

# Column spec codes, the same list as native/src/lib.rs.
INT, DECIMAL, DOUBLE, FLOAT, STRING, YEAR, BIT, DATE, DATETIME2, TIMESTAMP2, TIME2, ENUM, SET = range(1, 14)
AS_TEXT, AS_BINARY, AS_JSON = 0, 1, 2
WRITE, DELETE, UPDATE = 0, 1, 2

_INT_WIDTH = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}
# Rows events the decoder reads (v1 and v2); PARTIAL_UPDATE_ROWS_EVENT (MySQL's partial JSON)
# and anything else stay with mysql-replication.
_KIND_OF_EVENT = {23: WRITE, 30: WRITE, 25: DELETE, 32: DELETE, 24: UPDATE, 31: UPDATE}
_SIMPLE = {
    ("double", FIELD_TYPE.DOUBLE): (DOUBLE, 0, 0),
    ("float", FIELD_TYPE.FLOAT): (FLOAT, 0, 0),
    ("year", FIELD_TYPE.YEAR): (YEAR, 0, 0),
    ("date", FIELD_TYPE.DATE): (DATE, 0, 0),
}
_TEMPORAL = {
    ("datetime", FIELD_TYPE.DATETIME2): DATETIME2,
    ("timestamp", FIELD_TYPE.TIMESTAMP2): TIMESTAMP2,
    ("time", FIELD_TYPE.TIME2): TIME2,
}


class Unsupported(Exception):
    """A table the native decoder does not handle (the reason names the column)."""


def _codec(tm: Any) -> Optional[str]:
    """How mysql-replication turns this column's bytes into a value: None for UTF-8 (checked
    in Rust), '' for bytes left as they are (an unknown codec, e.g. the binary charset), or
    the Python codec it decodes with."""
    name = tm.character_set_name
    if name is None:
        return None  # no charset in the table map: the library decodes UTF-8
    encoding = RowsEvent.charset_to_encoding(name)
    try:
        canonical = codecs.lookup(encoding).name
    except LookupError:
        return ""
    return None if canonical == "utf-8" else encoding


@functools.lru_cache(maxsize=None)
def _single_byte_table(encoding: str) -> Optional[str]:
    """The 256 characters a single-byte codec decodes each byte to ('\ufffe' where it refuses
    the byte, as Python's charmap tables mark it), or None for a multi-byte codec: the
    extension then decodes such text without calling the codec per value."""
    chars = []
    for b in range(256):
        try:
            ch = codecs.getincrementaldecoder(encoding)("strict").decode(bytes([b]), final=False)
        except UnicodeDecodeError:
            ch = "\ufffe"
        if len(ch) != 1:  # '' is the lead byte of a longer sequence
            return None
        chars.append(ch)
    return "".join(chars)


def _string_spec(name: str, kind: str, length: Optional[int], tm: Any) -> tuple:
    prefix = tm.length_size if tm.type == FIELD_TYPE.BLOB else (2 if tm.max_length > 255 else 1)
    codec = _codec(tm)
    if kind == "binary":
        if codec != "":
            raise Unsupported(f"column {name}: binary column with character set {tm.character_set_name}")
        return (STRING, prefix, AS_BINARY, length or 0, None)
    if kind == "json" and codec == "":
        raise Unsupported(f"column {name}: JSON in a column without a known character set")
    # A text column without a known codec comes back as bytes, which from_binlog reads as UTF-8.
    extra = (codec, _single_byte_table(codec)) if codec else None
    return (STRING, prefix, AS_JSON if kind == "json" else AS_TEXT, 0, extra)


def column_spec(column: Column, tm: Any) -> tuple:
    """The spec the extension decodes one column with: (code, a, b, c, extra)."""
    kind, length = column_kind(column.type)
    t, name = tm.type, column.name
    if kind == "int" and t in _INT_WIDTH:
        return (INT, _INT_WIDTH[t], int(bool(tm.unsigned)), 0, None)
    if kind == "decimal" and t == FIELD_TYPE.NEWDECIMAL:
        return (DECIMAL, tm.precision, tm.decimals, 0, None)
    if (kind, t) in _SIMPLE:
        return (*_SIMPLE[(kind, t)], 0, None)
    if (kind, t) in _TEMPORAL:
        return (_TEMPORAL[(kind, t)], tm.fsp, 0, 0, None)
    if kind in ("text", "binary", "json") and t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        if column.type.lower().startswith("inet4"):
            raise Unsupported(f"column {name}: {column.type}")
        return _string_spec(name, kind, length, tm)
    if kind == "bit" and t == FIELD_TYPE.BIT:
        first = tm.bits if tm.bytes == 1 else (tm.bits % 8 or 8)
        return (BIT, tm.bytes, first, 0, None)
    if kind == "enum" and t == FIELD_TYPE.ENUM:
        return (ENUM, tm.size, 0, 0, list(tm.enum_values) if tm.enum_values else None)
    if kind == "set" and t == FIELD_TYPE.SET:
        if not tm.set_values:
            return (SET, tm.size, 0, 0, None)  # the library reads no labels: every value is ''
        labels = list(tm.set_values)
        members = [(labels.index(m), m) for m in set_members(column.type) if m in labels]
        return (SET, tm.size, 0, 0, members)
    raise Unsupported(f"column {name}: {column.type} (binlog type {t})")


class NativeRows:
    """Per binlog reader: plans per table, and which fallbacks were logged already."""

    def __init__(self) -> None:
        self._plans: dict[str, Any] = {}  # table -> Plan, or the reason it has none
        self._once = LogOnce(log)
        self.on = enabled()  # read once: the environment is no per-event lookup

    def forget(self, table: str) -> None:
        """The table map of ``table`` changed: its plan is made again on its next rows."""
        self._plans.pop(table, None)

    def _plan(self, table: str, columns: Sequence[Column], tm_columns: list) -> Any:
        plan = self._plans.get(table)
        if plan is None:
            try:
                if len(tm_columns) != len(columns):
                    raise Unsupported(f"the table map has {len(tm_columns)} columns, the schema {len(columns)}")
                specs = [column_spec(c, tm) for c, tm in zip(columns, tm_columns)]
                plan = extension.Plan([c.name for c in columns], specs)
            except (Unsupported, ValueError, TypeError) as exc:
                plan = str(exc)
            self._plans[table] = plan
        if isinstance(plan, str):
            self._once(f"table:{table}:{plan}", "rows of %s are decoded in Python: %s", table, plan)
            return None
        return plan

    def _event(self, ev: Any, table: str, columns: Sequence[Column]) -> Optional[tuple]:
        """(plan, the decode arguments but the last) of the event, or None when
        mysql-replication must decode it (the reason is logged once)."""
        if not self.on:
            self._once("off", "binlog rows are decoded in Python: %s", IMPORT_ERROR or "DBLOG_NATIVE_ROWS=0")
            return None
        kind = _KIND_OF_EVENT.get(ev.event_type)
        if kind is None:
            self._once(f"event:{ev.event_type}", "rows events of type %s are decoded in Python", ev.event_type)
            return None
        plan = self._plan(table, columns, ev.columns)
        if plan is None:
            return None
        wrapper = ev.packet  # mysql-replication's BinLogPacketWrapper around PyMySQL's packet
        if wrapper._BinLogPacketWrapper__data_buffer or getattr(ev, "_RowsEvent__rows", None) is not None:
            return None  # the library has started reading the rows itself
        raw = wrapper.packet
        start = raw._position
        end = start + ev.event_size - wrapper.read_bytes  # event_size excludes the checksum
        present_after = getattr(ev, "columns_present_bitmap2", None) if kind == UPDATE else None
        return plan, (raw._data, start, end, kind, ev.columns_present_bitmap), present_after

    def rows(self, ev: Any, table: str, columns: Sequence[Column]) -> Optional[list]:
        """The event's rows as (before, after) images of canonical values, or None when the
        event must be decoded by mysql-replication (the reason is logged once)."""
        event = self._event(ev, table, columns)
        if event is None:
            return None
        plan, args, present_after = event
        try:
            return plan.decode(*args, present_after)
        except extension.Unsupported as exc:
            self._once(f"value:{table}:{exc}", "a rows event of %s is decoded in Python: %s", table, exc)
        except extension.RowsDecodeError as exc:
            log.warning("the native decoder rejected a rows event of %s (%s); decoding it in Python", table, exc)
        return None

    def texts(self, ev: Any, table: str, columns: Sequence[Column], key: Sequence[int]) -> Optional[list]:
        """The event's rows as (before_key, after_key, before, after): the images as their
        changelog JSON text (core/row_text.py), the keys as tuples of the columns at ``key``.
        None when the event needs dicts: ``rows`` then decodes it (a value only Python writes,
        e.g. a JSON integer beyond 64 bits, or text in a multi-byte character set; logged
        once per table and reason)."""
        event = self._event(ev, table, columns)
        if event is None:
            return None
        plan, args, present_after = event
        try:
            return plan.decode_text(*args, key, present_after)
        except extension.Unsupported as exc:
            self._once(f"text:{table}:{exc}", "a rows event of %s is decoded into dicts: %s", table, exc)
        except extension.RowsDecodeError:
            pass  # rows() decodes it again and says why
        return None
