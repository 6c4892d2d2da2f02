"""One huge table dumped under a write load, with a SIGKILL part way (issue 33, part 4c).

    eval "$(scripts/services env)"
    python -m bench.huge_dump [--rows 50000000] [--chunk-size 50000] [--kill-at 0.6]
        [--load-rate 200] [--plot docs/img/huge-dump.png]

A PostgreSQL table of ``--rows`` narrow rows (bigint key, int, 10 characters; bench/dbs.py),
filled before the capture exists, is dumped by ``dblog capture`` in a child process (the
Delta changelog, a local state store) in ``--chunk-size`` chunks while a load thread updates
random rows of it and inserts into a second table at ``--load-rate`` rows per second. When
``--kill-at`` of the rows are dumped the child is SIGKILLed and started again.

Printed, from the dump's stored progress sampled four times a second:

* throughput in each tenth of the table (rows/s), and the last tenth over the first: a dump
  whose chunks get slower as it goes (an OFFSET, a growing buffer) shows a ratio well
  under 1;
* peak RSS (VmHWM) of each process, against the 500 MB budget;
* the resume: the rows recorded as dumped just before the kill and just after the restart's
  first chunk, so a restart from the beginning (or from anywhere but the last finished
  chunk) shows; and the rows the chunks wrote in all: the table's row count less the rows
  the load changed inside a chunk's window (those come from the log instead), never more;
* the seconds from the kill to the restarted child's first chunk.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from typing import Optional

from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus

from .common import say
from .dbs import PostgresBench
from .engine_runs import ChildCapture

BUDGET_MB = 500


class WriteLoad(threading.Thread):
    """Updates random rows of the dumped table and inserts into the event table, one row per
    transaction, ``rate`` times a second, until stopped."""

    def __init__(self, db: PostgresBench, rows: int, rate: float) -> None:
        super().__init__(daemon=True, name="write-load")
        self.db, self.rows, self.rate = db, rows, rate
        self.done = threading.Event()
        self.writes = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        rng = random.Random(7)
        c = self.db.connect()
        c.autocommit = True
        cur = c.cursor()
        try:
            next_at = time.monotonic()
            while self.rate > 0 and not self.done.is_set():  # --load-rate 0: no load
                if self.writes % 2:
                    cur.execute(
                        f"UPDATE {self.db.dump_table} SET v = v + 1 WHERE id = %s", (rng.randint(1, self.rows),)
                    )
                else:
                    cur.execute(
                        f"INSERT INTO {self.db.event_table} VALUES (%s, 0, 'load')", (1_000_000_000 + self.writes,)
                    )
                self.writes += 1
                next_at += 1 / self.rate
                time.sleep(max(0.0, next_at - time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
        finally:
            c.close()


def run(rows: int, chunk: int, kill_at: float, rate: float, workdir: str) -> dict:
    db = PostgresBench()
    source_id = f"bench_huge_{db.tag}"
    db.create()
    cap = ChildCapture(db, source_id, workdir)
    load = WriteLoad(db, rows, rate)
    try:
        say(f"huge dump: filling {db.dump_table} with {rows:,} rows")
        t0 = time.perf_counter()
        db.fill_dump_table(rows)
        fill_s = time.perf_counter() - t0
        say(f"huge dump: filled in {fill_s:.0f} s; starting the capture")
        cap.start()
        cap.prime(-1)
        load.start()
        spec = DumpSpec.new(source_id, [db.dump_table], None)
        cap.state.add_dump(spec, DumpControl(chunk_size=chunk))
        t_start = time.perf_counter()
        samples: list[tuple[float, int]] = []
        peaks: list[float] = []
        resume: dict = {}
        while True:
            if load.error:
                raise load.error
            cap.check()
            d = cap.state.get_dump(spec.dump_id)
            done = sum(p.rows for p in d.progress.values())
            now = time.perf_counter() - t_start
            samples.append((now, done))
            if "killed_at_rows" in resume and "first_rows_after" not in resume and done > resume["killed_at_rows"]:
                resume["first_rows_after"] = done
                resume["kill_to_first_chunk_s"] = round(now - resume["killed_at_s"], 1)
            if d.status is DumpStatus.DONE:
                break
            if not resume and done >= kill_at * rows:
                peaks.append(cap.rss_mb()[1])
                cap.proc.kill()
                cap.proc.wait()
                resume = {"killed_at_rows": done, "killed_at_s": now}
                say(f"huge dump: SIGKILL at {done:,} rows ({now:.0f} s); starting again")
                cap.start()
            if d.status.finished:
                raise RuntimeError(f"bench: the dump ended {d.status.value}: {d.error}")
            time.sleep(0.25)
        peaks.append(cap.rss_mb()[1])
        total_s = time.perf_counter() - t_start
        say(f"huge dump: done in {total_s:.0f} s")
    finally:
        load.done.set()
        cap.stop()
        db.cleanup([source_id])
    return {
        "rows": rows,
        "chunk_size": chunk,
        "load_rate": rate,
        "load_writes": load.writes,
        "fill_s": round(fill_s, 1),
        "dump_s": round(total_s, 1),
        "rows_per_s": round(rows / total_s),
        "deciles_rows_per_s": deciles(samples, rows, resume),
        "peak_rss_mib": [round(p, 1) for p in peaks],
        "rows_dumped": done,
        **resume,
        "samples": samples,
    }


def deciles(samples: list[tuple[float, int]], rows: int, resume: dict) -> list[Optional[int]]:
    """Rows per second within each tenth of the table; the tenth with the kill in it is left
    out (None): its time includes the restart."""
    out: list[Optional[int]] = []
    end = samples[-1][1]  # under a load a little short of ``rows``: rows changed in a window come from the log
    for i in range(10):
        lo, hi = end * i / 10, end * (i + 1) / 10
        a = next(((t, n) for t, n in samples if n >= lo), None)
        b = next(((t, n) for t, n in samples if n >= hi), None)
        killed = "killed_at_rows" in resume and lo <= resume["killed_at_rows"] < hi + 1
        if a is None or b is None or b[0] <= a[0] or killed:
            out.append(None)
        else:
            out.append(round((b[1] - a[1]) / (b[0] - a[0])))
    return out


def markdown(r: dict) -> str:
    d = [x for x in r["deciles_rows_per_s"] if x]
    lines = [
        f"{r['rows']:,} rows in {r['chunk_size']:,}-row chunks under {r['load_rate']:.0f} writes/s: "
        f"{r['dump_s']:,} s ({r['rows_per_s']:,} rows/s, the restart included).",
        "",
        "| tenth of the table | " + " | ".join(str(i + 1) for i in range(10)) + " |",
        "|---|" + "---:|" * 10,
        "| rows/s | " + " | ".join(f"{x:,}" if x else "–" for x in r["deciles_rows_per_s"]) + " |",
        "",
        "(–: the tenth with the kill in it, whose time includes the restart.)",
        f"* last tenth / first tenth: {d[-1] / d[0]:.2f}" if len(d) > 1 else "",
        f"* peak RSS (VmHWM) before the kill / after the restart: "
        f"{' / '.join(f'{p:,} MiB' for p in r['peak_rss_mib'])} (budget {BUDGET_MB} MB)",
        f"* rows recorded as dumped at the SIGKILL: {r.get('killed_at_rows', 0):,}; after the restart's first "
        f"chunk: {r.get('first_rows_after', 0):,}; from the kill to that chunk: {r.get('kill_to_first_chunk_s')} s",
        f"* rows dumped in all: {r['rows_dumped']:,} (the table has {r['rows']:,})",
    ]
    return "\n".join(lines)


def plot(r: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ts = [t for t, _ in r["samples"]]
    ax.plot(ts, [n / 1e6 for _, n in r["samples"]], color="#2ca02c", label="rows dumped (stored progress)")
    if "killed_at_s" in r:
        ax.axvline(r["killed_at_s"], color="#d62728", linestyle=":", label="SIGKILL, then a new process")
    ax.set_xlabel("seconds since the dump was requested")
    ax.set_ylabel("million rows dumped")
    ax.set_title(f"Dump of {r['rows'] / 1e6:.0f}M narrow rows under {r['load_rate']:.0f} writes/s (PostgreSQL 15)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=50_000_000)
    p.add_argument("--chunk-size", type=int, default=50_000)
    p.add_argument("--kill-at", type=float, default=0.6, help="fraction of the rows; 0: no kill")
    p.add_argument("--load-rate", type=float, default=200, help="writes per second during the dump (0: none)")
    p.add_argument("--plot", metavar="PNG")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dblog-bench-huge-dump-") as workdir:
        r = run(a.rows, a.chunk_size, a.kill_at or 2.0, a.load_rate, workdir)
    if a.plot:
        plot(r, a.plot)
    print(json.dumps({k: v for k, v in r.items() if k != "samples"}, indent=2))
    print(markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
