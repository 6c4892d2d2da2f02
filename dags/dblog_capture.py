"""dblog_capture: continuous log capture of one source as one long-lived, deferrable task.

The run starts once (``@once``) and its ``capture`` task never ends by design: it defers to a
``CaptureTrigger`` that supervises ``dblog capture`` in a child process of the triggerer for
``DBLOG_CAPTURE_SESSION_SECONDS``, then defers again (a triggerer restart costs at most one
session; the next resumes from the checkpoint). The capture also performs the dumps that
``dblog_repair_dump`` and ``dblog_backfill`` request. If the task fails (the engine's error is
in the task log), fix the cause and clear the task: it resumes from the checkpoint.

Deployment settings (environment of the scheduler / dag-processor / workers / triggerer):
  DBLOG_SOURCE_CONN_ID          the source's Postgres/MySQL connection (default ``dblog_source``)
  DBLOG_STATE_CONN_ID           the ``dblog_state`` connection (default ``dblog_state_default``)
  DBLOG_CHANGELOG               changelog URL (default ``delta:///opt/dblog/lake``)
  DBLOG_CAPTURE_SESSION_SECONDS length of one session (default 3600)
  DBLOG_CHANGELOG_ASSET         name of the changelog's Airflow asset (default ``dblog_changelog``)
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Asset

from airflow_provider_dblog.operators.capture import CaptureOperator

SOURCE_CONN_ID = os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source")
STATE_CONN_ID = os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default")
CHANGELOG = os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake")
SESSION_SECONDS = float(os.environ.get("DBLOG_CAPTURE_SESSION_SECONDS", "3600"))
CHANGELOG_ASSET = Asset(os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"))

with DAG(
    dag_id="dblog_capture",
    description="Continuous DBLog capture: the source's log (and requested dumps) into the changelog",
    schedule="@once",
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # two captures of one source would fight over the slot / leader lease
    tags=["dblog"],
) as dag:
    CaptureOperator(
        task_id="capture",
        source_conn_id=SOURCE_CONN_ID,
        state_conn_id=STATE_CONN_ID,
        changelog=CHANGELOG,
        session_seconds=SESSION_SECONDS,
        status_interval=float(os.environ.get("DBLOG_CAPTURE_STATUS_INTERVAL", "30")),
        retries=3,
        retry_delay=dt.timedelta(seconds=30),
        # Emitted when the task ends (max_sessions); while it runs, dblog_land's schedule and
        # the dump DAGs' asset events pick up the new changelog data.
        outlets=[CHANGELOG_ASSET],
    )
