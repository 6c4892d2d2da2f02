"""sources/dump_errors.py: driver errors of a dump's SELECT that fail only that dump become
RequestError naming the table and the fix; a lost connection and unknown errors stay as
they are (the engine reconnects, or stops)."""

from __future__ import annotations

import psycopg2
import psycopg2.errors
import pymysql
import pytest

from airflow_provider_dblog.core.errors import RequestError, SchemaChanged
from airflow_provider_dblog.sources.dump_errors import mysql_dump_errors, postgres_dump_errors


class PgError(psycopg2.Error):
    """psycopg2 errors take their SQLSTATE from the server; this one carries it by hand."""

    def __init__(self, pgcode: str, text: str):
        super().__init__(text)
        self._code = pgcode

    @property
    def pgcode(self):  # type: ignore[override]
        return self._code


@pytest.mark.parametrize(
    "code,text,needle",
    [
        ("42P01", 'relation "s.t" does not exist', "table s.t no longer exists"),
        ("42501", "permission denied for table t", "user dblog may not read table s.t"),
        ("22P02", 'invalid input syntax for type integer: "abc"', "does not fit its key column's type"),
    ],
)
def test_postgres_errors_of_a_dump_become_request_errors(code, text, needle):
    with pytest.raises(RequestError) as info, postgres_dump_errors("s.t", "dblog"):
        raise PgError(code, text)
    assert needle in str(info.value) and "Fix:" in str(info.value) and text in str(info.value)


def test_a_column_gone_under_a_chunk_is_a_schema_change_not_a_failed_dump():
    """An ALTER TABLE since the engine read the columns: SchemaChanged (the engine reads the
    schema again and selects the chunk again), not RequestError (which fails the dump)."""
    with pytest.raises(SchemaChanged) as info, postgres_dump_errors("s.t", "dblog"):
        raise PgError("42703", 'column "v" does not exist')
    assert not isinstance(info.value, RequestError) and "column of table s.t" in str(info.value)
    with pytest.raises(SchemaChanged), mysql_dump_errors("d.t", "dblog"):
        raise pymysql.err.OperationalError(1054, "Unknown column 'v' in 'field list'")


@pytest.mark.parametrize("code", ["08006", "57P01", "", "53100"])
def test_postgres_connection_loss_and_unknown_errors_pass_unchanged(code):
    with pytest.raises(PgError), postgres_dump_errors("s.t", "dblog"):
        raise PgError(code, "server closed the connection unexpectedly")


@pytest.mark.parametrize(
    "exc,needle",
    [
        (pymysql.err.ProgrammingError(1146, "Table 'd.t' doesn't exist"), "table d.t no longer exists"),
        (pymysql.err.OperationalError(1142, "SELECT command denied to user 'dblog'"), "may not read table d.t"),
    ],
)
def test_mysql_errors_of_a_dump_become_request_errors(exc, needle):
    with pytest.raises(RequestError) as info, mysql_dump_errors("d.t", "dblog"):
        raise exc
    assert needle in str(info.value) and f"error {exc.args[0]}" in str(info.value)


@pytest.mark.parametrize("code", [2013, 2006, 1927, 1213])
def test_mysql_connection_loss_and_unknown_errors_pass_unchanged(code):
    with pytest.raises(pymysql.err.OperationalError), mysql_dump_errors("d.t", "dblog"):
        raise pymysql.err.OperationalError(code, "Lost connection to server during query")
