"""sources/postgres/pq_stream.py against a real PostgreSQL 15: the compiled batch reader gives what
psycopg2's read_message gives, answers keepalives, and fails as psycopg2 fails."""

from __future__ import annotations

import os
import select
import time
import uuid

import pytest

psycopg2 = pytest.importorskip("psycopg2")
extras = pytest.importorskip("psycopg2.extras")

from airflow_provider_dblog.sources.postgres import pq_stream  # noqa: E402
from airflow_provider_dblog.sources.postgres.pq_stream import ReplicationStream, compiled_reader  # noqa: E402

from .test_postgres_source import drop_slot, run  # noqa: E402

pytestmark = pytest.mark.integration

READERS = ["compiled", "read_message"]


@pytest.fixture(scope="module")
def dsn() -> dict:
    if not os.environ.get("DBLOG_PG_SUPERUSER_PASSWORD"):
        pytest.skip('PostgreSQL test server not configured: run `eval "$(scripts/services env)"`')
    return dict(
        host=os.environ["DBLOG_PG_HOST"],
        port=int(os.environ["DBLOG_PG_PORT"]),
        dbname=os.environ.get("DBLOG_PG_DATABASE", "postgres"),
        user=os.environ["DBLOG_PG_SUPERUSER"],
        password=os.environ["DBLOG_PG_SUPERUSER_PASSWORD"],
    )


@pytest.fixture
def admin(dsn):
    conn = psycopg2.connect(**dsn)
    conn.autocommit = True
    yield conn
    conn.close()


@pytest.fixture
def table(admin):
    """A table in a publication, and a factory of pgoutput slots made now (dropped after)."""
    name = "pqs_" + uuid.uuid4().hex[:8]
    run(admin, f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    run(admin, f"CREATE PUBLICATION {name} FOR TABLE {name}")
    slots: list[str] = []

    def slot() -> str:
        s = f"{name}_{len(slots)}"
        run(admin, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (s,))
        slots.append(s)
        return s

    yield name, slot
    for s in slots:
        drop_slot(admin, s)
    run(admin, f"DROP PUBLICATION {name}")
    run(admin, f"DROP TABLE {name}")


def stream(dsn, name: str, slot: str, reader: str, status_interval: float = 10.0, **conn_kw):
    conn = psycopg2.connect(**dsn, connection_factory=extras.LogicalReplicationConnection, **conn_kw)
    cur = conn.cursor()
    cur.start_replication(
        slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": name}, status_interval=10
    )
    s = ReplicationStream(conn, cur, status_interval)
    if reader == "read_message":
        s._reader = None
    else:
        assert s._reader is not None, "the compiled reader is not in use"
    return conn, cur, s


def read_for(s: ReplicationStream, cur, seconds: float, until=None) -> tuple[list[bytes], object]:
    """Payloads read for ``seconds`` (or until ``until(payloads)``), and the failure, if any."""
    out: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        payloads, failure = s.read(1000)
        out.extend(payloads)
        if failure is not None:
            return out, failure
        if until is not None and until(out):
            break
        if not payloads:
            select.select([cur], [], [], 0.1)
    return out, None


def test_the_compiled_reader_binds_to_psycopg2s_libpq():
    if pq_stream.native.extension is None:
        pytest.skip("the compiled extension is not built")
    reader = compiled_reader()
    assert reader is not None
    assert reader.lib_version() == psycopg2.extensions.libpq_version()


def test_the_compiled_reader_gives_read_messages_payloads(dsn, admin, table):
    name, slot = table
    slots = [slot(), slot()]
    # Small transactions, one large one, and values bigger than a TLS record and libpq's
    # initial buffer (16 KiB): batches must cut no message.
    for i in range(0, 2000, 10):
        run(admin, f"INSERT INTO {name} SELECT g, md5(g::text) FROM generate_series({i}, {i + 9}) g")
    run(admin, f"UPDATE {name} SET v = repeat(v, 1000) WHERE id % 97 = 0")
    run(admin, f"DELETE FROM {name} WHERE id % 5 = 0")
    got = {}
    for reader, s_name in zip(READERS, slots):
        conn, cur, s = stream(dsn, name, s_name, reader)
        try:
            payloads, failure = read_for(s, cur, 60, until=lambda out: sum(p[:1] == b"C" for p in out) >= 202)
            assert failure is None
            got[reader] = (payloads, s.data_start)
        finally:
            conn.close()
    compiled, by_psycopg2 = got["compiled"], got["read_message"]
    assert sum(p[:1] == b"I" for p in compiled[0]) == 2000
    assert max(len(p) for p in compiled[0]) > 32_000
    assert compiled[0] == by_psycopg2[0]
    assert compiled[1] == by_psycopg2[1] > 0


@pytest.mark.parametrize("reader", READERS)
def test_keepalives_are_answered_so_an_idle_stream_stays_open(dsn, table, reader):
    """The walsender asks for a reply after half of wal_sender_timeout without one, and ends
    the connection after all of it; the status interval is longer than the test."""
    name, slot = table
    conn, cur, s = stream(dsn, name, slot(), reader, status_interval=60, options="-c wal_sender_timeout=1500")
    try:
        _, failure = read_for(s, cur, 5)
        assert failure is None
        assert s.wal_end > 0
    finally:
        conn.close()


def test_an_unanswered_stream_fails_as_a_lost_connection(dsn, table, monkeypatch):
    """The test above can fail: without replies the walsender ends the connection, and the
    failure is an OperationalError without SQLSTATE (what PostgresSource.lost cures)."""
    name, slot = table
    monkeypatch.setattr(ReplicationStream, "feedback", lambda self, lsn=0: None)
    conn, cur, s = stream(dsn, name, slot(), "compiled", status_interval=60, options="-c wal_sender_timeout=1500")
    try:
        _, failure = read_for(s, cur, 10)
        assert isinstance(failure, psycopg2.OperationalError), failure
        assert not getattr(failure, "pgcode", None)
    finally:
        conn.close()


@pytest.mark.parametrize("reader", READERS)
def test_a_terminated_walsender_fails_as_psycopg2_fails(dsn, admin, table, reader):
    name, slot = table
    s_name = slot()
    conn, cur, s = stream(dsn, name, s_name, reader)
    try:
        read_for(s, cur, 0.5)
        run(admin, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s", (s_name,))
        _, failure = read_for(s, cur, 10)
        assert isinstance(failure, psycopg2.OperationalError), failure
        # 57P01 when the server's message arrives before the socket closes.
        assert getattr(failure, "pgcode", None) in (None, "57P01")
        if failure.pgcode:
            assert type(failure) is psycopg2.errors.AdminShutdown
            # psycopg2's text: the message without its severity, which pgerror keeps.
            assert str(failure).startswith("terminating connection due to administrator command")
            assert failure.pgerror.startswith("FATAL:  terminating connection")
    finally:
        conn.close()
