"""A new leader ends the previous leader's sessions, not only its log reader, on the real
servers. The CI failure this comes from: a leader SIGSTOPped inside a chunk's transaction
kept its lock on the table; the workload's TRUNCATE queued behind that lock, and every
later reader of the table behind the TRUNCATE, the new leader's first chunk read too: the
new leader made no progress until the old one woke (tests/integration/test_fencing.py).

Here the previous leader ``a`` of lease domain ``d0main`` holds a transaction that read
``accounts`` (the paused chunk read), a TRUNCATE of ``accounts`` waits behind it, and a
capture ``c`` of another lease domain holds a transaction of its own. When ``b`` takes the
lease and opens the source, a's session is gone and the TRUNCATE done; c's session, not
ours to end, is untouched. Without the ending (PostgreSQL: sessions named by
application_name; MariaDB: a named lock per session), b's open or the TRUNCATE waits:
the test fails after 30 s."""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid

import pytest

from airflow_provider_dblog.config import make_source

from .databases import ADAPTERS

pytestmark = pytest.mark.integration


@pytest.fixture(params=sorted(ADAPTERS))
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"deposed_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


def _leader(db, domain: str):
    source = make_source(db.source_config(db.source_id))
    source.take_over(lambda: None, None, domain)
    source.open()
    return source


def _paused_chunk_read(db, source, table: str):
    """The leader's own connection inside a chunk-like transaction that read ``table``, left open."""
    if db.kind == "postgres":
        cur = source._conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    else:
        cur = source._session.conn().cursor()
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute(f"SELECT count(*) FROM {db.ns}.{table}")
    cur.fetchall()
    return cur


def _alive(cur) -> bool:
    try:
        cur.execute("SELECT 1")
        return cur.fetchone()[0] == 1
    except Exception:  # noqa: BLE001 - the server ended the session
        return False


def _truncate(db, table: str) -> None:
    c = db.connect()
    try:
        c.cursor().execute(f"TRUNCATE TABLE {db.ns}.{table}")
        c.commit()
    finally:
        c.close()


def test_the_new_leader_ends_the_previous_leaders_sessions_and_no_other_domains(db):
    import random

    db.seed(random.Random(3), 20)
    a = _leader(db, "d0main")
    c = _leader(db, "0therdomain")
    b = None
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        a_cur = _paused_chunk_read(db, a, "accounts")
        c_cur = _paused_chunk_read(db, c, "orders")
        truncate = pool.submit(_truncate, db, "accounts")
        with pytest.raises(concurrent.futures.TimeoutError):
            truncate.result(timeout=2)  # queued behind a's transaction, as in the failure

        b = make_source(db.source_config(db.source_id))
        b.take_over(lambda: None, None, "d0main")
        pool.submit(b.open).result(timeout=30)
        truncate.result(timeout=30)  # a's lock is gone with its session
        assert not _alive(a_cur), "the previous leader's session survived the takeover"
        assert _alive(c_cur), "a session of another lease domain's capture was ended"
        assert b.estimate_rows(f"{db.ns}.accounts") >= 0  # b reads the table
    finally:
        for source in (a, c, b):  # closing a's connection also frees a stuck TRUNCATE
            if source is not None:
                with contextlib.suppress(Exception):  # a's connection was ended
                    source.close()
        pool.shutdown(wait=True)
