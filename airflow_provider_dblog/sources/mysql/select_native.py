"""A chunk SELECT's rows made canonical by the compiled extension (native/src/mysql_text.rs).

PyMySQL reads every row and converts each value in Python (an int, a Decimal, a datetime),
and ``from_select`` then turns most of them back into text: on 30-column rows that was most of
a dump's time. Here PyMySQL still sends the query and reads the packets (framing, sequence
numbers, errors, the column descriptions), but each row is kept as its raw payload, which the
extension decodes straight into the canonical values ``from_select`` gives (unit and
integration tests compare both on the same rows). A table with a column of another kind
(TIME, SET, MariaDB's UUID/INET types, ...), a result whose columns do not look as planned, and
any value the extension hands back go through PyMySQL's converters and ``from_select`` as
before. ``DBLOG_NATIVE_ROWS=0`` turns it off, like the binlog rows decoder.

When the output stores the rows' JSON text, ``query_texts`` goes further: once PyMySQL has read
the column descriptions, the extension reads the row packets from the connection's bytes, a
block at a time, and writes each row's text and key with the GIL released
(native/src/mysql_result.rs); PyMySQL reading each packet in Python was most of a narrow dump.

This subclasses PyMySQL's ``MySQLResult`` and uses ``Connection._execute_command``,
``_read_packet``, ``_rfile`` and ``_next_seq_id``, which are not public API:
tests/integration/test_mysql_source.py exercises them against the installed PyMySQL (and
tests/unit/test_mysql_result.py the extension's reading of the protocol's bytes).
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from pymysql import err
from pymysql.connections import MysqlPacket, MySQLResult
from pymysql.constants import COMMAND, CR

from ...core.events import Column
from ...core.row_text import PART_ROWS, ChunkTexts
from ...core.text_column import TextColumn
from ..native import LogOnce, enabled, extension
from .values import column_kind

log = logging.getLogger(__name__)

# The kinds the extension converts, in its numbering (native/src/mysql_text.rs).
TEXT_KINDS = (
    "int",
    "decimal",
    "double",
    "float",
    "text",
    "binary",
    "bit",
    "year",
    "date",
    "datetime",
    "timestamp",
    "json",
)
_BINARY_CHARSET = 63  # the protocol's charset number of binary strings (and numbers)


def text_kind(column: Column) -> Optional[str]:
    """The extension's kind for a column, or None when it does not convert that type."""
    if column.type.lower().startswith("inet4"):
        return None  # a text kind in the catalog, but PyMySQL returns bytes
    kind = column_kind(column.type)[0]
    kind = "text" if kind == "enum" else kind
    return kind if kind in TEXT_KINDS else None


class _RawRows(MySQLResult):
    """A result whose rows are the packets' payloads, not converted values."""

    def _read_row_from_packet(self, packet: MysqlPacket) -> bytes:
        return packet._data


def query_packets(conn: Any, sql: str, params: Optional[Sequence[Any]]) -> Any:
    """Run one statement as ``Connection.query`` does; the result's ``rows`` are raw payloads."""
    with conn.cursor() as cur:
        query = cur.mogrify(sql, params)
    conn._execute_command(COMMAND.COM_QUERY, query.encode(conn.encoding))
    conn._result = None
    result = _RawRows(conn)
    result.read()
    conn._result = result
    if result.server_status is not None:
        conn.server_status = result.server_status
    conn._affected_rows = result.affected_rows
    return result


# Bytes asked of the connection per read when the extension reads the rows.
READ_BLOCK = 1 << 16


def query_texts(conn: Any, sql: str, params: Optional[Sequence[Any]], native: "NativeSelect", schema: Any) -> Any:
    """Run one statement as ``query_packets`` does, the rows read by the extension into
    (keys, JSON texts, key JSON texts), the texts as TextColumns (core/text_column.py);
    None when the columns do not look as planned or a value is not written exactly (the
    rows are read and dropped: select again with ``query_packets``). Raises what PyMySQL
    would for an error packet or a lost connection."""
    with conn.cursor() as cur:
        query = cur.mogrify(sql, params)
    conn._execute_command(COMMAND.COM_QUERY, query.encode(conn.encoding))
    conn._result = None
    result = _RawRows(conn)
    first = conn._read_packet()  # an error packet raises here
    if first.is_ok_packet():  # no result set: not what a SELECT answers
        result._read_ok_packet(first)
        conn.server_status = result.server_status
        return None
    result.field_count = first.read_length_encoded_integer()
    result._get_descriptions()
    plan = native.plan(schema)
    if plan is None or not native.as_planned(schema, conn.encoding, result.fields or []):
        result._read_rowdata_packet()
        return None
    names = [c.name for c in schema.columns]
    reader = extension.MyRowsReader(plan, [names.index(k) for k in schema.key], conn._next_seq_id)
    keys: list = []
    while True:
        try:
            block = conn._rfile.read1(READ_BLOCK)
        except OSError as exc:
            conn._force_close()
            raise err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
            ) from exc
        if not block:
            conn._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
        done = reader.feed(block)
        keys += reader.take()
        if done:
            break
    conn._next_seq_id = reader.next_seq
    end = reader.end()
    if end[0] == "broken":
        conn._force_close()
        raise err.InternalError(end[1])
    if end[0] == "error":
        err.raise_mysql_exception(end[1])
    _, _warnings, status, unsupported = end
    conn.server_status = status
    if unsupported is not None:
        native.fell_back(schema, unsupported)
        return None
    texts, key_texts = reader.texts()
    return keys, TextColumn.from_pieces(texts), TextColumn.from_pieces(key_texts)


def pymysql_rows(encoding: str, result: Any) -> list[tuple]:
    """The raw rows converted as PyMySQL would have (its converters, per the result's columns)."""
    return [MySQLResult._read_row_from_packet(result, MysqlPacket(d, encoding)) for d in result.rows or ()]


class NativeSelect:
    """One plan per table schema; ``rows`` gives canonical dicts or None (use PyMySQL's)."""

    def __init__(self) -> None:
        self.on = enabled()
        self._plans: dict[str, tuple[Any, Any]] = {}  # schema id -> (plan or None, kinds)
        self._log_once = LogOnce(log)

    def plan(self, schema: Any) -> Optional[Any]:
        sid = schema.schema_id()
        cached = self._plans.get(sid)
        if cached is None:
            kinds = [text_kind(c) for c in schema.columns]
            plan = None
            if all(kinds):
                names = [c.name for c in schema.columns]
                plan = extension.MyTextPlan(names, [TEXT_KINDS.index(k) for k in kinds])
            else:
                self._once(f"{schema.table}: a column of a kind it does not convert")
            cached = self._plans[sid] = (plan, kinds)
        return cached[0]

    def rows(self, schema: Any, encoding: str, result: Any, into: Optional[ChunkTexts] = None) -> Optional[list]:
        """The result's rows as canonical dicts, or None when the columns do not look as
        planned or a value does not convert (then ``pymysql_rows`` and ``from_select``).
        With ``into``, the rows are added to it a part at a time and its texts returned (on
        None, what it holds is partial: the caller starts again)."""
        plan, kinds = self._plans[schema.schema_id()]
        if not self.as_planned(schema, encoding, result.fields or []):
            return None
        packets = result.rows or ()
        try:
            if into is None:
                return plan.rows(packets)
            for at in range(0, len(packets), PART_ROWS):
                into.add(plan.rows(packets[at : at + PART_ROWS]))
            return into.rows
        except extension.Unsupported as exc:
            self._once(f"{schema.table}: {exc}")
            return None

    def as_planned(self, schema: Any, encoding: str, fields: Sequence[Any]) -> bool:
        """Whether a result's columns look as the plan of ``schema`` expects (else logged once)."""
        kinds = self._plans[schema.schema_id()][1]
        planned = (
            len(fields) == len(kinds)
            and encoding in ("utf8", "utf-8")
            and all(f.charsetnr == _BINARY_CHARSET for f, k in zip(fields, kinds) if k in ("binary", "bit"))
        )
        if not planned:
            self._once(f"{schema.table}: the result's columns differ from the plan")
        return planned

    def fell_back(self, schema: Any, reason: str) -> None:
        """A chunk the extension did not read into texts: selected again as packets."""
        self._log_once(
            f"texts {schema.table}: {reason}",
            "a chunk of %s is selected again as packets: %s (logged once)",
            schema.table,
            reason,
        )

    def _once(self, reason: str) -> None:
        self._log_once(reason, "chunk rows of %s are converted in Python (logged once)", reason)
