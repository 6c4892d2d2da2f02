"""One source with many tables (issue 33, part 4b): what a table costs a capture.

    eval "$(scripts/services env)"
    python -m bench.many_tables [--kind postgres|mysql] [--tables 1000] [--rows 20] [--idle-seconds 30]
    python -m bench.many_tables --sweep 10 100 300 1000 [--plot docs/img/many-tables.png]

A PostgreSQL schema (or a MariaDB database) of ``--tables`` narrow tables (bigint key, int, 10
characters) with ``--rows`` rows each, captured by ``dblog capture`` in a child process
(pgoutput or the binlog, a local state store, the Delta changelog), and the same with 10
tables, the baseline, in the same run:

* start-up: from the process's start to its first checkpoint (a primer row in the first table);
* idle: CPU of the capture process (percent of one core) and its RSS over ``--idle-seconds``
  with no change to any table (its heartbeats and status reports go on);
* status: the bytes of the status value the capture stores (what ``dblog status`` reads);
* ``dump --all``: from the request to DONE, and rows per second.

Printed: each figure for both runs and per table, and the ratio of the big run to the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus

from .common import say
from .dbs import MariaDBBench, PostgresBench
from .engine_runs import ChildCapture

BASELINE_TABLES = 10


class NarrowTables:
    """``tables`` narrow tables of ``rows`` rows each (mixed into a bench database), and a
    source that captures exactly them."""

    def __init__(self, tables: int, rows: int) -> None:
        super().__init__()  # the bench database's
        self.names = [f"{self.ns}.t{i:05d}" for i in range(tables)]
        self.rows = rows

    def source_config(self, source_id: str) -> dict:
        return {**super().source_config(source_id), "tables": self.names}

    def insert_primer(self, key: int) -> None:
        self._run(f"INSERT INTO {self.names[0]} VALUES ({key}, 0, 'primer')")


class ManyTables(NarrowTables, PostgresBench):
    def create(self) -> None:
        c = self.connect()
        try:
            cur = c.cursor()
            cur.execute(f"CREATE SCHEMA {self.ns}")
            for name in self.names:
                cur.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v int NOT NULL, s text NOT NULL)")
                cur.execute(
                    f"INSERT INTO {name} SELECT i, i, md5(i::text)::varchar(10) FROM generate_series(1, %s) i",
                    (self.rows,),
                )
            c.commit()
        finally:
            c.close()

    def drop(self, source_ids: list[str]) -> None:
        self.cleanup(source_ids)
        self._run(f"DROP SCHEMA IF EXISTS {self.ns} CASCADE")


class ManyMariaTables(NarrowTables, MariaDBBench):
    """A MariaDB database of ``tables`` narrow tables of ``rows`` rows each."""

    def create(self) -> None:
        stmts = [f"CREATE DATABASE {self.ns}"]
        for name in self.names:
            stmts.append(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v int NOT NULL, s varchar(16) NOT NULL)")
            stmts.append(f"INSERT INTO {name} SELECT seq, seq, LEFT(MD5(seq), 10) FROM {self.ns}.seq_1_to_{self.rows}")
        self._run(*stmts)

    def drop(self, source_ids: list[str]) -> None:
        self.cleanup(source_ids)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def one_run(tables: int, rows: int, idle: float, workdir: str, kind: str = "postgres") -> dict:
    db = ManyTables(tables, rows) if kind == "postgres" else ManyMariaTables(tables, rows)
    source_id = f"bench_mt_{db.tag}"
    say(f"{tables} tables: creating them ({rows} rows each)")
    db.create()
    cap = ChildCapture(db, source_id, workdir)
    try:
        t0 = time.perf_counter()
        cap.start()
        cap.prime(-1)
        startup = time.perf_counter() - t0
        say(f"{tables} tables: first checkpoint after {startup:.1f} s; idle for {idle:.0f} s")
        time.sleep(2)  # let the start's own work settle
        c0, w0 = cpu_seconds(cap.proc.pid), time.perf_counter()
        time.sleep(idle)
        cpu_pct = 100 * (cpu_seconds(cap.proc.pid) - c0) / (time.perf_counter() - w0)
        rss, _ = cap.rss_mb()
        status = cap.state.get_value(status_key(source_id)) or ""
        spec = DumpSpec.new(source_id, None)
        t1 = time.perf_counter()
        cap.state.add_dump(spec, DumpControl(chunk_size=10_000))
        while (d := cap.state.get_dump(spec.dump_id)).status is not DumpStatus.DONE:
            cap.check()
            if d.status.finished:
                raise RuntimeError(f"bench: dump --all ended {d.status.value}: {d.error}")
            time.sleep(0.1)
        dump_s = time.perf_counter() - t1
        dumped = sum(p.rows for p in d.progress.values())
        say(f"{tables} tables: dump of every table in {dump_s:.1f} s ({dumped} rows)")
        _, peak = cap.rss_mb()
        return {
            "tables": tables,
            "startup_s": round(startup, 2),
            "idle_cpu_pct": round(cpu_pct, 2),
            "idle_rss_mib": round(rss, 1),
            "status_bytes": len(status),
            "dump_all_s": round(dump_s, 2),
            "dump_rows": dumped,
            "dump_rows_per_s": round(dumped / dump_s),
            "peak_rss_mib": round(peak, 1),
        }
    finally:
        cap.stop()
        db.drop([source_id])


def markdown(base: dict, big: dict) -> str:
    rows = [
        ("start-up to the first checkpoint (s)", "startup_s"),
        ("idle CPU (% of a core)", "idle_cpu_pct"),
        ("idle RSS (MiB)", "idle_rss_mib"),
        ("status value (bytes)", "status_bytes"),
        ("dump of every table (s)", "dump_all_s"),
        ("dump rows/s", "dump_rows_per_s"),
        ("peak RSS (MiB)", "peak_rss_mib"),
    ]
    n, b = big["tables"], base["tables"]
    out = [
        f"| | {b} tables | {n} tables | ratio | per extra table |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in rows:
        x, y = base[key], big[key]
        ratio = f"{y / x:.2f}×" if x else "–"
        per = (y - x) / (n - b)
        out.append(f"| {label} | {x:,} | {y:,} | {ratio} | {per:,.4g} |")
    return "\n".join(out)


def sweep_markdown(runs: list[dict]) -> str:
    """One row per table count (``--sweep``)."""
    out = [
        "| tables | start-up (s) | idle CPU (% of a core) | idle RSS (MiB) | status (bytes) | "
        "`dump --all` (s) | peak RSS (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        out.append(
            f"| {r['tables']:,} | {r['startup_s']} | {r['idle_cpu_pct']} | {r['idle_rss_mib']} | "
            f"{r['status_bytes']} | {r['dump_all_s']} | {r['peak_rss_mib']} |"
        )
    return "\n".join(out)


def plot(runs: list[dict], kind: str, path: str) -> None:
    """Each figure against the table count (``--sweep --plot``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["tables"] for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    axes[0].plot(n, [r["startup_s"] for r in runs], "o-", label="start-up to the first checkpoint")
    axes[0].plot(n, [r["dump_all_s"] for r in runs], "s-", label="dump --all")
    axes[0].set_ylabel("seconds")
    axes[1].plot(n, [r["idle_cpu_pct"] for r in runs], "o-", color="#d62728")
    axes[1].set_ylabel("idle CPU (% of a core)")
    axes[1].set_ylim(bottom=0)
    axes[2].plot(n, [r["idle_rss_mib"] for r in runs], "o-", label="idle RSS")
    axes[2].plot(n, [r["peak_rss_mib"] for r in runs], "s-", label="peak RSS (dump --all)")
    axes[2].set_ylabel("MiB")
    axes[2].set_ylim(bottom=0)
    for ax in axes:
        ax.set_xlabel("tables of the source")
    axes[0].legend()
    axes[2].legend()
    fig.suptitle(f"One capture against its table count ({'PostgreSQL 15' if kind == 'postgres' else 'MariaDB 10.11'})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--idle-seconds", type=float, default=30)
    p.add_argument("--kind", choices=("postgres", "mysql"), default="postgres")
    p.add_argument(
        "--sweep", type=int, nargs="+", metavar="N", help="one run per table count instead (e.g. 10 100 300 1000)"
    )
    p.add_argument("--plot", metavar="PNG", help="with --sweep: each figure against the table count")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dblog-bench-many-tables-") as workdir:
        if a.sweep:
            runs = [one_run(n, a.rows, a.idle_seconds, workdir, a.kind) for n in sorted(a.sweep)]
            print(json.dumps(runs, indent=2))
            print(sweep_markdown(runs))
            if a.plot:
                plot(runs, a.kind, a.plot)
            return 0
        base = one_run(BASELINE_TABLES, a.rows, a.idle_seconds, workdir, a.kind)
        big = one_run(a.tables, a.rows, a.idle_seconds, workdir, a.kind)
    print(json.dumps({"baseline": base, "many": big}, indent=2))
    print(markdown(base, big))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
