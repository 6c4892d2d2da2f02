"""dblog_fleet: the capture and backfill DAGs of many sources, and one repair form for them.

Declare the fleet in ``DBLOG_FLEET``, comma-separated connection ids (each a Postgres or MySQL
connection whose extra names its tables), e.g. ``shop_db,billing_db,crm_db``. Per source this
publishes ``dblog_capture__<conn id>`` and ``dblog_backfill__<conn id>``, and for the fleet
``dblog_repair_dump`` with a select of its sources (do not deploy ``dblog_repair_dump.py`` beside
it; ``dblog_capture.py`` and ``dblog_backfill.py`` are the single-source form of the same
DAGs). Unset, it publishes nothing. Per-source settings (changelog, session length, backfill
schedule, tables and pacing): write your own file with ``FleetSource(...)`` entries
(``airflow_provider_dblog/fleet.py``).

Deployment settings (environment of the scheduler / dag-processor / workers / triggerer):
  DBLOG_FLEET                   the sources' connection ids
  DBLOG_STATE_CONN_ID           the ``dblog_state`` connection (default ``dblog_state_default``)
  DBLOG_CHANGELOG               changelog URL (default ``delta:///opt/dblog/lake``)
  DBLOG_CAPTURE_SESSION_SECONDS length of one capture session (default 3600)
  DBLOG_BACKFILL_SCHEDULE       every source's backfill (default ``@weekly``)
  DBLOG_CHANGELOG_ASSET         as in dblog_capture (the changelog's own asset:
                                ``dblog://changelog/<lake>``)
"""

from __future__ import annotations

import os

from airflow_provider_dblog.fleet import FleetSource, fleet_dags

FLEET = [c.strip() for c in os.environ.get("DBLOG_FLEET", "").split(",") if c.strip()]

if FLEET:
    globals().update(
        fleet_dags(
            [FleetSource(c, backfill=os.environ.get("DBLOG_BACKFILL_SCHEDULE", "@weekly")) for c in FLEET],
            state_conn_id=os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default"),
            changelog=os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"),
            session_seconds=float(os.environ.get("DBLOG_CAPTURE_SESSION_SECONDS", "3600")),
            changelog_asset=os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"),
        )
    )
