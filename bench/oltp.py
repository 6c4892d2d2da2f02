"""The OLTP write load of bench/impact.py: pgbench (PostgreSQL) or one pymysql process per
client (MariaDB), each client on its own key range so that clients never wait for each
other's row locks; runs outside the benchmark process so the capture's GIL cannot throttle it."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import time

from .dbs import find_tool


# -- load generators ------------------------------------------------------------------------
class PgLoad:
    """pgbench with a custom script; inserts take keys from a sequence (no key conflicts)."""

    def __init__(self, db, clients: int, span: int, workdir: str):
        self.db, self.clients, self.span = db, clients, span
        self.app = f"bench-impact-{db.tag}"
        self.script = os.path.join(workdir, f"impact-{db.tag}.sql")
        t = db.event_table
        with open(self.script, "w") as f:
            f.write(
                "\\set uid :client_id * :span + random(1, :span)\n"
                "\\set uid2 :client_id * :span + random(1, :span)\n"
                f"BEGIN;\nUPDATE {t} SET v = v + 1 WHERE id = :uid;\n"
                f"UPDATE {t} SET v = v - 1 WHERE id = :uid2;\n"
                f"INSERT INTO {t} VALUES (nextval('{db.ns}.ev_ins'), :client_id, 'ins');\nEND;\n"
            )

    def prepare(self) -> None:
        self.db._run(
            f"INSERT INTO {self.db.event_table} SELECT g, 0, 'load' "
            f"FROM generate_series(1, {self.clients * self.span}) g",
            f"CREATE SEQUENCE {self.db.ns}.ev_ins START 10000000000",
        )
        self.db._run(f"VACUUM ANALYZE {self.db.event_table}", autocommit=True)

    def start(self, seconds: int, phase_no: int) -> None:
        db = self.db
        cmd = [
            find_tool("pgbench"),
            "-n",
            "-M",
            "prepared",
            "-c",
            str(self.clients),
            "-j",
            str(min(self.clients, os.cpu_count() or 2)),
            "-T",
            str(seconds),
            "-D",
            f"span={self.span}",
            "-f",
            self.script,
            "-h",
            db.host,
            "-p",
            str(db.port),
            "-U",
            db.user,
            db.db,
        ]
        env = dict(os.environ, PGPASSWORD=db.password, PGAPPNAME=self.app)
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self) -> dict:
        out, err = self.proc.communicate(timeout=120)
        if self.proc.returncode != 0:
            raise RuntimeError(f"pgbench failed ({self.proc.returncode}): {err.strip()[-500:]}")
        tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        n = re.search(r"number of transactions actually processed: (\d+)", out)
        failed = re.search(r"number of failed transactions: (\d+)", out)
        return {
            "tps": float(tps.group(1)),
            "transactions": int(n.group(1)),
            "failed": int(failed.group(1)) if failed else 0,
        }

    def stop(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _mysql_client(
    conn: dict, table: str, client: int, span: int, key_base: int, seconds: float, ready, go, out
) -> None:
    """One sysbench-like client in its own process; the password comes from the environment."""
    import random

    import pymysql

    c = pymysql.connect(password=os.environ["DBLOG_MYSQL_PASSWORD"], autocommit=False, **conn)
    cur = c.cursor()
    rnd = random.Random(key_base + client)
    lo, nxt = client * span, key_base + client * 10**8  # own update range, own insert range
    ready.put(client)
    go.wait(120)
    t0 = time.time()
    done = failed = 0
    while time.time() < t0 + seconds:
        try:
            cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = {lo + rnd.randint(1, span)}")
            cur.execute(f"UPDATE {table} SET v = v - 1 WHERE id = {lo + rnd.randint(1, span)}")
            cur.execute(f"INSERT INTO {table} VALUES ({nxt}, {client}, 'ins')")
            c.commit()
            nxt += 1
            done += 1
        except pymysql.MySQLError:
            c.rollback()
            failed += 1
    out.put((done, failed, time.time() - t0))
    c.close()


class MariaLoad:
    def __init__(self, db, clients: int, span: int, workdir: str):
        self.db, self.clients, self.span = db, clients, span
        self.app = f"bench-impact-{db.tag}"  # unused: the clients are known by their database
        self.ctx = multiprocessing.get_context("spawn")  # never fork a process running an engine thread
        self.procs: list = []

    def prepare(self) -> None:
        self.db._insert_rows(self.db.event_table, 1, self.clients * self.span)
        self.db._run(f"ANALYZE TABLE {self.db.event_table}")

    def start(self, seconds: int, phase_no: int) -> None:
        db = self.db
        conn = {"host": db.host, "port": db.port, "user": db.user, "database": db.ns}
        self.ready, self.go, self.out = self.ctx.Queue(), self.ctx.Event(), self.ctx.Queue()
        base = 10**10 + phase_no * 10**9  # insert keys unique across phases and clients
        self.procs = [
            self.ctx.Process(
                target=_mysql_client,
                daemon=True,
                args=(conn, db.event_table, c, self.span, base, seconds, self.ready, self.go, self.out),
            )
            for c in range(self.clients)
        ]
        for p in self.procs:
            p.start()
        for _ in self.procs:  # all connected before the clock starts
            self.ready.get(timeout=120)
        self.go.set()
        self.results: list = []

    def running(self) -> bool:
        while not self.out.empty():
            self.results.append(self.out.get())
        return len(self.results) < len(self.procs) and any(p.is_alive() for p in self.procs)

    def result(self) -> dict:
        while len(self.results) < len(self.procs):
            self.results.append(self.out.get(timeout=120))
        for p in self.procs:
            p.join(30)
        return {
            "tps": sum(r[0] / r[2] for r in self.results),
            "transactions": sum(r[0] for r in self.results),
            "failed": sum(r[1] for r in self.results),
        }

    def stop(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5)


# -- lock waits -------------------------------------------------------------------------------
