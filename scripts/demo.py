"""Demo of one source: sample tables, a live write load, capture + dump, verify; then Spark
lands the changelog into typed Delta mirrors, shows them through Spark SQL and verifies them.

Run through `make demo` (which starts the servers and sets the DBLOG_* variables).
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

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "demo-output"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", str(CONFIG), *args]
    print("$ dblog " + " ".join(args), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.stdout:
        print(p.stdout.rstrip(), flush=True)
    if check and p.returncode != 0:
        sys.exit(f"dblog {args[0]} failed ({p.returncode}):\n{p.stderr}")
    return p


def connect(kind: str):
    e = os.environ
    if kind == "postgres":
        import psycopg2

        return psycopg2.connect(
            host=e["DBLOG_PG_HOST"],
            port=e["DBLOG_PG_PORT"],
            user=e["DBLOG_PG_USER"],
            password=e["DBLOG_PG_PASSWORD"],
            dbname=e["DBLOG_PG_DATABASE"],
        )
    import pymysql

    return pymysql.connect(
        host=e["DBLOG_MYSQL_HOST"],
        port=int(e["DBLOG_MYSQL_PORT"]),
        user=e["DBLOG_MYSQL_USER"],
        password=e["DBLOG_MYSQL_PASSWORD"],
        database=e["DBLOG_MYSQL_DATABASE"],
    )


def create_tables(kind: str, ns: str, rows: int) -> None:
    c = connect(kind)
    cur = c.cursor()
    if kind == "postgres":
        cur.execute(f"DROP SCHEMA IF EXISTS {ns} CASCADE")
        cur.execute(f"CREATE SCHEMA {ns}")
        cur.execute(f"CREATE TABLE {ns}.customers (id bigint PRIMARY KEY, name text, email text, since date)")
        cur.execute(
            f"CREATE TABLE {ns}.orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric(10,2), "
            "status text, created timestamptz DEFAULT now())"
        )
        cur.execute(
            f"INSERT INTO {ns}.customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', "
            f"date '2020-01-01' + (g % 1000) FROM generate_series(1, {rows}) g"
        )
        cur.execute(
            f"INSERT INTO {ns}.orders SELECT g, 1 + g % {rows}, (g % 10000) / 100.0, 'new', now() "
            f"FROM generate_series(1, {rows}) g"
        )
    else:
        cur.execute(f"DROP DATABASE IF EXISTS {ns}")
        cur.execute(f"CREATE DATABASE {ns}")
        cur.execute(
            f"CREATE TABLE {ns}.customers (id bigint PRIMARY KEY, name varchar(100), email varchar(100), since date)"
        )
        cur.execute(
            f"CREATE TABLE {ns}.orders (id bigint PRIMARY KEY, customer_id bigint, amount decimal(10,2), "
            "status varchar(20), created timestamp(6) DEFAULT CURRENT_TIMESTAMP(6))"
        )
        for lo in range(1, rows + 1, 1000):
            hi = min(rows, lo + 999)
            cur.executemany(
                f"INSERT INTO {ns}.customers VALUES (%s,%s,%s,%s)",
                [(g, f"customer {g}", f"c{g}@example.com", f"2020-01-{1 + g % 28:02d}") for g in range(lo, hi + 1)],
            )
            cur.executemany(
                f"INSERT INTO {ns}.orders (id, customer_id, amount, status) VALUES (%s,%s,%s,%s)",
                [(g, 1 + g % rows, f"{(g % 10000) / 100:.2f}", "new") for g in range(lo, hi + 1)],
            )
    c.commit()
    c.close()


def live_load(kind: str, ns: str, rows: int, stop: threading.Event, counter: list) -> None:
    rng = random.Random(1)
    c = connect(kind)
    cur = c.cursor()
    next_id = rows + 1
    while not stop.is_set():
        r = rng.random()
        if r < 0.4:
            cur.execute(
                f"INSERT INTO {ns}.orders (id, customer_id, amount, status) VALUES (%s,%s,%s,%s)",
                (next_id, rng.randint(1, rows), f"{rng.random() * 500:.2f}", "new"),
            )
            next_id += 1
        elif r < 0.8:
            cur.execute(
                f"UPDATE {ns}.orders SET status=%s WHERE id=%s", (rng.choice(["paid", "sent"]), rng.randint(1, next_id))
            )
        elif r < 0.9:
            cur.execute(
                f"UPDATE {ns}.customers SET email=%s WHERE id=%s",
                (f"new{rng.random():.6f}@example.com", rng.randint(1, rows)),
            )
        else:
            cur.execute(f"DELETE FROM {ns}.orders WHERE id=%s", (rng.randint(1, next_id),))
        c.commit()
        counter[0] += 1
        time.sleep(0.002)
    c.close()


def main(kind: str) -> None:
    global CONFIG
    ns = "demo_shop"
    rows = int(os.environ.get("DEMO_ROWS", "50000"))
    work = WORK / kind
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lake = lake_of(work, kind)
    e = os.environ
    if kind == "postgres":
        src = {
            "type": "postgres",
            "id": "demo_pg",
            "host": e["DBLOG_PG_HOST"],
            "port": int(e["DBLOG_PG_PORT"]),
            "user": e["DBLOG_PG_USER"],
            "database": e["DBLOG_PG_DATABASE"],
            "password_env": "DBLOG_PG_PASSWORD",
        }
    else:
        src = {
            "type": "mysql",
            "id": "demo_my",
            "host": e["DBLOG_MYSQL_HOST"],
            "port": int(e["DBLOG_MYSQL_PORT"]),
            "user": e["DBLOG_MYSQL_USER"],
            "password_env": "DBLOG_MYSQL_PASSWORD",
        }
    src["tables"] = [f"{ns}.customers", f"{ns}.orders"]
    CONFIG = work / "dblog.toml"
    CONFIG.write_text(
        "[source]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in src.items())
        + f"\n[state]\npath = {json.dumps(str(work / 'state.db'))}\n"
        + f"\n[output]\nurl = {json.dumps(output_url(lake))}\n"
    )
    print(f"\n=== DBLog demo on {kind}: {rows} customers and {rows} orders, config {CONFIG}", flush=True)
    drop_slot(kind, src["id"])
    create_tables(kind, ns, rows)

    log = open(work / "capture.log", "w")
    capture = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_dblog.cli",
            "--config",
            str(CONFIG),
            "capture",
            "--status-interval",
            "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop, counter = threading.Event(), [0]
    loader = threading.Thread(target=live_load, args=(kind, ns, rows, stop, counter), daemon=True)
    try:
        time.sleep(3)
        loader.start()
        dump_id = sh("dump", "--all", "--chunk-size", "5000").stdout.strip()
        t0 = time.time()
        while True:
            if capture.poll() is not None:
                sys.exit(f"capture exited:\n{(work / 'capture.log').read_text()[-3000:]}")
            st = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", str(CONFIG), "status", "--json"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            d = next(x for x in st["dumps"] if x["dump_id"] == dump_id)
            print(
                f"  dump {dump_id}: {d['status']} rows={d['rows']} chunks={d['chunks']} "
                f"(live load: {counter[0]} transactions)",
                flush=True,
            )
            if d["status"] == "done":
                break
            if d["status"] in ("failed", "cancelled") or time.time() - t0 > 600:
                sys.exit(f"dump did not finish: {d}")
            time.sleep(2)
        time.sleep(2)
        stop.set()
        loader.join()
        wait_for_sentinel(kind, ns, src["id"], lake)  # the capture has reached the last write
    finally:
        stop.set()
        capture.terminate()
        capture.wait(60)
    print((work / "capture.log").read_text().splitlines()[-1] if (work / "capture.log").exists() else "")
    result = sh("verify", check=False)
    if result.returncode != 0:
        sys.exit("demo FAILED: the changelog does not match the source")
    print(
        f"=== {kind}: the changelog replays to exactly the source tables (0 mismatches); "
        f"changelog at {lake}/changelogs/\n",
        flush=True,
    )
    lakehouse(CONFIG, lake, land=True)
    print(
        f"=== {kind}: Spark landed the changelog into typed Delta mirrors equal to the source tables "
        f"(0 mismatches); mirrors at {lake}/mirrors\n",
        flush=True,
    )


def lake_of(work: Path, kind: str) -> str:
    """The demo's lake: under ``work`` on local disk, or a fresh prefix of the S3 test store
    when ``DEMO_DEPLOY=cluster`` (scripts/demo)."""
    if os.environ.get("DEMO_DEPLOY") == "cluster":
        return f"s3://{os.environ['DBLOG_S3_BUCKET']}/demo-{time.time_ns()}/{kind}/lake"
    return str(work / "lake")


def output_url(lake: str) -> str:
    """The capture's output URL for the lake: ``delta://`` + a local path, an s3:// URL as is."""
    return lake if "://" in lake else "delta://" + lake


def lakehouse(config: Path, lake: str | Path, land: bool) -> None:
    """Land into the mirrors (unless Airflow did), show rows through Spark SQL, verify them."""
    print(f"--- the lakehouse: Delta mirror tables of {lake}/changelogs", flush=True)
    cmd = [sys.executable, "-m", "scripts.demo_lakehouse", "--config", str(config), "--lake", str(lake)]
    if subprocess.run(cmd + (["--land"] if land else []), cwd=ROOT).returncode != 0:
        sys.exit("demo FAILED: the mirrors do not match the source")


def wait_for_sentinel(kind: str, ns: str, source_id: str, lake: str) -> None:
    """Write one recognisable change; once it is in the changelog, so is everything before."""
    from airflow_provider_dblog.outputs import make_output

    mark = f"sentinel-{time.time_ns()}@example.com"
    c = connect(kind)
    c.cursor().execute(f"UPDATE {ns}.customers SET email=%s WHERE id=1", (mark,))
    c.commit()
    c.close()
    out = make_output(output_url(lake))
    out.open()
    deadline = time.time() + 120
    while time.time() < deadline:
        if any((e.after or {}).get("email") == mark for e in out.scan(source_id, f"{ns}.customers")):
            return
        time.sleep(0.5)
    sys.exit("the capture did not reach the last write within 120 s")


def drop_slot(kind: str, source_id: str) -> None:
    """Forget an earlier demo run's replication slot and publication."""
    if kind != "postgres":
        return
    c = connect(kind)
    c.autocommit = True
    cur = c.cursor()
    cur.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name=%s",
        (f"dblog_{source_id}",),
    )
    # the demo recreates its tables, so the publication of an earlier run would name dropped ones
    cur.execute(f'DROP PUBLICATION IF EXISTS "dblog_{source_id}"')
    c.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "postgres")
