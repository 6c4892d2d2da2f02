"""The demo's last stage: the same pipeline, run by a real Airflow.

Starts api-server, scheduler, dag-processor and triggerer exactly as the end-to-end test does
(scripts/airflow_stack.py; settings from docker/airflow.env), on the repo's dags/ and MariaDB:
unpauses dblog_capture (continuous capture, a deferred task) and dblog_repair_dump, dumps
both sample tables and then a few keys through the REST API while a write load runs, shows
the repaired rows in the changelog, then triggers dblog_land: its SparkSubmitOperator runs the
landing job with this venv's real spark-submit (local[2]) and the Delta jars scripts/spark-jars
resolved once (``--jars``; nothing is downloaded). It ends with `dblog verify` of the changelog
and a typed mirror-vs-source check (0 mismatches each). Everything it started is stopped at the
end. With ``DEMO_DEPLOY=cluster`` (scripts/demo) the lake is on the S3 test store and
dblog_land's spark-submit goes to the standalone cluster (``spark_default``'s host), the S3A
connector on the driver's and executors' class path, as docs/deploy.md deploys it. Run through `make demo` (servers up, DBLOG_* variables set), or
as ``python -m scripts.demo_airflow`` from the repository root.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from scripts import airflow_stack as stack
from scripts.demo import lake_of, lakehouse, output_url
from scripts.polling import wait_for

WORK = stack.REPO / "demo-output" / "airflow"
NS = "demo_airflow"  # the MariaDB database holding the sample tables
SOURCE_ID = "demo_af"
ROWS = int(os.environ.get("DEMO_AIRFLOW_ROWS", "2000"))
REPAIR_KEYS = [7, 42, 99, 500, 1234]
CLUSTER = os.environ.get("DEMO_DEPLOY") == "cluster"


LAKE = lake_of(WORK, "airflow")  # WORK/lake, or a fresh prefix of the S3 test store


def say(msg: str) -> None:
    print(f"[airflow] {msg}", flush=True)


def connect():
    import pymysql

    e = os.environ
    return pymysql.connect(
        host=e["DBLOG_MYSQL_HOST"],
        port=int(e["DBLOG_MYSQL_PORT"]),
        user=e["DBLOG_MYSQL_USER"],
        password=e["DBLOG_MYSQL_PASSWORD"],
        autocommit=True,
    )


def create_tables() -> None:
    c = connect()
    cur = c.cursor()
    cur.execute(f"DROP DATABASE IF EXISTS {NS}")
    cur.execute(f"CREATE DATABASE {NS}")
    cur.execute(f"CREATE TABLE {NS}.customers (id bigint PRIMARY KEY, name varchar(100), email varchar(100))")
    cur.execute(
        f"CREATE TABLE {NS}.orders (id bigint PRIMARY KEY, customer_id bigint, amount decimal(10,2), "
        "status varchar(20))"
    )
    cur.executemany(
        f"INSERT INTO {NS}.customers VALUES (%s,%s,%s)",
        [(i, f"customer {i}", f"c{i}@example.com") for i in range(1, ROWS + 1)],
    )
    cur.executemany(
        f"INSERT INTO {NS}.orders VALUES (%s,%s,%s,%s)",
        [(i, 1 + i % ROWS, f"{(i % 10000) / 100:.2f}", "new") for i in range(1, ROWS + 1)],
    )
    c.close()


def live_load(stop: threading.Event, counter: list) -> None:
    """Inserts, updates and deletes while the dumps run: they interleave with the log."""
    rng, c = random.Random(2), connect()
    cur, next_id = c.cursor(), ROWS + 1
    while not stop.is_set():
        r = rng.random()
        if r < 0.4:
            cur.execute(f"INSERT INTO {NS}.orders VALUES (%s,%s,%s,%s)", (next_id, rng.randint(1, ROWS), "9.99", "new"))
            next_id += 1
        elif r < 0.9:
            cur.execute(
                f"UPDATE {NS}.orders SET status=%s WHERE id=%s", (rng.choice(["paid", "sent"]), rng.randint(1, next_id))
            )
        else:
            cur.execute(f"DELETE FROM {NS}.orders WHERE id=%s", (rng.randint(REPAIR_KEYS[-1] + 1, next_id),))
        counter[0] += 1
        time.sleep(0.01)
    c.close()


def write_config() -> Path:
    """A dblog config for the same source, state and changelog: for `dblog verify`."""
    e = os.environ
    src = {
        "type": "mysql",
        "id": SOURCE_ID,
        "host": e["DBLOG_MYSQL_HOST"],
        "port": int(e["DBLOG_MYSQL_PORT"]),
        "user": e["DBLOG_MYSQL_USER"],
        "password_env": "DBLOG_MYSQL_PASSWORD",
        "tables": [f"{NS}.customers", f"{NS}.orders"],
    }
    path = WORK / "dblog.toml"
    path.write_text(
        "[source]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in src.items())
        + f"\n[state]\npath = {json.dumps(str(WORK / 'state.db'))}\n"
        + f"\n[output]\nurl = {json.dumps(output_url(LAKE))}\n"
    )
    return path


def captured_yet() -> bool:
    """Whether the capture has created its changelog table (on disk or in the S3 store)."""
    import deltalake

    from airflow_provider_dblog.outputs.lake_layout import changelog_path

    return deltalake.DeltaTable.is_deltatable(changelog_path(LAKE, SOURCE_ID))


def changelog_events(lake: str, table: str) -> list:
    from airflow_provider_dblog.outputs import make_output

    out = make_output(lake)
    out.open()
    try:
        return list(out.scan(SOURCE_ID, table))
    finally:
        out.close()


def dump_through_rest(af: stack.Airflow, table: str, keys: list, chunk_size: int) -> dict:
    """POST a dblog_repair_dump run, wait for it; the DumpOperator's result from XCom."""
    conf = {"table": table, "keys": "\n".join(map(str, keys)), "chunk_size": chunk_size}
    what = f"{len(keys)} keys" if keys else "all rows"
    say(f"POST /api/v2/dags/dblog_repair_dump/dagRuns  table={table} ({what}), chunk_size={chunk_size}")
    run_id = af.trigger("dblog_repair_dump", conf)
    state = af.wait_run("dblog_repair_dump", run_id, timeout=300)
    if state != "success":
        raise stack.AirflowError(f"run {run_id} ended {state}\n{af.tails()}")
    result = af.request(
        "GET", f"/api/v2/dags/dblog_repair_dump/dagRuns/{run_id}/taskInstances/dump/xcomEntries/return_value"
    )["value"]
    result = json.loads(result) if isinstance(result, str) else result
    say(
        f"  run {run_id}: success; dump {result['dump_id']}: {result['rows']} rows in {result['chunks']} "
        f"chunks, {result['duration_s']:.1f} s"
    )
    return result


def wait_for_sentinel(lake: str) -> None:
    """One recognisable change; once it is in the changelog, so is every write before it."""
    mark = f"sentinel-{time.time_ns()}@example.com"
    c = connect()
    c.cursor().execute(f"UPDATE {NS}.customers SET email=%s WHERE id=1", (mark,))
    c.close()
    wait_for(
        lambda: any((e.after or {}).get("email") == mark for e in changelog_events(lake, f"{NS}.customers")),
        120,
        "the capture to reach the last write",
        interval=0.5,
        error=stack.AirflowError,
    )


def land_settings() -> dict[str, str]:
    """What dblog_land's SparkSubmitOperator needs on the worker (docs/airflow.md): a
    spark_default connection with a local master, this venv's spark-submit and Python first on
    PATH, the jars resolved once, and the source to land."""
    jars = os.environ.get("DBLOG_SPARK_JARS")
    if not jars:
        sys.exit("DBLOG_SPARK_JARS is not set: run through `make demo` (scripts/demo resolves the jars once)")
    venv_bin = str(Path(sys.executable).parent)
    master = {"conn_type": "spark", "host": "local[2]"}
    if CLUSTER:  # spark://127.0.0.1:57077 as a connection: host and port
        url, _, port = os.environ["DBLOG_SPARK_MASTER"].rpartition(":")
        master = {"conn_type": "spark", "host": url, "port": int(port)}
    return {
        stack.conn_env_name("spark_default"): json.dumps(master),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "DBLOG_SPARK_JARS": jars,
        "DBLOG_LAND_SOURCE": SOURCE_ID,
    }


def land_through_airflow(af: stack.Airflow) -> None:
    """Trigger dblog_land and wait; show its spark-submit command line and what each run
    landed. Unpausing may start a run of its own first (the latest cron tick, or the repair
    dumps' asset events: AssetOrTimeSchedule); max_active_runs=1 queues ours behind it."""
    say("unpausing dblog_land (its schedule may start a run too); POST /api/v2/dags/dblog_land/dagRuns")
    before = cluster_landings() if CLUSTER else set()
    af.unpause("dblog_land")
    t0 = time.time()
    run_id = af.trigger("dblog_land", {})
    af.wait_run("dblog_land", run_id, timeout=900)
    say(f"  dblog_land done in {time.time() - t0:.0f} s:")
    landed, shown = 0, False
    for run in af.request("GET", "/api/v2/dags/dblog_land/dagRuns?order_by=run_after")["dag_runs"]:
        state = af.wait_run("dblog_land", run["dag_run_id"], timeout=900)
        lines = task_log_lines(af, "dblog_land", run["dag_run_id"])
        if state != "success":
            raise stack.AirflowError(f"dblog_land run {run['dag_run_id']} ended {state}\n" + "\n".join(lines[-60:]))
        submit = next((x for x in lines if "Spark-Submit cmd" in x), "")
        if "--jars" not in submit or "--packages" in submit or any("resolving dependencies" in x for x in lines):
            sys.exit(f"demo FAILED: dblog_land did not use the jars resolved at install time:\n{submit}")
        if CLUSTER and (os.environ["DBLOG_SPARK_MASTER"] not in submit or "--driver-class-path" not in submit):
            sys.exit(f"demo FAILED: dblog_land did not submit to the cluster with the S3A connector:\n{submit}")
        stats = json.loads(next(x for x in lines if x.lstrip().startswith('{"events"')))
        landed += stats["events"]
        say(
            f"    run {run['dag_run_id']} ({run['run_type']}): {state}, spark-submit landed {stats['events']} "
            f"events into {len(stats['tables'])} mirrors in {stats['seconds']:.0f} s"
        )
        if not shown:
            print(f"    task log: {submit.strip()}", flush=True)
            shown = True
    if landed == 0:
        sys.exit("demo FAILED: dblog_land landed nothing")
    if CLUSTER:  # the master's record: the landing ran there, in executors of its workers
        landings = cluster_landings() - before
        if not landings:
            sys.exit("demo FAILED: the Spark master lists no landing application (dblog-land-changelog) of this stage")
        say(f"    the master at {os.environ['DBLOG_SPARK_MASTER']} ran them: applications {sorted(landings)}")


def cluster_landings() -> set[str]:
    """The landing applications the standalone master has finished (its web UI's JSON)."""
    import urllib.request

    with urllib.request.urlopen(os.environ["DBLOG_SPARK_CLUSTER_UI"] + "/json/", timeout=10) as r:
        return {a["id"] for a in json.load(r).get("completedapps", []) if a.get("name") == "dblog-land-changelog"}


def task_log_lines(af: stack.Airflow, dag_id: str, run_id: str) -> list[str]:
    """The messages of a run's task log (Airflow 3 writes one JSON object per line)."""
    out = []
    for path in sorted((af.home / "logs" / f"dag_id={dag_id}").rglob("*.log")):
        if f"run_id={run_id}" not in str(path):
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(str(json.loads(line).get("event", line)))
            except (ValueError, AttributeError):
                out.append(line)
    return out


def main() -> None:
    e = os.environ
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    lake = output_url(LAKE)
    tables = [f"{NS}.customers", f"{NS}.orders"]
    print(
        f"\n=== DBLog demo through Airflow: MariaDB {NS}.customers/orders ({ROWS} rows each), "
        f"changelog {LAKE}" + (f", Spark at {os.environ['DBLOG_SPARK_MASTER']}" if CLUSTER else ""),
        flush=True,
    )
    create_tables()
    settings = stack.dag_env(
        source_conn={
            "conn_type": "mysql",
            "host": e["DBLOG_MYSQL_HOST"],
            "port": int(e["DBLOG_MYSQL_PORT"]),
            "login": e["DBLOG_MYSQL_USER"],
            "password": e["DBLOG_MYSQL_PASSWORD"],
            "extra": {"source_id": SOURCE_ID, "tables": tables},
        },
        state_conn={"conn_type": "dblog_state", "host": str(WORK / "state.db")},
        changelog=lake,
        repair_tables=tables,
    )
    settings.update(land_settings())
    with stack.metadata_database(
        e["DBLOG_PG_HOST"],
        int(e["DBLOG_PG_PORT"]),
        e["DBLOG_PG_SUPERUSER"],
        e["DBLOG_PG_SUPERUSER_PASSWORD"],
        prefix="airflow_demo",
    ) as sql_conn:
        af = stack.Airflow(WORK / "airflow-home", sql_conn, settings)
        stop, counter = threading.Event(), [0]
        loader = threading.Thread(target=live_load, args=(stop, counter), daemon=True)
        try:
            say("airflow db migrate (a fresh metadata database in the services' PostgreSQL)")
            af.migrate()
            say(f"starting api-server ({af.base}), scheduler, dag-processor, triggerer (LocalExecutor)")
            af.start()
            af.wait_ready(("dblog_capture", "dblog_repair_dump", "dblog_land"))
            say("unpausing dblog_capture and dblog_repair_dump")
            af.unpause("dblog_capture")
            af.unpause("dblog_repair_dump")
            # a new capture starts at the end of the log: probe until one write arrives
            probe = iter(range(900001, 999999))

            def captured() -> bool:
                i = next(probe)
                c = connect()
                c.cursor().execute(f"INSERT INTO {NS}.customers VALUES (%s,%s,%s)", (i, f"probe {i}", None))
                c.close()
                return (
                    any(ev.key[0] > 900000 for ev in changelog_events(lake, f"{NS}.customers") if ev.op.value == "c")
                    if captured_yet()
                    else False
                )

            wait_for(
                captured,
                180,
                "the capture to write a first row",
                alive=af.assert_alive,
                detail=af.tails,
                interval=1,
                error=stack.AirflowError,
            )
            say(
                f"dblog_capture is running: task state {af.task_state('dblog_capture', 'capture')!r}, "
                f"capture child pid {af.capture_pids()}"
            )
            loader.start()
            say("live write load started (inserts, updates, deletes on orders)")
            for table in tables:  # the full state first, so that verify can compare every row
                dump_through_rest(af, table, [], 500)
            result = dump_through_rest(af, f"{NS}.orders", REPAIR_KEYS, 2)
            stop.set()
            loader.join()
            say(f"live load stopped after {counter[0]} transactions; waiting for the capture to catch up")
            wait_for_sentinel(lake)
            of_dump = [ev for ev in changelog_events(lake, f"{NS}.orders") if ev.dump_id == result["dump_id"]]
            # 'k' events are the chunks' key statements (keys the source no longer has are
            # deleted downstream, changelog-format.md); the rows are the 'r' events
            repaired = [ev for ev in of_dump if ev.op.value == "r"]
            say(f"the repair dump's chunk statements ('k') in the changelog: {len(of_dump) - len(repaired)}")
            say(f"the repair dump's rows in the changelog ({len(repaired)}):")
            for ev in sorted(repaired, key=lambda ev: ev.key):
                print(f"    op={ev.op.value} key={list(ev.key)} after={json.dumps(ev.after, default=str)}", flush=True)
            if sorted(ev.key for ev in repaired) != [(k,) for k in REPAIR_KEYS]:
                sys.exit(f"demo FAILED: expected keys {REPAIR_KEYS} from the repair dump")
            land_through_airflow(af)
        finally:
            stop.set()
            say("stopping Airflow")
            af.stop()
    print("$ dblog verify", flush=True)
    p = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", str(write_config()), "verify"],
        capture_output=True,
        text=True,
    )
    print(p.stdout.rstrip(), flush=True)
    if p.returncode != 0:
        sys.exit(f"demo FAILED: the changelog does not match the source\n{p.stderr[-2000:]}")
    lakehouse(write_config(), LAKE, land=False)  # dblog_land has landed it
    print(
        "=== airflow: capture, dumps and the Spark landing run by Airflow; the changelog replays to "
        "exactly the source tables and the Delta mirrors equal them (0 mismatches each)\n",
        flush=True,
    )


if __name__ == "__main__":
    main()
