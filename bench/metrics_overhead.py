"""What the capture's metrics cost (docs/operations.md): the same capture of generated events
with the metrics off and on, in alternating rounds on fresh tables; on = a Prometheus endpoint
scraped every second, OTel instruments read from a status report made every second (off
reports every second too). CPU µs per event (this process: engine, writer, the endpoint and
its scrapes) and events/s, and the ratio on/off of the medians.

    python -m bench.metrics_overhead [--only pg|mysql] [--events 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from typing import Optional

from airflow_provider_dblog.core.engine import EngineConfig
from airflow_provider_dblog.metrics import start_metrics

from .dbs import DATABASES
from .engine_runs import SENTINEL_KEY, InProcessCapture


class Scraper(threading.Thread):
    """GET /metrics every second, as Prometheus would."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.done, self.scrapes = port, threading.Event(), 0

    def run(self) -> None:
        while not self.done.wait(1.0):
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read()
            self.scrapes += 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(kind: str, events: int, metrics_on: bool) -> dict:
    db = DATABASES[kind]()
    work = tempfile.mkdtemp(prefix="dblog-metrics-")
    ids = db.source_ids(["metrics"])
    cap = InProcessCapture(db, ids["metrics"], work, EngineConfig(status_interval=1.0))
    scraper: Optional[Scraper] = None
    metrics = None
    try:
        if metrics_on:
            port = free_port()
            metrics = start_metrics(ids["metrics"], port, "127.0.0.1")
            assert metrics is not None
            cap.on_progress = metrics.update
            scraper = Scraper(port)
            scraper.start()
        db.create()
        cap.start().prime(-1)
        cap.stop()
        db.generate(events)
        db.insert_primer(SENTINEL_KEY)
        cpu0 = time.process_time()
        run = cap.capture_until_sentinel(events, 600)
        return {
            "metrics": metrics_on,
            "cpu_us_per_event": round((time.process_time() - cpu0) / events * 1e6, 2),
            "events_per_s": round(run["events_per_s"]),
            "scrapes": scraper.scrapes if scraper else 0,
        }
    finally:
        if scraper is not None:
            scraper.done.set()
        try:
            cap.stop(30)
        finally:
            if metrics is not None:
                metrics.provider.shutdown()
            db.cleanup(list(ids.values()))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.metrics_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    for kind in [args.only] if args.only else list(DATABASES):
        runs = []
        for r in range(args.rounds):  # off/on, then on/off: drift hits both alike
            for on in (False, True) if r % 2 == 0 else (True, False):
                runs.append(one_run(kind, args.events, on))
                print(json.dumps({"kind": kind, "round": r, **runs[-1]}), flush=True)
        summary = {}
        for key in ("cpu_us_per_event", "events_per_s"):
            off = statistics.median(x[key] for x in runs if not x["metrics"])
            on = statistics.median(x[key] for x in runs if x["metrics"])
            summary[key] = {"off": off, "on": on, "on/off": round(on / off, 3)}
        print(f"{DATABASES[kind]().label}: {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
