"""The example DAGs: every one parses and serialises; ``dag.test()`` runs of the dump DAGs
against the real MariaDB and PostgreSQL with a ``dblog capture`` child doing the dumps.

Each ``dag.test()`` runs in a child Python with its own AIRFLOW_HOME (a migrated SQLite
metadata database): the DAG files read their settings from the environment at parse time,
and Airflow's configuration is fixed once per process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

from tests.support.airflow_home import migrated_airflow_home
from tests.support.spark_jars import spark_jars

pytest.importorskip("airflow.sdk")

from airflow_provider_dblog.assets.dblog import changelog_uri, commits_uri  # noqa: E402
from airflow_provider_dblog.outputs import make_output  # noqa: E402

from .capture_proc import Capture, wait_for, write_config  # noqa: E402
from .databases import ADAPTERS, env  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
EXAMPLE_DAGS = {
    "dblog_capture": "CaptureOperator",
    "dblog_repair_dump": "DumpOperator",
    "dblog_backfill": "DumpOperator",
    "dblog_land": "SparkSubmitLandOperator",  # a SparkSubmitOperator reporting lineage
    "dblog_verify_repair": "VerifyOperator",
    "dblog_after_dump": "_PythonDecoratedOperator",  # @task
}


# -- parsing and serialisation (no servers) -------------------------------------------------
@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag


@pytest.mark.parametrize("dag_id", sorted(EXAMPLE_DAGS))
def test_example_dag_parses_and_serialises(dagbag, dag_id):
    from airflow.serialization.serialized_objects import DagSerialization

    dag = dagbag.dags[dag_id]
    again = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert [t.task_type for t in again.tasks] == [EXAMPLE_DAGS[dag_id]]
    assert set(again.tags) == {"dblog"}


def test_dump_dags_emit_the_changelog_asset_that_schedules_landing(dagbag):
    from airflow.sdk import Asset

    # the dblog:// asset of the changelog's lake, named by its URI (tests/unit/test_assets.py),
    # and the name-only asset of earlier builds
    lake = os.environ.get("DBLOG_CHANGELOG", "delta:///opt/dblog/lake")
    asset = Asset(name=changelog_uri(lake), uri=changelog_uri(lake))
    for dag_id in ("dblog_capture", "dblog_repair_dump", "dblog_backfill"):
        assert dagbag.dags[dag_id].tasks[0].outlets == [asset, Asset("dblog_changelog")], dag_id
    land = dagbag.dags["dblog_land"]
    # event mode (the default): the changelog's new commits (an asset watcher), dumps, and a cron
    assert type(land.timetable).__name__ == "AssetOrTimeSchedule"
    assets = {a.name: a for a in land.timetable.asset_condition.objects}
    assert set(assets) == {changelog_uri(lake), commits_uri(lake)}
    assert all(a.uri == name for name, a in assets.items())
    (watcher,) = assets[commits_uri(lake)].watchers
    assert type(watcher.trigger).__name__ == "ChangelogCommitTrigger" and watcher.trigger.min_interval == 60
    assert "CronTriggerTimetable" in type(land.timetable.timetable).__name__  # and the cron part


def land_dag(monkeypatch, **environ: str):
    """The dblog_land DAG, its file executed afresh under ``environ`` (read at parse time)."""
    import importlib.util

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"dblog_land_{uuid.uuid4().hex}", DAGS / "dblog_land.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_land_dag_modes(monkeypatch):
    from airflow_provider_dblog.assets.dblog import changelog_asset

    scheduled = land_dag(monkeypatch, DBLOG_LAND_MODE="schedule", DBLOG_CHANGELOG="delta:///data/lake")
    assert scheduled.timetable.asset_condition == changelog_asset("/data/lake")  # no watcher
    continuous = land_dag(monkeypatch, DBLOG_LAND_MODE="continuous", DBLOG_LAND_TRIGGER_SECONDS="3")
    task = continuous.get_task("land_changelog")
    assert task.task_type == "ContinuousLandOperator" and task.trigger_seconds == 3.0
    with pytest.raises(ValueError, match="DBLOG_LAND_MODE"):
        land_dag(monkeypatch, DBLOG_LAND_MODE="hourly")


def test_land_dag_submits_the_installed_landing_job(dagbag):
    task = dagbag.dags["dblog_land"].get_task("land_changelog")
    import airflow_provider_dblog.spark.land_changelog as job

    assert Path(task.application).resolve() == Path(job.__file__).resolve()
    assert task.application_args[0] == "--lake"


def land_task(monkeypatch, **environ: str):
    """dblog_land's task, the DAG file executed afresh under ``environ`` (it reads it at parse)."""
    import importlib.util

    for name in ("DBLOG_SPARK_JARS", "DBLOG_SPARK_JARS_DIR", "DBLOG_SPARK_PACKAGES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"dblog_land_{uuid.uuid4().hex}", DAGS / "dblog_land.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.get_task("land_changelog")


def test_land_dag_uses_the_jars_resolved_at_install_and_no_packages(monkeypatch, tmp_path):
    from airflow_provider_dblog.spark.session import DELTA_PACKAGE

    jar = tmp_path / "delta-spark.jar"
    jar.write_bytes(b"PK")
    task = land_task(monkeypatch, DBLOG_SPARK_JARS=str(jar))
    assert (task.jars, task.packages) == (str(jar), None)  # nothing for spark-submit to download
    # the list scripts/spark-jars writes into its cache directory is found by itself
    _, artifact, version = DELTA_PACKAGE.split(":")
    (tmp_path / f"{artifact}-{version}").mkdir()
    (tmp_path / f"{artifact}-{version}" / "jars.txt").write_text(f"{jar}\n")
    task = land_task(monkeypatch, DBLOG_SPARK_JARS_DIR=str(tmp_path))
    assert (task.jars, task.packages) == (str(jar), None)


def test_land_dag_without_local_jars_names_the_delta_package(monkeypatch, tmp_path):
    from airflow_provider_dblog.spark.session import DELTA_PACKAGE

    task = land_task(monkeypatch, DBLOG_SPARK_JARS_DIR=str(tmp_path / "empty"))
    assert (task.jars, task.packages) == (None, DELTA_PACKAGE)


def test_land_dag_refuses_a_jar_list_whose_jars_are_gone(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="run dblog spark-jars again"):
        land_task(monkeypatch, DBLOG_SPARK_JARS=str(tmp_path / "gone.jar"))


def test_capture_dag_is_one_long_lived_task(dagbag):
    dag = dagbag.dags["dblog_capture"]
    assert dag.max_active_runs == 1
    (task,) = dag.tasks
    assert task.max_sessions is None and task.execution_timeout is None


# -- dag.test() against real sources -------------------------------------------------------
RUNNER = r"""
import json, sys
from sqlalchemy import delete, select
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetActive, AssetDagRunQueue, AssetEvent
from airflow.utils.session import create_session
path, dag_id, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
bag = DagBag(dag_folder=path)
assert not bag.import_errors, bag.import_errors
with create_session() as session:  # what earlier runs queued: a scheduler would have run it by now
    session.execute(delete(AssetDagRunQueue))
dr = bag.dags[dag_id].test(run_conf=conf or None)
print("RUN_STATE=" + str(dr.state))
with create_session() as session:  # the run's asset events, and the DAGs each queued a run of
    q = select(AssetEvent).where(AssetEvent.source_dag_id == dag_id, AssetEvent.source_run_id == dr.run_id)
    events = [
        {
            "name": e.name,
            "uri": e.uri,
            "extra": e.extra,
            "queued": sorted(
                session.scalars(
                    select(AssetDagRunQueue.target_dag_id).where(AssetDagRunQueue.asset_id == e.asset_id)
                )
            ),
        }
        for e in session.scalars(q)
    ]
    print("ASSET_EVENTS=" + json.dumps(sorted(events, key=lambda e: e["uri"])))
    print("ACTIVE_ASSETS=" + json.dumps(sorted([a.name, a.uri] for a in session.scalars(select(AssetActive)))))
"""


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    return migrated_airflow_home(tmp_path_factory.mktemp("airflow-home"), timeout=300)


@pytest.fixture(params=["mysql", "postgres"])
def captured(request, tmp_path):
    """A seeded source, a ``dblog capture`` child on it, and the env the DAG files read."""
    with capture_source(request.param, tmp_path) as found:
        yield found


@contextlib.contextmanager
def capture_source(
    kind: str,
    where: Path,
    conn_id: str = "dblog_test_source",
    state_conn_id: str = "dblog_test_state",
    state: Optional[Path] = None,
) -> Iterator[tuple]:
    """A seeded ``kind`` source, a ``dblog capture`` child on it writing to a lake of its own
    under ``where`` (its state in ``state``, default ``where/state.db``), and the env the DAG
    files read: the connections ``conn_id`` and ``state_conn_id``."""
    env("DBLOG_PG_HOST" if kind == "postgres" else "DBLOG_MYSQL_HOST")
    db = ADAPTERS[kind]()
    db.create()
    db.seed(random.Random(11), 8)
    source_id = f"afd_{uuid.uuid4().hex[:8]}"
    state, lake = state or where / "state.db", f"delta://{where / 'lake'}"
    src = db.source_config(source_id)
    password = os.environ[src["password_env"]]
    cfg = write_config(where / "dblog.toml", src, state, lake)
    cap = Capture(cfg, where / "capture.log")
    cap.start()
    conn = {
        "conn_type": db.kind,
        "host": db.host,
        "port": db.port,
        "login": db.user,
        "password": password,
        "extra": {"source_id": source_id, "tables": db.tables()},
    }
    if db.kind == "postgres":
        conn["schema"] = db.db
    dag_env = {
        "DBLOG_SOURCE_CONN_ID": conn_id,
        "DBLOG_STATE_CONN_ID": state_conn_id,
        f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn),
        f"AIRFLOW_CONN_{state_conn_id.upper()}": json.dumps({"conn_type": "dblog_state", "host": str(state)}),
        "DBLOG_DUMP_POLL_INTERVAL": "0.5",
    }
    try:
        wait_for(
            lambda: "started at" in cap.log_path.read_text(errors="replace"),
            90,
            "the capture to start",
            alive=cap.assert_alive,
            detail=cap.detail,
        )
        yield db, source_id, lake, dag_env, cap
    finally:
        try:
            cap.stop(60)
        finally:
            cap.close()
            db.drop(source_id)


def dag_test(
    airflow_home, dag_file: str, dag_id: str, dag_env: dict, conf: dict | None = None, dags: Path = DAGS
) -> str:
    # dag.test() syncs the DAG folder's bundle to the metadata database: point it at dags/
    environ = {
        **os.environ,
        **dag_env,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
    }
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(dags / dag_file), dag_id, json.dumps(conf or {})],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0 and "RUN_STATE=success" in out.stdout, (out.stdout[-4000:], out.stderr[-4000:])
    return out.stdout + out.stderr


def printed(log: str, key: str):
    """A JSON value the runner printed as ``KEY=...``."""
    (line,) = [ln for ln in log.splitlines() if ln.startswith(f"{key}=")]
    return json.loads(line[len(key) + 1 :])


def dumped(lake: str, source_id: str, table: str) -> list:
    out = make_output(lake)
    out.open()
    try:
        return [e for e in out.scan(source_id, table) if e.op.value == "r"]
    finally:
        out.close()


def current_keys(db, table: str, cols: str) -> set:
    c = db.connect()
    try:
        cur = c.cursor()
        cur.execute(f"SELECT {cols} FROM {db.ns}.{table}")
        return {tuple(r) for r in cur.fetchall()}
    finally:
        c.close()


def lineage_events(path: Path, job: str) -> dict[str, dict]:
    """The OpenLineage events of one task (by eventType) that the provider's file transport wrote."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {e["eventType"]: e for e in events if e["job"]["name"] == job}


@pytest.mark.integration
def test_repair_dump_dag_emits_the_requested_keys(airflow_home, captured, tmp_path):
    db, source_id, lake, dag_env, cap = captured
    table = f"{db.ns}.orders"
    keys = sorted(current_keys(db, "orders", "region, order_no"))[:3]
    conf = {
        "source": dag_env["DBLOG_SOURCE_CONN_ID"],
        "table": table,
        "keys": "\n".join(json.dumps(list(k)) for k in keys) + '\n["zz", 999999]',
        "chunk_size": 2,
    }
    ol_file = tmp_path / "openlineage.jsonl"  # Airflow's OpenLineage provider, its file transport
    transport = {"type": "file", "log_file_path": str(ol_file), "append": True}
    lineage_env = {"DBLOG_CHANGELOG": lake, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}
    log = dag_test(airflow_home, "dblog_repair_dump.py", "dblog_repair_dump", {**dag_env, **lineage_env}, conf)
    cap.assert_alive()
    rows = dumped(lake, source_id, table)
    assert sorted(e.key for e in rows) == sorted(keys), log[-3000:]  # the absent key emits nothing
    assert len({e.dump_id for e in rows}) == 1
    assert "3 rows" in log or "rows': 3" in log or '"rows": 3' in log
    # an asset event for the run on the changelog's asset (it schedules landing) and on the
    # name-only one of earlier builds, each saying which dump it stands for. The module's
    # Airflow database saw the other database's run first, with another lake: another asset.
    events = printed(log, "ASSET_EVENTS")
    assert [(e["name"], e["uri"]) for e in events] == [
        (changelog_uri(lake), changelog_uri(lake)),  # dblog://changelog/<lake>
        ("dblog_changelog", "dblog_changelog"),
    ], log[-3000:]
    for asset_event in events:
        summary = asset_event["extra"]["dblog_dump"]
        assert summary["dump_id"] == rows[0].dump_id and summary["rows"] == 3 and summary["tables"] == {table: 3}

    # lineage: the source table (named by OpenLineage's spec, with its schema) feeds the changelog
    events = lineage_events(ol_file, "dblog_repair_dump.dump")
    assert {"START", "COMPLETE"} <= set(events), (sorted(events), log[-3000:])
    namespace = f"{'postgres' if db.kind == 'postgres' else 'mysql'}://{db.host}:{db.port}"
    name = f"{db.db}.{table}" if db.kind == "postgres" else table
    changelog = {"namespace": "file", "name": f"{lake[len('delta://') :]}/changelogs/{source_id}"}
    (start_in,) = events["START"]["inputs"]
    assert (start_in["namespace"], start_in["name"]) == (namespace, name)
    columns = [f["name"] for f in start_in["facets"]["schema"]["fields"]]
    assert {"region", "order_no"} <= set(columns)
    key_fields = [f["name"] for f in start_in["facets"]["schema"]["fields"] if f.get("description") == "primary key"]
    assert key_fields == ["region", "order_no"]
    assert [{k: o[k] for k in changelog} for o in events["START"]["outputs"]] == [changelog]
    (done_in,) = events["COMPLETE"]["inputs"]
    assert (done_in["namespace"], done_in["name"]) == (namespace, name)
    (done_out,) = events["COMPLETE"]["outputs"]
    assert {k: done_out[k] for k in changelog} == changelog
    assert done_out["outputFacets"]["outputStatistics"]["rowCount"] == 3  # the rows the dump emitted
    # no secret: the source is named by host and port (the test password is a common word, so
    # look for it where a connection would carry it)
    password, text = json.loads(dag_env["AIRFLOW_CONN_DBLOG_TEST_SOURCE"])["password"], ol_file.read_text()
    assert f":{password}@" not in text and '"password"' not in text.lower()


@pytest.mark.integration
def test_backfill_dag_dumps_every_row_of_every_table(airflow_home, captured):
    db, source_id, lake, dag_env, cap = captured
    dag_test(airflow_home, "dblog_backfill.py", "dblog_backfill", {**dag_env, "DBLOG_BACKFILL_CHUNK_SIZE": "3"})
    cap.assert_alive()
    for table, cols in (("accounts", "id"), ("orders", "region, order_no"), ("notes", "uid")):
        got = {e.key for e in dumped(lake, source_id, f"{db.ns}.{table}")}
        want = {tuple(str(v) if table == "notes" else v for v in k) for k in current_keys(db, table, cols)}
        assert got == want, table


@pytest.mark.integration
@pytest.mark.soak  # make test: the real-Airflow e2e runs dblog_land through spark-submit already
def test_land_dag_lands_through_spark_submit_with_the_install_time_jars(airflow_home, captured):
    """dblog_land's SparkSubmitOperator with a real spark-submit (this venv's, local master):
    the jars resolved at install, nothing downloaded, every source row in its mirror."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    db, source_id, lake, dag_env, cap = captured
    dag_test(airflow_home, "dblog_backfill.py", "dblog_backfill", dag_env)
    venv_bin = str(Path(sys.executable).parent)
    log = dag_test(
        airflow_home,
        "dblog_land.py",
        "dblog_land",
        {
            **dag_env,
            "DBLOG_CHANGELOG": lake,
            "DBLOG_LAND_SOURCE": source_id,
            "DBLOG_SPARK_JARS": spark_jars(),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            # spark-submit and the driver's Python: the venv's, first on PATH (docs/airflow.md)
            "PATH": venv_bin + os.pathsep + os.environ["PATH"],
        },
    )
    assert "--jars" in log and "--packages" not in log, log[-4000:]
    assert ":: resolving dependencies ::" not in log  # Ivy, i.e. a download
    mirrors = Path(lake[len("delta://") :]) / "mirrors" / source_id
    for table, cols in (("accounts", "id"), ("orders", "region, order_no"), ("notes", "uid")):
        # Read as docs/landing.md shows: the deltalake package's QueryBuilder applies the
        # mirror's deletion vectors (its pyarrow dataset refuses the feature).
        mirror = DeltaTable(str(mirrors / f"{db.ns}.{table}"))
        live = QueryBuilder().register("m", mirror).execute("SELECT _key FROM m WHERE NOT _deleted").read_all()
        got = {tuple(json.loads(k)) for k in pa.table(live).column("_key").to_pylist()}
        want = {tuple(str(v) if table == "notes" else v for v in k) for k in current_keys(db, table, cols)}
        assert got == want, table


# -- asset identity: two changelogs in one Airflow, and an upgrade from name-only assets ------
# Airflow keeps one active asset per name and one per URI; an outlet whose asset a clash left
# inactive emits nothing (only a warning in the task's log). Each test below has an Airflow
# database of its own, the DAGs unpaused as they are created, so that an event queues a run
# of every DAG scheduled on its asset (AssetDagRunQueue, which the runner reports).
UNPAUSED = {"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"}

TWO_CHANGELOGS = """
import os
from airflow_provider_dblog.fleet import FleetSource, fleet_dags

# one fleet, each source writing to a changelog (a lake) of its own
globals().update(
    fleet_dags(
        [
            FleetSource("dblog_src_a", name="a", capture=False, changelog=os.environ["LAKE_A"]),
            FleetSource("dblog_src_b", name="b", capture=False, changelog=os.environ["LAKE_B"]),
        ],
        state_conn_id="dblog_fleet_state",
        changelog=os.environ["LAKE_A"],
        backfill_poll_interval=0.5,
    )
)
"""

DOWNSTREAM = """
import datetime as dt
import os
from airflow.sdk import DAG, Asset
from airflow.providers.standard.operators.empty import EmptyOperator

# a user's DAGs on each changelog, written by hand (the URI, as docs/airflow.md spells it), and
# one on the name-only asset that every changelog's DAGs emitted before the dblog:// URIs
for dag_id, asset in (
    ("on_a", Asset(uri=os.environ["URI_A"])),
    ("on_b", Asset(uri=os.environ["URI_B"])),
    ("on_any", Asset("dblog_changelog")),
):
    with DAG(dag_id, schedule=[asset], start_date=dt.datetime(2024, 1, 1), catchup=False) as dag:
        EmptyOperator(task_id="after")
    globals()[dag_id] = dag
"""


def fresh_airflow_home(where: Path) -> Path:
    home = where / "airflow-home"
    home.mkdir()
    environ = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=environ, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return home


@pytest.mark.integration
def test_two_changelogs_in_one_airflow_each_get_their_asset_events(tmp_path):
    """Two sources of one fleet writing to two lakes: each backfill's event reaches the DAG
    scheduled on its own changelog (and the one on the name-only asset), in one Airflow
    database where both are declared. With one asset name for both lakes (the reverted
    cad1f17), one of the two was inactive and its events were dropped."""
    home = fresh_airflow_home(tmp_path)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sources.py").write_text(TWO_CHANGELOGS)
    (dags / "downstream.py").write_text(DOWNSTREAM)
    state = tmp_path / "state.db"  # one state store for the fleet, as FleetSource takes it
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        capture_source("mysql", tmp_path / "a", "dblog_src_a", "dblog_fleet_state", state) as a,
        capture_source("postgres", tmp_path / "b", "dblog_src_b", "dblog_fleet_state", state) as b,
    ):
        lakes = {"a": a[2], "b": b[2]}
        dag_env = {
            **a[3],
            **b[3],
            **UNPAUSED,
            "LAKE_A": lakes["a"],
            "LAKE_B": lakes["b"],
            "URI_A": changelog_uri(lakes["a"]),
            "URI_B": changelog_uri(lakes["b"]),
        }
        for name, (db, source_id, _, _, cap) in (("a", a), ("b", b)):
            log = dag_test(home, "sources.py", f"dblog_backfill__{name}", dag_env, dags=dags)
            cap.assert_alive()
            assert {e.key for e in dumped(lakes[name], source_id, f"{db.ns}.accounts")}, name
            uri = changelog_uri(lakes[name])
            events = printed(log, "ASSET_EVENTS")
            assert [(e["name"], e["uri"], e["queued"]) for e in events] == [
                (uri, uri, [f"on_{name}"]),  # its own changelog's DAG, not the other's
                ("dblog_changelog", "dblog_changelog", ["on_any"]),
            ], log[-3000:]
            assert all(e["extra"]["dblog_dump"]["status"] == "done" for e in events), events
        # both changelogs' assets active side by side, each named by its URI
        active = printed(log, "ACTIVE_ASSETS")
        assert [changelog_uri(lakes["a"])] * 2 in active and [changelog_uri(lakes["b"])] * 2 in active


# The repair DAG as the build before the dblog:// URIs declared it (dags/dblog_repair_dump.py).
OLD_REPAIR_DUMP = """
import os
from airflow.sdk import Asset
from airflow_provider_dblog.repair_form import repair_dag

dag = repair_dag(
    [os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source")],
    os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default"),
    Asset(os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog")),
    poll_interval=float(os.environ.get("DBLOG_DUMP_POLL_INTERVAL", "2")),
    changelog=os.environ.get("DBLOG_CHANGELOG"),
)
"""

# A user's DAG scheduled on the changelog's asset as that build named it; not edited on upgrade.
USERS_DOWNSTREAM = """
import datetime as dt
from airflow.sdk import DAG, Asset
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("my_downstream", schedule=[Asset("dblog_changelog")], start_date=dt.datetime(2024, 1, 1)) as dag:
    EmptyOperator(task_id="after")
"""


@pytest.mark.integration
@pytest.mark.parametrize("captured", ["postgres"], indirect=True)
def test_an_upgrade_keeps_the_events_of_dags_scheduled_on_the_name_only_asset(captured, tmp_path):
    """An Airflow database where the previous build's repair DAG registered
    ``Asset("dblog_changelog")`` and a user's DAG is scheduled on it; then this build's DAG
    files replace the provider's (the user's DAG unchanged) and a repair runs: the user's DAG
    still gets the event, and dblog_land and dblog_after_dump get theirs on the changelog's
    dblog:// asset. With the reverted cad1f17 the new asset had the old one's name and another
    URI: inactive, and the run emitted nothing at all."""
    db, source_id, lake, dag_env, cap = captured
    home = fresh_airflow_home(tmp_path)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "my_downstream.py").write_text(USERS_DOWNSTREAM)
    (dags / "dblog_repair_dump.py").write_text(OLD_REPAIR_DUMP)
    table = f"{db.ns}.accounts"
    keys = sorted(current_keys(db, "accounts", "id"))
    environ = {**dag_env, **UNPAUSED, "DBLOG_CHANGELOG": lake}

    def repair(key) -> list:
        conf = {"source": dag_env["DBLOG_SOURCE_CONN_ID"], "table": table, "keys": json.dumps(key[0])}
        log = dag_test(home, "dblog_repair_dump.py", "dblog_repair_dump", environ, conf, dags=dags)
        cap.assert_alive()
        return printed(log, "ASSET_EVENTS")

    # before: the name-only asset, and the user's DAG queued by it
    (before,) = repair(keys[0])
    assert [before["name"], before["uri"], before["queued"]] == ["dblog_changelog"] * 2 + [["my_downstream"]]

    # the upgrade: this build's example DAG files (dblog_repair_dump, dblog_land, ...) in place
    for example in DAGS.glob("dblog_*.py"):
        shutil.copy(example, dags / example.name)
    events = repair(keys[1])
    uri = changelog_uri(lake)
    assert [(e["name"], e["uri"], e["queued"]) for e in events] == [
        (uri, uri, ["dblog_after_dump", "dblog_land"]),
        ("dblog_changelog", "dblog_changelog", ["my_downstream"]),
    ], events
    dump_ids = {e["extra"]["dblog_dump"]["dump_id"] for e in events}
    assert len(dump_ids) == 1 and dump_ids <= {e.dump_id for e in dumped(lake, source_id, table)}
