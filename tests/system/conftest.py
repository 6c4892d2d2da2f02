"""System tests: each example DAG run by ``dag.test()`` against real servers (tests/system/utils.py).

Airflow's providers name their system tests ``example_*.py``; pytest collects them here (the
project's other tests keep the ``test_*.py`` default). The environment they share, built once
per session: a seeded PostgreSQL source (the test server of ``scripts/services``), a local
state store, a Delta lake holding a full dump of the source, a ``dblog capture`` child that
performs the dumps the DAGs request, and the settings the example DAGs read (DBLOG_* and
``AIRFLOW_CONN_*``).
"""

from __future__ import annotations

import json
import os
import random
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.airflow_home import migrated_airflow_home

from .utils import CAPTURE_CONN_ID, SOURCE_CONN_ID, STATE_CONN_ID


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".py" and file_path.name.startswith("example_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@dataclass
class SystemEnvironment:
    env: dict[str, str]  # what the DAG files and Airflow read: DBLOG_* and AIRFLOW_CONN_*
    source_id: str
    tables: list[str]
    lake: Path


@pytest.fixture(scope="session")
def system_airflow_home(tmp_path_factory) -> Path:
    """An AIRFLOW_HOME with a migrated SQLite metadata database, for every ``dag.test()``."""
    return migrated_airflow_home(tmp_path_factory.mktemp("airflow-home"), timeout=600)


@pytest.fixture(scope="session")
def dblog_system(tmp_path_factory):
    from airflow_provider_dblog.core.dumps import DumpStatus
    from airflow_provider_dblog.state.local import LocalStateStore
    from tests.integration.capture_proc import Capture, dblog, wait_for, write_config
    from tests.integration.databases import PostgresAdapter, env
    from tests.support.spark_jars import spark_jars

    env("DBLOG_PG_HOST")  # skips with the command that starts the servers
    db = PostgresAdapter()
    db.create()
    db.seed(random.Random(35), 20)
    root = tmp_path_factory.mktemp("dblog-system")
    source_id = f"sys_{uuid.uuid4().hex[:8]}"
    state, lake = root / "state.db", root / "lake"
    config = write_config(root / "dblog.toml", db.source_config(source_id), state, f"delta://{lake}")
    capture = Capture(config, root / "capture.log")
    capture.start()
    try:
        wait_for(
            lambda: "started at" in capture.log_path.read_text(errors="replace"),
            120,
            "the system environment's capture to start",
            alive=capture.assert_alive,
            detail=capture.detail,
        )
        # a full dump first: the landing and the verification have the source's rows to work on
        dump_id = dblog(config, "dump", "--all").stdout.strip().split()[-1]
        store = LocalStateStore(str(state))
        try:

            def dumped() -> bool:
                d = store.get_dump(dump_id)
                assert d is not None and d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), d
                return d.status is DumpStatus.DONE

            wait_for(dumped, 300, "the first full dump", alive=capture.assert_alive, detail=capture.detail)
        finally:
            store.close()
        tables = db.tables()

        def source(conn_source_id: str) -> str:
            return json.dumps(
                {
                    "conn_type": "postgres",
                    "host": db.host,
                    "port": db.port,
                    "login": db.user,
                    "password": db.password,
                    "schema": db.db,
                    "extra": {"source_id": conn_source_id, "tables": tables},
                }
            )

        dag_env = {
            "DBLOG_SOURCE_CONN_ID": SOURCE_CONN_ID,
            "DBLOG_STATE_CONN_ID": STATE_CONN_ID,
            f"AIRFLOW_CONN_{SOURCE_CONN_ID.upper()}": source(source_id),
            f"AIRFLOW_CONN_{CAPTURE_CONN_ID.upper()}": source(f"{source_id}_cap"),
            f"AIRFLOW_CONN_{STATE_CONN_ID.upper()}": json.dumps({"conn_type": "dblog_state", "host": str(state)}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "DBLOG_CHANGELOG": f"delta://{lake}",
            "DBLOG_REPAIR_TABLES": ",".join(tables),  # the form's default table: the first
            "DBLOG_DUMP_POLL_INTERVAL": "0.5",
            "DBLOG_CAPTURE_STATUS_INTERVAL": "1",
            "DBLOG_LAND_SOURCE": source_id,
            "DBLOG_SPARK_JARS": spark_jars(),  # resolved once (.spark-jars/): nothing downloaded per run
            # spark-submit and the Spark driver's Python: this venv's (docs/airflow.md, "Install")
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        }
        yield SystemEnvironment(dag_env, source_id, tables, lake)
    finally:
        try:
            if capture.proc is not None and capture.proc.poll() is None:
                capture.stop(60)
        finally:
            capture.close()
            db.drop(source_id)
            db.drop(f"{source_id}_cap")  # dblog_capture's own slot and publication
