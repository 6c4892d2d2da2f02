"""The source database restarted under a running capture (issue 5): the capture reconnects
and resumes from its position, and nothing is lost.

The test stops and starts the test server itself (`scripts/services down|up`), so it must not
run beside other tests that use the same servers (the suite runs sequentially).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.verify import replay
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import wait_for
from .databases import ADAPTERS

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SERVICE = {"postgres": "pg", "mysql": "mysql"}


def services(*args: str) -> None:
    out = subprocess.run(
        [str(REPO / "scripts" / "services"), *args], capture_output=True, text=True, timeout=180, env=os.environ.copy()
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_capture_survives_a_restart_of_the_source_database(kind, tmp_path):
    db = ADAPTERS[kind]()
    db.create()
    source_id = f"restart_{kind}_{uuid.uuid4().hex[:6]}"
    state = LocalStateStore(str(tmp_path / "state.db"))
    lake = f"delta://{tmp_path / 'lake'}"
    engine = Engine(
        make_source(db.source_config(source_id)),
        make_output(lake),
        state,
        EngineConfig(status_interval=0.5, reconnect_max_backoff=2.0),
    )
    stop, errors = threading.Event(), []

    def run():
        try:
            engine.run(stop)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_for(lambda: state.get_value(status_key(source_id)) is not None, 60, "the capture to start")
        table = f"{db.ns}.accounts"

        def insert(lo: int, hi: int) -> None:
            with db.connect() as c:
                cur = c.cursor()
                for i in range(lo, hi):
                    cur.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (i, f"n{i}"))
                c.commit()

        insert(1, 50)
        services("down", SERVICE[kind])  # the server goes away under the running capture
        time.sleep(1)
        services("up", SERVICE[kind])
        insert(50, 100)  # written after the restart
        out = make_output(lake)
        out.open()
        wait_for(
            lambda: len(replay(out.scan(source_id, table))) >= 99 or errors, 120, "the rows written around the restart"
        )
        assert not errors, errors
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"SELECT id, name FROM {table}")
            source_rows = {(r[0],): r[1] for r in cur.fetchall()}
        mirror = {k: row["name"] for k, row in replay(out.scan(source_id, table)).items()}
        assert mirror == source_rows and len(source_rows) == 99
        assert engine.status(0.0)["reconnects"] >= 1
    finally:
        stop.set()
        t.join(60)
        db.drop(source_id)
