"""A MySQL / MariaDB chunk's SELECT and its rows as canonical values (or their JSON texts).

Read from the result's packets by the compiled extension where it is built and knows every
column (mysql/select_native.py), else from PyMySQL's values made canonical per column
(mysql/values.py).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ...core.events import Row, TableSchema
from ...core.protocols import ChunkResult
from ...core.row_text import PART_ROWS, ChunkTexts
from ..dump_errors import filter_errors, mysql_dump_errors
from .catalog import Session
from .select_native import NativeSelect, pymysql_rows, query_texts
from .values import select_converters


class ChunkSelect:
    """``user``: the source's user (named in a permission error); ``lost(exc)``: whether a
    driver error is a lost connection (not the filter's fault)."""

    def __init__(self, user: str, lost: Callable[[BaseException], bool]):
        self._user, self._lost = user, lost
        self.native = NativeSelect()  # chunk rows made canonical by the extension

    def rows(
        self, session: Session, schema: TableSchema, sql: str, params: Sequence[Any], where: Optional[str], texts: bool
    ) -> ChunkResult:
        # Its own autocommit READ COMMITTED statement: sees every commit before it (DESIGN
        # "Non-stale read"); no transaction is ever left open on this connection. A filtered
        # chunk: a READ ONLY transaction of its own, just as fresh. ``session``: the source's
        # or a parallel reader's connection (chunk_readers). ``texts``: the rows as JSON
        # texts, made a part at a time (core/row_text.py): a chunk's dicts are never all in
        # memory at once.
        if where is not None:
            with filter_errors(schema.table, where, self._lost):
                raw = session.read_only_query(sql, list(params))  # a list: %% is formatted
        elif self.native.on and self.native.plan(schema) is not None:
            if texts:
                with mysql_dump_errors(schema.table, self._user):
                    read = session.read(lambda conn: query_texts(conn, sql, params or None, self.native, schema))
                if read is not None:
                    return ChunkResult(read[1], keys=read[0], texts=True, key_texts=read[2])
            with mysql_dump_errors(schema.table, self._user):
                result, encoding = session.query_packets(sql, params or None)
            collected = ChunkTexts(schema) if texts else None
            canonical = self.native.rows(schema, encoding, result, collected)
            if canonical is not None:
                return ChunkResult(canonical, keys=collected.keys, texts=True) if collected else ChunkResult(canonical)
            raw = pymysql_rows(encoding, result)
        else:
            with mysql_dump_errors(schema.table, self._user):
                raw = session.query(sql, params or None)
        if not texts:
            return ChunkResult(from_select(schema, raw))
        collected = ChunkTexts(schema)
        for at in range(0, len(raw), PART_ROWS):
            collected.add(from_select(schema, raw[at : at + PART_ROWS]))
        return ChunkResult(collected.rows, keys=collected.keys, texts=True)


def from_select(schema: TableSchema, raw: Sequence[Sequence[Any]]) -> list[Row]:
    """PyMySQL's rows as dicts of canonical values."""
    names = [c.name for c in schema.columns]
    rows = [dict(zip(names, r)) for r in raw]
    # Per column, not per value: only the columns PyMySQL does not return canonical.
    for name, conv in zip(names, select_converters(schema.columns)):
        if conv is not None:
            for row in rows:
                v = row[name]
                if v is not None:
                    row[name] = conv(v)
    return rows
