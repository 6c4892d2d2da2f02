"""The dashboard's capture panels drawn from a real run (docs/operations.md "Dashboard").

A capture with its Prometheus endpoint on, scraped every second as Prometheus would, under a
steady update load; a whole-table dump begins at 20 % of the run and a burst of writes at 60 %.
Each panel of docs/dashboards/dblog-grafana.json's capture rows is computed from the scrapes
the way its PromQL does (rates over a window, quantiles from the histogram's buckets) and
drawn to docs/img/dashboard.png. Grafana itself does not run here; the landing panels need
the Spark job and are not drawn.

    python -m bench.dashboard [--only pg|mysql] [--seconds 150] [--rate 400] [--out docs/img/dashboard.png]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from typing import Optional

from prometheus_client.parser import text_string_to_metric_families

from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec
from airflow_provider_dblog.core.engine import EngineConfig
from airflow_provider_dblog.metrics import start_metrics

from .dbs import DATABASES
from .engine_runs import InProcessCapture
from .metrics_overhead import free_port

ROWS = 20_000  # the event table's rows the load updates
DUMP_ROWS = 300_000


class Scrapes(threading.Thread):
    """GET /metrics every second: (seconds since start, {(name, labels): value})."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.done, self.t0 = port, threading.Event(), time.monotonic()
        self.samples: list[tuple[float, dict]] = []

    def run(self) -> None:
        while not self.done.wait(1.0):
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()
            values = {}
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    values[(s.name, tuple(sorted(s.labels.items())))] = s.value
            self.samples.append((time.monotonic() - self.t0, values))


def series(samples, name: str, **labels) -> dict:
    """label set -> (times, values) of ``name`` with ``labels``."""
    out: dict = defaultdict(lambda: ([], []))
    for t, values in samples:
        for (n, labs), v in values.items():
            if n == name and all(dict(labs).get(k) == w for k, w in labels.items()):
                out[labs][0].append(t)
                out[labs][1].append(v)
    return out


def rate(times: list, values: list, window: float = 5.0) -> tuple[list, list]:
    """PromQL's rate(): the increase over the last ``window`` seconds, per second."""
    ts, rs = [], []
    for i, t in enumerate(times):
        j = next(k for k in range(i + 1) if times[k] >= t - window)
        if i > j:
            ts.append(t)
            rs.append((values[i] - values[j]) / (times[i] - times[j]))
    return ts, rs


def quantile(samples, name: str, q: float, window: float = 15.0, **labels) -> tuple[list, list]:
    """histogram_quantile(q, rate(name_bucket[window])): linear within the bucket, as Prometheus."""
    buckets = series(samples, name + "_bucket", **labels)
    bounds = sorted((float(dict(labs)["le"]), labs) for labs in buckets)
    times = buckets[bounds[0][1]][0] if bounds else []
    ts, qs = [], []
    for i, t in enumerate(times):
        j = next(k for k in range(i + 1) if times[k] >= t - window)
        counts = [(le, buckets[labs][1][i] - buckets[labs][1][j]) for le, labs in bounds]
        total = counts[-1][1]
        if i == j or total <= 0:
            continue
        rank, prev_le, prev_c = q * total, 0.0, 0.0
        for le, c in counts:
            if c >= rank:
                if le == float("inf"):
                    value = prev_le
                else:
                    value = prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0)
                break
            prev_le, prev_c = le, c
        ts.append(t)
        qs.append(value)
    return ts, qs


def run(kind: str, seconds: float, rate_per_s: int) -> tuple[list, str]:
    db = DATABASES[kind]()
    ids = db.source_ids(["dashboard"])
    source_id = ids["dashboard"]
    work = tempfile.mkdtemp(prefix="dblog-dashboard-")
    port = free_port()
    metrics = start_metrics(source_id, port, "127.0.0.1")
    assert metrics is not None
    cap = InProcessCapture(db, source_id, work, EngineConfig(status_interval=2.0))
    cap.on_progress, cap.on_commit = metrics.update, metrics.commit
    scrapes = Scrapes(port)
    stop = threading.Event()
    try:
        db.create()
        db.generate(ROWS)
        db.fill_dump_table(DUMP_ROWS)
        cap.start().prime(-1)
        scrapes.start()

        def load() -> None:  # steady updates, a tenth of a second's worth at a time
            c = db.connect()
            lo, n = 1, max(1, rate_per_s // 10)
            try:
                while not stop.wait(0.1):
                    cur = c.cursor()
                    cur.execute(f"UPDATE {db.event_table} SET v = v + 1 WHERE id BETWEEN {lo} AND {lo + n - 1}")
                    c.commit()
                    lo = lo + n if lo + n <= ROWS else 1
            finally:
                c.close()

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        t0 = time.monotonic()
        dumped = burst = False
        while time.monotonic() - t0 < seconds:
            cap.check()
            elapsed = time.monotonic() - t0
            if not dumped and elapsed >= 0.2 * seconds:
                dumped = True
                # paced (1,000-row chunks, 150 ms apart) so that its progress shows over the run
                cap.state.add_dump(
                    DumpSpec.new(source_id, [db.dump_table], None), DumpControl(chunk_size=1_000, delay_ms=150)
                )
            if not burst and elapsed >= 0.6 * seconds:
                burst = True  # every row of the event table twice, at once
                c = db.connect()
                try:
                    for _ in range(2):
                        c.cursor().execute(f"UPDATE {db.event_table} SET v = v + 1")
                        c.commit()
                finally:
                    c.close()
            time.sleep(0.5)
        stop.set()
        loader.join(10)
        return scrapes.samples, source_id
    finally:
        stop.set()
        scrapes.done.set()
        try:
            cap.stop(60)
        finally:
            metrics.provider.shutdown()
            db.cleanup(list(ids.values()))


def draw(samples: list, source_id: str, out: str, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = {"dblog_source_id": source_id}
    fig, axes = plt.subplots(3, 3, figsize=(16, 11))
    fig.suptitle(f"DBLog capture and landing (capture panels): a real run, {label}", fontsize=14)

    def one(ax, title, lines, unit):
        ax.set_title(title, fontsize=11)
        for (times, values), legend in lines:
            if times:
                ax.plot(times, values, label=legend)
        ax.set_xlabel("s")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if any(t for (t, _), _ in lines):
            ax.legend(fontsize=8, loc="upper left")

    def gauge(name, **labels):
        found = list(series(samples, name, **src, **labels).values())
        return found[0] if found else ([], [])

    def counter_rate(name):
        return rate(*gauge(name))

    dump_rows = series(samples, "dblog_dump_rows", **src)
    estimated = series(samples, "dblog_dump_rows_estimated", **src)
    progress = []
    for labs, (t, rows) in dump_rows.items():
        est_labs = dict(labs)
        match = [v for k, v in estimated.items() if dict(k).get("dblog_dump_id") == est_labs.get("dblog_dump_id")]
        if match:
            est = dict(zip(*match[0]))
            pts = [(ti, r / est[ti]) for ti, r in zip(t, rows) if est.get(ti)]
            progress.append(((([p[0] for p in pts]), [p[1] for p in pts]), est_labs.get("dblog_dump_id")))
    dump_rate = [
        (v, f"rows/s {dict(k).get('dblog_dump_id')}")
        for k, v in series(samples, "dblog_dump_rate_per_second", **src).items()
    ]
    quantiles = [
        (quantile(samples, "dblog_capture_output_commit_duration_seconds", q, **src), f"p{int(q * 100)}")
        for q in (0.5, 0.99)
    ]
    one(axes[0][0], "Capture lag", [(gauge("dblog_capture_lag_seconds"), "lag")], "s")
    one(
        axes[0][1],
        "Events per second",
        [
            (counter_rate("dblog_capture_events_total"), "read"),
            (counter_rate("dblog_capture_output_events_total"), "written"),
        ],
        "events/s",
    )
    one(
        axes[0][2],
        "Log not read yet / retained",
        [(gauge("dblog_capture_log_unread_bytes"), "unread"), (gauge("dblog_capture_log_retained_bytes"), "retained")],
        "bytes",
    )
    one(axes[1][0], "Writer buffer", [(gauge("dblog_capture_writer_buffered"), "events")], "events")
    one(axes[1][1], "Output commit latency", quantiles, "s")
    one(
        axes[1][2],
        "Output outage and report age",
        [
            (gauge("dblog_capture_output_outage_seconds"), "outage"),
            (gauge("dblog_capture_report_age_seconds"), "report age"),
        ],
        "s",
    )
    one(axes[2][0], "Dump progress", progress, "fraction of the estimate")
    one(axes[2][1], "Dump rows per second", dump_rate, "rows/s")
    one(
        axes[2][2],
        "Leader epoch (no lease in this run), warnings",
        [(gauge("dblog_capture_leader_epoch"), "epoch"), (gauge("dblog_capture_warnings"), "warnings")],
        "",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(out, dpi=80)
    print(f"wrote {out} from {len(samples)} scrapes")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.dashboard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES), default="pg")
    p.add_argument("--seconds", type=float, default=150)
    p.add_argument("--rate", type=int, default=400, help="rows updated per second by the steady load")
    p.add_argument("--out", default="docs/img/dashboard.png")
    args = p.parse_args(argv)
    samples, source_id = run(args.only, args.seconds, args.rate)
    draw(samples, source_id, args.out, f"{DATABASES[args.only]().label}, {args.rate} updates/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
