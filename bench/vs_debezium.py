"""Ours against Debezium's embedded engine, measured in the same run (issue 13's table).

    eval "$(scripts/services env)"; python -m bench.vs_debezium [--only pg|mysql]
        [--events 200000] [--narrow-rows 1000000] [--wide-rows 200000] [--plot PNG]

Five workloads per database, each on a fresh table: *capture* of N log events (90 % inserts
in 10k-row transactions, 10 % updates, written with the capture stopped, then read by both)
and *dump* of a table filled beforehand, each with narrow rows (bigint key, int, 10
characters: bench/dbs.py) and 30-column rows (bench/wide.py); and *capture* of narrow rows
written in one-row transactions (``--onerow-events``), as OLTP applications write them. Ours: the in-process capture
into the durable Delta changelog, timed until the sentinel's checkpoint is stored (capture) or
from the dump request to DONE (10k-row chunks). Debezium 3.5 (bench/debezium.py, built with
Maven once): the embedded engine with its default settings and two consumers (count-only, and
Kafka's JsonConverter), reading the same log range (capture) or snapshotting the same table
(``snapshot.mode=initial``; MariaDB with ``snapshot.locking.mode=none``, as our dumps take no
lock), timed from building the engine to its N-th event of the table. CPU: this process's CPU
time while ours ran (capture, reader and writer threads) and the JVM's process CPU while
Debezium ran, per event or row; the database servers are in neither.

Ratios are ours / Debezium for the rates and Debezium / ours for the CPU per event (above 1:
we are faster, or spend less); the issue's goal is 2 for every row and both consumers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
import time
from typing import Any, Optional

from . import debezium
from .common import NAMES, standalone
from .dbs import DATABASES
from .engine_runs import SENTINEL_KEY, InProcessCapture
from .wide import WIDE

DEFAULTS = {
    "events": 200_000,
    "narrow_rows": 1_000_000,
    "wide_rows": 200_000,
    "chunk_size": 10_000,
    "onerow_events": 50_000,  # capture_onerow: each its own transaction (slow to write)
    "workloads": "capture_narrow,capture_wide,dump_narrow,dump_wide,capture_onerow",
    "debezium": True,  # False: ours only (a quick before/after of one change)
    # Our MariaDB sslmode: None keeps our default (PyMySQL negotiates TLS when the server
    # offers it); 'disable' matches Debezium's MariaDB connector default (database.ssl.mode).
    "mysql_sslmode": None,
}
WORKLOADS = (("capture", "narrow"), ("capture", "wide"), ("dump", "narrow"), ("dump", "wide"), ("capture", "onerow"))
GOAL = 2.0


def _db(kind: str, width: str, sslmode: Optional[str]) -> Any:
    db = (WIDE[kind] if width == "wide" else DATABASES[kind])()  # onerow: the narrow table
    if sslmode and db.kind != "postgres":
        config = db.source_config
        db.source_config = lambda sid: {**config(sid), "sslmode": sslmode}
    return db


def _theirs(db, table: str, n: int, timeout: float, say, with_dbz: bool, snapshot_of: Optional[str] = None) -> dict:
    out: dict = {}
    for consumer in debezium.ENGINE_CONSUMERS if with_dbz else ():
        res = debezium.run(db, consumer, table, n, timeout, say, snapshot_of=snapshot_of)
        out[consumer] = dict(name=res["name"], **debezium.rate(res, n))
    return out


def _capture(
    kind: str, width: str, n: int, workdir: str, say, with_dbz: bool, sslmode: Optional[str], per_txn: Optional[int]
) -> dict:
    db = _db(kind, width, sslmode)
    sid = db.source_ids(["vsdbz"])["vsdbz"]
    timeout = max(300.0, n / 500)
    cap: Optional[InProcessCapture] = None
    try:
        db.create()
        cap = InProcessCapture(db, sid, tempfile.mkdtemp(prefix="cap-", dir=workdir))
        cap.start().prime(-1)
        cap.stop()
        db.prepare_log_baseline()  # PostgreSQL: the publication; MariaDB: where the range starts
        debezium.prepare(db)
        say(f"{kind} capture {width}: writing {n} log events with the capture stopped")
        db.generate(n, per_txn) if per_txn else db.generate(n)
        db.insert_primer(SENTINEL_KEY)
        cpu0 = time.process_time()
        r = cap.capture_until_sentinel(n, timeout)
        cpu = time.process_time() - cpu0
        cap.stop()
        ours = {"per_s": round(r["events_per_s"], 1), "cpu_us": round(cpu / n * 1e6, 2), "seconds": r["seconds"]}
        say(f"{kind} capture {width}: ours {ours['per_s']:,.0f} events/s; Debezium next")
        return {"units": n, "ours": ours, "debezium": _theirs(db, db.event_table, n, timeout, say, with_dbz)}
    finally:
        _cleanup(db, cap, sid, say)


def _dump(
    kind: str, width: str, rows: int, chunk_size: int, workdir: str, say, with_dbz: bool, sslmode: Optional[str]
) -> dict:
    db = _db(kind, width, sslmode)
    sid = db.source_ids(["vsdbz"])["vsdbz"]
    timeout = max(300.0, rows / 2_000)
    cap: Optional[InProcessCapture] = None
    publication = f"{db.ns}_snap"
    try:
        db.create()
        if width == "narrow":
            table = db.dump_table
            db.fill_dump_table(rows)
        else:
            table = db.event_table
            db.fill_event_table(rows)
        cap = InProcessCapture(db, sid, tempfile.mkdtemp(prefix="dump-", dir=workdir))
        cap.start().prime(-1)  # a narrow source's primer rows go to its event table
        n = int(db._run(f"SELECT COUNT(*) FROM {table}")[0][0])
        cpu0 = time.process_time()
        d = cap.dump(table, chunk_size, timeout)
        cpu = time.process_time() - cpu0
        cap.stop()
        ours = {"per_s": round(d["rows_per_s"], 1), "cpu_us": round(cpu / n * 1e6, 2), "seconds": d["seconds"]}
        say(f"{kind} dump {width}: ours {ours['per_s']:,.0f} rows/s; Debezium next")
        if db.kind == "postgres" and with_dbz:
            db._run(f"CREATE PUBLICATION {publication} FOR TABLE {table}")
        snap = publication if db.kind == "postgres" else table
        return {"units": n, "ours": ours, "debezium": _theirs(db, table, n, timeout, say, with_dbz, snapshot_of=snap)}
    finally:
        if db.kind == "postgres":
            try:
                db._run(f"DROP PUBLICATION IF EXISTS {publication}")
            except Exception as exc:  # keep cleaning up
                say(f"{kind} dump {width}: dropping {publication}: {exc}")
        _cleanup(db, cap, sid, say)


def _cleanup(db, cap: Optional[InProcessCapture], sid: str, say) -> None:
    try:
        debezium.cleanup(db)
    except Exception as exc:
        say(f"dropping the Debezium slots: {exc}")
    if cap is not None:
        try:
            cap.stop(30)
        except Exception as exc:
            say(f"stopping {sid}: {exc}")
        shutil.rmtree(cap.dir, ignore_errors=True)
    try:
        db.cleanup([sid])
    except Exception as exc:
        say(f"clean-up of {db.ns}: {exc}")


def run(kind: str, opts: Optional[dict], workdir: str, say) -> dict:
    o = {**DEFAULTS, **(opts or {})}
    out: dict = {"label": NAMES.get(kind, kind), "workloads": {}}
    with_dbz = bool(o["debezium"])
    chosen = str(o["workloads"]).split(",")
    for what, width in [w for w in WORKLOADS if f"{w[0]}_{w[1]}" in chosen]:
        if what == "capture" and width == "onerow":
            r = _capture(kind, width, int(o["onerow_events"]), workdir, say, with_dbz, o["mysql_sslmode"], 1)
        elif what == "capture":
            r = _capture(kind, width, int(o["events"]), workdir, say, with_dbz, o["mysql_sslmode"], None)
        else:
            rows = int(o["narrow_rows"] if width == "narrow" else o["wide_rows"])
            r = _dump(kind, width, rows, int(o["chunk_size"]), workdir, say, with_dbz, o["mysql_sslmode"])
        for d in r["debezium"].values():
            d["ratio"] = debezium.ratio(r["ours"]["per_s"], d["events_per_s"])
            d["cpu_ratio"] = debezium.cpu_ratio(r["ours"]["cpu_us"], d["cpu_us_per_event"])
        out["workloads"][f"{what}_{width}"] = r
    return out


# -- reporting ---------------------------------------------------------------------------------
_WHAT = {
    "capture_narrow": "capture, 3-column rows",
    "capture_wide": "capture, 30-column rows",
    "dump_narrow": "dump, 3-column rows",
    "dump_wide": "dump, 30-column rows",
    "capture_onerow": "capture, 3-column rows, one-row transactions",
}


def _k(x: float) -> str:
    return f"{x / 1000:,.1f}k"


def markdown(results: dict) -> str:
    lines = [
        "### Against Debezium, same run (issue 13)",
        "",
        "| Workload | Units | Debezium, count-only | Debezium, JSON | DBLog | DBLog / count-only "
        "| DBLog / JSON | CPU µs per unit: count-only / JSON / DBLog | Goal ≥ 2× both |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name}: failed: {r['error']} | | | | | | | | |")
            continue
        for key, w in r["workloads"].items():
            unit = "events/s" if key.startswith("capture") else "rows/s"
            ours = w["ours"]
            if not w["debezium"]:
                lines.append(
                    f"| {name} {_WHAT[key]} | {w['units']:,} | – | – | {_k(ours['per_s'])} {unit} "
                    f"| – | – | – / – / {ours['cpu_us']:.1f} | – |"
                )
                continue
            c, j = w["debezium"]["count"], w["debezium"]["json"]
            met = "met" if min(c["ratio"] or 0, j["ratio"] or 0) >= GOAL else "**missed**"
            lines.append(
                f"| {name} {_WHAT[key]} | {w['units']:,} | {_k(c['events_per_s'])} {unit} | "
                f"{_k(j['events_per_s'])} | {_k(ours['per_s'])} | {c['ratio']:.2f}× | {j['ratio']:.2f}× | "
                f"{c['cpu_us_per_event']:.1f} / {j['cpu_us_per_event']:.1f} / {ours['cpu_us']:.1f} | {met} |"
            )
    return "\n".join(lines)


def plot(results: dict, path: str) -> Optional[str]:
    ok = {k: r for k, r in results.items() if "error" not in r}
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, count, js = [], [], []
    for kind, r in ok.items():
        for key, w in r["workloads"].items():
            if not w["debezium"]:
                continue
            labels.append("\n".join([NAMES.get(kind, kind), *textwrap.wrap(_WHAT[key], 20)]))
            count.append(w["debezium"]["count"]["ratio"] or 0)
            js.append(w["debezium"]["json"]["ratio"] or 0)
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(2 + 1.3 * len(labels), 4.5))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], count, 0.4, label="ours / Debezium count-only", color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], js, 0.4, label="ours / Debezium JSON", color="#ff7f0e")
    for x, a, b in zip(xs, count, js):
        ax.annotate(f"{a:.2f}", (x - 0.2, a), ha="center", va="bottom", fontsize=7)
        ax.annotate(f"{b:.2f}", (x + 0.2, b), ha="center", va="bottom", fontsize=7)
    ax.axhline(GOAL, color="#2ca02c", linestyle="--", label=f"goal {GOAL:g}×")
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("rate, ours / Debezium")
    ax.set_title("DBLog against Debezium's embedded engine, same run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.vs_debezium", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES), help="one database only")
    p.add_argument("--events", type=int, default=DEFAULTS["events"], help="log events (default %(default)s)")
    p.add_argument("--onerow-events", type=int, default=DEFAULTS["onerow_events"], help="default %(default)s")
    p.add_argument("--narrow-rows", type=int, default=DEFAULTS["narrow_rows"], help="default %(default)s")
    p.add_argument("--wide-rows", type=int, default=DEFAULTS["wide_rows"], help="default %(default)s")
    p.add_argument("--workloads", default=DEFAULTS["workloads"], help="comma-separated, default %(default)s")
    p.add_argument("--no-debezium", action="store_true", help="ours only: a quick before/after of one change")
    p.add_argument(
        "--mysql-sslmode",
        choices=["disable", "require"],
        help="our MariaDB source's sslmode (default: ours, TLS when offered; Debezium's MariaDB default is no TLS)",
    )
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    args = p.parse_args(argv)
    unknown = set(args.workloads.split(",")) - {f"{a}_{b}" for a, b in WORKLOADS}
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}")
    opts = {
        "events": args.events,
        "narrow_rows": args.narrow_rows,
        "wide_rows": args.wide_rows,
        "onerow_events": args.onerow_events,
        "workloads": args.workloads,
        "debezium": not args.no_debezium,
        "mysql_sslmode": args.mysql_sslmode,
    }
    return standalone(
        "vs_debezium", sys.modules[__name__], [args.only] if args.only else list(DATABASES), opts, args.plot
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
