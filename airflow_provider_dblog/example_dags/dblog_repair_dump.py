"""dblog_repair_dump: an on-call form to re-emit rows into the changelog.

Trigger it from the UI ("Trigger DAG" shows the form) or the REST API with a conf such as
``{"table": "shop.orders", "keys": "42\\n43", "chunk_size": 1000}`` (one key per line: ``"42"`` alone is one key). Airflow validates the
form against the Params before the run starts; the operator then validates the table and the
keys against the source's schema before it records anything. An empty key list dumps the
whole table; a row filter (``"where": "region = 'eu'"``) dumps only the rows it accepts, after
the database checked it. The running ``dblog_capture`` performs the dump; this task waits (deferred) and
logs its progress.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_SOURCE_CONN_ID   the source's Postgres/MySQL connection (default ``dblog_source``)
  DBLOG_STATE_CONN_ID    the ``dblog_state`` connection (default ``dblog_state_default``)
  DBLOG_REPAIR_TABLES    comma-separated tables offered in the form's select (else free text)
  DBLOG_DUMP_POLL_INTERVAL  seconds between progress checks (default 2)
  DBLOG_CHANGELOG        the capture's changelog URL: OpenLineage's output, and the asset
                         emitted when the dump is done, ``dblog://changelog/<lake>`` (named by
                         its URI; default ``delta:///opt/dblog/lake``)
  DBLOG_CHANGELOG_ASSET  a name-only asset emitted too, for DAGs scheduled on it as earlier
                         builds named the changelog's asset (default ``dblog_changelog``; empty:
                         none)
"""

from __future__ import annotations

import os

from airflow_provider_dblog.assets.dblog import changelog_outlets
from airflow_provider_dblog.repair_form import repair_dag

TABLES = [t.strip() for t in os.environ.get("DBLOG_REPAIR_TABLES", "").split(",") if t.strip()]

# [START howto_dblog_repair_form]
dag = repair_dag(
    [os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source")],
    os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default"),
    # the changelog's asset (dblog://changelog/<lake>), as the capture, the backfill and
    # dblog_land build it, and the name-only asset of earlier builds
    changelog_outlets(
        os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"),
        os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"),
    ),
    tables=TABLES or None,
    poll_interval=float(os.environ.get("DBLOG_DUMP_POLL_INTERVAL", "2")),
    changelog=os.environ.get("DBLOG_CHANGELOG"),  # lineage only: where the capture writes
)
# [END howto_dblog_repair_form]
