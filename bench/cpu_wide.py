"""CPU microseconds per captured 30-column event: cpu_per_row's capture half, on bench.wide's table.

    python -m bench.cpu_wide [--only pg|mysql] [--events 200000]

Process CPU time (engine, writer and binlog reader threads of this process; the servers are
other processes) divided by the events captured, from the capture's start until the
sentinel's checkpoint is stored. Like cpu_per_row, the number to compare one code change
against the next on a shared machine (docs/benchmarks.md, "Performance work").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Optional

from .engine_runs import SENTINEL_KEY, InProcessCapture
from .wide import WIDE


def measure(kind: str, events: int) -> dict:
    db = WIDE[kind]()
    ids = db.source_ids(["cpuwide"])
    cap = InProcessCapture(db, ids["cpuwide"], tempfile.mkdtemp(prefix="dblog-cpuwide-"))
    try:
        db.create()
        cap.start().prime(-1)
        cap.stop()
        db.generate(events)
        db.insert_primer(SENTINEL_KEY)
        cpu0 = time.process_time()
        run = cap.capture_until_sentinel(events, max(300.0, events / 500))
        return {
            "label": db.label,
            "events": events,
            "cpu_us_per_event": round((time.process_time() - cpu0) / events * 1e6, 2),
            "events_per_s": round(run["events_per_s"]),
        }
    finally:
        try:
            cap.stop(30)
        finally:
            db.cleanup(list(ids.values()))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.cpu_wide", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(WIDE))
    p.add_argument("--events", type=int, default=200_000)
    args = p.parse_args(argv)
    for kind in [args.only] if args.only else list(WIDE):
        r = measure(kind, args.events)
        print(f"{r['label']}: capture of 30-column rows {r['cpu_us_per_event']} CPU µs/event", flush=True)
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
