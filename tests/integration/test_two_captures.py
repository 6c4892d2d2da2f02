"""Two captures of one source with separate state files (a user mistake), against real
PostgreSQL and MariaDB: each takes a leader lease from its own store, so both lead. The
second must refuse to start, naming the first's replication session and the fix, and the
first must keep capturing undisturbed (no reconnect). Without a lease domain on the log
reader, the second ended the first's walsender (PostgreSQL) or both knocked each other off
the binlog with their shared server_id (MariaDB) (docs/sources.md, "One reader").
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.sources.mysql.reader_claim import ReaderClaim
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"two_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


def _insert(db, i: int, name: str) -> None:
    c = db.connect()
    try:
        db._insert_account(c, i, {"name": name, "balance": "1.00", "meta": None, "updated": None, "note": None})
        c.commit()
    finally:
        c.close()


def _captured(out: Path, name: str) -> bool:
    path = out / "changelog.jsonl"
    return path.exists() and name in path.read_text(errors="replace")


def _status(state_path: Path, source_id: str) -> dict:
    store = LocalStateStore(str(state_path))
    try:
        raw = store.get_value(status_key(source_id))
    finally:
        store.close()
    return json.loads(raw) if raw else {}


def _reader_session(db) -> Optional[str]:
    """What identifies the first capture's log reader on the server: the slot's walsender
    pid, or the connection holding the binlog reader's claim (sources/mysql/reader_claim.py)."""
    c = db.connect()
    try:
        cur = c.cursor()
        if db.kind == "postgres":
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (f"dblog_{db.source_id}",))
        else:
            cur.execute("SELECT IS_USED_LOCK(%s)", (ReaderClaim(db.source_id, "", lambda: None).source_lock,))
        (session,) = cur.fetchone()
    finally:
        c.close()
    return None if session is None else str(session)


def test_a_second_capture_with_its_own_state_refuses_and_the_first_goes_on(db, tmp_path):
    config = db.source_config(db.source_id)
    out_a, out_b = tmp_path / "out-a", tmp_path / "out-b"
    config_a = write_config(tmp_path / "a.toml", config, tmp_path / "a.db", f"jsonl://{out_a}")
    config_b = write_config(tmp_path / "b.toml", config, tmp_path / "b.db", f"jsonl://{out_b}")
    a = Capture(config_a, tmp_path / "a.log")
    a.start()
    try:
        # Reading from the end of the log once it reports: the insert comes after that.
        wait_for(lambda: _status(tmp_path / "a.db", db.source_id).get("leader"), 90, "a to lead", a.assert_alive)
        _insert(db, 1, "before-b")
        wait_for(lambda: _captured(out_a, "before-b"), 90, "a to capture", a.assert_alive, detail=a.detail)
        reader = _reader_session(db)

        # Without the fix b ran on (taking the log over), so a bounded run is the assertion too.
        b = dblog(config_b, "capture", "--status-interval", "1", check=False, timeout=120)
        assert b.returncode != 0, f"b must refuse to start:\n{b.stdout}\n{b.stderr}"
        assert reader is not None and "does not coordinate" in b.stderr and reader in b.stderr, b.stderr
        assert "share one state store" in b.stderr and "zk://" in b.stderr, b.stderr
        assert "Traceback" not in b.stderr, b.stderr

        _insert(db, 2, "after-b")
        wait_for(lambda: _captured(out_a, "after-b"), 90, "a to capture after b", a.assert_alive, detail=a.detail)
        assert _reader_session(db) == reader, "a's reader was replaced"
        captured_at = time.time()
        wait_for(
            lambda: _status(tmp_path / "a.db", db.source_id).get("updated_at", 0) > captured_at,
            30,
            "a's next status report",
            a.assert_alive,
            detail=a.detail,
        )
        assert _status(tmp_path / "a.db", db.source_id)["reconnects"] == 0, a.tail()
        assert not _captured(out_b, "after-b")
        a.assert_alive()
    finally:
        a.close()
