"""Captures under several Airflow triggerers (issue 33): how Airflow spreads them, what a
capture costs its triggerer, and where a SIGKILLed triggerer's captures go.

    scripts/services up pg zk && eval "$(scripts/services env)"
    python -m bench.triggerers [--sources 10] [--tables 5] [--triggerers 2]
        [--idle-seconds 60] [--busy-seconds 60] [--rate 50] [--restarts 3]

A real Airflow (scripts/airflow_stack.py: api-server, scheduler, dag-processor and
``--triggerers`` triggerers, LocalExecutor, a fresh metadata database in the services'
PostgreSQL) runs ``dags/dblog_fleet.py`` with ``--sources`` PostgreSQL sources (a schema of
``--tables`` narrow tables each, a slot each), their state in the services' ZooKeeper. Two
runs, each on a fresh Airflow, differing only in Airflow's triggerer settings:

* ``defaults``: ``[triggerer] capacity`` 1000, ``max_trigger_to_select_per_loop`` 50;
* ``one per loop``: ``max_trigger_to_select_per_loop`` 1 (Airflow's setting "to keep load
  balanced across triggerers in HA deployments"), capacity unchanged;
* ``capacity N``: ``[triggerer] capacity`` sources / triggerers + 1, a bound on each.

Per run: the captures each triggerer runs once all are up, and again after each of
``--restarts`` restarts of every triggerer at once (Airflow hands the triggers out anew: a
deployment's rollout); the triggerers' own CPU (every
process of a triggerer's tree except the capture children and theirs) with no capture yet
(the baseline, same run), with every capture idle, and under ``--rate`` one-row transactions
a second spread over every table; the capture children's CPU beside it. The second and third runs then
SIGKILL the triggerer holding the most captures: seconds until each of its sources runs a new
capture child under a survivor (if one has room within 90 s), and the spread after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Optional

from scripts import airflow_stack as stack

from .common import say
from .many_sources import Writer
from .many_tables import ManyTables

CAPTURE_ARGV = re.compile(rb"airflow_provider_dblog\.cli\x00.*\x00capture\x00")


def processes() -> dict[int, tuple[int, bytes]]:
    """Every process: pid -> (ppid, argv as NUL-separated bytes)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            argv = (d / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        out[int(d.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), argv)
    return out


def cpu_ticks(pid: int) -> Optional[int]:
    """utime + stime + the waited-for children's (cutime + cstime), in clock ticks."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return sum(int(fields[i]) for i in (11, 12, 13, 14))


class Tree:
    """The processes under each triggerer, split into the triggerer's own and its captures."""

    def __init__(self, af: stack.Airflow) -> None:
        self.roots = {n: p.proc.pid for n, p in af.procs.items() if n.startswith("triggerer") and p.proc}
        procs = processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        self.own: dict[str, set[int]] = {}
        self.captures: dict[str, set[int]] = {}
        for name, root in self.roots.items():
            own, caps, todo = set(), set(), [root] if root in procs else []
            while todo:
                pid = todo.pop()
                if CAPTURE_ARGV.search(procs[pid][1] + b"\x00"):
                    caps.add(pid)  # its own children (none today) stay out of the triggerer's figure
                    continue
                own.add(pid)
                todo += children.get(pid, [])
            self.own[name], self.captures[name] = own, caps

    def spread(self) -> dict[str, int]:
        return {n: len(c) for n, c in self.captures.items()}


def cpu_pct(af: stack.Airflow, seconds: float, check=lambda: None) -> dict:
    """Percent of a core over ``seconds``: each triggerer's own processes, and all captures."""
    before = Tree(af)
    t0 = {pid: cpu_ticks(pid) for pids in (*before.own.values(), *before.captures.values()) for pid in pids}
    w0 = time.perf_counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        af.assert_alive()
        time.sleep(1)
    wall = time.perf_counter() - w0
    after = Tree(af)
    hz = os.sysconf("SC_CLK_TCK")

    def used(pids: set[int]) -> float:
        total = 0
        for pid in pids:
            now = cpu_ticks(pid)
            if now is not None:
                total += now - (t0.get(pid) or 0)  # a process new since the start: all of it
        return round(100 * total / hz / wall, 2)

    return {
        "triggerer_cpu_pct": {n: used(p) for n, p in after.own.items()},
        "captures_cpu_pct": round(sum(used(p) for p in after.captures.values()), 2),
        "captures": after.spread(),
    }


def fleet_env(dbs: list, ids: list[str], zk: str, chroot: str, lake: str) -> dict[str, str]:
    env = {
        "DBLOG_FLEET": ",".join(ids),
        stack.conn_env_name("dblog_state_default"): json.dumps(
            {"conn_type": "dblog_state", "host": zk, "schema": chroot}
        ),
        "DBLOG_CHANGELOG": lake,
    }
    for db, sid in zip(dbs, ids):
        env[stack.conn_env_name(sid)] = json.dumps(
            {
                "conn_type": "postgres",
                "host": db.host,
                "port": db.port,
                "login": db.user,
                "password": db.password,
                "schema": db.db,
                "extra": {"source_id": sid, "tables": db.names},
            }
        )
    return env


def wait_spread(af: stack.Airflow, n: int, timeout: float) -> tuple[float, dict[str, int]]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        af.assert_alive()
        spread = Tree(af).spread()
        if sum(spread.values()) >= n:
            return time.monotonic() - t0, spread
        time.sleep(0.5)
    raise TimeoutError(
        f"bench: {n} capture children not running after {timeout:.0f} s: {Tree(af).spread()}\n{af.tails()}"
    )


def one_run(
    label: str, settings: dict, args, dbs: list, ids: list[str], work: Path, kill: bool, first_key: int
) -> dict:
    e = os.environ
    chroot = f"/dblog_bench_trig_{os.getpid()}_{label.replace(' ', '_')}"  # a state of its own per run
    env = {**fleet_env(dbs, ids, e["DBLOG_ZK_HOSTS"], chroot, f"delta://{work / label / 'lake'}"), **settings}
    with stack.metadata_database(
        e["DBLOG_PG_HOST"], int(e["DBLOG_PG_PORT"]), e["DBLOG_PG_SUPERUSER"], e["DBLOG_PG_SUPERUSER_PASSWORD"]
    ) as sql_conn:
        af = stack.Airflow(work / label / "airflow-home", sql_conn, env)
        try:
            af.migrate()
            af.start()
            for _ in range(args.triggerers - 1):
                af.add_triggerer()
            dag_ids = tuple(f"dblog_capture__{sid}" for sid in ids)
            af.wait_ready(dag_ids, timeout=180)
            say(
                f"{label}: Airflow up with {args.triggerers} triggerers; their CPU with no capture for {args.idle_seconds:.0f} s"
            )
            empty = cpu_pct(af, args.idle_seconds)
            for d in dag_ids:
                af.unpause(d)
            up_s, spread = wait_spread(af, len(ids), 600)
            say(f"{label}: {len(ids)} captures running after {up_s:.0f} s, per triggerer {spread}; idle")
            time.sleep(15)  # the captures' start-up work done
            idle = cpu_pct(af, args.idle_seconds)
            say(
                f"{label}: {args.rate:.0f} one-row transactions a second over every table for {args.busy_seconds:.0f} s"
            )
            writer = Writer(dbs, args.rate, first_key=first_key)
            writer.start()

            def writer_ok() -> None:
                if writer.error:
                    raise writer.error

            busy = cpu_pct(af, args.busy_seconds, writer_ok)
            writer.done.set()
            writer.join(10)
            spreads = [spread]
            for i in range(args.restarts):  # every triggerer stopped, then all started at once
                triggerers = [n for n in af.procs if n.startswith("triggerer")]
                for n in triggerers:
                    af.procs[n].terminate()
                for n in triggerers:
                    af.procs[n].reap()
                for n in triggerers:
                    af.procs[n].start()
                _, again = wait_spread(af, len(ids), 600)
                say(f"{label}: restart {i + 1} of every triggerer: per triggerer {again}")
                spreads.append(again)
            out = {
                "label": label,
                "spreads": spreads,
                "settings": settings,
                "captures_up_s": round(up_s, 1),
                "no_capture": empty,
                "idle": idle,
                "busy": {**busy, "writes": writer.writes},
            }
            if kill:
                tree = Tree(af)
                victim = max(tree.captures, key=lambda n: len(tree.captures[n]))
                orphans = set(tree.captures[victim])
                say(f"{label}: SIGKILL of {victim} and its process group ({len(orphans)} captures)")
                t0 = time.monotonic()
                af.procs[victim].kill()
                gone, back = None, None
                while time.monotonic() - t0 < 90:  # a capacity may leave some without a triggerer
                    alive = [p for p in orphans if stack.pid_alive(p)]
                    if gone is None and not alive:
                        gone = time.monotonic() - t0
                    now = Tree(af)
                    if sum(now.spread().values()) >= len(ids) and not alive:
                        back = time.monotonic() - t0
                        break
                    time.sleep(0.2)
                out["kill"] = {
                    "victim": victim,
                    "captures": len(orphans),
                    "old_children_gone_s": None if gone is None else round(gone, 1),
                    "all_running_again_s": None if back is None else round(back, 1),
                    "spread_after": Tree(af).spread(),
                }
                say(f"{label}: after the kill {out['kill']}")
            return out
        finally:
            af.stop()


def markdown(runs: list[dict], n: int) -> str:
    names = sorted({t for r in runs for sp in r["spreads"] for t in sp})
    out = [
        "| run | captures per triggerer (first start, then each restart) | triggerers' own CPU, no capture (% of a core) | "
        f"with {n} idle captures | busy | per capture, idle / busy | captures' CPU idle / busy |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        no = sum(r["no_capture"]["triggerer_cpu_pct"].values())
        idle = sum(r["idle"]["triggerer_cpu_pct"].values())
        busy = sum(r["busy"]["triggerer_cpu_pct"].values())
        spread = ", ".join("/".join(str(sp.get(t, 0)) for t in names) for sp in r["spreads"])
        out.append(
            f"| {r['label']} | {spread} | {no:.2f} | {idle:.2f} | {busy:.2f} | "
            f"{(idle - no) / n:.3f} / {(busy - no) / n:.3f} | "
            f"{r['idle']['captures_cpu_pct']:.1f} / {r['busy']['captures_cpu_pct']:.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sources", type=int, default=10)
    p.add_argument("--tables", type=int, default=5)
    p.add_argument("--triggerers", type=int, default=2)
    p.add_argument("--idle-seconds", type=float, default=60)
    p.add_argument("--busy-seconds", type=float, default=60)
    p.add_argument("--rate", type=float, default=50)
    p.add_argument("--restarts", type=int, default=3, help="restarts of every triggerer, a spread each")
    p.add_argument("--only", metavar="LABEL", help="only the runs whose label starts so (defaults, one, capacity)")
    args = p.parse_args()
    if not os.environ.get("DBLOG_ZK_HOSTS"):
        raise SystemExit('bench: needs ZooKeeper: scripts/services up pg zk && eval "$(scripts/services env)"')
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    dbs = [ManyTables(args.tables, 10) for _ in range(args.sources)]
    half = args.sources // args.triggerers + 1
    variants = [
        ("defaults", {}, False),
        ("one per loop", {"AIRFLOW__TRIGGERER__MAX_TRIGGER_TO_SELECT_PER_LOOP": "1"}, True),
        (f"capacity {half}", {"AIRFLOW__TRIGGERER__CAPACITY": str(half)}, True),
    ]
    variants = [v for v in variants if not args.only or v[0].startswith(args.only)]
    # source ids (and so slots and publications) of their own per run: each starts from nothing
    ids = [[f"bench_tr{v}_{db.tag}" for db in dbs] for v in range(len(variants))]
    runs = []
    with tempfile.TemporaryDirectory(prefix="dblog-bench-trig-") as tmp:
        try:
            for db in dbs:
                db.create()
            for (label, settings, kill), run_ids in zip(variants, ids):
                first_key = 10**9 + 10**7 * len(runs)  # the writer's new keys, apart in every run
                runs.append(one_run(label, settings, args, dbs, run_ids, Path(tmp), kill, first_key))
        finally:
            for i, db in enumerate(dbs):
                db.drop([run_ids[i] for run_ids in ids])
    print(json.dumps(runs, indent=1))
    print(markdown(runs, args.sources))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
