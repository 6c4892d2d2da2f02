"""Driver errors of a dump's SELECTs that belong to that dump, as RequestError.

A table dropped or renamed while its dump runs, a SELECT privilege revoked, or a key value
the column type rejects (a request recorded before keys were checked) is a problem of that
dump, not of the capture: the engine marks the dump
FAILED with this error and goes on capturing (DESIGN invariant 9). Each source wraps its
chunk SELECTs (``select_chunk``, ``select_keys``, ``max_key``) in its context manager here.
A column renamed or dropped away is not the dump's problem either: SchemaChanged, on which
the engine reads the table's schema again and selects the chunk again (core/schema_watch.py).

Only the errors listed are translated. A lost connection stays the driver's error, which
``on_connection_loss`` turns into SourceUnavailable (the engine reconnects and selects the
chunk again); anything unknown stops the capture as before.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import psycopg2
import pymysql

from ..core.errors import DBLogError, RequestError, SchemaChanged

_REQUEST_AGAIN = "then request the dump again (dblog dump / the DumpOperator)"


def _line(exc: BaseException) -> str:
    text = str(getattr(exc, "pgerror", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _gone(table: str, detail: str) -> RequestError:
    return RequestError(
        f"table {table} no longer exists ({detail}); it was dropped or renamed while its dump ran.",
        f"dump it again once it exists (under its new name: add that to the captured tables), {_REQUEST_AGAIN}.",
    )


def _denied(table: str, user: str, detail: str) -> RequestError:
    return RequestError(
        f"user {user} may not read table {table} any more ({detail}).",
        f"grant it SELECT on {table} again, {_REQUEST_AGAIN}.",
    )


def _column(table: str, detail: str) -> SchemaChanged:
    return SchemaChanged(
        f"a column of table {table} that the chunk selects is gone ({detail}): it was renamed or "
        "dropped since the capture read the table's columns."
    )


def _bad_key(table: str, detail: str) -> RequestError:
    return RequestError(
        f"a key value of the dump of {table} does not fit its key column's type ({detail}).",
        "request the dump again with keys of the key columns' types (see docs/cli.md, 'Keys').",
    )


def postgres_request_error(exc: BaseException, table: str, user: str) -> Optional[DBLogError]:
    """The RequestError for a PostgreSQL error that fails the dump of ``table`` (SchemaChanged
    for a column that is gone), else None."""
    code = getattr(exc, "pgcode", None) or ""
    detail = _line(exc)
    if code in ("42P01", "3F000"):  # undefined_table, invalid_schema_name
        return _gone(table, detail)
    if code == "42501":  # insufficient_privilege
        return _denied(table, user, detail)
    if code == "42703":  # undefined_column
        return _column(table, detail)
    if code.startswith("22") or code == "42804":  # data exception, datatype_mismatch
        return _bad_key(table, detail)
    return None


# PyMySQL error numbers: no such table, unknown database, SELECT / column / database access
# denied, unknown column; and values the key column cannot hold.
_MYSQL_GONE = {1146, 1049}
_MYSQL_DENIED = {1142, 1143, 1044}
_MYSQL_COLUMN = {1054}
_MYSQL_BAD_VALUE = {1292, 1366, 1367, 1411}


def mysql_request_error(exc: BaseException, table: str, user: str) -> Optional[DBLogError]:
    """The RequestError for a MySQL/MariaDB error that fails the dump of ``table``, else None."""
    if not isinstance(exc, pymysql.err.MySQLError) or not exc.args or not isinstance(exc.args[0], int):
        return None
    code = exc.args[0]
    detail = f"error {code}: {exc.args[1] if len(exc.args) > 1 else ''}".rstrip(": ")
    if code in _MYSQL_GONE:
        return _gone(table, detail)
    if code in _MYSQL_DENIED:
        return _denied(table, user, detail)
    if code in _MYSQL_COLUMN:
        return _column(table, detail)
    if code in _MYSQL_BAD_VALUE:
        return _bad_key(table, detail)
    return None


@contextlib.contextmanager
def postgres_dump_errors(table: str, user: str) -> Iterator[None]:
    try:
        yield
    except psycopg2.Error as exc:
        err = postgres_request_error(exc, table, user)
        if err is None:
            raise
        raise err from exc


@contextlib.contextmanager
def mysql_dump_errors(table: str, user: str) -> Iterator[None]:
    try:
        yield
    except pymysql.err.MySQLError as exc:
        err = mysql_request_error(exc, table, user)
        if err is None:
            raise
        raise err from exc


def filter_error(table: str, where: str, detail: str) -> RequestError:
    return RequestError(
        f"the row filter of the dump of {table} failed on the source ({detail}); the filter: {where}",
        f"fix the filter (it must be one boolean expression over {table}'s columns, and read-only), {_REQUEST_AGAIN}.",
    )


@contextlib.contextmanager
def filter_errors(table: str, where: str, lost: Callable[[BaseException], bool]) -> Iterator[None]:
    """A filtered dump's SELECT (or its EXPLAIN): every database error that is not a lost
    connection fails that dump with the database's message. Not SchemaChanged for an unknown
    column either: it is usually the filter's, and selecting again would not cure it."""
    try:
        yield
    except (psycopg2.Error, pymysql.err.MySQLError) as exc:
        if lost(exc):
            raise
        raise filter_error(table, where, _line(exc)) from exc
