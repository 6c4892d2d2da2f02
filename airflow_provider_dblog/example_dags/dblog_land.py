"""dblog_land: the Spark landing job merges new changelog data into the Delta mirrors.

Three modes (``DBLOG_LAND_MODE``):

* ``event`` (default): runs when the changelog has new commits. An ``AssetWatcher`` on the
  ``dblog://commits/<lake>`` asset runs ``ChangelogCommitTrigger`` in the triggerer: it polls
  the changelog's Delta log and fires at most once per ``DBLOG_LAND_MIN_INTERVAL`` seconds.
  Also after a repair dump or a backfill (the changelog asset, ``dblog://changelog/<lake>``)
  and on the cron as a safety net.
* ``schedule``: on the cron and after dumps only (``AssetOrTimeSchedule``), as before.
* ``continuous``: one long-lived deferred task (``ContinuousLandOperator``) supervising a
  Spark Structured Streaming landing with a ``DBLOG_LAND_TRIGGER_SECONDS`` trigger, session
  after session, like dblog_capture: mirrors trail their sources by seconds. The cron
  (default every 5 minutes) starts it when no run is alive: the first time, after a switch
  from another mode, or after a run failed.

The job is incremental and idempotent (docs/landing.md), so extra or overlapping runs are
harmless; ``max_active_runs=1`` keeps one streaming checkpoint writer. The application is the
job file of the installed package, so the DAG and the job never drift apart. With Airflow's
OpenLineage provider installed, every mode reports the changelog feeding the mirrors
(docs/operations.md "Lineage").

Deployment settings (environment of the scheduler / dag-processor / workers / triggerer):
  DBLOG_LAND_MODE             event (default), schedule or continuous
  DBLOG_LAND_MIN_INTERVAL     event mode: seconds between landings at least (default 60)
  DBLOG_LAND_POLL_INTERVAL    event mode: seconds between looks at the changelog (default 5)
  DBLOG_LAND_TRIGGER_SECONDS  continuous mode: the streaming trigger interval (default 5)
  DBLOG_LAKE                  the changelog's root directory or URL (what ``--lake`` takes;
                              default: the path of DBLOG_CHANGELOG, else /opt/dblog/lake)
  DBLOG_LAND_SCHEDULE         cron (default every 15 minutes; in event mode hourly; in
                              continuous mode every 5: when a stopped landing restarts)
  DBLOG_SPARK_CONN_ID         Spark connection (default ``spark_default``; ``local[2]`` as its
                              host runs Spark on the worker)
  DBLOG_SPARK_JARS            the Delta jars resolved at install time (``dblog spark-jars``
                              prints the comma-separated list): passed as ``--jars``, so
                              nothing is downloaded at run time. Default: the list in
                              ``$DBLOG_SPARK_JARS_DIR`` (default: a checkout's ``.spark-jars``,
                              else ~/.cache/dblog/spark-jars) when dblog spark-jars has filled it
  DBLOG_SPARK_PACKAGES        without local jars: ``--packages`` (default the Delta coordinate
                              matching the pinned pyspark), resolved by spark-submit on each
                              run: the setting for a cluster (docs/airflow.md)
  DBLOG_SPARK_S3A_JARS        a lake on S3: the S3A connector's jars as a class path present at
                              that path on the worker and every Spark host (``dblog spark-jars
                              --s3a`` prints it): passed as ``--driver-class-path`` and
                              ``spark.executor.extraClassPath``, not ``--jars`` (the AWS SDK
                              bundle is 650 MB). Default: the cached listing of ``dblog
                              spark-jars --s3a``; required when the lake is on S3
  DBLOG_LAND_SOURCE           land only this source id (default: every source)
  DBLOG_LAND_PARALLEL_TABLES  tables of a micro-batch landed at once (the job's
                              ``--parallel-tables``; default up to 4, 1: one after another)
  DBLOG_CHANGELOG             the capture's changelog URL (default ``delta:///opt/dblog/lake``):
                              its asset, ``dblog://changelog/<lake>``, is the one the capture and
                              dump DAGs emit
  DBLOG_LAKE_CONN_ID          event mode on an object store: an ``aws`` connection whose keys
                              the changelog watcher uses in the triggerer (docs/deploy.md)
"""

from __future__ import annotations

import datetime as dt
import os
from importlib import resources
from typing import Optional

from airflow.sdk import DAG, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable

from airflow_provider_dblog.assets.dblog import changelog_asset, commits_asset
from airflow_provider_dblog.operators.land import ContinuousLandOperator, SparkSubmitLandOperator
from airflow_provider_dblog.spark.session import (  # match the pinned pyspark/delta-spark
    DELTA_PACKAGE,
    S3_SCHEMES,
    resolve_jars,
    resolve_s3a_jars,
)
from airflow_provider_dblog.triggers.changelog import ChangelogCommitTrigger

# the asset the capture and the dump DAGs emit, built as they build it: dblog://changelog/<lake>
# of DBLOG_CHANGELOG, named by its URI
CHANGELOG_ASSET = changelog_asset(os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake"))
MODE = os.environ.get("DBLOG_LAND_MODE", "event").strip().lower()
if MODE not in ("event", "schedule", "continuous"):
    raise ValueError(f"dblog_land: DBLOG_LAND_MODE is {MODE!r}. Fix: set it to event, schedule or continuous.")


def lake_root() -> str:
    if os.environ.get("DBLOG_LAKE"):
        return os.environ["DBLOG_LAKE"]
    changelog = os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake")
    return changelog[len("delta://") :] if changelog.startswith("delta://") else changelog


def land_job_path() -> str:
    """The job file inside the installed package (a real file: the package is not zipped)."""
    return str(resources.files("airflow_provider_dblog.spark").joinpath("land_changelog.py"))


def local_jars() -> Optional[str]:
    """The jar list resolved at install time, or None (``resolve_jars``, the one resolver of
    every Spark entry point). A listed jar that is gone is an error here, at parse time."""
    try:
        return resolve_jars()
    except FileNotFoundError as e:
        raise FileNotFoundError(f"dblog_land: {e}") from None


def parallel_tables() -> Optional[int]:
    """DBLOG_LAND_PARALLEL_TABLES as a number, checked here at parse time rather than by a
    landing that fails on every run."""
    text = os.environ.get("DBLOG_LAND_PARALLEL_TABLES", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"dblog_land: DBLOG_LAND_PARALLEL_TABLES is {text!r}. Fix: set it to a whole number of 1 or more "
            "(1 lands the tables of a batch one after another), or unset it for the default."
        )
    return int(text)


def s3a_classpath() -> Optional[str]:
    """A lake on S3: the S3A connector's class path (``resolve_s3a_jars``), else None. The
    connector is not shipped with ``--jars``: each host has it at the same path, and the
    driver and executors load it with Hadoop's classloader (spark/session.py ``s3a_conf``)."""
    if not lake_root().startswith(S3_SCHEMES):
        return None
    try:
        classpath = resolve_s3a_jars()
    except FileNotFoundError as e:
        raise FileNotFoundError(f"dblog_land: {e}") from None
    if not classpath:
        raise FileNotFoundError(
            f"dblog_land: the lake {lake_root()} is on S3 but the S3A connector's jars are not resolved. "
            "Fix: run dblog spark-jars --s3a on every host (the same path), or set DBLOG_SPARK_S3A_JARS."
        )
    return classpath


JARS = local_jars()
S3A_CLASSPATH = s3a_classpath()
PARALLEL_TABLES = parallel_tables()
args = [] if PARALLEL_TABLES is None else ["--parallel-tables", str(PARALLEL_TABLES)]


def schedule():
    if MODE == "continuous":
        # One task that runs for ever (session after session). Not ``@once``: a DAG that has
        # runs already (switched from event or schedule mode) would get no next run, and the
        # landing would never start. A cron always has a next tick; max_active_runs=1 keeps a
        # second run from starting while the continuous one lives, and a run that ended
        # (failed past its retries) is restarted at the next tick.
        return CronTriggerTimetable(os.environ.get("DBLOG_LAND_SCHEDULE", "*/5 * * * *"), timezone="UTC")
    cron = os.environ.get("DBLOG_LAND_SCHEDULE", "0 * * * *" if MODE == "event" else "*/15 * * * *")
    assets = CHANGELOG_ASSET
    if MODE == "event":
        # [START howto_trigger_dblog_changelog_commits]
        commits = commits_asset(  # dblog://commits/<lake>, named by its URI
            lake_root(),
            watchers=[
                AssetWatcher(
                    name="dblog_changelog_commits",
                    trigger=ChangelogCommitTrigger(
                        lake_root(),
                        poll_interval=float(os.environ.get("DBLOG_LAND_POLL_INTERVAL", "5")),
                        min_interval=float(os.environ.get("DBLOG_LAND_MIN_INTERVAL", "60")),
                        conn_id=os.environ.get("DBLOG_LAKE_CONN_ID") or None,
                        source=os.environ.get("DBLOG_LAND_SOURCE") or None,  # its table only; else every source's
                    ),
                )
            ],
        )
        # [END howto_trigger_dblog_changelog_commits]
        assets = CHANGELOG_ASSET | commits
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=assets)


with DAG(
    dag_id="dblog_land",
    description="Land the DBLog changelog into Delta mirror tables (Spark)",
    schedule=schedule(),
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog"],
) as dag:
    if MODE == "continuous":
        # [START howto_operator_dblog_land_continuous]
        ContinuousLandOperator(
            task_id="land_changelog",
            lake=lake_root(),
            source=os.environ.get("DBLOG_LAND_SOURCE") or None,
            trigger_seconds=float(os.environ.get("DBLOG_LAND_TRIGGER_SECONDS", "5")),
            parallel_tables=PARALLEL_TABLES,
            jars=JARS,  # the child's session takes these, as spark-submit's --jars
            retries=10,
            retry_delay=dt.timedelta(seconds=30),
        )
        # [END howto_operator_dblog_land_continuous]
    else:
        # SparkSubmitOperator, plus --lake/--source and the landing's OpenLineage datasets
        # (changelog -> mirrors, named as the capture and the continuous landing name them)
        # [START howto_operator_dblog_land_spark_submit]
        SparkSubmitLandOperator(
            task_id="land_changelog",
            lake=lake_root(),
            source=os.environ.get("DBLOG_LAND_SOURCE") or None,
            application=land_job_path(),
            conn_id=os.environ.get("DBLOG_SPARK_CONN_ID", "spark_default"),
            jars=JARS,
            packages=None if JARS else os.environ.get("DBLOG_SPARK_PACKAGES", DELTA_PACKAGE),
            conf={
                "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
                # a lake on S3: the connector on the executors' class path too (the job sets the rest)
                **({"spark.executor.extraClassPath": S3A_CLASSPATH} if S3A_CLASSPATH else {}),
            },
            driver_class_path=S3A_CLASSPATH,
            application_args=args,
            name="dblog-land",
            retries=2,
            retry_delay=dt.timedelta(minutes=1),
        )
        # [END howto_operator_dblog_land_spark_submit]
