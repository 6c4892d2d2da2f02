"""One keyset chunk reader for every source: chunk selects, key lists, the max key, parallel
readers, range digests and the filter check, built on the source's SQL dialect
(core/chunks.py).

A source mixes ``KeysetChunkReader`` in and supplies only what is its database's:

* ``dialect``, ``_select_list`` (a column as the SELECT reads it) and ``_key_params`` (a key's
  values as the query's parameters);
* how to run SQL and give canonical rows: ``_run_chunk`` for a chunk or a key list (under the
  database's snapshot rules, on the main connection or a parallel reader's, with its fast
  paths: PostgreSQL's COPY, MySQL/MariaDB's compiled row packets), ``_run_statement`` for one
  autocommit statement's canonical rows (the max key), ``_run_digest`` for the one row of a
  digest statement and ``_explain`` for a read-only plan of a filtered chunk;
* ``_digest_sql`` and ``row_hasher`` (the range digest's SQL and the same hash in Python);
* ``_open_reader`` and ``_readers`` (the parallel readers' connections, closed by the source).

The statements are the dialect's, so both databases read the same chunks in the same order.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

from ..core.chunks import Dialect, chunk_query, key_range, keys_query, max_key_query
from ..core.events import Key, Row, TableSchema
from ..core.protocols import ChunkResult, ParallelChunkReaders, RangeDigests
from .connection_loss import on_connection_loss
from .dump_errors import filter_errors


class KeysetChunkReader(ParallelChunkReaders, RangeDigests):
    """Declares the capabilities it gives (core/protocols.py): parallel chunk readers and
    range digests."""

    dialect: Dialect
    source_id: str

    # -- what the database supplies ----------------------------------------------------------
    def lost(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _select_list(self, schema: TableSchema) -> list[str]:
        raise NotImplementedError

    def _key_params(self, schema: TableSchema, key: Key) -> Any:
        """A key's values as the chunk query's parameters."""
        raise NotImplementedError

    def _run_chunk(
        self, conn: Any, schema: TableSchema, sql: str, params: list[Any], where: Optional[str], texts: bool
    ) -> ChunkResult:
        """The chunk's canonical rows (or texts), read on ``conn`` (None: the main connection)."""
        raise NotImplementedError

    def _run_statement(self, schema: TableSchema, sql: str, params: list[Any]) -> Sequence[Row]:
        """One autocommit statement's canonical rows."""
        raise NotImplementedError

    def _digest_sql(self, schema: TableSchema) -> str:
        raise NotImplementedError

    def _run_digest(self, schema: TableSchema, sql: str, params: list[Any]) -> Sequence[Any]:
        """The one row (rows, sum) of a digest statement, autocommit."""
        raise NotImplementedError

    def _explain(self, schema: TableSchema, sql: str, params: list[Any]) -> None:
        """Plan ``sql`` read-only (EXPLAIN) without running it."""
        raise NotImplementedError

    def _open_reader(self) -> Any:
        """A new connection for a parallel reader."""
        raise NotImplementedError

    def _readers(self) -> list[Any]:
        """The parallel readers' connections (the source closes them)."""
        raise NotImplementedError

    def row_hasher(self, schema: TableSchema) -> Callable[[Row], int]:
        """The hash ``range_digest`` sums, from a row's canonical values."""
        raise NotImplementedError

    # -- the reader --------------------------------------------------------------------------
    def _params(self, schema: TableSchema, key: Optional[Key]) -> Any:
        return self._key_params(schema, key) if key is not None else None

    @on_connection_loss
    def select_chunk(
        self,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key] = None,
        where: Optional[str] = None,
        texts: bool = False,
    ) -> ChunkResult:
        return self._select_chunk_on(None, schema, after_key, limit, upper_key, where, texts)

    def chunk_readers(self, n: int) -> list[Callable[..., ChunkResult]]:
        """``n`` more ways to run ``select_chunk``, each on a connection of its own (opened
        on first use, kept for the next chunks, closed with the source): a dump with several
        readers selects disjoint key ranges in parallel inside one watermark window."""
        readers = self._readers()
        while len(readers) < n:
            readers.append(self._open_reader())
        return [functools.partial(self._read_on, conn) for conn in readers[:n]]

    @on_connection_loss
    def _read_on(
        self,
        conn: Any,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key] = None,
        where: Optional[str] = None,
    ) -> ChunkResult:
        return self._select_chunk_on(conn, schema, after_key, limit, upper_key, where)

    def _select_chunk_on(
        self,
        conn: Any,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key],
        where: Optional[str],
        texts: bool = False,
    ) -> ChunkResult:
        after, upper = self._params(schema, after_key), self._params(schema, upper_key)
        sql, params = chunk_query(self.dialect, schema, self._select_list(schema), after, limit, upper, where)
        return self._run_chunk(conn, schema, sql, params, where, texts)

    @on_connection_loss
    def select_keys(self, schema: TableSchema, keys: Sequence[Key]) -> ChunkResult:
        if not keys:
            return ChunkResult([])
        params = [self._key_params(schema, k) for k in keys]
        sql, values = keys_query(self.dialect, schema, self._select_list(schema), params)
        return self._run_chunk(None, schema, sql, values, None, False)

    @on_connection_loss
    def max_key(self, schema: TableSchema) -> Optional[Key]:
        """One autocommit statement (the bound needs no snapshot of its own: whatever commits
        after it reaches the changelog through the log)."""
        sql, params = max_key_query(self.dialect, schema, self._select_list(schema))
        rows = self._run_statement(schema, sql, params)
        return schema.key_of(rows[0]) if rows else None

    @on_connection_loss
    def range_digest(self, schema: TableSchema, after_key: Optional[Key], upper_key: Optional[Key]) -> tuple[int, int]:
        """(rows, sum of row hashes) of the key range (after_key, upper_key] for ``dblog
        verify --ranges`` (core/range_verify.py, the source's digest.py): one autocommit
        statement, only the two numbers leave the server."""
        preds, params = key_range(
            self.dialect, schema, self._params(schema, after_key), self._params(schema, upper_key)
        )
        sql = f"SELECT {self._digest_sql(schema)} FROM {self.dialect.table(schema.table)}"
        if preds:
            sql += " WHERE " + " AND ".join(preds)
        rows, total = self._run_digest(schema, sql, params)
        return int(rows), int(total)

    @on_connection_loss
    def check_predicate(self, schema: TableSchema, where: str) -> None:
        """RequestError unless the database plans ``where`` in this table's chunk query."""
        sql, params = chunk_query(self.dialect, schema, self._select_list(schema), None, 1, None, where)
        with filter_errors(schema.table, where, self.lost):
            self._explain(schema, sql, params)
