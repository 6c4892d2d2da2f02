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
  DBLOG_CAPTURE_MAX_SESSIONS    end the task (successfully) after this many sessions (default:
                                never; the system test, tests/system/dblog, runs one)
  DBLOG_CHANGELOG_ASSET         a name-only asset the task emits beside the changelog's own
                                (``dblog://changelog/<lake>``), for DAGs scheduled on it as
                                earlier builds named it (default ``dblog_changelog``; empty: none)
"""

from __future__ import annotations

import os

from airflow_provider_dblog.fleet import FleetSource, fleet_dags

# One source: the fleet's DAG ids without the source's name (dags/dblog_fleet.py declares many).
# [START howto_dblog_capture]
globals().update(
    fleet_dags(
        [
            FleetSource(
                os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source"),
                session_seconds=float(os.environ.get("DBLOG_CAPTURE_SESSION_SECONDS", "3600")),
                max_sessions=int(os.environ["DBLOG_CAPTURE_MAX_SESSIONS"])
                if os.environ.get("DBLOG_CAPTURE_MAX_SESSIONS")
                else None,
                backfill=None,  # dags/dblog_backfill.py
            )
        ],
        state_conn_id=os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default"),
        changelog=os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"),
        status_interval=float(os.environ.get("DBLOG_CAPTURE_STATUS_INTERVAL", "30")),
        changelog_asset=os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"),
        repair=False,  # dags/dblog_repair_dump.py
        single=True,
    )
)
# [END howto_dblog_capture]
