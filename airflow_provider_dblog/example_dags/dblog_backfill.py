"""dblog_backfill: a scheduled full-state dump of every captured table into the changelog.

A DBLog dump takes no locks and runs inside the live capture (chunks between watermarks), so
a periodic full state is cheap for the source: it lets consumers rebuild from a recent
snapshot instead of replaying a long log, and repairs anything a consumer lost. The task
records the request and waits (deferred) until the running ``dblog_capture`` finished it; on
success it emits the changelog asset (``dblog://changelog/<lake>`` of ``DBLOG_CHANGELOG``, and
the name-only ``DBLOG_CHANGELOG_ASSET``: as in dblog_capture), which triggers ``dblog_land``.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_SOURCE_CONN_ID, DBLOG_STATE_CONN_ID, DBLOG_CHANGELOG, DBLOG_CHANGELOG_ASSET   as in dblog_capture
  DBLOG_BACKFILL_SCHEDULE     cron or preset (default ``@weekly``)
  DBLOG_BACKFILL_TABLES       comma-separated tables (default: every captured table)
  DBLOG_BACKFILL_CHUNK_SIZE   rows per chunk (default 10000)
  DBLOG_BACKFILL_DELAY_MS     pause between chunks, to throttle the source (default 0)
"""

from __future__ import annotations

import os

from airflow_provider_dblog.fleet import FleetSource, fleet_dags

TABLES = [t.strip() for t in os.environ.get("DBLOG_BACKFILL_TABLES", "").split(",") if t.strip()] or None

# One source's backfill (its capture: dags/dblog_capture.py), as the fleet builds it.
# [START howto_dblog_backfill]
dag = fleet_dags(
    [
        FleetSource(
            os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source"),
            capture=False,  # dags/dblog_capture.py
            backfill=os.environ.get("DBLOG_BACKFILL_SCHEDULE", "@weekly"),
            backfill_tables=TABLES,
            chunk_size=int(os.environ.get("DBLOG_BACKFILL_CHUNK_SIZE", "10000")),
            delay_ms=int(os.environ.get("DBLOG_BACKFILL_DELAY_MS", "0")),
        )
    ],
    state_conn_id=os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default"),
    changelog=os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"),
    changelog_asset=os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"),
    repair=False,
    single=True,
    backfill_poll_interval=float(os.environ.get("DBLOG_DUMP_POLL_INTERVAL", "10")),
)["dblog_backfill"]
# [END howto_dblog_backfill]
