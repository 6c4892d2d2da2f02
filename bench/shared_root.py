"""Captures sharing one lake root (issue 32 part 3): commit conflicts and commit latency.

``--writers`` processes each run the capture's Writer over a Delta changelog output with a
source id of its own, all into ONE lake root, flushing a small batch every
``--flush-interval`` seconds (a busy capture commits about 5 times a second) for
``--seconds``: once into a root of the layout before (one changelog table for every source)
and once into a new root (a table per source); the baseline is one writer alone in the same
run. Printed per run: commits,
commit conflicts (another writer took the version first; the writer retries them),
conflicts per commit, and the commit latency p50/p99 (from handing a batch to the writer to
its durable marker), with the ratio of the shared run to the baseline.

    eval "$(scripts/services env)"
    python -m bench.shared_root [--writers 5] [--seconds 30] [--lake local|s3]

``--lake s3`` writes to the test store (``scripts/services up s3``), else a temporary dir.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid


def _writer(root: str, source: str, seconds: float, interval: float, queue) -> None:
    import logging

    from airflow_provider_dblog.core.writer import Writer
    from airflow_provider_dblog.outputs import make_output

    class Count(logging.Handler):
        warnings = 0

        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                Count.warnings += 1

    logging.getLogger("airflow_provider_dblog.core.writer").addHandler(Count())
    out = make_output(root)
    out.open()
    w = Writer(out, flush_interval=interval, epoch=1)
    w.start()
    latencies: list[float] = []
    end = time.monotonic() + seconds
    try:
        _load(w, source, interval, end, latencies)
        w.close(timeout=120)
        latencies += [time.monotonic() - m.at for m in w.completed()]
        failed = None
    except Exception as exc:  # the writer gave up (the output refused every retry)
        failed = str(exc).splitlines()[0][:160]
    queue.put(
        {
            "commits": w.flushes,
            "conflicts": getattr(w, "commit_conflicts", 0),
            "warnings": Count.warnings,
            "latencies": latencies,
            "failed": failed,
        }
    )


def _load(w, source: str, interval: float, end: float, latencies: list) -> None:
    from airflow_provider_dblog.core.events import ChangeEvent, Op, Position
    from airflow_provider_dblog.core.markers import Marker

    class Mark(Marker):
        def __init__(self, at: float):
            self.at = at

    n, next_put = 0, time.monotonic()
    while time.monotonic() < end:
        if time.monotonic() >= next_put:  # a batch of 20 events per interval, then its marker
            batch = []
            for _ in range(20):
                n += 1
                batch.append(ChangeEvent(source, "public.t", Op.CREATE, (n,), None, {"id": n}, Position(f"{n:016d}")))
            w.put_many([*batch, Mark(time.monotonic())])
            next_put += interval
        latencies += [time.monotonic() - m.at for m in w.completed()]  # polled every 5 ms
        time.sleep(0.005)


def run(root: str, writers: int, seconds: float, interval: float) -> dict:
    spawn = mp.get_context("spawn")  # delta-rs' runtime does not survive a fork (the parent made tables)
    queue = spawn.Queue()
    ctx = [
        spawn.Process(target=_writer, args=(root, f"src{i}", seconds, interval, queue), daemon=True)
        for i in range(writers)
    ]
    for p in ctx:
        p.start()
    results = [queue.get(timeout=seconds + 300) for _ in ctx]
    for p in ctx:
        p.join(60)
    lat = sorted(x for r in results for x in r["latencies"])
    commits = sum(r["commits"] for r in results)
    conflicts = sum(r["conflicts"] for r in results)
    warnings = sum(r["warnings"] for r in results)
    return {
        "writers_that_gave_up": [r["failed"] for r in results if r["failed"]],
        "warnings": warnings,
        "writers": writers,
        "commits": commits,
        "conflicts": conflicts,
        "conflicts_per_commit": round(conflicts / commits, 3) if commits else None,
        "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--flush-interval", type=float, default=0.2)
    ap.add_argument("--lake", choices=["local", "s3"], default="local")
    args = ap.parse_args()
    if args.lake == "s3":
        from tests.support.s3_env import aws_env

        os.environ.update(aws_env())

    def root() -> str:
        if args.lake == "s3":
            return f"s3://{os.environ['DBLOG_S3_BUCKET']}/bench-{uuid.uuid4().hex[:8]}/lake"
        return tempfile.mkdtemp(prefix="dblog-shared-root-")

    def shared_layout_root() -> str:
        """A root of the layout before the table per source: its one changelog table exists."""
        from deltalake import DeltaTable

        from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA
        from airflow_provider_dblog.outputs.lake_layout import changelog_path

        r = root()
        DeltaTable.create(changelog_path(r), CHANGELOG_SCHEMA)
        return r

    alone = run(root(), 1, args.seconds, args.flush_interval)
    one_table = run(shared_layout_root(), args.writers, args.seconds, args.flush_interval)
    per_source = run(root(), args.writers, args.seconds, args.flush_interval)
    print(json.dumps({"lake": args.lake, "alone": alone, "one_table": one_table, "per_source": per_source}, indent=1))
    for name, shared in (("one changelog table (layout before)", one_table), ("a table per source", per_source)):
        if alone["p50_ms"] and shared["p50_ms"]:
            print(
                f"{args.writers} writers in one root, {name}, vs one alone ({args.lake}): "
                f"{shared['conflicts']} lost commits (retried) and {shared['warnings']} warnings in "
                f"{shared['commits']} commits, commit latency p50 x{shared['p50_ms'] / alone['p50_ms']:.2f}, "
                f"p99 x{shared['p99_ms'] / alone['p99_ms']:.2f}"
            )


if __name__ == "__main__":
    main()
