"""The landing job on a Spark standalone cluster (``scripts/services up spark``): a master and
two workers, each a JVM of its own, the job submitted with pyspark's spark-submit as
dblog_land's SparkSubmitOperator does, its executors in the workers' processes.

* A changelog on local disk (the workers share the host) lands into the same mirrors on the
  cluster as on ``local[2]``.
* A changelog on S3 (``scripts/services up s3``, moto) lands into mirrors on S3, on the
  cluster: the S3A connector's jars (``scripts/spark-jars --s3a``) on the driver's and the
  executors' class path, the endpoint from ``AWS_ENDPOINT_URL``, the executors' credentials from
  their worker's environment (the services start the workers with the test store's keys).

Both check, from the workers' work directories, that executors in both worker JVMs ran the
job's tasks: a job that ran in its driver alone (``local``) leaves none and fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Optional
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.integration

pyspark = pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema  # noqa: E402
from airflow_provider_dblog.core.verify import replay  # noqa: E402
from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput, changelog_batch  # noqa: E402
from airflow_provider_dblog.outputs.lake_layout import changelog_path  # noqa: E402
from tests.support.s3_env import aws_env  # noqa: E402
from tests.support.spark_jars import spark_jars  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
JOB = REPO / "airflow_provider_dblog" / "spark" / "land_changelog.py"
APP_NAME = "dblog-land-changelog"  # get_session's name for the landing


# ---------------------------------------------------------------- the cluster
class Cluster:
    def __init__(self, master: str, ui: str, work: Path):
        self.master, self.ui, self.work = master, ui, work

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as r:
            return json.load(r)

    def app_ids(self, name: str = APP_NAME) -> set[str]:
        s = self.state()
        return {a["id"] for a in s.get("activeapps", []) + s.get("completedapps", []) if a["name"] == name}

    def tasks_by_worker(self, app_id: str) -> dict[str, int]:
        """Tasks each worker's executors of ``app_id`` ran (their stderr in the work dirs)."""
        out = {}
        for worker in sorted(p for p in self.work.iterdir() if p.is_dir()):
            logs = list((worker / app_id).glob("*/stderr"))
            out[worker.name] = sum(f.read_text(errors="replace").count("Running task ") for f in logs)
        return out


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    master = os.environ.get("DBLOG_SPARK_CLUSTER_MASTER", "spark://127.0.0.1:57077")
    ui = os.environ.get("DBLOG_SPARK_CLUSTER_UI", "http://127.0.0.1:57078")
    services = Path(os.environ.get("DBLOG_SERVICES_DIR") or REPO / ".services")
    c = Cluster(master, ui, services / "spark" / "work")
    try:
        state = c.state()
    except OSError as exc:
        pytest.skip(f"no Spark master answers at {ui} ({exc}): `scripts/services up spark`, then eval its env")
    if state.get("url") != master or state.get("aliveworkers", 0) < 2:
        pytest.skip(f"the Spark master at {ui} is not {master} with 2 live workers: `scripts/services up spark`")
    if not c.work.is_dir():
        pytest.skip(f"{c.work} missing: DBLOG_SERVICES_DIR must be the services' directory (its env)")
    return c


def submit(master: str, lake: str, mirrors: str, **kw) -> dict:
    """spark-submit the landing job (client mode, as dblog_land does); its stats line."""
    proc = start_submit(master, lake, mirrors, **kw)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"spark-submit --master {master} ... failed:\n{stdout[-2000:]}\n{stderr[-6000:]}"
    return json.loads([x for x in stdout.splitlines() if x.startswith("{")][-1])


def start_submit(
    master: str,
    lake: str,
    mirrors: str,
    classpath: str | None = None,
    env: dict | None = None,
    args: tuple[str, ...] = (),
    log_to: Path | None = None,
) -> subprocess.Popen:
    """The landing job submitted, running: the driver is this child process. ``log_to``: its
    output into that file rather than a pipe (a pipe nobody reads would stall a long run)."""
    cmd = [str(SPARK_SUBMIT), "--master", master, "--driver-memory", "1g", "--jars", spark_jars()]
    cmd += ["--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false"]
    if master.startswith("spark://"):
        cmd += ["--executor-memory", "1g", "--executor-cores", "1", "--total-executor-cores", "2"]
    if classpath:  # the S3A connector: on the class path of the driver and of every executor
        cmd += ["--driver-class-path", classpath, "--conf", f"spark.executor.extraClassPath={classpath}"]
    cmd += [str(JOB), "--lake", lake, "--mirrors", mirrors, "--no-register", *args]
    environ = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    environ.pop("PYSPARK_GATEWAY_PORT", None)
    if log_to is not None:
        with open(log_to, "w") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, start_new_session=True
    )


def run_on_cluster(cluster: Cluster, lake: str, mirrors: str, **kw) -> tuple[dict, dict[str, int]]:
    """The job on the cluster; its stats and the tasks each worker's executors ran."""
    before = cluster.app_ids()
    stats = submit(cluster.master, lake, mirrors, **kw)
    new = cluster.app_ids() - before
    assert len(new) == 1, f"the job did not run as one application of the master at {cluster.ui}: {new}"
    app = new.pop()
    for _ in range(20):  # executors' logs are flushed as they exit
        tasks = cluster.tasks_by_worker(app)
        if len(tasks) >= 2 and all(tasks.values()):
            break
        time.sleep(0.5)
    return stats, tasks


# ---------------------------------------------------------------- a changelog
class Changelog:
    """A changelog under ``root`` (a path or an s3:// URL), one commit per ``append``."""

    def __init__(self, root: str, source_id: str):
        self.root, self.source_id = root, source_id
        self.out = DeltaChangelogOutput(root)
        self.out.open()
        self.events: list[ChangeEvent] = []
        self.n = 0

    def schema(self, table: str) -> TableSchema:
        s = TableSchema(table, (Column("id", "integer"), Column("v", "text"), Column("n", "bigint")), ("id",))
        self.out.register_schema(s)
        return s

    def ev(self, schema: TableSchema, op: str, key: int, v: str = "") -> ChangeEvent:
        self.n += 1
        row = None if op == "d" else {"id": key, "v": v, "n": key * 1000 + self.n}
        return ChangeEvent(
            self.source_id,
            schema.table,
            Op(op),
            (key,),
            None,
            row,
            Position(f"{self.n:016X}{0:010d}", 0),
            commit_ts=1_700_000_000_000_000 + self.n,
            origin=Origin("log"),
            dump_id=None,
            schema_id=schema.schema_id(),
        )

    def append(self, *events: ChangeEvent) -> None:
        path = changelog_path(self.root, self.source_id)  # the source's table (outputs/lake_layout.py)
        deltalake.write_deltalake(path, changelog_batch(list(events), None), mode="append")
        self.events += events

    def expected(self, table: str) -> dict[int, tuple]:
        return {k[0]: (r["v"], r["n"]) for k, r in replay(e for e in self.events if e.table == table).items()}


def write_changelog(root: str) -> tuple[Changelog, list[TableSchema]]:
    """Three tables over several commits: inserts, updates (in and across commits), deletes,
    a key deleted and inserted again."""
    log = Changelog(root, "cl_" + uuid.uuid4().hex[:6])
    schemas = [log.schema(f"s.t{i}") for i in range(3)]
    for s in schemas:
        log.append(*[log.ev(s, "c", k, f"{s.table}-{k}") for k in range(200)])
    for s in schemas:
        log.append(*[log.ev(s, "u", k, "u1") for k in range(0, 200, 3)], *[log.ev(s, "d", k) for k in range(1, 200, 7)])
        log.append(*[log.ev(s, "u", k, "u2") for k in range(0, 200, 9)], log.ev(s, "c", 1, "again"))
    return log, schemas


def mirror_rows(mirrors: str, source_id: str, table: str, storage_options: dict | None = None) -> list[tuple]:
    """A mirror's rows (tombstones included; not when they were landed), sorted, read without Spark."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(f"{mirrors}/{source_id}/{table}", storage_options=storage_options)
    rows = pa.table(QueryBuilder().register("m", dt).execute("SELECT * FROM m").read_all()).to_pylist()
    return sorted(tuple(sorted((k, v) for k, v in r.items() if k != "_landed_at")) for r in rows)


def live(rows: list[tuple]) -> dict[int, tuple]:
    return {d["id"]: (d["v"], d["n"]) for d in map(dict, rows) if not d["_deleted"]}


# ---------------------------------------------------------------- tests
@pytest.mark.soak  # make soak: three minutes
def test_landing_on_the_cluster_equals_local(cluster, tmp_path):
    lake = tmp_path / "lake"
    log, schemas = write_changelog(str(lake))

    t0 = time.monotonic()
    stats, tasks = run_on_cluster(cluster, str(lake), str(tmp_path / "cluster-mirrors"))
    print(f"landed on the cluster in {time.monotonic() - t0:.1f} s: {stats}")
    assert stats["events"] == len(log.events)
    assert len(tasks) >= 2 and all(tasks.values()), f"executors in both workers should have run tasks: {tasks}"

    t0 = time.monotonic()
    local = submit("local[2]", str(lake), str(tmp_path / "local-mirrors"))
    print(f"landed on local[2] in {time.monotonic() - t0:.1f} s: {local}")
    assert local["events"] == stats["events"]
    for s in schemas:
        on_cluster = mirror_rows(str(tmp_path / "cluster-mirrors"), log.source_id, s.table)
        assert on_cluster == mirror_rows(str(tmp_path / "local-mirrors"), log.source_id, s.table)
        assert live(on_cluster) == log.expected(s.table)


def s3a_classpath() -> str:
    out = subprocess.run(
        [str(REPO / "scripts" / "spark-jars"), "--s3a"],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PY": sys.executable},
    )
    if out.returncode != 0 or not out.stdout.strip():
        pytest.fail(f"the S3A connector's jars did not resolve (scripts/spark-jars --s3a):\n{out.stderr[-2000:]}")
    return out.stdout.strip()


@pytest.mark.soak  # make soak: three minutes (make test stayed under 40 minutes without it)
def test_landing_from_s3_into_s3_on_the_cluster(cluster, monkeypatch):
    env = aws_env()
    classpath = s3a_classpath()
    for k, v in env.items():  # delta-rs (the changelog's writer here) reads them too
        monkeypatch.setenv(k, v)
    lake = f"s3://{os.environ['DBLOG_S3_BUCKET']}/{uuid.uuid4().hex[:12]}/lake"
    log, schemas = write_changelog(lake)

    stats, tasks = run_on_cluster(cluster, lake, f"{lake}/mirrors", classpath=classpath, env=env)
    assert stats["events"] == len(log.events)
    assert len(tasks) >= 2 and all(tasks.values()), f"executors in both workers should have run tasks: {tasks}"
    for s in schemas:
        assert live(mirror_rows(f"{lake}/mirrors", log.source_id, s.table)) == log.expected(s.table)

    again, _ = run_on_cluster(cluster, lake, f"{lake}/mirrors", classpath=classpath, env=env)
    assert again["events"] == 0, "the checkpoint on S3 should hold what was landed"


@pytest.mark.soak  # make soak: about three minutes
def test_maintenance_and_a_consistent_cut_on_the_cluster_on_s3(cluster, monkeypatch):
    """Landed from S3 into S3 on the cluster, then the maintenance job (tombstone vacuum,
    OPTIMIZE / ZORDER of the mirrors, VACUUM; the changelog's compaction by delta-rs) and a
    consistent cut, each as an application of the cluster with executors in both workers:
    the mirrors still hold the replay, without tombstones, and the cut names a version of
    every mirror."""
    env = aws_env()
    classpath = s3a_classpath()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    lake = f"s3://{os.environ['DBLOG_S3_BUCKET']}/{uuid.uuid4().hex[:12]}/lake"
    mirrors = f"{lake}/mirrors"
    log, schemas = write_changelog(lake)
    run_on_cluster(cluster, lake, mirrors, classpath=classpath, env=env)

    def on_cluster(module: str, app: str, *args: str) -> tuple[dict, dict[str, int]]:
        before = cluster.app_ids(app)
        proc = subprocess.run(
            [sys.executable, "-m", f"airflow_provider_dblog.spark.{module}", "--lake", lake, *args],
            capture_output=True,
            text=True,
            timeout=600,
            env={
                **os.environ,
                "DBLOG_SPARK_JARS": spark_jars(),
                "DBLOG_SPARK_S3A_JARS": classpath,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYTHONPATH": str(REPO),
            },
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        [app_id] = cluster.app_ids(app) - before
        tasks: dict[str, int] = {}
        for _ in range(20):  # executors' logs are flushed as they exit
            tasks = cluster.tasks_by_worker(app_id)
            if len(tasks) >= 2 and all(tasks.values()):
                break
            time.sleep(0.5)
        return json.loads(proc.stdout.strip().splitlines()[-1]), tasks

    report, tasks = on_cluster(
        "maintenance",
        "dblog-maintenance",
        "--master",
        cluster.master,
        "--tombstone-horizon-hours",
        "0",
        "--vacuum-retain-hours",
        "0",
    )
    assert len(tasks) >= 2 and all(tasks.values()), f"the maintenance's tasks should run in both workers: {tasks}"
    for s in schemas:
        path = f"{mirrors}/{log.source_id}/{s.table}"
        assert report["tombstones_removed"][path] > 0 and path in report["compacted"] and path in report["vacuumed"]
        rows = mirror_rows(mirrors, log.source_id, s.table)
        assert live(rows) == log.expected(s.table) and len(rows) == len(log.expected(s.table))
    assert changelog_path(lake, log.source_id) in report["compacted"]
    changelog = deltalake.DeltaTable(changelog_path(lake, log.source_id))
    assert not [h for h in changelog.history() if "Spark" in str(h.get("engineInfo", ""))]

    # The next event in the changelog (not landed yet) shows the landed end is a transaction's end.
    landed = max(e.position for e in log.events).encode()
    log.append(log.ev(schemas[0], "u", 0, "later"))
    cut, _ = on_cluster("consistent_cut", "dblog-consistent-cut", "--source", log.source_id, "--master", cluster.master)
    assert cut["position"] == landed
    assert sorted(cut["versions"]) == sorted(s.table for s in schemas) and None not in cut["versions"].values()


# ---------------------------------------------------------------- faults on the cluster
def mirror_commits(mirrors: str, source_id: str, table: str) -> list[tuple]:
    """(landing, batch, operation) of each landing commit of a mirror, oldest first."""
    from airflow_provider_dblog.spark.mirror_commits import BATCH, LANDING, parse_user_metadata

    out = []
    for c in sorted(deltalake.DeltaTable(f"{mirrors}/{source_id}/{table}").history(), key=lambda c: c["version"]):
        meta = parse_user_metadata(c.get("userMetadata"))
        if meta is not None:
            out.append((meta.get(LANDING), meta.get(BATCH), c.get("operation")))
    return out


def merge_in_flight(mirrors: str, source_id: str, tables: list[str]) -> Optional[str]:
    """A mirror that a MERGE is writing now: past its first landing (the create and the
    append), its directory holds a data file that no commit names yet. Delta writes a
    command's files first and commits them last, so this is the window between the two."""
    for table in tables:
        path = Path(mirrors) / source_id / table
        commits = sorted((path / "_delta_log").glob("*.json")) if (path / "_delta_log").is_dir() else []
        if len(commits) < 2:
            continue
        named = set()
        for commit in commits:
            for line in commit.read_text().splitlines():
                action = json.loads(line)
                for kind in ("add", "cdc"):
                    if kind in action:
                        named.add(unquote(action[kind]["path"]))
        written = {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}
        if written - named:
            return table
    return None


@pytest.mark.soak  # make soak: two landings on the cluster each (about 4 minutes)
@pytest.mark.parametrize("victim", ["worker", "driver"])
def test_a_kill_on_the_cluster_mid_merge_then_the_next_run_converges_without_a_duplicate_commit(
    cluster, tmp_path, victim
):
    """SIGKILL worker 1 (its executor dies with it) or the driver (spark-submit) while a
    MERGE writes a mirror on the cluster (its files written, its commit not yet: one changelog
    commit per micro-batch, so every batch after a table's first merges); the worker is
    started again and the job resubmitted: the mirrors equal the replay, and no micro-batch
    committed twice to a mirror (the transaction id of spark/mirror_commits.py)."""
    lake, mirrors = str(tmp_path / "lake"), str(tmp_path / "mirrors")
    log, schemas = write_changelog(lake)
    tables = [s.table for s in schemas]
    output = tmp_path / "first-run.log"
    proc = start_submit(cluster.master, lake, mirrors, args=("--max-files-per-batch", "1"), log_to=output)
    try:
        end, merging = time.monotonic() + 600, None
        while merging is None:
            assert proc.poll() is None, f"the landing ended before a MERGE was caught: {output.read_text()[-3000:]}"
            assert time.monotonic() < end, "no MERGE caught between its files and its commit in 600 s"
            merging = merge_in_flight(mirrors, log.source_id, tables)
            time.sleep(0.02)
        print(f"\n[cluster] {victim} SIGKILLed while a MERGE wrote the mirror of {merging}")
        if victim == "worker":
            subprocess.run([str(REPO / "scripts" / "services"), "crash", "spark-worker"], check=True, timeout=60)
        else:
            os.killpg(proc.pid, 9)
        proc.wait(timeout=600)  # a lost executor's tasks are retried elsewhere: it may still succeed
        if victim == "driver":  # the files no commit names are still there: the kill cut the MERGE short
            print(f"[cluster] after the kill, uncommitted files in {merge_in_flight(mirrors, log.source_id, tables)}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    first_ok = proc.returncode == 0
    subprocess.run([str(REPO / "scripts" / "services"), "up", "spark"], check=True, timeout=300)
    stats = submit(cluster.master, lake, mirrors)
    if first_ok:
        assert stats["events"] == 0, "the first run landed everything: the second has nothing to do"
    for s in schemas:
        assert live(mirror_rows(mirrors, log.source_id, s.table)) == log.expected(s.table)
        commits = mirror_commits(mirrors, log.source_id, s.table)
        assert commits and len(commits) == len(set(commits)), f"a micro-batch committed twice: {commits}"


@pytest.mark.soak  # make soak: about two minutes
def test_landing_from_kafka_on_the_cluster(cluster, tmp_path):
    """The capture's Kafka output (topics per table, the schema topic) landed by the job on the
    cluster: Spark's Kafka source in the executors of both workers, mirrors equal to the
    replay, and a second run lands nothing (the offsets in its checkpoint)."""
    bootstrap = os.environ.get("DBLOG_KAFKA_BOOTSTRAP")
    if not bootstrap:
        pytest.skip("no Kafka broker: `scripts/services up kafka`, then eval its env")
    from airflow_provider_dblog.outputs.kafka import KafkaOutput

    log = Changelog(str(tmp_path / "unused"), "kc_" + uuid.uuid4().hex[:6])  # its events, not its table
    schemas = [log.schema(f"s.t{i}") for i in range(3)]
    batches = [[log.ev(s, "c", k, f"{s.table}-{k}") for s in schemas for k in range(150)]]
    for s in schemas:
        batches.append(
            [*[log.ev(s, "u", k, "u1") for k in range(0, 150, 3)], *[log.ev(s, "d", k) for k in range(1, 150, 7)]]
        )
        batches.append([*[log.ev(s, "u", k, "u2") for k in range(0, 150, 9)], log.ev(s, "c", 1, "again")])
    out = KafkaOutput(bootstrap)  # topics <source id>.<table>, the output's default prefix
    out.open()
    try:
        out.register_schemas(schemas)
        for batch in batches:
            out.write(batch, epoch=1)
            log.events += batch
    finally:
        out.close()

    args = ("--kafka", f"kafka://{bootstrap}", "--source", log.source_id)
    mirrors = str(tmp_path / "mirrors")
    stats, tasks = run_on_cluster(cluster, str(tmp_path / "lake"), mirrors, args=args)
    assert stats["events"] == len(log.events)
    assert len(tasks) >= 2 and all(tasks.values()), f"executors in both workers should have run tasks: {tasks}"
    for s in schemas:
        assert live(mirror_rows(mirrors, log.source_id, s.table)) == log.expected(s.table)
    again, _ = run_on_cluster(cluster, str(tmp_path / "lake"), mirrors, args=args)
    assert again["events"] == 0, "the checkpoint should hold the Kafka offsets landed"
