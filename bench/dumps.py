"""Dumps at scale, with and without a concurrent write load, and the watermark overhead.

1. **Dump at scale** (issue 6, item 2): a ``rows``-row narrow table is dumped by a running
   in-process capture with each chunk size, against ``psql COPY (SELECT * ... ORDER BY id)
   TO STDOUT`` / ``mariadb --quick --batch -e 'SELECT * ... ORDER BY id'`` to /dev/null
   (median of ``baseline_repeat``), first on an idle table, then while a separate process
   (bench/dump_load.py) writes ``load_rate`` rows/s of small transactions into the dumped
   table itself; the capture captures those log events while it dumps (the point of the
   watermark algorithm). The baseline of each condition is measured under that condition.
2. **Watermark overhead** (item 5): on an ``overhead_rows`` table, per chunk size, the
   engine's dump against the bare keyset loop of the same SQL (a) through the driver cursor
   and (b) through the source's own ``select_chunk`` (canonical values), with no
   watermarks, log or output. The differences per row say where the dump's time goes.

``python -m bench.dumps [--only pg|mysql] [--rows N] [--overhead-rows N] ...`` runs it
standalone and prints the JSON and the markdown.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Optional

from .common import NAMES, standalone
from .common import fmt_n as _n
from .dump_load import DATABASES, ChunkRetries, LiveCapture, WriteLoad, bare_loops, changes_between, close_bare
from .engine_runs import SENTINEL_KEY, wait_for

DEFAULTS = {
    "rows": 5_000_000,  # rows of the dump-at-scale table
    "chunk_sizes": [1_000, 10_000, 50_000],
    "baseline_repeat": 3,  # COPY / mariadb --quick and the bare loops: median of N
    "dump_repeat": 1,  # engine dumps per chunk size and condition (median)
    "load_rate": 2_000,  # rows/s of the concurrent write load (0: no loaded runs)
    "load_txn_rows": 20,  # rows per write-load transaction (75 % upd, 20 % ins, 5 % del)
    "overhead_rows": 1_000_000,  # rows of the watermark-overhead table
    "parts": ["scale", "overhead"],
    "readers": [1],  # parallel chunk readers per dump (--readers 1,2,4: each chunk size with each)
}
TARGETS = {"rows_per_s": 150_000, "ratio": 0.5}  # issue 6: dump >= 150k rows/s and >= 0.5 of COPY


def _median(items: list[dict], key: str) -> dict:
    return sorted(items, key=lambda r: r[key])[len(items) // 2]


def _ratio(a: float, b: float) -> Optional[float]:
    return round(a / b, 4) if b else None


def _met(run: dict) -> bool:
    return run["rows_per_s"] >= TARGETS["rows_per_s"] and (run.get("ratio") or 0) >= TARGETS["ratio"]


# -- 1. dump at scale ---------------------------------------------------------------------
def _dump_set(
    db,
    cap: LiveCapture,
    o: dict,
    rows_now: Callable[[], int],
    say,
    kind: str,
    load: Optional[WriteLoad],
    retries: ChunkRetries,
) -> dict:
    cond = "loaded" if load else "idle"
    say(f"{kind}: {cond}: baseline {db.dump_baseline_name} (median of {o['baseline_repeat']})")
    base_s = db.run_dump_baseline(o["baseline_repeat"])
    n = rows_now()
    out = {"baseline": {"seconds": round(base_s, 3), "rows": n, "rows_per_s": n / base_s}, "runs": []}
    timeout = max(600.0, rows_now() / 2_000)
    for size, readers in [(s, n) for n in o.get("readers", [1]) for s in o["chunk_sizes"]]:
        reps = []
        for _ in range(o["dump_repeat"]):
            s0, e0, r0 = (load.snapshot() if load else None), cap.watch.log_events, retries.count
            tick = load.check if load else (lambda: None)
            d = cap.dump(db.dump_table, size, timeout, on_tick=tick, readers=readers)
            if load:
                d["load"] = changes_between(s0, load.snapshot())
                d["log_events"] = cap.watch.log_events - e0
            d["chunks_reselected"] = retries.count - r0
            reps.append(d)
        d = _median(reps, "rows_per_s")
        d["ratio"] = _ratio(d["rows_per_s"], out["baseline"]["rows_per_s"])
        d["met"] = _met(d)
        out["runs"].append(d)
        say(
            f"{kind}: {cond}: chunk {size}, {readers} reader(s): {d['rows_per_s']:,.0f} rows/s vs {out['baseline']['rows_per_s']:,.0f} "
            f"raw (ratio {d['ratio']})" + (f", {d['log_events']:,} log events captured meanwhile" if load else "")
        )
    return out


def scale(kind: str, o: dict, workdir: str, say) -> dict:
    db = DATABASES[kind]()
    ids = db.source_ids(["scale"])
    cap: Optional[LiveCapture] = None
    load: Optional[WriteLoad] = None
    retries = ChunkRetries()
    engine_log = logging.getLogger(ChunkRetries.LOGGER)
    level = engine_log.level
    ok = False
    try:
        rows = o["rows"]
        say(f"{kind}: creating {db.ns}, filling {db.dump_table} with {rows:,} rows")
        t0 = time.perf_counter()
        db.create()
        db.fill_dump_table(rows)
        out: dict = {"rows": rows, "fill_s": round(time.perf_counter() - t0, 1), "baseline_name": db.dump_baseline_name}
        engine_log.addHandler(retries)
        if engine_log.getEffectiveLevel() > logging.INFO:
            engine_log.setLevel(logging.INFO)
        cap = LiveCapture(db, ids["scale"], workdir)
        cap.start().prime(-1)
        out["idle"] = _dump_set(db, cap, o, lambda: rows, say, kind, None, retries)
        if o["load_rate"] > 0:
            cap.watch.counting = True  # before the load's first commit: every event counted
            load = WriteLoad(kind, db.dump_table, rows + 1, o["load_rate"], o["load_txn_rows"])
            say(f"{kind}: starting the write load ({o['load_rate']:,} rows/s into {db.dump_table})")
            load.start()

            def rows_now() -> int:
                s = load.snapshot()
                return rows + s["inserted"] - s["deleted"]

            loaded = _dump_set(db, cap, o, rows_now, say, kind, load, retries)
            for run in loaded["runs"]:
                idle = next(
                    r
                    for r in out["idle"]["runs"]
                    if (r["chunk_size"], r.get("readers", 1)) == (run["chunk_size"], run.get("readers", 1))
                )
                run["ratio_to_idle"] = _ratio(run["rows_per_s"], idle["rows_per_s"])
            loaded["load"] = totals = load.stop()
            load = None
            # Every change of the load must reach the changelog: end with a sentinel row and
            # compare the log events written with the rows the load changed.
            db.insert_primer(SENTINEL_KEY)
            wait_for(lambda: cap.watch.position is not None, 300, "the sentinel after the load", cap.check)
            loaded["log_events_total"] = cap.watch.log_events
            # >=: delivery is at least once (a reconnect may write an event again).
            loaded["captured_all"] = cap.watch.log_events >= totals["changes"]
            say(
                f"{kind}: write load achieved {totals['achieved_rows_per_s']:,.0f} rows/s; "
                f"{cap.watch.log_events:,} of its {totals['changes']:,} changes captured"
            )
            out["loaded"] = loaded
        ok = True
        return out
    finally:
        engine_log.removeHandler(retries)
        engine_log.setLevel(level)
        if load is not None:
            load.stop()
        _stop_and_clean(db, [cap], ids, ok, kind, say)


# -- 2. watermark overhead -----------------------------------------------------------------
def overhead(kind: str, o: dict, workdir: str, say) -> dict:
    db = DATABASES[kind]()
    ids = db.source_ids(["engine", "bare"])
    cap: Optional[LiveCapture] = None
    ok = False
    try:
        rows = o["overhead_rows"]
        say(f"{kind}: creating {db.ns}, filling {db.dump_table} with {rows:,} rows (watermark overhead)")
        db.create()
        db.fill_dump_table(rows)
        # The capture keeps running (idle) while the bare loops run in a worker process: a
        # stopped capture restarting from a checkpoint in a binlog file purged meanwhile
        # (the integration tests PURGE BINARY LOGS) would fail.
        cap = LiveCapture(db, ids["engine"], workdir)
        cap.start().prime(-1)
        out: dict = {"rows": rows, "runs": []}
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
            try:
                for size in o["chunk_sizes"]:
                    bare = pool.submit(
                        bare_loops, kind, db.source_config(ids["bare"]), db.dump_table, size, o["baseline_repeat"]
                    ).result(timeout=3_600)
                    drv, src = _median(bare["driver"], "rows_per_s"), _median(bare["select_chunk"], "rows_per_s")
                    engs = [cap.dump(db.dump_table, size, max(600.0, rows / 2_000)) for _ in range(o["dump_repeat"])]
                    out["runs"].append(_overhead_run(size, drv, src, _median(engs, "rows_per_s")))
                    r = out["runs"][-1]
                    say(
                        f"{kind}: chunk {size}: driver {drv['rows_per_s']:,.0f}, select_chunk {src['rows_per_s']:,.0f}, "
                        f"engine {r['engine']['rows_per_s']:,.0f} rows/s (ratio {r['ratio_to_driver']} / "
                        f"{r['ratio_to_select_chunk']})"
                    )
            finally:
                try:
                    pool.submit(close_bare).result(timeout=60)
                except Exception as exc:  # noqa: BLE001 - its connections end with the process
                    say(f"{kind}: closing the bare source: {exc}")
        ok = True
        return out
    finally:
        _stop_and_clean(db, [cap], ids, ok, kind, say)


def _overhead_run(size: int, drv: dict, src: dict, eng: dict) -> dict:
    run = {
        "chunk_size": size,
        "driver": drv,
        "select_chunk": src,
        "engine": eng,
        "ratio_to_driver": _ratio(eng["rows_per_s"], drv["rows_per_s"]),
        "ratio_to_select_chunk": _ratio(eng["rows_per_s"], src["rows_per_s"]),
    }
    # Where a row's time goes (µs/row); the engine side uses its rate between the first and
    # last chunk, so request pick-up and the final flush are not in it.
    eng_rate = eng.get("chunk_phase_rows_per_s") or eng["rows_per_s"]
    us = [1e6 / drv["rows_per_s"], 1e6 / src["rows_per_s"], 1e6 / eng_rate]
    run["us_per_row"] = {
        "driver_fetch": round(us[0], 2),
        "snapshot_and_canonical": round(us[1] - us[0], 2),
        "watermarks_log_output": round(us[2] - us[1], 2),
        "engine_total": round(us[2], 2),
    }
    return run


def _stop_and_clean(db, caps: list, ids: dict, ok: bool, kind: str, say) -> None:
    for c in caps:
        if c is not None:
            try:
                c.stop(120 if ok else 10)  # after a failure, clean-up ends what is stuck
            except Exception as exc:  # noqa: BLE001 - keep cleaning up
                say(f"{kind}: stopping {c.source_id}: {exc}")
    try:
        db.cleanup(list(ids.values()))
    except Exception as exc:  # noqa: BLE001
        say(f"{kind}: clean-up of {db.ns} failed: {exc}")


# -- the integration contract ---------------------------------------------------------------
def run(kind: str, opts: dict, workdir: str, say) -> dict:
    """kind: "pg" or "mysql"; opts: keys of DEFAULTS (missing ones take the default)."""
    o = {**DEFAULTS, **(opts or {})}
    out: dict = {"label": DATABASES[kind].label, "opts": o, "targets": TARGETS}
    t0 = time.perf_counter()
    if "scale" in o["parts"]:
        out["scale"] = scale(kind, o, workdir, say)
    if "overhead" in o["parts"]:
        out["overhead"] = overhead(kind, o, workdir, say)
    out["duration_s"] = round(time.perf_counter() - t0, 1)
    return out


# -- report ----------------------------------------------------------------------------------
def _x(x) -> str:
    return f"{x:.2f}×" if isinstance(x, (int, float)) else "–"


def _scale_md(results: dict) -> list[str]:
    o = next((r["opts"] for r in results.values() if "scale" in r), DEFAULTS)
    lines = [
        f"### Dump at scale ({_n(o['rows'])} rows), with and without a concurrent write load",
        "",
        "A narrow table (`id bigint primary key, v int, s` 10 characters) is dumped by a running "
        "in-process capture (Delta changelog, default `EngineConfig`) with each chunk size, timed from "
        'the dump request to DONE. Baseline: `psql -c "COPY (SELECT * FROM t ORDER BY id) TO STDOUT"` / '
        '`mariadb --quick --batch -e "SELECT * FROM t ORDER BY id"` to /dev/null, median of '
        f"{o['baseline_repeat']}, measured in the same run under the same condition. *Loaded*: a separate "
        f"process commits {_n(o['load_rate'])} rows/s in transactions of {o['load_txn_rows']} rows into the "
        "dumped table itself (75 % updates of random existing keys, 20 % inserts beyond the max key, 5 % "
        "deletes) while the capture dumps it and captures those changes; *log events* are the table's "
        "changes written to the changelog during the dump. PostgreSQL fills the table with `INSERT ... "
        "SELECT generate_series`, MariaDB with `INSERT ... SELECT` from the SEQUENCE engine's `seq_1_to_N`. "
        f"Target (issue 6): ≥ {_n(TARGETS['rows_per_s'])} rows/s and ≥ {TARGETS['ratio']:.2f}× the baseline.",
        "",
        "| Source | Write load | Chunk size | Readers | Baseline rows/s | DBLog rows/s | Ratio "
        "| Rows/s between chunks | Chunks | Log events captured during the dump | Load rows/s during the dump "
        "| Target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes = []
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} ||||||||||| ")
            continue
        sc = r.get("scale")
        if not sc:
            continue
        for cond in ("idle", "loaded"):
            part = sc.get(cond)
            if not part:
                continue
            for run in part["runs"]:
                loaded = cond == "loaded"
                lines.append(
                    f"| {name} | {'yes' if loaded else 'none'} | {_n(run['chunk_size'])} | {run.get('readers', 1)} | "
                    f"{_n(part['baseline']['rows_per_s'])} | {_n(run['rows_per_s'])} | {_x(run['ratio'])} | "
                    f"{_n(run.get('chunk_phase_rows_per_s'))} | {_n(run['chunks'])} | "
                    f"{_n(run['log_events']) if loaded else ''} | {_n(run['load']['rows_per_s']) if loaded else ''} | "
                    f"{'met' if run['met'] else 'missed'} |"
                )
        ld = sc.get("loaded")
        if ld:
            t = ld["load"]
            retried = sum(x.get("chunks_reselected", 0) for x in ld["runs"])
            notes.append(
                f"{name}: the write load achieved {_n(t['achieved_rows_per_s'])} rows/s (asked "
                f"{_n(t['target_rows_per_s'])}) over {t['seconds']:.0f} s: {_n(t['updated'])} updates, "
                f"{_n(t['inserted'])} inserts, {_n(t['deleted'])} deletes ({_n(t['changes'])} rows changed); "
                f"{_n(ld['log_events_total'])} log events of the table reached the changelog "
                f"({'every change' if ld['captured_all'] else 'changes MISSING'}); loaded/idle DBLog rate "
                + ", ".join(f"{_x(x.get('ratio_to_idle'))} ({_n(x['chunk_size'])})" for x in ld["runs"])
                + (f"; {retried} chunks re-selected" if retried else "")
                + "."
            )
    return lines + [""] + [f"* {n}" for n in notes]


def _overhead_md(results: dict) -> list[str]:
    o = next((r["opts"] for r in results.values() if "overhead" in r), DEFAULTS)
    lines = [
        f"### Watermark overhead ({_n(o['overhead_rows'])} rows)",
        "",
        "The engine's dump (live capture: LW write, chunk SELECT, HW write, the window, the Delta "
        "output; request to DONE) against the bare loop of the same keyset chunk SQL "
        "(`core/chunks.py`, `WHERE id > last ORDER BY id LIMIT n`) in a worker process of its own (no "
        "capture thread, no shared GIL; the capture idles meanwhile): *driver* fetches the rows with a plain autocommit psycopg2 / PyMySQL cursor (the "
        "driver's own type conversion), *select_chunk* calls the source's `select_chunk` (PostgreSQL: "
        "REPEATABLE READ snapshot and its invisible transactions; canonical values). Bare loops: median of "
        f"{o['baseline_repeat']}. The µs/row columns decompose the engine's time per row: driver fetch, "
        "then what `select_chunk` adds (snapshot, conversion to canonical values), then what the engine "
        "adds on top (watermarks, window, events, output; its rate between the first and last chunk, so "
        "request pick-up is excluded). The engine's writer thread overlaps the output with the next "
        "chunk's SELECT, so the split is approximate; a negative difference is within the noise.",
        "",
        "| Source | Chunk size | Driver loop rows/s | select_chunk loop rows/s | DBLog dump rows/s | "
        "DBLog ÷ driver | DBLog ÷ select_chunk | µs/row driver fetch | + snapshot, canonical values | "
        "+ watermarks, log, output |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} ||||||||| ")
            continue
        for run in (r.get("overhead") or {}).get("runs", []):
            us = run["us_per_row"]
            lines.append(
                f"| {name} | {_n(run['chunk_size'])} | {_n(run['driver']['rows_per_s'])} | "
                f"{_n(run['select_chunk']['rows_per_s'])} | {_n(run['engine']['rows_per_s'])} | "
                f"{_x(run['ratio_to_driver'])} | {_x(run['ratio_to_select_chunk'])} | "
                f"{us['driver_fetch']:.2f} | {us['snapshot_and_canonical']:.2f} | {us['watermarks_log_output']:.2f} |"
            )
    return lines


def markdown(results: dict) -> str:
    out: list[str] = []
    if any("scale" in r or "error" in r for r in results.values()):
        out += _scale_md(results) + [""]
    if any("overhead" in r for r in results.values()):
        out += _overhead_md(results) + [""]
    return "\n".join(out)


def plot(results: dict, path: str) -> Optional[str]:
    kinds = [k for k, r in results.items() if "error" not in r and ("scale" in r or "overhead" in r)]
    if not kinds:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [p for p in ("scale", "overhead") if any(p in results[k] for k in kinds)]
    fig, axes = plt.subplots(len(parts), len(kinds), figsize=(6.5 * len(kinds), 5 * len(parts)), squeeze=False)
    for col, kind in enumerate(kinds):
        r = results[kind]
        for row, part in enumerate(parts):
            ax = axes[row][col]
            if part == "scale" and "scale" in r:
                sc = r["scale"]
                conds = [c for c in ("idle", "loaded") if c in sc]
                runs0 = sc[conds[0]]["runs"]
                sizes = [x["chunk_size"] for x in runs0]
                many = len({x.get("readers", 1) for x in runs0}) > 1
                ticks = [f"{x['chunk_size']:,}" + (f"\n{x.get('readers', 1)} readers" if many else "") for x in runs0]
                w = 0.8 / len(conds)
                for i, c in enumerate(conds):
                    xs = [j + (i - (len(conds) - 1) / 2) * w for j in range(len(sizes))]
                    ax.bar(
                        xs,
                        [x["rows_per_s"] for x in sc[c]["runs"]],
                        w,
                        label=f"DBLog dump ({c})",
                        color=("tab:blue", "tab:orange")[i],
                    )
                    ax.axhline(
                        sc[c]["baseline"]["rows_per_s"],
                        ls="--",
                        color=("tab:blue", "tab:orange")[i],
                        label=f"raw baseline ({c})",
                    )
                ax.axhline(TARGETS["rows_per_s"], ls=":", color="gray", label="target rows/s")
                ax.set_title(f"{NAMES.get(kind, kind)}: dump of {sc['rows']:,} rows")
            elif part == "overhead" and "overhead" in r:
                runs = r["overhead"]["runs"]
                sizes = [x["chunk_size"] for x in runs]
                ticks = [f"{s:,}" for s in sizes]
                for i, (k, label) in enumerate(
                    (
                        ("driver", "bare loop, driver cursor"),
                        ("select_chunk", "bare loop, source select_chunk"),
                        ("engine", "DBLog dump (watermarks, output)"),
                    )
                ):
                    ax.bar(
                        [j + (i - 1) * 0.27 for j in range(len(sizes))],
                        [x[k]["rows_per_s"] for x in runs],
                        0.27,
                        label=label,
                    )
                ax.set_title(f"{NAMES.get(kind, kind)}: watermark overhead, {r['overhead']['rows']:,} rows")
            else:
                ax.set_visible(False)
                continue
            ax.set_yscale("log")
            lo = min(b.get_height() for b in ax.patches if b.get_height() > 0)
            ax.set_ylim(bottom=lo / 3)  # log-scale bars need a floor below the smallest
            ax.set_xticks(range(len(sizes)), ticks)
            ax.set_xlabel("chunk size (rows)")
            ax.set_ylabel("rows/s (log scale)")
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.dumps", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument("--rows", type=int, default=DEFAULTS["rows"], help="rows of the dump-at-scale table")
    p.add_argument("--overhead-rows", type=int, default=DEFAULTS["overhead_rows"])
    p.add_argument("--chunk-sizes", default=",".join(map(str, DEFAULTS["chunk_sizes"])))
    p.add_argument("--repeat", type=int, default=DEFAULTS["baseline_repeat"], help="baseline runs (median)")
    p.add_argument("--dump-repeat", type=int, default=DEFAULTS["dump_repeat"], help="engine dumps (median)")
    p.add_argument("--load-rate", type=int, default=DEFAULTS["load_rate"], help="rows/s; 0: no loaded runs")
    p.add_argument("--load-txn-rows", type=int, default=DEFAULTS["load_txn_rows"])
    p.add_argument("--parts", default=",".join(DEFAULTS["parts"]), help="scale,overhead")
    p.add_argument("--readers", default="1", help="parallel chunk readers per dump, e.g. 1,2,4")
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    a = p.parse_args(argv)
    opts = {
        "rows": a.rows,
        "overhead_rows": a.overhead_rows,
        "baseline_repeat": a.repeat,
        "dump_repeat": a.dump_repeat,
        "load_rate": a.load_rate,
        "load_txn_rows": a.load_txn_rows,
        "chunk_sizes": [int(x) for x in a.chunk_sizes.split(",") if x.strip()],
        "parts": [x.strip() for x in a.parts.split(",") if x.strip()],
        "readers": [int(x) for x in a.readers.split(",") if x.strip()],
    }

    return standalone("dumps", sys.modules[__name__], [a.only] if a.only else list(DATABASES), opts, a.plot)


if __name__ == "__main__":
    sys.exit(main())
