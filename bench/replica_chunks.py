"""Dump chunks read on a replica (``chunk_replica``, issue 38) against chunks read on the
primary, in one run on the MariaDB GTID pair of ``scripts/services up gtid``:

    scripts/services up gtid && eval "$(scripts/services env)"
    python -m bench.replica_chunks [--rows 2000000] [--chunk-size 10000]

A table of ``--rows`` narrow rows (bigint key, int, 10 characters) on the primary, replicated;
then ``dblog capture`` in a child process dumps it four times, each a fresh source: chunks on
the primary with table watermarks (the baseline) and with read-only watermarks, and on the
replica with each. Printed per run: the dump's time from request to DONE,
rows/s, the ratio to the baseline, and the rows the capture's user read on each server
(``userstat``): what the replica takes off the primary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import pymysql

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .common import say


def root(port: int) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="root", autocommit=True)


def rows_read(port: int, user: str) -> int:
    with root(port) as c, c.cursor() as cur:
        cur.execute("SELECT ROWS_READ FROM information_schema.USER_STATISTICS WHERE USER = %s", (user,))
        row = cur.fetchone()
        return int(row[0]) if row else 0


def caught_up(primary: int, replica: int) -> None:
    with root(primary) as c, c.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()
    with root(replica) as c, c.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 600)", (pos,))
        if cur.fetchone()[0] != 0:
            raise RuntimeError(f"bench: the replica did not reach {pos}")


def one_dump(name: str, source: dict, workdir: str, table: str, chunk: int, ports: tuple[int, int]) -> dict:
    d = os.path.join(workdir, name)
    os.makedirs(d)
    config = os.path.join(d, "dblog.toml")
    lines = ["[source]", *(f"{k} = {json.dumps(v)}" for k, v in source.items())]
    lines += ["", "[state]", f"path = {json.dumps(os.path.join(d, 'state.db'))}", "", "[output]"]
    lines += [f"url = {json.dumps('delta://' + os.path.join(d, 'lake'))}", ""]
    with open(config, "w") as f:
        f.write("\n".join(lines))
    cmd = [sys.executable, "-m", "airflow_provider_dblog.cli", "--config", config]
    log = open(os.path.join(d, "capture.log"), "w")
    proc = subprocess.Popen([*cmd, "capture"], stdout=log, stderr=subprocess.STDOUT)
    state = LocalStateStore(os.path.join(d, "state.db"))
    try:
        deadline = time.monotonic() + 90
        while not open(os.path.join(d, "capture.log")).read().count(" started at "):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"bench: the capture did not start: {open(os.path.join(d, 'capture.log')).read()[-2000:]}"
                )
            time.sleep(0.2)
        before = [rows_read(p, source["user"]) for p in ports]
        t0 = time.perf_counter()
        dump_id = subprocess.run(
            [*cmd, "dump", "--table", table, "--chunk-size", str(chunk)], capture_output=True, text=True, check=True
        ).stdout.strip()
        while (dump := state.get_dump(dump_id)).status is not DumpStatus.DONE:
            if dump.status.finished or proc.poll() is not None:
                raise RuntimeError(f"bench: the dump ended {dump.status.value}: {dump.error}")
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        rows = sum(p.rows for p in dump.progress.values())
        after = [rows_read(p, source["user"]) for p in ports]
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    return {
        "run": name,
        "seconds": round(seconds, 2),
        "rows": rows,
        "rows_per_s": round(rows / seconds),
        "read_on_primary": after[0] - before[0],
        "read_on_replica": after[1] - before[1],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--chunk-size", type=int, default=10_000)
    a = p.parse_args()
    primary, replica = int(os.environ["DBLOG_GTID_PRIMARY_PORT"]), int(os.environ["DBLOG_GTID_REPLICA_PORT"])
    tag = uuid.uuid4().hex[:8]
    db, user, password = f"brc_{tag}", f"dblog_brc_{tag}", uuid.uuid4().hex
    table = f"{db}.t"
    say(f"replica chunks: filling {table} with {a.rows:,} rows on the primary")
    with root(primary) as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v int NOT NULL, s varchar(16) NOT NULL)")
        cur.execute(f"INSERT INTO {table} SELECT seq, seq, LEFT(MD5(seq), 10) FROM {db}.seq_1_to_{a.rows}")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'")
        cur.execute(f"GRANT SELECT ON {db}.* TO '{user}'@'%'")
        cur.execute(f"GRANT CREATE, SELECT, INSERT, UPDATE ON dblog_{tag}.* TO '{user}'@'%'")
    caught_up(primary, replica)
    for port in (primary, replica):
        with root(port) as c, c.cursor() as cur:
            cur.execute("SET GLOBAL userstat = 1")
    os.environ["DBLOG_BRC_PASSWORD"] = password
    base = {"type": "mysql", "host": "127.0.0.1", "port": primary, "user": user}
    base.update(password_env="DBLOG_BRC_PASSWORD", tables=[table], watermark_schema=f"dblog_{tag}")
    runs = [
        ("primary, table watermarks", {}),
        ("primary, read-only watermarks", {"watermarks": "log"}),
        ("replica, table watermarks", {"chunk_replica": f"127.0.0.1:{replica}"}),
        ("replica, read-only watermarks", {"chunk_replica": f"127.0.0.1:{replica}", "watermarks": "log"}),
    ]
    out = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for i, (name, extra) in enumerate(runs):
                say(f"replica chunks: {name}")
                source = {**base, "id": f"brc{tag}_{i}", **extra}
                out.append(one_dump(f"run{i}", source, workdir, table, a.chunk_size, (primary, replica)))
                out[-1]["run"] = name
    finally:
        with root(primary) as c, c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"DROP DATABASE IF EXISTS dblog_{tag}")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
    print(json.dumps(out, indent=2))
    print(f"\n{a.rows:,} rows dumped in {a.chunk_size:,}-row chunks, MariaDB 10.11 GTID pair on one machine:\n")
    print("| chunks read on | s | rows/s | vs primary | rows read on the primary | on the replica |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in out:
        ratio = r["rows_per_s"] / out[0]["rows_per_s"]
        print(
            f"| {r['run']} | {r['seconds']} | {r['rows_per_s']:,} | {ratio:.2f}× | "
            f"{r['read_on_primary']:,} | {r['read_on_replica']:,} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
