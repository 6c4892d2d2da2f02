"""A local Spark session (``python -m`` of a job, the continuous landing's child, the mirror
check) as a user starts it: the venv's python run without activating the venv, and only
``DBLOG_SPARK_JARS_DIR`` set, as docs/airflow.md's install section says. Its Python workers
must import this package (they ran ``python3`` from PATH: ModuleNotFoundError
airflow_provider_dblog), and Delta must load from the jars resolved at install time, with
nothing resolved at run time. Nor may the log carry noise that every landing printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_jars import spark_jars

pytest.importorskip("pyspark")

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
sys.path.insert(0, sys.argv[2])  # this checkout's package, for the driver only
from airflow_provider_dblog.spark.session import get_session
spark = get_session("dblog-python-probe")
print("JARS=" + str(spark.sparkContext.getConf().get("spark.jars.packages", "") == ""), flush=True)
rows = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("airflow_provider_dblog").__name__).collect()
print("WORKER=" + rows[0], flush=True)
spark.range(3).write.format("delta").save(sys.argv[1])
print("DELTA=" + str(spark.read.format("delta").load(sys.argv[1]).count()), flush=True)
from airflow_provider_dblog.spark.land_changelog import ensure_database
for _ in range(3):  # once per mirror of a source, as register_all does
    ensure_database(spark, "dblog_probe")
print("DATABASE=" + str(spark.catalog.databaseExists("dblog_probe")), flush=True)
spark.stop()
"""


def test_a_local_session_without_pyspark_python_or_jars_list(tmp_path):
    spark_jars()  # resolved into .spark-jars/ (or DBLOG_SPARK_JARS_DIR) as the install step does
    jars_dir = os.environ.get("DBLOG_SPARK_JARS_DIR") or str(REPO / ".spark-jars")
    env = {  # not activated: no venv on PATH, no PYSPARK_PYTHON, no DBLOG_SPARK_JARS
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "DBLOG_SPARK_JARS", "VIRTUAL_ENV")
    }
    env.pop("PYTHONPATH", None)  # the workers see the package only as installed in the venv
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", DBLOG_SPARK_JARS_DIR=jars_dir)
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "t"), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "JARS=True" in run.stdout and "WORKER=airflow_provider_dblog" in run.stdout, run.stdout
    assert "DELTA=3" in run.stdout
    assert ":: resolving dependencies ::" not in run.stderr  # nothing downloaded at run time
    assert "DATABASE=True" in run.stdout
    # no noise in every job's log: the catalog database made once, pyspark's pandas 3 warning
    assert "was created concurrently" not in run.stderr, run.stderr[-3000:]
    assert "does not yet fully support pandas" not in run.stderr, run.stderr[-3000:]
