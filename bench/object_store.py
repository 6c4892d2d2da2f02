"""The capture into an object store vs local disk (issue 32): events/s, commit latency, dump.

For each database the same work runs twice in one process, first into a local lake (the
baseline), then into the S3 test store (``scripts/services up s3``): a backlog of
``--events`` log events captured until its sentinel is checkpointed, then a dump of a
``--rows``-row table. Printed per lake: capture events/s, the output's commit latency
p50/p99 (``output.write`` call to return: one Delta commit, the put-if-absent included) and
events per commit, dump rows/s; then the S3 run's ratios to the local one.

    scripts/services up pg mysql s3 && eval "$(scripts/services env)"
    python -m bench.object_store [--only pg|mysql] [--events 200000] [--rows 500000]

The test store is moto on loopback: it measures what the object-store protocol costs the
capture (requests, conditional commits, no local rename), not a network's round trips; a
region's S3 adds its latency to every commit (about 10-30 ms per request).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

from .dbs import DATABASES
from .engine_runs import SENTINEL_KEY, InProcessCapture, SentinelWatch


class _TimedWrites(SentinelWatch):
    """The output, each write's duration and size recorded."""

    def __init__(self, output, table: str):
        super().__init__(output, table)
        self.writes: list[tuple[float, int]] = []

    def write(self, events, epoch=None):
        t0 = time.perf_counter()
        super().write(events, epoch=epoch)
        self.writes.append((time.perf_counter() - t0, len(events)))


class _Capture(InProcessCapture):
    def __init__(self, db, source_id: str, workdir: str, lake: str):
        super().__init__(db, source_id, workdir)
        self.lake = lake

    def wrap_output(self, output):
        return _TimedWrites(output, self.db.event_table)


def _ms(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1)


def measure(kind: str, lake_kind: str, events: int, rows: int) -> dict:
    db = DATABASES[kind]()
    work = tempfile.mkdtemp(prefix="dblog-objstore-")
    ids = db.source_ids(["objstore"])
    if lake_kind == "s3":
        lake = f"s3://{os.environ['DBLOG_S3_BUCKET']}/bench-{uuid.uuid4().hex[:8]}/lake"
    else:
        lake = "delta://" + os.path.join(work, "lake")
    cap = _Capture(db, ids["objstore"], work, lake)
    try:
        db.create()
        db.fill_dump_table(rows)
        cap.start().prime(-1)
        cap.stop()
        db.generate(events)
        db.insert_primer(SENTINEL_KEY)
        run = cap.capture_until_sentinel(events, 1200)
        writes = [w for w in cap.watch.writes if w[1]]
        dump = cap.dump(db.dump_table, 10_000, 1200)
        cap.stop()
        return {
            "lake": lake_kind,
            "events": events,
            "events_per_s": round(run.get("events_per_s_after_startup", run["events_per_s"])),
            "commits": len(writes),
            "events_per_commit": round(statistics.mean(n for _, n in writes)) if writes else 0,
            "commit_p50_ms": _ms([t for t, _ in writes], 0.5) if writes else None,
            "commit_p99_ms": _ms([t for t, _ in writes], 0.99) if writes else None,
            "dump_rows": dump["rows"],
            "dump_rows_per_s": round(dump["rows_per_s"]),
        }
    finally:
        try:
            cap.stop(30)
        finally:
            db.cleanup(list(ids.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(DATABASES))
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rows", type=int, default=500_000)
    args = ap.parse_args()
    from tests.support.s3_env import aws_env

    os.environ.update(aws_env())  # delta-rs and obstore read the store's settings from here
    results = {}
    for kind in [args.only] if args.only else sorted(DATABASES):
        local = measure(kind, "local", args.events, args.rows)
        s3 = measure(kind, "s3", args.events, args.rows)
        results[kind] = {"local": local, "s3": s3}
        print(json.dumps(results[kind], indent=1), flush=True)
        print(
            f"{kind}: capture {s3['events_per_s']:,} events/s into S3 vs {local['events_per_s']:,} local "
            f"(x{s3['events_per_s'] / local['events_per_s']:.2f}); commit p50 {s3['commit_p50_ms']} vs "
            f"{local['commit_p50_ms']} ms, p99 {s3['commit_p99_ms']} vs {local['commit_p99_ms']} ms; "
            f"dump {s3['dump_rows_per_s']:,} vs {local['dump_rows_per_s']:,} rows/s "
            f"(x{s3['dump_rows_per_s'] / local['dump_rows_per_s']:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
