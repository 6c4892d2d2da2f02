"""A SparkSession with Delta Lake, configured the same way on a laptop and on a cluster.

On a cluster the user submits with the Maven coordinate below (``--packages``) and the two
Delta confs (docs/landing.md); the job then only adds what it needs at run time. Locally
(tests, demo, ``python -m``, the continuous landing child, the mirror check) the jars come
from the cache ``dblog spark-jars`` fills once, found by ``resolve_jars`` (the one place that
reads ``DBLOG_SPARK_JARS`` / ``DBLOG_SPARK_JARS_DIR``, also for dags/dblog_land.py), so no
Maven/Ivy resolution happens at run time; with neither set the session falls back to
``spark.jars.packages``. Sessions are built only here (``get_session``).

The jobs' runtime SQL settings (``job_conf``: shuffle partitions, ...) apply in both cases,
under spark-submit too, unless the submitter set them.

A lake (or mirrors, or checkpoint) on ``s3://`` / ``s3a://`` adds Hadoop's S3A connector
(``s3a_conf``): its jars on the class path, the endpoint and region from the standard AWS
variables, credentials from the environment of each JVM (never the job's conf or argv), and
Delta's log store for S3.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Optional

# delta-spark 4.4.0 is built for Spark 4.2 / Scala 2.13. `io.delta:delta-spark_2.13:4.4.0`
# is the same build under the un-suffixed name; this one is what delta's own
# configure_spark_with_delta_pip asks for, so pip users and cluster users agree.
# The one place the coordinate is written: dags/dblog_land.py imports it, spark/jars.py
# resolves it, and tests/unit/test_delta_package.py holds the docs to it.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"

# Hadoop's S3A connector, for a lake on s3:// or s3a://: the Hadoop version pyspark bundles
# (pyspark/jars/hadoop-client-api-3.5.0.jar; spark/jars.py refuses another), with the AWS
# SDK v2 bundle it declares.
S3A_PACKAGE = "org.apache.hadoop:hadoop-aws:3.5.0"

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# Small local sessions (plain ``python``, no spark-submit): static settings that only the
# process starting the JVM can choose. No UI, two cores' worth of parallelism.
LOCAL_CONF = {
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
}


def _default_jars_dir() -> Path:
    """Where ``dblog spark-jars`` keeps the jars unless told (DBLOG_SPARK_JARS_DIR): a
    checkout's ``.spark-jars`` (tests, demo), else the user's cache directory (an installed
    package: never inside site-packages)."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "airflow_provider_dblog").is_dir():
        return checkout / ".spark-jars"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dblog" / "spark-jars"


DEFAULT_JARS_DIR = _default_jars_dir()


def _cached_jars(package: str, env_var: str, default_dir: Optional[Path], fix: str) -> list[str]:
    """The jar paths ``env_var`` lists (comma-separated), else the listing ``dblog spark-jars``
    keeps for ``package`` in ``$DBLOG_SPARK_JARS_DIR`` (default ``default_dir``, else
    ``DEFAULT_JARS_DIR``); [] when neither. A listed jar that is gone is an error here
    rather than a run that downloads or fails in the JVM."""
    jars = os.environ.get(env_var, "").strip()
    if not jars:
        _, artifact, version = package.split(":")
        cache = Path(os.environ.get("DBLOG_SPARK_JARS_DIR") or default_dir or DEFAULT_JARS_DIR)
        listing = cache / f"{artifact}-{version}" / "jars.txt"
        jars = listing.read_text().strip() if listing.is_file() else ""
    paths = [j for j in jars.replace(":", ",").split(",") if j]
    missing = [j for j in paths if not Path(j).is_file()]
    if missing:
        raise FileNotFoundError(
            f"jar(s) {missing} of {package} listed by {env_var} / DBLOG_SPARK_JARS_DIR do not exist. Fix: {fix}"
        )
    return paths


def resolve_jars(default_dir: Optional[Path] = None) -> Optional[str]:
    """The Delta jars resolved at install time (comma-separated paths), or None:
    ``DBLOG_SPARK_JARS`` (the list ``dblog spark-jars`` prints), else its cached listing."""
    fix = "run dblog spark-jars again (it resolves them once), or unset both to use --packages."
    return ",".join(_cached_jars(DELTA_PACKAGE, "DBLOG_SPARK_JARS", default_dir, fix)) or None


S3_SCHEMES = ("s3://", "s3a://")

# What a lake on S3 needs besides the connector's jars. Nothing secret: the credentials are
# read by each JVM from its own environment (the driver: the job's; executors: their worker's,
# which a standalone worker hands its executors, see scripts/services spark; on YARN/Kubernetes
# the node's instance profile or the pod's environment) - spark.executorEnv.* would show them
# in the web UI and event log. Environment variables first, then the host's instance profile.
S3A_CONF = {
    # s3:// (what the capture's delta-rs output and AWS users write) read and written by S3A,
    # through FileSystem and FileContext (the streaming checkpoint uses the latter).
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
    "spark.hadoop.fs.s3a.aws.credentials.provider": (
        "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider,"
        "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
    ),
    # Delta 4.4's log stores for S3 are S3SingleDriverLogStore (its default, set here so the
    # choice is visible) and S3DynamoDBLogStore (delta-storage-s3-dynamodb plus a DynamoDB
    # table); none commits through S3's put-if-absent. The single-driver store makes a commit
    # atomic only among the writers of one JVM (an in-process lock per table, then a listing
    # check), so two drivers committing to one mirror at once can overwrite each other's
    # version file. That fits this job: the mirrors have one writer, the landing of their
    # source (dblog_land: max_active_runs=1, one driver; --parallel-tables shares that JVM);
    # the changelog it reads is committed by the capture (delta-rs, put-if-absent), never by
    # Spark. Run maintenance (OPTIMIZE/VACUUM) of S3 mirrors between landings, not beside them,
    # or configure S3DynamoDBLogStore (docs/landing.md) for multiple drivers.
    "spark.delta.logStore.s3.impl": "io.delta.storage.S3SingleDriverLogStore",
    "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
}


def on_s3(locations: Iterable[Optional[str]]) -> bool:
    """Whether any of the job's locations (lake, mirrors, checkpoint) is an S3 URL."""
    return any(loc and loc.startswith(S3_SCHEMES) for loc in locations)


def resolve_s3a_jars(default_dir: Optional[Path] = None) -> Optional[str]:
    """The S3A connector's jars resolved at install (``dblog spark-jars --s3a``), as a class
    path (``:``-separated), or None: ``DBLOG_SPARK_S3A_JARS``, else the cached listing."""
    fix = "run dblog spark-jars --s3a again (it resolves them once)."
    return ":".join(_cached_jars(S3A_PACKAGE, "DBLOG_SPARK_S3A_JARS", default_dir, fix)) or None


def s3a_conf(launched_by_submit: bool, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Settings for a lake on S3. Endpoint and region from the standard variables
    (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``),
    with path-style requests and plain HTTP when the endpoint says ``http://`` (S3-compatible
    stores); credentials as ``S3A_CONF`` says. Without spark-submit the connector's jars go on
    the driver's and executors' class path (``extraClassPath``, so they are loaded by the
    classloader Hadoop's FileSystem uses, and not copied to every executor as ``spark.jars``
    would: the AWS SDK bundle is 650 MB); every host must have them at that path (here: one
    host; on a cluster: installed with the package). Under spark-submit the submitter passes
    ``--driver-class-path`` / ``spark.executor.extraClassPath`` (docs/landing.md)."""
    conf = dict(S3A_CONF)
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        if endpoint.startswith("http://"):
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if not launched_by_submit:
        classpath = resolve_s3a_jars()
        if not classpath:
            raise FileNotFoundError(
                f"the lake is on S3 but the S3A connector ({S3A_PACKAGE}) is not resolved. "
                "Fix: run dblog spark-jars (it resolves it once into DBLOG_SPARK_JARS_DIR), or set DBLOG_SPARK_S3A_JARS."
            )
        conf["spark.driver.extraClassPath"] = classpath
        conf["spark.executor.extraClassPath"] = classpath
    return conf


def session_conf(launched_by_submit: bool, jars: Optional[str] = None, extra_conf: Optional[dict] = None) -> dict:
    """The builder's settings. Under spark-submit the submitter chose jars, master and Python;
    otherwise: the local settings, the jars ``resolve_jars`` finds (else the package), and
    the Python workers' interpreter: this one unless ``PYSPARK_PYTHON`` says otherwise (else
    Spark starts ``python3`` from PATH, which without the venv activated lacks this package)."""
    conf = dict(DELTA_CONF)
    # The session time zone decides how timestamps without zone print and how "with time
    # zone" values render: UTC keeps them equal to the canonical UTC values.
    conf["spark.sql.session.timeZone"] = "UTC"
    if not launched_by_submit:
        conf.update(LOCAL_CONF)
        jars = jars or resolve_jars()
        if jars:
            conf["spark.jars"] = jars
        else:
            conf["spark.jars.packages"] = DELTA_PACKAGE
    conf.update(extra_conf or {})
    return conf


def python_workers_default() -> None:
    """PySpark reads the workers' interpreter from ``PYSPARK_PYTHON`` when the context starts
    (``spark.pyspark.python`` only under spark-submit): default it to this interpreter, which
    imports this package (``python3`` from PATH may not: a venv's python run without
    activating the venv). Under spark-submit the submitter chose (docs/airflow.md)."""
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable


def quiet_pandas_warning() -> None:
    """pyspark 4.2 warns "does not yet fully support pandas >= 3.0.0" when a session starts,
    in every job's log. The jobs use no pandas API (no toPandas, no pandas UDFs), so that one
    warning says nothing about them; every other warning stays."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


def job_conf(parallelism: int) -> dict[str, str]:
    """Runtime SQL settings the jobs want on any master, local or spark-submit.

    Spark's default of 200 shuffle partitions makes every small MERGE run 200 tasks;
    the cluster's parallelism (2 on ``local[2]``) fits a changelog batch, and adaptive
    execution coalesces further. ``snapshotPartitions``: Delta's per-commit log replay,
    sized the same way."""
    p = str(max(1, parallelism))
    return {
        "spark.sql.shuffle.partitions": p,
        "spark.databricks.delta.snapshotPartitions": p,
        "spark.databricks.delta.stats.collect": "true",
    }


def get_session(
    app_name: str = "dblog",
    master: Optional[str] = None,
    jars: Optional[str] = None,
    extra_conf: Optional[dict] = None,
    locations: Iterable[Optional[str]] = (),
):
    """The active session if there is one, else a new one with Delta.

    ``master``: e.g. ``local[2]``; None keeps what spark-submit set (or ``local[2]`` when
    run with plain ``python``). ``jars``: comma-separated jar paths (default
    ``resolve_jars()``). ``locations``: the job's lake, mirrors, checkpoint: one on S3 adds
    ``s3a_conf`` (under spark-submit only what the submitter did not set)."""
    from pyspark.sql import SparkSession

    quiet_pandas_warning()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = SparkSession.builder.appName(app_name)
    if master or not launched_by_submit:
        builder = builder.master(master or os.environ.get("DBLOG_SPARK_MASTER", "local[2]"))
    if not launched_by_submit:
        python_workers_default()
    conf = session_conf(launched_by_submit, jars, extra_conf)
    if on_s3(locations):
        conf = {**_unchosen(s3a_conf(launched_by_submit), launched_by_submit), **conf}
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DBLOG_SPARK_LOG_LEVEL", "WARN"))
    apply_job_conf(spark, keep=set(extra_conf or ()))
    return spark


def _unchosen(conf: dict[str, str], launched_by_submit: bool) -> dict[str, str]:
    """``conf`` without the keys spark-submit's ``--conf`` / spark-defaults.conf already set
    (they are the JVM's system properties, which a new SparkConf reads)."""
    if not launched_by_submit:
        return conf
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway spark-submit started
    chosen = SparkConf()
    return {k: v for k, v in conf.items() if not chosen.contains(k)}


def apply_job_conf(spark, keep: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """Set ``job_conf`` on a new session, also under spark-submit, where the builder's local
    settings are skipped. A value the submitter chose (``--conf``, e.g. SparkSubmitOperator's
    ``conf``; spark-defaults.conf; ``extra_conf``) is in the context's conf and wins.
    Returns what was set."""
    sc = spark.sparkContext
    chosen = sc.getConf()
    applied = {}
    for key, value in job_conf(sc.defaultParallelism).items():
        if key not in keep and not chosen.contains(key):
            spark.conf.set(key, value)
            applied[key] = value
    return applied
