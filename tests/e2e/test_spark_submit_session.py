"""The jobs' session settings under a real ``spark-submit`` (the one pyspark installs).

``dblog_land`` runs the landing job through spark-submit; the settings get_session gives a
local ``python -m`` run (shuffle partitions sized to the cores instead of Spark's 200, ...)
must apply there too, and a value the submitter passes with ``--conf`` must win.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_jars import spark_jars

REPO = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"

PROBE = """
import json
from airflow_provider_dblog.spark.session import get_session
spark = get_session("dblog-session-probe")
keys = ["spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions", "spark.sql.session.timeZone"]
print("CONF=" + json.dumps({k: spark.conf.get(k, None) for k in keys}), flush=True)
spark.stop()
"""


@pytest.fixture(scope="module")
def jars() -> str:
    return spark_jars()


def submit(tmp_path: Path, jars: str, *conf: str) -> dict:
    app = tmp_path / "probe.py"
    app.write_text(PROBE)
    # the driver's Python must be the one with the provider installed (docs/airflow.md)
    environ = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    environ.pop("PYSPARK_GATEWAY_PORT", None)
    out = subprocess.run(
        [str(SPARK_SUBMIT), "--master", "local[2]", "--jars", jars, *conf, str(app)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("CONF="))
    return json.loads(line[len("CONF=") :])


@pytest.mark.integration
def test_job_settings_apply_under_spark_submit(tmp_path, jars):
    got = submit(tmp_path, jars)
    assert got == {
        "spark.sql.shuffle.partitions": "2",  # local[2], not Spark's 200
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.session.timeZone": "UTC",
    }


@pytest.mark.integration
def test_a_setting_the_submitter_chose_wins(tmp_path, jars):
    got = submit(tmp_path, jars, "--conf", "spark.sql.shuffle.partitions=5")
    assert got["spark.sql.shuffle.partitions"] == "5"
    assert got["spark.databricks.delta.snapshotPartitions"] == "2"
