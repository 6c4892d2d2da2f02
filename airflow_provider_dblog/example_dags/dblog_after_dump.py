"""dblog_after_dump: runs once for each finished dump (a repair from the form, a backfill).

An example of acting on a dump's completion: the dump DAGs emit the changelog's asset when
their dump is done, with the dump's summary in the event's extra (``dblog_dump``: dump id,
tables and rows per table, rows, chunks, duration; docs/operations.md "Dump notifications and
asset events"). This DAG is scheduled on that asset; its task reads the summaries of the events
that triggered the run, and is where a team puts what follows a repair (a report, a downstream
refresh, a check). Events from elsewhere (a capture task ending) carry no ``dblog_dump`` and are
passed over.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_CHANGELOG        the capture's changelog URL (default ``delta:///opt/dblog/lake``): the
                         asset is its lake's ``dblog://changelog/<lake>``, named by its URI
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, task

from airflow_provider_dblog.assets.dblog import changelog_asset

# [START howto_asset_dblog_changelog]
# the asset the capture and dump DAGs emit: dblog://changelog/<lake> of DBLOG_CHANGELOG's lake,
# named by its URI (one asset per changelog, whichever DAG declares it)
CHANGELOG_ASSET = changelog_asset(os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"))

with DAG(
    dag_id="dblog_after_dump",
    description="Runs once for each finished DBLog dump, with the dump's summary",
    schedule=[CHANGELOG_ASSET],
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    tags=["dblog"],
) as dag:

    @task
    def dumps_done(triggering_asset_events=None) -> list:
        """The summaries of the dumps behind this run (several when they finished together)."""
        summaries = [
            e.extra["dblog_dump"]
            for events in (triggering_asset_events or {}).values()
            for e in events
            if "dblog_dump" in (e.extra or {})
        ]
        for s in summaries:
            print(f"dump {s['dump_id']} done: {s['rows']} rows in {s['duration_s']} s, tables {s['tables']}")
        return summaries

    dumps_done()
# [END howto_asset_dblog_changelog]
