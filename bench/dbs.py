"""The two benchmarked databases: tables, load generation, raw baselines and clean-up.

Each run works in a schema/database of its own (``bench_<hex>``) holding two narrow tables
(``id bigint primary key, v int, s`` ~10 characters): ``ev`` receives the generated log
events, ``dumpt`` is the table the dumps read. Passwords reach the command-line clients only
through the environment (PGPASSWORD) or a 0600 defaults file, never argv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from typing import Optional

INSERT_TXN = 10_000  # rows per transaction of generated inserts/updates
MYSQL_STATEMENT = 1_000  # rows per multi-row INSERT statement (MariaDB)


def need_env(name: str) -> str:
    v = os.environ.get(name)
    if v is None:
        raise SystemExit(
            f"bench: {name} is not set; run through scripts/run-bench (make bench), "
            "which starts the servers and exports their settings"
        )
    return v


def split_events(n: int) -> tuple[int, int]:
    """N log events = 90 % inserts + 10 % updates (updates hit rows inserted just before)."""
    updates = n // 10
    return n - updates, updates


def in_transactions(conn, lo: int, hi: int, per_txn: int, statement_for) -> None:
    """Rows lo..hi in transactions of per_txn rows: ``statement_for(start, end)`` each."""
    cur = conn.cursor()
    for start in range(lo, hi + 1, per_txn):
        cur.execute(statement_for(start, min(start + per_txn - 1, hi)))
        conn.commit()


def timed(cmd: list[str], env: Optional[dict] = None, stdout=subprocess.DEVNULL) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, timeout=900)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(
            f"{os.path.basename(cmd[0])} failed ({proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()[:500]}"
        )
    return elapsed


def median_time(cmd: list[str], env: Optional[dict], repeat: int) -> float:
    times = sorted(timed(cmd, env) for _ in range(repeat))
    return times[len(times) // 2]


def _lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def find_tool(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
        for d in ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    raise SystemExit(f"bench: none of {names} is installed (postgresql-client / mariadb-client)")


class BenchDB:
    kind: str
    label: str
    log_baseline_name: str
    dump_baseline_name: str

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.ns = f"bench_{self.tag}"
        self.event_table = f"{self.ns}.ev"
        self.dump_table = f"{self.ns}.dumpt"

    def source_ids(self, roles: list[str]) -> dict[str, str]:
        """One source per role (in-process, child process, profile), each with its own
        slot / checkpoint, so each reads the same generated log range once."""
        return {r: f"bench_{self.kind[:2]}_{self.tag}_{r}" for r in roles}

    @staticmethod
    def _row_text(i: int) -> str:
        return f"{(i * 2654435761) % 16**10:010x}"


class PostgresBench(BenchDB):
    kind, label = "postgres", "PostgreSQL 15 (pgoutput)"
    log_baseline_name = "pg_recvlogical (pgoutput, to /dev/null)"
    dump_baseline_name = "psql COPY (SELECT ... ORDER BY id) TO STDOUT"

    def __init__(self) -> None:
        super().__init__()
        self.host, self.port = need_env("DBLOG_PG_HOST"), int(need_env("DBLOG_PG_PORT"))
        self.user, self.db = need_env("DBLOG_PG_USER"), need_env("DBLOG_PG_DATABASE")
        self.password = need_env("DBLOG_PG_PASSWORD")
        self.raw_name = f"bench_raw_{self.tag}"
        self.end_lsn: Optional[str] = None
        self._env = dict(os.environ, PGPASSWORD=self.password)

    def connect(self):
        import psycopg2

        return psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.db)

    def _run(self, *sql: str, autocommit: bool = False) -> list:
        c = self.connect()
        c.autocommit = autocommit
        try:
            cur = c.cursor()
            out = []
            for s in sql:
                cur.execute(s)
                out = cur.fetchall() if cur.description else []
            c.commit()
            return out
        finally:
            c.close()

    def create(self) -> None:
        cols = "(id bigint PRIMARY KEY, v int NOT NULL, s text NOT NULL)"
        self._run(
            f"CREATE SCHEMA {self.ns}",
            f"CREATE TABLE {self.event_table} {cols}",
            f"CREATE TABLE {self.dump_table} {cols}",
        )

    def fill_dump_table(self, rows: int) -> None:
        self._run(
            f"INSERT INTO {self.dump_table} SELECT g, g % 1000, substr(md5(g::text), 1, 10) "
            f"FROM generate_series(1, {rows}) g"
        )
        self._run(f"VACUUM ANALYZE {self.dump_table}", autocommit=True)

    def source_config(self, source_id: str) -> dict:
        return {
            "type": "postgres",
            "id": source_id,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "database": self.db,
            "tables": [self.event_table, self.dump_table],
            "password_env": "DBLOG_PG_PASSWORD",
            "plugin": "pgoutput",
        }

    def insert_primer(self, key: int) -> None:
        self._run(f"INSERT INTO {self.event_table} VALUES ({key}, 0, 'primer')")

    def prepare_log_baseline(self) -> None:
        # The publication first: pgoutput reads it as of each change's snapshot.
        self._run(f"CREATE PUBLICATION {self.raw_name} FOR TABLE {self.event_table}")
        self._run(f"SELECT pg_create_logical_replication_slot('{self.raw_name}', 'pgoutput')", autocommit=True)
        self._run(f"SELECT pg_create_logical_replication_slot('{self.raw_name}_py', 'pgoutput')", autocommit=True)

    def generate(self, n_events: int, per_txn: int = INSERT_TXN) -> dict:
        inserts, updates = split_events(n_events)
        c = self.connect()
        t0 = time.perf_counter()
        try:
            in_transactions(
                c,
                1,
                inserts,
                per_txn,
                lambda lo, hi: (
                    f"INSERT INTO {self.event_table} SELECT g, g % 1000, substr(md5(g::text), 1, 10) "
                    f"FROM generate_series({lo}, {hi}) g"
                ),
            )
            in_transactions(
                c,
                1,
                updates,
                per_txn,
                lambda lo, hi: f"UPDATE {self.event_table} SET v = v + 1 WHERE id BETWEEN {lo} AND {hi}",
            )
            cur = c.cursor()
            cur.execute("SELECT pg_current_wal_lsn()::text")
            self.end_lsn = cur.fetchone()[0]
        finally:
            c.close()
        return {"inserts": inserts, "updates": updates, "seconds": time.perf_counter() - t0}

    def run_log_baseline(self) -> float:
        cmd = [
            find_tool("pg_recvlogical"),
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            self.db,
            "--slot",
            self.raw_name,
            "--start",
            "--no-loop",
            "--endpos",
            self.end_lsn,
            "-o",
            "proto_version=1",
            "-o",
            f"publication_names={self.raw_name}",
            "-f",
            "/dev/null",
        ]
        return timed(cmd, self._env)

    library_baseline_name = "psycopg2 replication loop (pgoutput messages received, not decoded)"

    def run_library_baseline(self) -> float:
        """The Python ceiling of the transport: psycopg2 receiving the same log range with
        a do-nothing consumer (our capture adds decoding, the window and the output)."""
        import psycopg2.extras

        end = _lsn_int(self.end_lsn)
        c = psycopg2.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.db,
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
        )
        try:
            cur = c.cursor()
            t0 = time.perf_counter()
            cur.start_replication(
                slot_name=f"{self.raw_name}_py",
                decode=False,
                options={"proto_version": "1", "publication_names": self.raw_name},
            )

            def consume(msg):
                if msg.data_start >= end:
                    raise psycopg2.extras.StopReplication

            try:
                cur.consume_stream(consume)
            except psycopg2.extras.StopReplication:
                pass
            return time.perf_counter() - t0
        finally:
            c.close()

    def run_dump_baseline(self, repeat: int = 3) -> float:
        cmd = [
            find_tool("psql"),
            "-X",
            "-q",
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            self.db,
            "-c",
            f"COPY (SELECT * FROM {self.dump_table} ORDER BY id) TO STDOUT",
        ]
        return median_time(cmd, self._env, repeat)

    def blockers(self) -> str:
        """Why creating a slot may hang: it waits for every transaction running when it
        started, so an old idle-in-transaction session anywhere on the server stalls it."""
        rows = self._run(
            "SELECT pid, datname, usename, now() - xact_start FROM pg_stat_activity "
            "WHERE state LIKE 'idle in transaction%' AND xact_start < now() - interval '30 seconds'",
            autocommit=True,
        )
        return "; ".join(f"pid {p} ({u}@{d}) idle in transaction for {age}" for p, d, u, age in rows)

    def cleanup(self, source_ids: list[str]) -> None:
        from airflow_provider_dblog.sources.postgres.source import slot_name_for

        slots = [self.raw_name, f"{self.raw_name}_py"] + [slot_name_for(s) for s in source_ids]
        c = self.connect()
        c.autocommit = True
        try:
            cur = c.cursor()
            # A connection of ours left behind (a capture thread stuck creating its slot when
            # the run gave up) would keep the slot active and undroppable.
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = ANY(%s) AND active",
                (slots,),
            )
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ANY(%s) "
                "AND pid <> pg_backend_pid()",
                ([f"dblog-{s}"[:63] for s in source_ids],),
            )
            time.sleep(0.5)
            cur.execute(f"DROP SCHEMA IF EXISTS {self.ns} CASCADE")
            for name in slots:
                if not name.endswith("_py"):
                    cur.execute(f'DROP PUBLICATION IF EXISTS "{name}"')
                cur.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND NOT active",
                    (name,),
                )
            cur.execute("SELECT to_regclass('dblog.watermarks') IS NOT NULL")
            if cur.fetchone()[0]:
                cur.execute("DELETE FROM dblog.watermarks WHERE source_id = ANY(%s)", (source_ids,))
        finally:
            c.close()


class MariaDBBench(BenchDB):
    kind, label = "mysql", "MariaDB 10.11 (binlog ROW/FULL)"
    log_baseline_name = "mariadb-binlog --read-from-remote-server (to /dev/null)"
    dump_baseline_name = "mariadb --quick -e 'SELECT ... ORDER BY id'"

    def __init__(self) -> None:
        super().__init__()
        self.host, self.port = need_env("DBLOG_MYSQL_HOST"), int(need_env("DBLOG_MYSQL_PORT"))
        self.user, self.password = need_env("DBLOG_MYSQL_USER"), need_env("DBLOG_MYSQL_PASSWORD")
        self.start: Optional[tuple[str, int]] = None
        self.end: Optional[tuple[str, int]] = None
        self._tmp = tempfile.mkdtemp(prefix="dblog-bench-")
        self.cnf = os.path.join(self._tmp, "client.cnf")
        fd = os.open(self.cnf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"[client]\nhost={self.host}\nport={self.port}\nuser={self.user}\npassword={self.password}\n")

    def connect(self):
        import pymysql

        return pymysql.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, autocommit=False, charset="utf8mb4"
        )

    def _run(self, *sql: str) -> list:
        c = self.connect()
        try:
            cur = c.cursor()
            out: list = []
            for s in sql:
                cur.execute(s)
                out = list(cur.fetchall())
            c.commit()
            return out
        finally:
            c.close()

    def create(self) -> None:
        cols = "(id bigint PRIMARY KEY, v int NOT NULL, s varchar(16) NOT NULL)"
        self._run(
            f"CREATE DATABASE {self.ns}",
            f"CREATE TABLE {self.event_table} {cols}",
            f"CREATE TABLE {self.dump_table} {cols}",
        )

    def _insert_rows(self, table: str, lo: int, hi: int, per_txn: int = INSERT_TXN) -> None:
        """Rows lo..hi as multi-row INSERTs of MYSQL_STATEMENT rows (at most), per_txn rows per commit."""
        c = self.connect()
        step = min(MYSQL_STATEMENT, per_txn)
        try:
            cur = c.cursor()
            for start in range(lo, hi + 1, step):
                end = min(start + step - 1, hi)
                values = ",".join(f"({i},{i % 1000},'{self._row_text(i)}')" for i in range(start, end + 1))
                cur.execute(f"INSERT INTO {table} VALUES {values}")
                if (end - lo + 1) % per_txn == 0 or end == hi:
                    c.commit()
        finally:
            c.close()

    def fill_dump_table(self, rows: int) -> None:
        self._insert_rows(self.dump_table, 1, rows)
        self._run(f"ANALYZE TABLE {self.dump_table}")

    def insert_seq(self, table: str, lo: int, hi: int, per_txn: int) -> None:
        """Narrow rows lo..hi written by the server itself, from the SEQUENCE engine's virtual
        ``seq_<lo>_to_<hi>`` tables (MariaDB only; any database holds them); the same
        values as the PostgreSQL fill (``md5`` of the decimal key)."""
        c = self.connect()
        try:
            in_transactions(
                c,
                lo,
                hi,
                per_txn,
                lambda a, b: (
                    f"INSERT INTO {table} SELECT seq, seq % 1000, LEFT(MD5(seq), 10) FROM {self.ns}.seq_{a}_to_{b}"
                ),
            )
        finally:
            c.close()

    def source_config(self, source_id: str) -> dict:
        return {
            "type": "mysql",
            "id": source_id,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "tables": [self.event_table, self.dump_table],
            "password_env": "DBLOG_MYSQL_PASSWORD",
        }

    def insert_primer(self, key: int) -> None:
        self._run(f"INSERT INTO {self.event_table} VALUES ({key}, 0, 'primer')")

    def _master_status(self) -> tuple[str, int]:
        row = self._run("SHOW MASTER STATUS")[0]
        return row[0], int(row[1])

    def prepare_log_baseline(self) -> None:
        self.start = self._master_status()

    def generate(self, n_events: int, per_txn: int = INSERT_TXN) -> dict:
        inserts, updates = split_events(n_events)
        t0 = time.perf_counter()
        self._insert_rows(self.event_table, 1, inserts, per_txn)
        c = self.connect()
        try:
            in_transactions(
                c,
                1,
                updates,
                per_txn,
                lambda lo, hi: f"UPDATE {self.event_table} SET v = v + 1 WHERE id BETWEEN {lo} AND {hi}",
            )
        finally:
            c.close()
        self.end = self._master_status()
        return {"inserts": inserts, "updates": updates, "seconds": time.perf_counter() - t0}

    def _binlog_files(self) -> list[str]:
        names = [r[0] for r in self._run("SHOW BINARY LOGS")]
        return names[names.index(self.start[0]) : names.index(self.end[0]) + 1]

    def run_log_baseline(self, verbose: bool = False, repeat: int = 3) -> float:
        # --defaults-extra-file must come first on the command line.
        cmd = (
            [
                find_tool("mariadb-binlog", "mysqlbinlog"),
                f"--defaults-extra-file={self.cnf}",
                "--read-from-remote-server",
                f"--start-position={self.start[1]}",
                f"--stop-position={self.end[1]}",
            ]
            + (["--verbose"] if verbose else [])
            + self._binlog_files()
        )
        return median_time(cmd, None, repeat)

    library_baseline_name = "mysql-replication loop (rows decoded to Python dicts, nothing else)"

    def run_library_baseline(self) -> float:
        """The Python ceiling of the decoder our source uses: mysql-replication alone
        reading the same log range and decoding every row (the capture adds canonical
        values, the window and the output)."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        settings = {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password}
        t0 = time.perf_counter()
        stream = BinLogStreamReader(
            connection_settings=settings,
            server_id=4_000_000_000 - os.getpid() % 1000,
            resume_stream=True,
            log_file=self.start[0],
            log_pos=self.start[1],
            blocking=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )
        try:
            for ev in stream:
                for _ in ev.rows:  # .rows decodes every row of the event
                    pass
                if (stream.log_file, stream.log_pos) >= self.end:
                    break
            return time.perf_counter() - t0
        finally:
            stream.close()

    def run_dump_baseline(self, repeat: int = 3) -> float:
        cmd = [
            find_tool("mariadb", "mysql"),
            f"--defaults-extra-file={self.cnf}",
            "--quick",
            "--batch",
            "-e",
            f"SELECT * FROM {self.dump_table} ORDER BY id",
        ]
        return median_time(cmd, None, repeat)

    def cleanup(self, source_ids: list[str]) -> None:
        c = self.connect()
        try:
            cur = c.cursor()
            cur.execute(f"DROP DATABASE IF EXISTS {self.ns}")
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = 'dblog' AND TABLE_NAME = 'watermarks'"
            )
            if cur.fetchone()[0] and source_ids:
                cur.execute("DELETE FROM dblog.watermarks WHERE source_id IN %s", (tuple(source_ids),))
            c.commit()
        finally:
            c.close()
            shutil.rmtree(self._tmp, ignore_errors=True)


DATABASES = {"pg": PostgresBench, "mysql": MariaDBBench}
