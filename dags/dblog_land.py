"""dblog_land: the Spark landing job merges new changelog data into the Delta mirrors.

Runs on a schedule **and** whenever the changelog asset gets an event (a repair dump or a
backfill finished): ``AssetOrTimeSchedule``. The job is incremental and its merge monotonic
(docs/landing.md), so extra or overlapping runs are harmless; ``max_active_runs=1`` keeps one
streaming checkpoint writer. The application is the job file of the installed package, so
the DAG and the job never drift apart.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_LAKE                  the changelog's root directory or URL (what ``--lake`` takes;
                              default: the path of DBLOG_CHANGELOG, else /opt/dblog/lake)
  DBLOG_LAND_SCHEDULE         cron (default every 15 minutes)
  DBLOG_SPARK_CONN_ID         Spark connection (default ``spark_default``)
  DBLOG_SPARK_PACKAGES        --packages (default the Delta jars matching the pinned pyspark)
  DBLOG_LAND_SOURCE           land only this source id (default: every source)
  DBLOG_CHANGELOG_ASSET       as in dblog_capture
"""

from __future__ import annotations

import datetime as dt
import os
from importlib import resources

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, AssetOrTimeSchedule, CronTriggerTimetable

from airflow_provider_dblog.spark.session import DELTA_PACKAGE  # matches the pinned pyspark/delta-spark

CHANGELOG_ASSET = Asset(os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"))


def lake_root() -> str:
    if os.environ.get("DBLOG_LAKE"):
        return os.environ["DBLOG_LAKE"]
    changelog = os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake")
    return changelog[len("delta://") :] if changelog.startswith("delta://") else changelog


def land_job_path() -> str:
    """The job file inside the installed package (a real file: the package is not zipped)."""
    return str(resources.files("airflow_provider_dblog.spark").joinpath("land_changelog.py"))


args = ["--lake", lake_root()]
if os.environ.get("DBLOG_LAND_SOURCE"):
    args += ["--source", os.environ["DBLOG_LAND_SOURCE"]]

with DAG(
    dag_id="dblog_land",
    description="Land the DBLog changelog into Delta mirror tables (Spark)",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable(os.environ.get("DBLOG_LAND_SCHEDULE", "*/15 * * * *"), timezone="UTC"),
        assets=CHANGELOG_ASSET,
    ),
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog"],
) as dag:
    SparkSubmitOperator(
        task_id="land_changelog",
        application=land_job_path(),
        conn_id=os.environ.get("DBLOG_SPARK_CONN_ID", "spark_default"),
        packages=os.environ.get("DBLOG_SPARK_PACKAGES", DELTA_PACKAGE),
        conf={
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        },
        application_args=args,
        name="dblog-land",
        retries=2,
        retry_delay=dt.timedelta(minutes=1),
    )
