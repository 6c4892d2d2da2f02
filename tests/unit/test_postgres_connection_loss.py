"""Which psycopg2 errors the PostgreSQL source takes for a lost connection (the engine then
reconnects) and which it does not (the capture stops with the error)."""

from __future__ import annotations

import psycopg2
import pytest

from airflow_provider_dblog.sources.postgres.source import PostgresSource


@pytest.fixture
def source():
    return PostgresSource(source_id="s", host="127.0.0.1", port=1, user="u", password="p", dbname="d")


def test_a_replication_stream_cut_mid_message_is_a_lost_connection(source):
    # What read_message raised when the server crashed under a TLS replication connection.
    assert source.lost(psycopg2.DatabaseError("error with status PGRES_COPY_BOTH and no message from the libpq"))
    assert source.lost(psycopg2.InterfaceError("connection already closed"))
    assert source.lost(psycopg2.OperationalError("SSL SYSCALL error: EOF detected"))


def test_other_database_errors_are_not(source):
    assert not source.lost(psycopg2.DatabaseError("something the server said"))
    assert not source.lost(psycopg2.ProgrammingError("syntax error"))
