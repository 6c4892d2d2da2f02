"""CPU microseconds per dumped row and per captured event: the yardstick of the speed work.

    python -m bench.cpu_per_row [--only pg|mysql] [--rows 300000] [--events 200000] [--repeat 3]

Process CPU time (all threads of this process: engine, writer, binlog reader; the database
servers are other processes and not counted) divided by the rows dumped / events captured.
On a shared machine CPU time moves far less with other jobs than wall time does, which makes
it the number to compare one code change against the next (docs/benchmarks.md, "Performance
work"). Run the same command on two checkouts to compare them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Optional

from .dbs import DATABASES
from .engine_runs import SENTINEL_KEY, InProcessCapture


def measure(kind: str, rows: int, events: int, repeat: int) -> dict:
    db = DATABASES[kind]()
    work = tempfile.mkdtemp(prefix="dblog-cpu-")
    ids = db.source_ids(["cpu"])
    cap = InProcessCapture(db, ids["cpu"], work)
    out: dict = {"label": db.label, "rows": rows, "events": events, "dump": [], "capture": None}
    try:
        db.create()
        db.fill_dump_table(rows)
        cap.start().prime(-1)
        for _ in range(repeat):
            cpu0 = time.process_time()
            d = cap.dump(db.dump_table, 10_000, 600)
            out["dump"].append(
                {
                    "cpu_us_per_row": round((time.process_time() - cpu0) / rows * 1e6, 2),
                    "rows_per_s": round(d["rows_per_s"]),
                }
            )
        cap.stop()
        if events:
            db.generate(events)
            db.insert_primer(SENTINEL_KEY)
            cpu0 = time.process_time()
            run = cap.capture_until_sentinel(events, 600)
            out["capture"] = {
                "cpu_us_per_event": round((time.process_time() - cpu0) / events * 1e6, 2),
                "events_per_s": round(run["events_per_s"]),
            }
        return out
    finally:
        try:
            cap.stop(30)
        finally:
            db.cleanup(list(ids.values()))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.cpu_per_row", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    for kind in [args.only] if args.only else list(DATABASES):
        r = measure(kind, args.rows, args.events, args.repeat)
        best = min(x["cpu_us_per_row"] for x in r["dump"])
        cap = r["capture"] or {}
        print(
            f"{r['label']}: dump {best} CPU µs/row (best of {args.repeat}), capture "
            f"{cap.get('cpu_us_per_event', '–')} CPU µs/event",
            flush=True,
        )
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
