"""dblog_verify_repair: find drift between the source and the changelog, repair exactly it.

Each run compares every captured table with the replay of its changelog (the same check as
``dblog verify --ranges``: key ranges compared by digests computed in the database, only the
ranges that differ read) and requests a key-list dump of exactly the keys that differ: rows missing
from the changelog, with other values, or deleted in the source. The running
``dblog_capture`` performs those dumps, which read only those rows; ``dblog_land`` then lands
them. The XCom summary lists rows, mismatches and the repair dump per table.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_SOURCE_CONN_ID, DBLOG_STATE_CONN_ID, DBLOG_CHANGELOG   as in dblog_capture
  DBLOG_VERIFY_SCHEDULE   cron or preset (default ``@daily``)
  DBLOG_VERIFY_TABLES     comma-separated tables (default: every captured table)
  DBLOG_VERIFY_MIRRORS    compare the Delta mirrors under this directory (``<lake>/mirrors``)
                          instead of the changelog's replay: Spark in the worker hashes the
                          mirrors' rows (DBLOG_SPARK_JARS or DBLOG_SPARK_JARS_DIR, and
                          DBLOG_SPARK_MASTER, as for dblog_land); the repair reaches the
                          mirrors with the next landing
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_dblog.operators.verify import VerifyOperator

SOURCE_CONN_ID = os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source")
STATE_CONN_ID = os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default")
CHANGELOG = os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake")
MIRRORS = os.environ.get("DBLOG_VERIFY_MIRRORS") or None
TABLES = [t.strip() for t in os.environ.get("DBLOG_VERIFY_TABLES", "").split(",") if t.strip()] or None

with DAG(
    dag_id="dblog_verify_repair",
    description="Compare the DBLog changelog with the source and re-dump exactly the keys that differ",
    schedule=os.environ.get("DBLOG_VERIFY_SCHEDULE", "@daily"),
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog"],
) as dag:
    # [START howto_operator_dblog_verify]
    VerifyOperator(
        task_id="verify",
        source_conn_id=SOURCE_CONN_ID,
        state_conn_id=STATE_CONN_ID,
        changelog=CHANGELOG,
        mirrors=MIRRORS,
        tables=TABLES,
        repair=True,
    )
    # [END howto_operator_dblog_verify]
