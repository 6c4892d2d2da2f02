"""Commit -> durable changelog latency at a paced write rate, against a raw log consumer.

    python -m bench.latency [--only pg|mysql] [--rates 1000,10000] [--seconds 30] [--warmup 5]

A writer process commits inserts into the captured table at a fixed pace (1k events/s: 100
transactions/s of 10 rows; 10k events/s: 200 transactions/s of 50 rows) and records, for
each transaction, its last key and the wall-clock time right after COMMIT returned. The
capture runs in this process with default settings and its Delta output wrapped, so the time
at which ``output.write`` returns (the batch is durable in the changelog) is known for every
key. Latency of a transaction = durable time of its last row - commit-returned time (same
host, same clock). The baseline is the same measurement with a plain log consumer in a process
of its own, the time at which the transaction's commit is read from the log: a psycopg2
logical replication cursor on a pgoutput slot (PostgreSQL) and a pymysqlreplication
BinLogStreamReader (MariaDB), i.e. the same client libraries the capture is built on.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import math
import multiprocessing
import os
import random
import signal
import sys
import time
from typing import Callable, Optional

from airflow_provider_dblog.core.batch import LogRows

from .common import NAMES, standalone
from .dbs import DATABASES

DEFAULTS = {
    "rates": [1_000, 10_000],  # target events/s
    "seconds": 30,  # measured seconds per rate (after the warm-up)
    "warmup": 5,  # seconds written first and not measured
    "max_txn_rate": 200,  # transactions/s at most; bigger rates use bigger transactions
    "drain_timeout": 120,  # seconds to wait for the last measured transaction to arrive
    "engine": {},  # EngineConfig overrides (e.g. flush_interval), default: none
}
TARGET_P99_S, TARGET_RATE = 1.0, 10_000


def plan(rate: int, max_txn_rate: int) -> tuple[float, int]:
    """(transactions/s, rows per transaction) for a target events/s."""
    txn_rate = min(float(max_txn_rate), rate / 10)
    return txn_rate, max(1, round(rate / txn_rate))


def _connect(kind: str, conn: dict):
    if kind == "pg":
        import psycopg2

        return psycopg2.connect(password=os.environ["DBLOG_PG_PASSWORD"], **conn)
    import pymysql

    return pymysql.connect(password=os.environ["DBLOG_MYSQL_PASSWORD"], autocommit=False, **conn)


def _writer(
    kind: str, conn: dict, table: str, first_key: int, rows: int, txn_rate: float, seconds: float, path: str, ready, go
) -> None:
    """Paced writer (own process): transaction i is due at start + i / txn_rate; a late one
    goes at once, so a writer that cannot keep up shows as a lower achieved rate."""
    c = _connect(kind, conn)
    cur = c.cursor()
    ready.put(1)
    go.wait(120)
    recs, key, t0 = [], first_key, time.time()
    for i in range(int(seconds * txn_rate)):
        delay = t0 + i / txn_rate - time.time()
        if delay > 0:
            time.sleep(delay)
        lo, hi = key, key + rows - 1
        if kind == "pg":
            cur.execute(f"INSERT INTO {table} SELECT g, 1, 'lat' FROM generate_series({lo}, {hi}) g")
        else:
            cur.execute(f"INSERT INTO {table} VALUES " + ",".join(f"({k},1,'lat')" for k in range(lo, hi + 1)))
        c.commit()
        recs.append((lo, hi, time.time()))
        key = hi + 1
    c.close()
    with open(path, "w") as f:
        json.dump({"t0": t0, "txns": recs}, f)


def _raw_consumer(kind: str, conn: dict, args: dict, path: str, ready) -> None:
    """Baseline (own process): one line "<last key of the transaction> <time>" per commit read."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = open(path, "w", buffering=1)
    if kind == "pg":
        import select

        import psycopg2.extras

        c = psycopg2.connect(
            password=os.environ["DBLOG_PG_PASSWORD"],
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
            **conn,
        )
        cur = c.cursor()
        cur.start_replication(
            slot_name=args["slot"],
            decode=False,
            options={"proto_version": "1", "publication_names": args["publication"]},
        )
        ready.put(1)
        top, fed = None, time.monotonic()
        while True:
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 1.0)
                continue
            p = msg.payload
            if p[:1] == b"I" and p[8:9] == b"t":  # 'I' relid 'N' ncols, first column as text
                n = int.from_bytes(p[9:13], "big")
                k = int(p[13 : 13 + n])
                top = k if top is None or k > top else top
            elif p[:1] == b"C":
                if top is not None:
                    out.write(f"{top} {time.time()}\n")
                top = None
                if time.monotonic() - fed > 1:  # let the slot advance
                    cur.send_feedback(flush_lsn=msg.data_start)
                    fed = time.monotonic()
    else:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import XidEvent
        from pymysqlreplication.row_event import WriteRowsEvent

        stream = BinLogStreamReader(
            connection_settings=dict(conn, passwd=os.environ["DBLOG_MYSQL_PASSWORD"]),
            server_id=args["server_id"],
            log_file=args["file"],
            log_pos=args["pos"],
            resume_stream=True,
            blocking=True,
            only_events=[WriteRowsEvent, XidEvent],
            only_schemas=[args["schema"]],
        )
        ready.put(1)
        top = None
        for ev in stream:
            if isinstance(ev, WriteRowsEvent):
                for row in ev.rows:
                    k = next(iter(row["values"].values()))
                    top = k if top is None or k > top else top
            elif isinstance(ev, XidEvent) and top is not None:
                out.write(f"{top} {time.time()}\n")
                top = None


class Marks:
    """(largest key of the table, time) per step. Keys grow with commit order (one sequential
    writer), so the first step whose largest key reaches a transaction's last key is the one
    that handled the whole transaction."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.times: list[float] = []

    def add(self, items, table: str, t: float) -> None:
        keys = (
            k[0]
            for e in items
            if getattr(e, "table", None) == table
            for k in (e.keys if isinstance(e, LogRows) else (e.key,))  # a block of log changes
        )
        top = max(keys, default=None)
        if top is not None and top > 0:  # primer rows have negative keys
            self.keys.append(top)
            self.times.append(t)

    def at(self, hi: int) -> Optional[float]:
        i = bisect.bisect_left(self.keys, hi)
        return self.times[i] if i < len(self.times) else None


class DurableTimes:
    """Wraps the capture's output: when each write started and returned (durable)."""

    def __init__(self, output, table: str):
        self._output, self._table = output, table
        self.started, self.durable = Marks(), Marks()
        self.writes: list[tuple[float, float, int]] = []  # (started, returned, events)

    def write(self, events, epoch=None):
        t0 = time.time()
        self._output.write(events, epoch=epoch)
        t1 = time.time()
        self.writes.append((t0, t1, len(events)))
        self.started.add(events, self._table, t0)
        self.durable.add(events, self._table, t1)

    def __getattr__(self, name):
        return getattr(self._output, name)


class PolledTimes:
    """Wraps the capture's source: when the engine received each change from the log."""

    def __init__(self, source, table: str):
        self._source, self._table = source, table
        self.polled = Marks()

    def poll(self, max_items: int, timeout: float):
        items = self._source.poll(max_items, timeout)
        if items:
            self.polled.add(items, self._table, time.time())
        return items

    def __getattr__(self, name):
        return getattr(self._source, name)


def _capture_class():
    from .engine_runs import InProcessCapture

    class LatencyCapture(InProcessCapture):
        def wrap_source(self, source):
            self.source = PolledTimes(source, self.db.event_table)
            return self.source

        def wrap_output(self, output):
            return DurableTimes(output, self.db.event_table)

    return LatencyCapture


def _conn(db, kind: str) -> dict:
    if kind == "pg":
        return {"host": db.host, "port": db.port, "user": db.user, "dbname": db.db}
    return {"host": db.host, "port": db.port, "user": db.user}


def _pct(sorted_v: list[float], q: float) -> float:
    return sorted_v[max(0, min(len(sorted_v) - 1, math.ceil(q * len(sorted_v)) - 1))]


def _stats(txns: list, seen: Callable, o: dict, t_go: float, stages: tuple = ()) -> dict:
    """Latency percentiles of the transactions committed in the measured window; ``stages``
    are (name, from, to) time lookups by last key (from None: the commit time)."""
    lo_t, hi_t = t_go + o["warmup"], t_go + o["warmup"] + o["seconds"]
    measured = [t for t in txns if lo_t <= t[2] < hi_t]
    lat, missing = [], 0
    for _lo, hi, tc in measured:
        ts = seen(hi)
        if ts is None:
            missing += 1
        else:
            lat.append(ts - tc)
    lat.sort()
    span = measured[-1][2] - measured[0][2] if len(measured) > 1 else 0
    out = {
        "txns": len(measured),
        "missing": missing,
        "achieved_events_per_s": sum(hi - lo + 1 for lo, hi, _ in measured) / span if span else 0.0,
        "achieved_txns_per_s": (len(measured) - 1) / span if span else 0.0,
    }
    if lat:
        out.update({f"p{int(q * 100)}_s": _pct(lat, q) for q in (0.5, 0.9, 0.99)})
        out.update(
            max_s=lat[-1],
            mean_s=sum(lat) / len(lat),
            min_s=lat[0],
            percentiles_s=[round(_pct(lat, i / 100), 4) for i in range(1, 101)],
        )
    out["stages"] = {}
    for name, frm, to in stages:
        d = []
        for _, hi, tc in measured:
            ta, tb = tc if frm is None else frm(hi), to(hi)
            if ta is not None and tb is not None:
                d.append(tb - ta)
        if d:
            d.sort()
            out["stages"][name] = {"p50_s": _pct(d, 0.5), "p99_s": _pct(d, 0.99)}
    return out


def _write_at(kind, db, rate, first_key, o, workdir, ctx, seen, tick, stages=()) -> tuple[dict, int]:
    """Runs the paced writer for warm-up + seconds; waits until the last transaction is seen."""
    txn_rate, rows = plan(rate, o["max_txn_rate"])
    path = os.path.join(workdir, f"writer-{kind}-{rate}-{first_key}.json")
    ready, go = ctx.Queue(), ctx.Event()
    p = ctx.Process(
        target=_writer,
        daemon=True,
        args=(
            kind,
            _conn(db, kind),
            db.event_table,
            first_key,
            rows,
            txn_rate,
            o["warmup"] + o["seconds"],
            path,
            ready,
            go,
        ),
    )
    p.start()
    try:
        ready.get(timeout=120)
        t_go = time.time()
        go.set()
        while p.is_alive():
            tick()
            p.join(0.2)
        if p.exitcode != 0:
            raise RuntimeError(f"bench: the latency writer exited with {p.exitcode}")
    finally:
        if p.is_alive():
            p.kill()
    with open(path) as f:
        txns = json.load(f)["txns"]
    end = time.monotonic() + o["drain_timeout"]
    while seen(txns[-1][1]) is None and time.monotonic() < end:
        tick()
        time.sleep(0.05)
    st = _stats(txns, seen, o, t_go, stages)
    st.update(target_events_per_s=rate, txn_rows=rows, target_txns_per_s=txn_rate)
    return st, txns[-1][1] + 1


def _say_stats(say, kind, who, rate, st) -> None:
    if "p99_s" in st:
        say(
            f"latency {kind} {who} @{rate}/s: p50 {st['p50_s'] * 1000:.0f} ms, p99 {st['p99_s'] * 1000:.0f} ms, "
            f"max {st['max_s'] * 1000:.0f} ms, {st['achieved_events_per_s']:.0f} events/s, {st['txns']} txns"
        )


def run(kind: str, opts: dict, workdir: str, say) -> dict:
    from airflow_provider_dblog.core.engine import EngineConfig

    o = {**DEFAULTS, **(opts or {})}
    db = DATABASES[kind]()
    ids = db.source_ids(["latency"])
    ctx = multiprocessing.get_context("spawn")  # never fork a process running the engine's threads
    cfg = EngineConfig(**o["engine"])
    cap = raw = None
    out: dict = {
        "label": db.label,
        "opts": o,
        "engine_config": {
            k: v
            for k, v in dataclasses.asdict(cfg).items()
            if k in ("poll_batch", "poll_timeout", "writer_batch", "flush_interval")
        },
        "ours": {},
        "raw": {},
    }
    try:
        db.create()
        cap = _capture_class()(db, ids["latency"], workdir, cfg)
        say(f"latency {kind}: starting the capture of {db.event_table}")
        cap.start().prime(-1)
        w, polled = cap.watch, cap.source.polled
        # commit -> the engine got it from the log -> its output write began -> write returned
        stages = (
            ("log_to_engine", None, polled.at),
            ("engine_to_write", polled.at, w.started.at),
            ("output_write", w.started.at, w.durable.at),
        )
        key = 1
        for rate in o["rates"]:
            n0 = len(w.writes)
            st, key = _write_at(kind, db, rate, key, o, workdir, ctx, w.durable.at, cap.check, stages)
            ws = sorted(t1 - t0 for t0, t1, _ in w.writes[n0:])
            if ws:
                st["output_write_p50_s"], st["output_write_p99_s"] = _pct(ws, 0.5), _pct(ws, 0.99)
                st["events_per_output_write"] = sum(n for *_, n in w.writes[n0:]) / len(ws)
            out["ours"][str(rate)] = st
            _say_stats(say, kind, "dblog", rate, st)
        cap.stop()
        cap = None

        # -- raw baseline: the same writer, a plain consumer of the log -----------------------
        if kind == "pg":
            # A publication and a pgoutput slot from the current WAL end, named so that
            # PostgresBench.cleanup drops them.
            db._run(f"CREATE PUBLICATION {db.raw_name} FOR TABLE {db.event_table}")
            db._run(f"SELECT pg_create_logical_replication_slot('{db.raw_name}', 'pgoutput')", autocommit=True)
            args = {"slot": db.raw_name, "publication": db.raw_name}
        else:
            row = db._run("SHOW MASTER STATUS")[0]
            args = {"file": row[0], "pos": int(row[1]), "schema": db.ns, "server_id": random.randint(10**6, 2**31)}
        path = os.path.join(workdir, f"raw-{kind}.txt")
        ready = ctx.Queue()
        raw = ctx.Process(target=_raw_consumer, daemon=True, args=(kind, _conn(db, kind), args, path, ready))
        raw.start()
        ready.get(timeout=120)
        seen_keys: list[int] = []
        seen_times: list[float] = []
        fh, partial = open(path), [""]

        def read_raw() -> None:
            *lines, partial[0] = (partial[0] + fh.read()).split("\n")  # keep a line still being written
            for line in lines:
                k, t = line.split()
                seen_keys.append(int(k))
                seen_times.append(float(t))
            if not raw.is_alive():
                raise RuntimeError(f"bench: the raw consumer exited with {raw.exitcode}")

        def visible(hi: int) -> Optional[float]:
            i = bisect.bisect_left(seen_keys, hi)
            return seen_times[i] if i < len(seen_times) else None

        for rate in o["rates"]:
            st, key = _write_at(kind, db, rate, key, o, workdir, ctx, visible, read_raw)
            out["raw"][str(rate)] = st
            _say_stats(say, kind, "raw", rate, st)
        fh.close()
        for rate in o["rates"]:
            a, b = out["ours"][str(rate)], out["raw"][str(rate)]
            if "p99_s" in a and "p99_s" in b:
                a["p99_ratio"] = round(a["p99_s"] / b["p99_s"], 2)
        big = out["ours"].get(str(TARGET_RATE), {})
        out["met"] = big.get("p99_s", float("inf")) <= TARGET_P99_S if big else None
        return out
    finally:
        if raw is not None and raw.is_alive():
            raw.terminate()
            raw.join(10)
            if raw.is_alive():
                raw.kill()
        if cap is not None:
            try:
                cap.stop(10)
            except Exception as exc:
                say(f"latency {kind}: stopping the capture: {exc}")
        try:
            db.cleanup(list(ids.values()))
        except Exception as exc:
            say(f"latency {kind}: clean-up of {db.ns} failed: {exc}")


# -- report ---------------------------------------------------------------------------------------
def _ms(x) -> str:
    if not isinstance(x, (int, float)):
        return "–"
    return f"{x * 1000:,.0f}" if abs(x) >= 0.01 else f"{x * 1000:.1f}"


def markdown(results: dict) -> str:
    o = next((r["opts"] for r in results.values() if "opts" in r), DEFAULTS)
    plans = ", ".join(
        f"{r:,} events/s = {plan(r, o['max_txn_rate'])[0]:,.0f} transactions/s of {plan(r, o['max_txn_rate'])[1]} rows"
        for r in o["rates"]
    )
    lines = [
        "### Latency: commit → durable in the changelog",
        "",
        f"A writer in its own process commits inserts into a captured table at a fixed pace ({plans}) "
        "and notes the wall-clock time right after each COMMIT returned. The capture runs in the "
        "benchmark process (Delta output, default `EngineConfig`"
        + (f" with {o['engine']}" if o["engine"] else "")
        + "); its output is wrapped so that the time "
        "at which each `write` returned, i.e. the batch is durable in the changelog, is known for every "
        "row. A transaction's latency is the durable time of its last row minus its commit time (same "
        f"host clock). {o['warmup']} s of warm-up, then {o['seconds']} s measured per rate. Baseline: "
        "the same writer with a plain log consumer in a process of its own instead of the capture, "
        "timed when the transaction's commit is read from the log: a psycopg2 logical replication "
        "cursor on a pgoutput slot (PostgreSQL) and a pymysqlreplication `BinLogStreamReader` "
        "(MariaDB), the client libraries the capture itself reads the log with. Ratio = our p99 / the "
        "baseline's p99. Latencies in milliseconds; the log can deliver a commit before the writer "
        "process has seen its COMMIT return, so the smallest raw latencies are about 0 or slightly "
        "negative (kept as measured).",
        "",
        "| Source | Target events/s | Achieved events/s | Consumer | p50 | p90 | p99 | max | Transactions | "
        "p99 ratio | Target p99 ≤ 1 s at 10k/s |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for kind, r in results.items():
        if "error" in r:
            lines.append(f"| {NAMES.get(kind, kind)} | failed: {r['error']} | | | | | | | | | |")
            continue
        for rate in r["opts"]["rates"]:
            for who, name in (("ours", "DBLog (durable in Delta)"), ("raw", "raw log consumer")):
                s = r[who].get(str(rate), {})
                target = ""
                if who == "ours" and rate == TARGET_RATE and "p99_s" in s:
                    target = "met" if s["p99_s"] <= TARGET_P99_S else "missed"
                miss = f" ({s['missing']} not seen)" if s.get("missing") else ""
                ratio = f"{s['p99_ratio']:.2f}×" if "p99_ratio" in s else ""
                lines.append(
                    f"| {r['label'] if who == 'ours' else '″'} | {rate:,} | "
                    f"{s.get('achieved_events_per_s', 0):,.0f} | {name} | {_ms(s.get('p50_s'))} | "
                    f"{_ms(s.get('p90_s'))} | {_ms(s.get('p99_s'))} | {_ms(s.get('max_s'))} | "
                    f"{s.get('txns', 0):,}{miss} | {ratio} | {target} |"
                )
    stage_rows = []
    for kind, r in results.items():
        for rate in r.get("opts", {}).get("rates", []):
            s = r.get("ours", {}).get(str(rate), {})
            g = s.get("stages", {})
            if g:
                stage_rows.append(
                    f"| {NAMES.get(kind, kind)} | {rate:,} | "
                    + " | ".join(
                        f"{_ms(g.get(k, {}).get('p50_s'))} / {_ms(g.get(k, {}).get('p99_s'))}"
                        for k in ("log_to_engine", "engine_to_write", "output_write")
                    )
                    + f" | {s.get('events_per_output_write', 0):,.0f} |"
                )
    if stage_rows:
        cfg = next((r["engine_config"] for r in results.values() if "engine_config" in r), {})
        lines += [
            "",
            "Where the time goes, p50 / p99 in ms per transaction: from the commit until the engine "
            "received its last row from the log (`poll`), until the writer thread began the Delta commit "
            "holding it (the writer gathers events for up to `flush_interval` seconds), and the Delta "
            "commit itself (`output.write`). Engine settings: " + ", ".join(f"{k}={v}" for k, v in cfg.items()) + ".",
            "",
            "| Source | Events/s | Commit → engine | Engine → write start | Delta commit | Events per Delta commit |",
            "|---|---:|---:|---:|---:|---:|",
        ] + stage_rows
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str) -> Optional[str]:
    ok = {k: r for k, r in results.items() if "ours" in r}
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ok), figsize=(6 * len(ok), 4.5), squeeze=False)
    colors = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a"]
    for ax, (_kind, r) in zip(axes[0], ok.items()):
        for i, rate in enumerate(r["opts"]["rates"]):
            for who, style, name in (("ours", "-", "DBLog"), ("raw", "--", "raw consumer")):
                s = r[who].get(str(rate), {})
                if "percentiles_s" in s:
                    # log scale: a commit read before the writer saw its COMMIT return is <= 0
                    ax.plot(
                        [max(x * 1000, 0.1) for x in s["percentiles_s"]],
                        range(1, 101),
                        style,
                        color=colors[i % len(colors)],
                        label=f"{name}, {rate:,} events/s",
                    )
        ax.axvline(TARGET_P99_S * 1000, color="grey", lw=0.8, ls=":")
        ax.axhline(99, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlim(left=0.1)
        ax.set_xlabel("commit → seen latency (ms, log scale)")
        ax.set_ylabel("percentile of transactions")
        ax.set_title(f"{r['label']}")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Commit → durable changelog: DBLog (solid) vs raw log consumer (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _without_percentiles(result: dict) -> dict:
    """A run's result for printing: the 100 percentiles behind the plot left out."""
    return {
        **result,
        **{
            who: {rate: {k: v for k, v in st.items() if k != "percentiles_s"} for rate, st in result[who].items()}
            for who in ("ours", "raw")
            if who in result
        },
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.latency", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument("--rates", default=",".join(str(r) for r in DEFAULTS["rates"]), help="target events/s")
    p.add_argument("--seconds", type=int, default=DEFAULTS["seconds"], help="measured seconds per rate")
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"])
    p.add_argument("--flush-interval", type=float, help="EngineConfig.flush_interval override (exploration)")
    p.add_argument("--poll-timeout", type=float, help="EngineConfig.poll_timeout override (exploration)")
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    a = p.parse_args(argv)
    engine = {
        k: v for k, v in (("flush_interval", a.flush_interval), ("poll_timeout", a.poll_timeout)) if v is not None
    }
    opts = {
        "rates": [int(x) for x in a.rates.split(",") if x.strip()],
        "seconds": a.seconds,
        "warmup": a.warmup,
        "engine": engine,
    }

    return standalone(
        "latency",
        sys.modules[__name__],
        [a.only] if a.only else list(DATABASES),
        opts,
        a.plot,
        shown=_without_percentiles,
    )


if __name__ == "__main__":
    sys.exit(main())
