"""sources/postgres/pq_stream.py: the compiled reader's ends become the exceptions psycopg2 raises."""

from __future__ import annotations

import pytest

psycopg2 = pytest.importorskip("psycopg2")

from airflow_provider_dblog.sources.postgres.pq_stream import _failure  # noqa: E402
from airflow_provider_dblog.sources.postgres.source import PostgresSource  # noqa: E402


def lost(exc: BaseException) -> bool:
    return PostgresSource.lost(None, exc)  # type: ignore[arg-type]  # uses no state


def test_a_server_error_keeps_its_class_sqlstate_and_text():
    exc = _failure(("copy", "55000", 'ERROR:  can no longer get changes from replication slot "s"\n'))
    assert type(exc) is psycopg2.errors.ObjectNotInPrerequisiteState
    assert exc.pgcode == "55000"
    assert str(exc).startswith("can no longer get changes")  # psycopg2 drops the severity
    assert exc.pgerror.startswith("ERROR:  can no longer")
    assert not lost(exc)


def test_an_admin_shutdown_is_a_lost_connection():
    exc = _failure(("copy", "57P01", "FATAL:  terminating connection due to administrator command\n"))
    assert isinstance(exc, psycopg2.OperationalError) and exc.pgcode == "57P01"
    assert lost(exc)


def test_an_unknown_sqlstate_is_a_database_error_with_its_code():
    exc = _failure(("copy", "ZZ999", "ERROR:  something new\n"))
    assert type(exc) is psycopg2.DatabaseError and exc.pgcode == "ZZ999"


def test_a_stream_the_server_ended_without_an_error_is_a_lost_connection():
    exc = _failure(("copy", "", ""))
    assert isinstance(exc, psycopg2.OperationalError)
    assert lost(exc)


def test_a_broken_connection_is_lost_and_a_failed_copy_without_message_too():
    bad = _failure(("broken", "server closed the connection unexpectedly\n", True))
    assert type(bad) is psycopg2.OperationalError and lost(bad)
    silent = _failure(("broken", "", False))
    assert type(silent) is psycopg2.DatabaseError
    assert str(silent) == "no message from the libpq" and lost(silent)


def test_an_unknown_message_type_is_named():
    exc = _failure(("unknown", ord("x"), ""))
    assert "b'x'" in str(exc)
