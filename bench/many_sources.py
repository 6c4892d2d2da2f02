"""Many sources at once (issue 33, part 4a): what a capture costs in a fleet.

    eval "$(scripts/services env)"; scripts/services up zk   # optional: state in ZooKeeper
    python -m bench.many_sources [--sources 20] [--tables 50] [--rows 10]
        [--idle-seconds 30] [--busy-seconds 30] [--rate 100] [--plot docs/img/many-sources.png]

``--sources`` sources, every other one a PostgreSQL schema (pgoutput, a slot of its own) and a
MariaDB database (a binlog connection of its own), each of ``--tables`` narrow tables, are
captured at once by one ``dblog capture`` child each (the Delta changelog; the state in
ZooKeeper when DBLOG_ZK_HOSTS is set, one chroot per source, else a local file each).
Then, in the same run, the same with two sources (one of each kind): the baseline.

* idle: CPU (percent of one core) and RSS of each capture over ``--idle-seconds`` with no
  change to any table (their heartbeats, lease renewals and status reports go on);
* busy: the same while one writer inserts ``--rate`` rows per second in all, spread over every
  table of every source (the MariaDB captures each read the whole binlog: every source's
  writes, filtered);
* ZooKeeper (with DBLOG_ZK_HOSTS): znodes, and requests per second in each phase (``mntr``).

Printed: per kind the mean per capture, the sums, and the ratio of the fleet's per-capture
figures to the baseline's (a capture that costs more because others run beside it shows).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from typing import Optional

from airflow_provider_dblog.config import make_state

from .common import say
from .engine_runs import ChildCapture
from .many_tables import ManyMariaTables, ManyTables, cpu_seconds


class FleetCapture(ChildCapture):
    """A capture child whose memory is read on demand (no 20 ms sampler thread per child,
    which would cost the bench process more than the captures it measures); its state in
    ZooKeeper when ``zk`` names the servers."""

    def __init__(self, db, source_id: str, workdir: str, zk: Optional[str]):
        super().__init__(db, source_id, workdir)
        if zk:
            self.state_path = f"zk://{zk}/dblog_bench/{source_id}"
            self.state = make_state({"url": self.state_path})
            self._write_config()

    def _sample(self) -> None:
        return


def zk_mntr(hosts: str) -> dict:
    """ZooKeeper's ``mntr`` figures (zk_znode_count, zk_packets_received, ...) of one server."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts.split(",")[0])
    client.start(timeout=10)
    try:
        text = client.command(b"mntr")
    finally:
        client.stop()
        client.close()
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


class Writer(threading.Thread):
    """One row per transaction into a random table of a random source, ``rate`` a second."""

    def __init__(self, dbs: list, rate: float, first_key: int = 10**9) -> None:
        super().__init__(daemon=True, name="fleet-writer")
        self.dbs, self.rate, self.first_key = dbs, rate, first_key
        self.done = threading.Event()
        self.writes = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        rng = random.Random(11)
        conns = [db.connect() for db in self.dbs]
        try:
            next_at = time.monotonic()
            while not self.done.is_set():
                i = rng.randrange(len(self.dbs))
                db, c = self.dbs[i], conns[i]
                cur = c.cursor()
                cur.execute(f"INSERT INTO {rng.choice(db.names)} VALUES (%s, 1, 'w')", (self.first_key + self.writes,))
                c.commit()
                self.writes += 1
                next_at += 1 / self.rate
                time.sleep(max(0.0, next_at - time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
        finally:
            for c in conns:
                c.close()


def phase(caps: list, seconds: float, zk: Optional[str], check=lambda: None) -> dict:
    """CPU and RSS of each capture over ``seconds``; ZooKeeper's request rate."""
    c0 = {cap.source_id: cpu_seconds(cap.proc.pid) for cap in caps}
    z0 = zk_mntr(zk) if zk else None
    t0 = time.perf_counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        for cap in caps:
            cap.check()
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    out: dict = {
        "cpu_pct": {cap.source_id: 100 * (cpu_seconds(cap.proc.pid) - c0[cap.source_id]) / wall for cap in caps},
        "rss_mib": {cap.source_id: cap.rss_mb()[0] for cap in caps},
    }
    if zk and z0:
        z1 = zk_mntr(zk)
        out["zk_requests_per_s"] = (int(z1["zk_packets_received"]) - int(z0["zk_packets_received"])) / wall
        out["zk_znodes"] = int(z1["zk_znode_count"])
    return out


def one_run(n: int, tables: int, rows: int, idle: float, busy: float, rate: float, zk, workdir: str) -> dict:
    kinds = [("postgres", "mysql")[i % 2] for i in range(n)]
    dbs = [ManyTables(tables, rows) if k == "postgres" else ManyMariaTables(tables, rows) for k in kinds]
    ids = [f"bench_ms_{db.tag}" for db in dbs]
    caps: list[FleetCapture] = []
    z_before = int(zk_mntr(zk)["zk_znode_count"]) if zk else 0
    try:
        say(f"{n} sources x {tables} tables: creating them")
        for db in dbs:
            db.create()
        t0 = time.perf_counter()
        for db, sid in zip(dbs, ids):
            caps.append(FleetCapture(db, sid, workdir, zk).start())
        for cap in caps:
            cap.prime(-1)
        startup = time.perf_counter() - t0
        say(f"{n} sources: every capture checkpointed after {startup:.1f} s; idle for {idle:.0f} s")
        time.sleep(2)
        quiet = phase(caps, idle, zk)
        say(f"{n} sources: {rate:.0f} rows/s over every table for {busy:.0f} s")
        writer = Writer(dbs, rate)
        writer.start()

        def writer_ok() -> None:
            if writer.error:
                raise writer.error

        loaded = phase(caps, busy, zk, writer_ok)
        writer.done.set()
        writer.join(10)
        by_kind = {}
        for kind in ("postgres", "mysql"):
            mine = [sid for sid, k in zip(ids, kinds) if k == kind]
            if mine:
                by_kind[kind] = {
                    "captures": len(mine),
                    "idle_cpu_pct": round(sum(quiet["cpu_pct"][s] for s in mine) / len(mine), 2),
                    "idle_rss_mib": round(sum(quiet["rss_mib"][s] for s in mine) / len(mine), 1),
                    "busy_cpu_pct": round(sum(loaded["cpu_pct"][s] for s in mine) / len(mine), 2),
                    "busy_rss_mib": round(sum(loaded["rss_mib"][s] for s in mine) / len(mine), 1),
                }
        out = {
            "sources": n,
            "tables": tables,
            "startup_s": round(startup, 1),
            "writes": writer.writes,
            "idle_cpu_pct_total": round(sum(quiet["cpu_pct"].values()), 1),
            "busy_cpu_pct_total": round(sum(loaded["cpu_pct"].values()), 1),
            "busy_rss_mib_total": round(sum(loaded["rss_mib"].values()), 1),
            "by_kind": by_kind,
        }
        if zk:
            out["zk_znodes_added"] = quiet["zk_znodes"] - z_before
            out["zk_idle_requests_per_s"] = round(quiet["zk_requests_per_s"], 1)
            out["zk_busy_requests_per_s"] = round(loaded["zk_requests_per_s"], 1)
        return out
    finally:
        for cap in caps:
            cap.stop()
        for db, sid in zip(dbs, ids):
            db.drop([sid])


def markdown(base: dict, fleet: dict) -> str:
    out = [
        f"| per capture | kind | {base['sources']} sources | {fleet['sources']} sources | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for key, label in (
        ("idle_cpu_pct", "idle CPU (% of a core)"),
        ("idle_rss_mib", "idle RSS (MiB)"),
        ("busy_cpu_pct", "busy CPU (% of a core)"),
        ("busy_rss_mib", "busy RSS (MiB)"),
    ):
        for kind in ("postgres", "mysql"):
            x, y = base["by_kind"][kind][key], fleet["by_kind"][kind][key]
            out.append(
                f"| {label} | {kind} | {x:,} | {y:,} | {y / x:.2f}× |" if x else f"| {label} | {kind} | 0 | {y} | – |"
            )
    out += ["", "| all captures | " + f"{base['sources']} sources | {fleet['sources']} sources |", "|---|---:|---:|"]
    for key, label in (
        ("startup_s", "start-up to every first checkpoint (s)"),
        ("idle_cpu_pct_total", "idle CPU (% of a core)"),
        ("busy_cpu_pct_total", "busy CPU (% of a core)"),
        ("busy_rss_mib_total", "busy RSS (MiB)"),
        ("writes", "rows written in the busy phase"),
        ("zk_znodes_added", "ZooKeeper znodes"),
        ("zk_idle_requests_per_s", "ZooKeeper requests/s, idle"),
        ("zk_busy_requests_per_s", "ZooKeeper requests/s, busy"),
    ):
        if key in fleet:
            out.append(f"| {label} | {base[key]:,} | {fleet[key]:,} |")
    return "\n".join(out)


def plot(base: dict, fleet: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    kinds = ("postgres", "mysql")
    for ax, (metric, label) in zip(
        axes, (("cpu_pct", "CPU per capture (% of a core)"), ("rss_mib", "RSS per capture (MiB)"))
    ):
        for i, run in enumerate((base, fleet)):
            vals = [run["by_kind"][k][f"idle_{metric}"] for k in kinds] + [
                run["by_kind"][k][f"busy_{metric}"] for k in kinds
            ]
            ax.bar([x + 0.4 * i for x in range(4)], vals, width=0.4, label=f"{run['sources']} sources")
        ax.set_xticks([x + 0.2 for x in range(4)], ["pg idle", "maria idle", "pg busy", "maria busy"])
        ax.set_title(label)
        ax.legend()
    fig.suptitle(f"{fleet['tables']} tables per source; busy: {fleet['writes']} rows written in all")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=int, default=20)
    p.add_argument("--tables", type=int, default=50)
    p.add_argument("--rows", type=int, default=10)
    p.add_argument("--idle-seconds", type=float, default=30)
    p.add_argument("--busy-seconds", type=float, default=30)
    p.add_argument("--rate", type=float, default=100, help="rows per second over every source")
    p.add_argument("--plot", metavar="PNG")
    a = p.parse_args()
    zk = os.environ.get("DBLOG_ZK_HOSTS")
    with tempfile.TemporaryDirectory(prefix="dblog-bench-many-sources-") as workdir:
        base = one_run(2, a.tables, a.rows, a.idle_seconds, a.busy_seconds, a.rate, zk, workdir)
        fleet = one_run(a.sources, a.tables, a.rows, a.idle_seconds, a.busy_seconds, a.rate, zk, workdir)
    if a.plot:
        plot(base, fleet, a.plot)
    print(json.dumps({"baseline": base, "fleet": fleet}, indent=2))
    print(markdown(base, fleet))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
