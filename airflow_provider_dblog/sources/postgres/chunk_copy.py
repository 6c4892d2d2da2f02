"""A dump chunk read by ``COPY (SELECT ...) TO STDOUT`` into the changelog's row texts, by the
compiled extension (native/src/pq_copy.rs), as Arrow string arrays (core/text_column.py).

The other way, a cursor (sources/postgres/source.py ``_select``), makes a tuple per row in psycopg2,
a dict of canonical values from it, and its JSON text, all with the GIL held; the COPY makes
only the text and the key, from the same server text the log carries, through the log
decoder's value rules, with the GIL released while libpq reads (the writer thread runs
meanwhile). It runs on the chunk's own connection, inside the transaction ``_select`` began,
so the snapshot and the invisible transactions are the same either way.

A chunk with a value the extension does not write exactly as the Python path would (a
timestamp of 'infinity', a JSON integer beyond 64 bits, ...) is read again with the cursor
(logged once per reason). ``DBLOG_NATIVE_ROWS=0`` turns it off with the other compiled paths.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ...core.events import Key
from ...core.row_text import PART_ROWS
from ...core.text_column import TextColumn
from ..native import LogOnce
from .pgoutput_native import NativePgRows
from .pq_stream import compiled, libpq_error, server_error

log = logging.getLogger(__name__)


class ChunkCopy:
    """Reads chunks by COPY when the extension can use psycopg2's libpq."""

    def __init__(self, plans: NativePgRows):
        self._plans = plans
        self._copier = compiled("PqCopy", "dump chunks: psycopg2's cursor") if plans.on else None
        self._once = LogOnce(log)

    @property
    def on(self) -> bool:
        return self._copier is not None

    def read(
        self,
        conn: Any,
        cur: Any,
        table: str,
        names: list[str],
        kinds: list[str],
        key: list[int],
        sql: str,
        params: list,
    ) -> Optional[tuple[list[Key], TextColumn, TextColumn]]:
        """(keys, row texts, key texts) of the chunk of ``table`` that ``sql`` selects
        (``params`` bound by psycopg2, as its cursor would), or None: read it with the cursor.
        ``kinds``: each selected column's pg_kind; ``key``: the key columns' indices. Raises
        the psycopg2 error the cursor would."""
        assert self._copier is not None
        copy_sql = cur.mogrify(f"COPY ({sql}) TO STDOUT", params)
        plan = self._plans.chunk_plan(names, kinds)
        keys, texts, key_texts, end = self._copier.rows(conn.pgconn_ptr, copy_sql, plan, key, PART_ROWS)
        if end is None:
            return keys, TextColumn.from_pieces(texts), TextColumn.from_pieces(key_texts)
        kind, a, b = end
        if kind == "unsupported":
            reason = f"{table}: {a}"
            self._once(reason, "a chunk is read by a cursor instead of COPY: %s (logged once)", reason)
            return None
        if kind == "error":
            raise server_error(a, b)
        raise libpq_error(a, b)
