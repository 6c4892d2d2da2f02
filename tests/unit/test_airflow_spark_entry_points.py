"""Every Spark entry point builds its session in one place (spark/session.py) and takes the
jars resolved at install time from one function (``resolve_jars``): the landing DAG, the
continuous landing's child, the mirror check (CLI and VerifyOperator), maintenance, cuts.
A stand-in SparkSession records what the builder was given (no JVM here; the real session:
tests/e2e/test_spark_session_local.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pyspark_sql = pytest.importorskip("pyspark.sql")

from airflow_provider_dblog.spark import session as spark_session  # noqa: E402
from airflow_provider_dblog.spark.session import DELTA_PACKAGE, get_session, resolve_jars  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_provider_dblog"


class FakeBuilder:
    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def appName(self, name):  # noqa: N802 - pyspark's name
        return self

    def master(self, master):
        self.conf["master"] = master
        return self

    def config(self, key, value):
        self.conf[key] = value
        return self

    def getOrCreate(self):  # noqa: N802
        from types import SimpleNamespace

        conf = SimpleNamespace(contains=lambda k: False)
        context = SimpleNamespace(setLogLevel=lambda level: None, getConf=lambda: conf, defaultParallelism=2)
        return SimpleNamespace(sparkContext=context, conf=SimpleNamespace(set=lambda k, v: None))


@pytest.fixture
def builder(monkeypatch):
    fake = FakeBuilder()

    class FakeSession:
        builder = fake

        @staticmethod
        def getActiveSession():  # noqa: N802
            return None

    monkeypatch.setattr(pyspark_sql, "SparkSession", FakeSession)
    monkeypatch.setenv("PYSPARK_PYTHON", "unset")  # so that the test's end restores it (get_session sets it)
    for name in ("DBLOG_SPARK_JARS", "DBLOG_SPARK_JARS_DIR", "PYSPARK_GATEWAY_PORT", "PYSPARK_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    return fake


@pytest.fixture
def jars_dir(tmp_path) -> tuple[Path, str]:
    """What scripts/spark-jars leaves in DBLOG_SPARK_JARS_DIR: a listing of existing jars."""
    _, artifact, version = DELTA_PACKAGE.split(":")
    jars = [tmp_path / "delta-spark.jar", tmp_path / "delta-storage.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    listed = ",".join(map(str, jars))
    (tmp_path / f"{artifact}-{version}").mkdir()
    (tmp_path / f"{artifact}-{version}" / "jars.txt").write_text(listed + "\n")
    return tmp_path, listed


def test_a_local_session_takes_the_jars_from_dblog_spark_jars_dir_alone(builder, jars_dir, monkeypatch):
    """The install section says DBLOG_SPARK_JARS_DIR suffices: the continuous landing's child
    and the mirror check read only DBLOG_SPARK_JARS and downloaded spark.jars.packages."""
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(jars_dir[0]))
    get_session("probe")
    assert builder.conf["spark.jars"] == jars_dir[1]
    assert "spark.jars.packages" not in builder.conf  # nothing resolved at run time


def test_without_local_jars_the_session_names_the_package(builder, tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(tmp_path / "empty"))
    get_session("probe")
    assert builder.conf["spark.jars.packages"] == DELTA_PACKAGE and "spark.jars" not in builder.conf


def test_a_listed_jar_that_is_gone_is_an_error_with_the_fix(jars_dir, monkeypatch):
    monkeypatch.setenv("DBLOG_SPARK_JARS", str(jars_dir[0] / "gone.jar"))
    with pytest.raises(FileNotFoundError, match="run dblog spark-jars again"):
        resolve_jars()


def test_a_local_session_runs_python_workers_with_this_interpreter(builder, monkeypatch):
    """Without PYSPARK_PYTHON Spark starts `python3` from PATH for its Python workers, which
    (the venv not activated) cannot import airflow_provider_dblog."""
    get_session("probe")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python")
    get_session("probe")
    assert os.environ["PYSPARK_PYTHON"] == "/opt/other/python"  # the user's choice stays


def test_under_spark_submit_the_submitter_chose_jars_and_python(builder, monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    get_session("probe")
    assert not {"spark.jars", "spark.jars.packages"} & set(builder.conf)
    assert "PYSPARK_PYTHON" not in os.environ


def land_task(monkeypatch, **environ: str):
    """dblog_land's task, the DAG file executed afresh under ``environ``."""
    for name in (
        "DBLOG_SPARK_JARS",
        "DBLOG_SPARK_JARS_DIR",
        "DBLOG_SPARK_PACKAGES",
        "DBLOG_LAND_MODE",
        "DBLOG_SPARK_S3A_JARS",
        "DBLOG_CHANGELOG",
        "DBLOG_LAKE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"dblog_land_{uuid.uuid4().hex}", REPO / "dags" / "dblog_land.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.get_task("land_changelog")


@pytest.mark.parametrize("mode", ["event", "continuous"])
def test_the_landing_dag_takes_the_jars_from_the_one_resolver(monkeypatch, jars_dir, mode):
    task = land_task(monkeypatch, DBLOG_SPARK_JARS_DIR=str(jars_dir[0]), DBLOG_LAND_MODE=mode)
    assert task.jars == jars_dir[1]
    if mode == "continuous":  # the trigger hands them to its child's session
        trigger = task._trigger(1)
        assert trigger.serialize()[1]["jars"] == jars_dir[1]
        assert trigger.environ()["DBLOG_SPARK_JARS"] == jars_dir[1]


def test_the_continuous_childs_session_resolves_jars_itself_when_the_dag_did_not(builder, jars_dir, monkeypatch):
    from airflow_provider_dblog.triggers.land import LandTrigger

    monkeypatch.setenv("DBLOG_SPARK_JARS_DIR", str(jars_dir[0]))
    env = LandTrigger("/lake").environ()
    assert "DBLOG_SPARK_JARS" not in env and env["DBLOG_SPARK_JARS_DIR"] == str(jars_dir[0])
    monkeypatch.setattr(os, "environ", env)  # the child's environment
    get_session("dblog-land-changelog")
    assert builder.conf["spark.jars"] == jars_dir[1]


def test_sessions_are_built_and_jars_read_only_in_spark_session():
    """Each entry point (land_changelog, verify_mirror, VerifyOperator, maintenance,
    consistent_cut, the DAGs) goes through get_session / resolve_jars: nothing else builds a
    SparkSession or reads the jar settings."""
    own = PACKAGE / "spark" / "session.py"
    # the install step (dblog spark-jars): where to put the jars, and Ivy's throwaway session
    resolver = PACKAGE / "spark" / "jars.py"
    builds = re.compile(r"SparkSession\.builder|\.getOrCreate\(|environ(?:\.get)?\(?\[?\s*\"DBLOG_SPARK_JARS")
    offenders = [
        str(p.relative_to(REPO))
        for p in [*PACKAGE.rglob("*.py"), *(REPO / "dags").glob("*.py")]
        if p not in (own, resolver) and builds.search(p.read_text())
    ]
    assert offenders == []
    users = {p.name for p in PACKAGE.rglob("*.py") if "get_session(" in p.read_text()}
    assert {"land_changelog.py", "verify_mirror.py", "verify.py", "maintenance.py", "consistent_cut.py"} <= users
    assert spark_session.resolve_jars.__name__ in (REPO / "dags" / "dblog_land.py").read_text()


@pytest.mark.parametrize("mode", ["event", "schedule", "continuous"])
def test_the_landing_dag_has_a_next_run_after_runs_it_already_had(monkeypatch, mode):
    """Switching DBLOG_LAND_MODE to continuous on a DAG with runs gave it ``@once``: no next
    run, so the continuous landing never started."""
    import datetime as dt

    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import DataInterval, TimeRestriction

    task = land_task(monkeypatch, DBLOG_LAND_MODE=mode)
    dag = DagSerialization.from_dict(DagSerialization.to_dict(task.dag))  # the scheduler's view
    now = pendulum.now("UTC")
    earlier_run = DataInterval(now - dt.timedelta(days=1), now - dt.timedelta(days=1))
    nxt = dag.timetable.next_dagrun_info(
        last_automated_data_interval=earlier_run,
        restriction=TimeRestriction(earliest=dag.start_date, latest=None, catchup=False),
    )
    assert nxt is not None and nxt.run_after > earlier_run.end
    assert dag.max_active_runs == 1  # a live continuous run keeps the next one waiting


@pytest.mark.parametrize("mode", ["event", "continuous"])
def test_the_landing_dag_passes_its_parallel_tables_setting_to_the_job(monkeypatch, mode):
    monkeypatch.delenv("DBLOG_LAND_PARALLEL_TABLES", raising=False)
    default = land_task(monkeypatch, DBLOG_LAND_MODE=mode)
    task = land_task(monkeypatch, DBLOG_LAND_MODE=mode, DBLOG_LAND_PARALLEL_TABLES="3")
    if mode == "continuous":  # through the trigger's child: its argv, and after a triggerer restart
        trigger = task._trigger(1)
        again = type(trigger)(**trigger.serialize()[1])
        assert again.argv()[-2:] == ["--parallel-tables", "3"]
        assert "--parallel-tables" not in default._trigger(1).argv()
    else:
        assert task.application_args[-2:] == ["--parallel-tables", "3"]
        assert "--parallel-tables" not in default.application_args


def test_a_landing_dag_on_s3_puts_the_s3a_connector_on_the_drivers_and_executors_class_path(monkeypatch, tmp_path):
    """spark-submit to a cluster with the lake on S3 (issue 32): the connector's jars are on
    each host at one path, loaded from the class path (not shipped with --jars)."""
    jars = [tmp_path / "hadoop-aws.jar", tmp_path / "bundle.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    classpath = ":".join(map(str, jars))
    task = land_task(monkeypatch, DBLOG_CHANGELOG="s3://bucket/lake", DBLOG_SPARK_S3A_JARS=classpath)
    assert task.lake == "s3://bucket/lake"
    assert task.driver_class_path == classpath and task.conf["spark.executor.extraClassPath"] == classpath
    assert classpath not in (task.jars or "")
    local = land_task(monkeypatch, DBLOG_CHANGELOG="delta:///data/lake", DBLOG_SPARK_S3A_JARS=classpath)
    assert local.driver_class_path is None and "spark.executor.extraClassPath" not in local.conf


def test_a_landing_dag_on_s3_without_the_s3a_connector_stops_at_parse_time_with_the_fix(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="S3A connector.*Fix: run dblog spark-jars --s3a"):
        land_task(monkeypatch, DBLOG_LAKE="s3://bucket/lake", DBLOG_SPARK_JARS_DIR=str(tmp_path / "empty"))


@pytest.mark.parametrize("value", ["0", "four", "-2"])
def test_a_wrong_parallel_tables_setting_stops_the_landing_dag_with_the_fix(monkeypatch, value):
    with pytest.raises(ValueError, match="DBLOG_LAND_PARALLEL_TABLES is .* Fix: set it to a whole number"):
        land_task(monkeypatch, DBLOG_LAND_PARALLEL_TABLES=value)


def test_spark_jobs_run_as_scripts_import_nothing_relatively():
    """spark-submit runs a job as a file (dblog_land's application is land_changelog.py's
    path): a relative import there fails with "no known parent package", even one inside a
    function that only some runs reach (the landing's metrics did)."""
    import ast

    scripts = [p for p in (PACKAGE / "spark").glob("*.py") if "__main__" in p.read_text()]
    assert PACKAGE / "spark" / "land_changelog.py" in scripts
    relative = [
        f"{p.name}:{node.lineno}"
        for p in scripts
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert not relative, f"relative imports in Spark job scripts: {relative}"
