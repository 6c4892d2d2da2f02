"""Debezium's embedded engine as a same-run baseline for the capture benchmarks (issue 13).

``bench/debezium/`` is a tiny Maven project (one class, ``dblog.bench.DebeziumBench``) that runs
the embedded engine for one connector with its default settings over a log range a benchmark
has just written, with one of these consumers: ``count`` (a ``notifying`` batch handler that
counts the table's change events; nothing is serialised) or ``json`` (the engine's Json format:
every record serialised by Kafka's JsonConverter, schemas included as by default); bench.kafka
adds ``kafka``: those JSON records sent by a Kafka producer, each batch finished once the
broker acknowledged it (as Debezium Server's Kafka sink). It stops at
the N-th change event of the table and prints one JSON line: events, seconds from building the
engine to that event (connector start-up included, JVM start-up not), process CPU seconds over
the same span (all JVM threads: connector, engine, JIT, GC).

The jar and its dependencies are resolved from Maven Central ONCE and cached in
``.bench-debezium/`` (a project-local Maven repository, the built jar and a flat lib/ dir), as
scripts/spark-jars does for the Delta jars; a changed pom.xml or class rebuilds it.

Debezium 3.5.0.Final (bench/debezium/pom.xml): the newest release whose MariaDB connector
Maven Central serves here; its MySQL connector no longer accepts MariaDB servers (3.6.1 fails
on MariaDB 10.11 with ``SHOW BINARY LOG STATUS``), so a MariaDB server is read with
``debezium-connector-mariadb``.

How the log range is given: PostgreSQL: a pgoutput slot per run, created before the load
(``prepare``), and the benchmark's own publication of the table; MariaDB/MySQL: the binlog
file/position before the load (and on MariaDB the GTID position there, ``BINLOG_GTID_POS``),
written into the engine's file offset store before it starts
(``snapshot.mode=recovery``: the table's schema is read from the server since its CREATE TABLE
lies before the range; no rows are snapshotted).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from typing import Callable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(REPO, "bench", "debezium")
CACHE = os.environ.get("DBLOG_BENCH_DEBEZIUM_DIR", os.path.join(REPO, ".bench-debezium"))
MAIN_CLASS = "dblog.bench.DebeziumBench"
CONSUMERS = {
    "count": "Debezium embedded, count-only consumer",
    "json": "Debezium embedded, JSON-serialising consumer",
    "kafka": "Debezium embedded → Kafka producer (JSON without schemas)",
}
ENGINE_CONSUMERS = ("count", "json")  # what bench.vs_debezium compares; "kafka": bench.kafka


def _sources_digest() -> str:
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(PROJECT)):
        if os.path.sep + "target" in d:
            continue
        for f in sorted(files):
            if f == "pom.xml" or f.endswith(".java"):
                with open(os.path.join(d, f), "rb") as fh:
                    h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


def classpath(say: Callable[[str], None] = print) -> str:
    """The engine's classpath, building it first if the cache is missing or stale."""
    digest = _sources_digest()
    stamp = os.path.join(CACHE, "classpath.txt")
    if os.path.exists(stamp):
        with open(stamp) as f:
            lines = f.read().splitlines()
        if lines and lines[0] == digest and all(os.path.exists(p) for p in lines[1].split(os.pathsep)):
            return lines[1]
    mvn = shutil.which("mvn")
    if not mvn:
        raise RuntimeError("bench: Debezium baseline needs Maven (mvn) and a JDK 17")
    say(f"debezium: building {PROJECT} with Maven into {CACHE} (once)")
    target, lib = os.path.join(CACHE, "target"), os.path.join(CACHE, "lib")
    shutil.rmtree(lib, ignore_errors=True)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        os.path.join(PROJECT, "pom.xml"),
        f"-Dmaven.repo.local={os.path.join(CACHE, 'm2')}",
        f"-Ddblog.build.dir={target}",
        "package",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={lib}",
        "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"bench: building the Debezium baseline failed:\n{proc.stdout.decode()[-3000:]}")
    jars = [os.path.join(target, "dblog-debezium-bench-1.jar")] + sorted(
        os.path.join(lib, j) for j in os.listdir(lib) if j.endswith(".jar")
    )
    cp = os.pathsep.join(jars)
    with open(stamp, "w") as f:
        f.write(f"{digest}\n{cp}\n")
    return cp


def parse_result(stdout: str) -> dict:
    """The JSON line the Java class prints last (log lines go to stderr, but be lenient)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            out = json.loads(line)
            if "error" in out:
                raise RuntimeError(f"Debezium run failed after {out.get('events', 0)} events: {out['error']}")
            return out
    raise RuntimeError(f"no result line from the Debezium run: {stdout[-500:]!r}")


def rate(result: dict, n: int) -> dict:
    """Events/s and CPU µs per event of one Debezium run over n log events (the N the
    benchmark wrote; the sentinel row Debezium also waits for is not counted, as for ours)."""
    s, cpu = float(result["seconds"]), float(result["cpu_s"])
    out = {
        "seconds": round(s, 3),
        "events_per_s": round(n / s, 1),
        "cpu_s": round(cpu, 3),
        "cpu_us_per_event": round(cpu / n * 1e6, 2),
        "startup_s": round(float(result["first_event_s"]), 3),
    }
    if result.get("json_bytes"):
        out["json_mb"] = round(result["json_bytes"] / 2**20, 1)
    return out


def ratio(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    """ours / Debezium for a rate (higher is better for us); None when either is missing."""
    if not ours or not theirs:
        return None
    return round(ours / theirs, 3)


def cpu_ratio(ours_us: Optional[float], theirs_us: Optional[float]) -> Optional[float]:
    """Debezium CPU per event / ours: > 1 when we spend less CPU per event."""
    if not ours_us or not theirs_us:
        return None
    return round(theirs_us / ours_us, 3)


# -- wiring into a benchmark's log range --------------------------------------------------------
def _slot(db, consumer: str) -> str:
    return f"{db.raw_name}_dbz_{consumer}"


def prepare(db, consumers=ENGINE_CONSUMERS) -> None:
    """Before the load: a pgoutput slot per Debezium run (PostgreSQL), so each reads the same
    range from the start of the load. MariaDB needs nothing (its range starts at db.start).
    Call after db.prepare_log_baseline() (which creates the publication)."""
    if db.kind == "postgres":
        for c in consumers:
            db._run(f"SELECT pg_create_logical_replication_slot('{_slot(db, c)}', 'pgoutput')", autocommit=True)


def cleanup(db, consumers=ENGINE_CONSUMERS) -> None:
    if db.kind != "postgres":
        return
    c = db.connect()
    c.autocommit = True
    try:
        cur = c.cursor()
        for name in (_slot(db, k) for k in consumers):
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND active",
                (name,),
            )
            cur.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (name,),
            )
    finally:
        c.close()


def run(
    db,
    consumer: str,
    table: str,
    n_events: int,
    timeout: float,
    say: Callable[[str], None] = print,
    snapshot_of: Optional[str] = None,
    extra: Optional[dict] = None,
) -> dict:
    """One Debezium run over the range the benchmark wrote into ``table`` (n_events, then the
    sentinel row: Debezium stops at the (n_events + 1)-th change event of the table).

    ``snapshot_of``: instead, a snapshot (``snapshot.mode=initial``) of ``table``'s n_events
    rows, through that publication on PostgreSQL (the slot is created by Debezium and dropped
    by ``cleanup``); MariaDB/MySQL snapshot without locks (``snapshot.locking.mode=none``, as
    our dumps take none). It stops at the n_events-th read event. ``extra``: more arguments
    (``kafka``: ``bootstrap``, ``kafka_topic``, ``dbz.*`` engine settings)."""
    cp = classpath(say)
    work = tempfile.mkdtemp(prefix="dblog-bench-debezium-")
    try:
        args = [
            f"consumer={consumer}",
            f"host={db.host}",
            f"port={db.port}",
            f"user={db.user}",
            f"table={table}",
            f"events={n_events + (0 if snapshot_of else 1)}",
            f"timeout={timeout}",
            f"workdir={work}",
        ]
        args += [f"{k}={v}" for k, v in (extra or {}).items()]
        if snapshot_of:
            args += ["dbz.snapshot.mode=initial"]
        if db.kind == "postgres":
            args += ["connector=postgres", f"database={db.db}", f"slot={_slot(db, consumer)}"]
            args += [f"publication={snapshot_of or db.raw_name}"]
        elif snapshot_of:
            mariadb = "mariadb" in str(db._run("SELECT VERSION()")[0][0]).lower()
            args += [f"connector={'mariadb' if mariadb else 'mysql'}", "dbz.snapshot.locking.mode=none"]
            args += [f"server_id={5_400_000 + os.getpid() % 100_000}"]
        else:
            mariadb = "mariadb" in str(db._run("SELECT VERSION()")[0][0]).lower()
            args += [f"connector={'mariadb' if mariadb else 'mysql'}"]
            args += [f"binlog_file={db.start[0]}", f"binlog_pos={db.start[1]}"]
            if mariadb:  # its connector starts from a GTID position, not from file/position alone
                gtids = db._run(f"SELECT BINLOG_GTID_POS('{db.start[0]}', {int(db.start[1])})")[0][0]
                args += [f"binlog_gtids={gtids or ''}"]
            args += [f"server_id={5_400_000 + os.getpid() % 100_000}"]  # unique among replicas
        env = dict(os.environ, DBZ_PASSWORD=db.password)
        cmd = [
            shutil.which("java") or "java",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.logFile=System.err",
            "-cp",
            cp,
            MAIN_CLASS,
            *args,
        ]
        err_path = os.path.join(work, "stderr.log")
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
            try:
                out, _ = proc.communicate(timeout=timeout + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
        with open(err_path, "rb") as err:
            log_tail = err.read()[-1500:].decode(errors="replace")
        try:
            result = parse_result(out.decode(errors="replace"))
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; java exit {proc.returncode}; stderr: {log_tail}") from None
        result["name"] = CONSUMERS[consumer]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
