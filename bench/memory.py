"""Peak memory of ``dblog capture`` under one huge transaction and during a 50k-chunk dump.

    eval "$(scripts/services env)"; python -m bench.memory [--only pg|mysql] [--txn-rows 1000000]
        [--dump-rows 1000000] [--chunk-size 50000] [--no-control] [--wide-dump-rows 0]

The capture runs as ``python -m airflow_provider_dblog.cli capture`` (bench.engine_runs.
ChildCapture, default EngineConfig), a fresh process per scenario so that the kernel's
high-water mark (VmHWM in /proc/<pid>/status) is that scenario's exact peak; the RSS is also
sampled every 20 ms (the curve in the plot). Scenarios, on the narrow tables of bench/dbs.py:

* baseline: the idle RSS of the process a second after its first commit (priming);
* txn: with the capture stopped, ONE transaction inserts ``txn_rows`` rows (a single
  ``INSERT ... SELECT`` from generate_series / MariaDB's seq_1_to_N), then a sentinel row;
  the capture is started and timed until its checkpoint passes the end of that transaction;
* control (optional): the same number of rows in 10k-row transactions, captured the same way.
  Same events, only the transaction size differs: if a source or the engine buffered whole
  transactions, the txn peak would exceed this one by about the size of the transaction;
* dump: a ``dump_rows`` table (filled before the source existed, so not in the log) dumped
  with ``chunk_size`` chunks by a freshly started capture, timed from request to DONE;
* wide_dump (optional, ``wide_dump_rows``): the same on bench/wide.py's 30-column table. The
  writer buffer is bounded in events, not bytes, so wide rows with big chunks weigh most.

The end of a load is a log position (PostgreSQL: the WAL insert LSN after the commit;
MariaDB: SHOW MASTER STATUS) encoded like the source encodes positions: the checkpoint passes
it only once every event of the load is durable (invariant 5).

Contract (bench/run.py wires it in): run(kind, opts, workdir, say) -> dict, markdown(results),
plot(results, path). opts: see DEFAULTS. RSS figures are MiB (keys ``*_mb``, as in bench/run.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from typing import Optional

from airflow_provider_dblog.core.engine import EngineConfig
from airflow_provider_dblog.core.events import Position

from .common import NAMES, standalone
from .common import fmt_n as _n
from .dbs import INSERT_TXN, MariaDBBench, PostgresBench, in_transactions
from .engine_runs import SENTINEL_KEY, ChildCapture

DEFAULTS = {
    "txn_rows": 1_000_000,  # rows of the single transaction
    "dump_rows": 1_000_000,  # rows of the dumped table
    "chunk_size": 50_000,  # dump chunk size
    "control": True,  # also capture txn_rows rows in 10k-row transactions
    "wide_dump_rows": 0,  # >0: also dump this many rows of the 30-column table of bench/wide.py
}
TARGET_MB = 500  # issue 6: capture RSS under 500 MB in every scenario
TARGET_MIB = TARGET_MB * 10**6 / 2**20  # RSS is read in KiB: compare in the same unit (476.8 MiB)
GROWTH_MB = 50  # txn peak this far above the control peak counts as growing with the transaction
WRITER_SETTINGS = (
    "writer_buffer",
    "writer_buffer_bytes",
    "writer_batch",
    "writer_batch_bytes",
    "poll_batch",
    "flush_interval",
)


class MemoryPostgresBench(PostgresBench):
    def load(self, lo: int, hi: int, per_txn: int) -> Position:
        """Rows lo..hi in transactions of per_txn rows; returns the log position after them."""
        from airflow_provider_dblog.sources.postgres.log import make_position, parse_lsn

        c = self.connect()
        try:
            in_transactions(
                c,
                lo,
                hi,
                per_txn,
                lambda a, b: (
                    f"INSERT INTO {self.event_table} SELECT g, g % 1000, substr(md5(g::text), 1, 10) "
                    f"FROM generate_series({a}::bigint, {b}::bigint) g"
                ),
            )
            cur = c.cursor()
            # The insert LSN is past the last commit record even with asynchronous commit;
            # index 0 sorts before the first change of any later transaction.
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            return make_position(parse_lsn(cur.fetchone()[0]), 0)
        finally:
            c.close()


class MemoryMariaDBBench(MariaDBBench):
    def fill_dump_table(self, rows: int) -> None:
        self.insert_seq(self.dump_table, 1, rows, 100_000)  # faster than multi-row INSERTs
        self._run(f"ANALYZE TABLE {self.dump_table}")

    def load(self, lo: int, hi: int, per_txn: int) -> Position:
        """Rows lo..hi in transactions of per_txn rows; returns the log position after them."""
        from airflow_provider_dblog.sources.mysql.log import encode_coord, file_number

        self.insert_seq(self.event_table, lo, hi, per_txn)
        name, offset = self._master_status()  # where the next transaction starts
        return Position(encode_coord(file_number(name), offset, 0, 0))


MEMORY = {"pg": MemoryPostgresBench, "mysql": MemoryMariaDBBench}


class TracedChildCapture(ChildCapture):
    """ChildCapture that also keeps the sampled RSS curve of each phase."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trace: dict[str, list[tuple[float, float]]] = {}
        self._phase_t0 = time.perf_counter()
        self._log_offset = 0

    def set_phase(self, phase: str) -> None:
        super().set_phase(phase)
        self._phase_t0 = time.perf_counter()
        self.trace[phase] = []
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0

    def end_phase(self) -> None:
        """Stop recording (the shutdown of the process is no part of any phase)."""
        self._phase = None

    def _sample(self) -> None:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            while self.proc.poll() is None:
                rss = p.memory_info().rss / 2**20
                ph = self._phase
                if ph is None:
                    time.sleep(0.02)
                    continue
                self.phase_peak[ph] = max(self.phase_peak.get(ph, 0.0), rss)
                self.trace.setdefault(ph, []).append((round(time.perf_counter() - self._phase_t0, 2), round(rss, 1)))
                time.sleep(0.02)
        except psutil.Error:
            pass

    def max_buffered(self) -> Optional[int]:
        """Largest writer buffer in this phase's status lines (printed every 5 s)."""
        try:
            with open(self.log_path, errors="replace") as f:
                f.seek(self._log_offset)
                seen = [int(m) for m in re.findall(r"buffered=(\d+)", f.read())]
        except OSError:
            return None
        return max(seen) if seen else None


def _thin(points: list, keep: int = 300) -> list:
    step = max(1, len(points) // keep)
    return [list(p) for p in points[::step]]


def _phase_result(child: TracedChildCapture, phase: str, rows: int, seconds: float, idle: float) -> dict:
    rss, hwm = child.rss_mb()
    return {
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1),
        "peak_rss_mb": round(hwm, 1),
        "sampled_peak_mb": round(child.phase_peak.get(phase, 0.0), 1),
        "rss_at_end_mb": round(rss, 1),
        "over_idle_mb": round(hwm - idle, 1),
        "peak_vs_idle": round(hwm / idle, 3),
        "max_buffered_events": child.max_buffered(),
    }


def _capture(child: TracedChildCapture, phase: str, target: Position, rows: int, timeout: float, idle: float) -> dict:
    child.set_phase(phase)
    t0 = time.perf_counter()
    child.start()
    t1 = child.wait_checkpoint(target, timeout)
    out = _phase_result(child, phase, rows, t1 - t0, idle)
    child.end_phase()
    child.stop()
    return out


def _prime(child: TracedChildCapture) -> float:
    """Create the source's slot / checkpoint; returns the idle RSS after the first commit."""
    child.set_phase("idle")
    child.start().prime(-1)
    time.sleep(1.0)  # let it settle: the idle footprint after the first commit
    idle, _ = child.rss_mb()
    child.end_phase()
    child.stop()
    return idle


def _dump(child: TracedChildCapture, phase: str, table: str, chunk: int, timeout: float, idle: float) -> dict:
    """A dump by a freshly started capture process, timed from the request to DONE."""
    child.set_phase(phase)
    child.start()
    d = child.dump(table, chunk, timeout)
    out = dict(_phase_result(child, phase, d["rows"], d["seconds"], idle), chunk_size=chunk, chunks=d["chunks"])
    child.end_phase()
    child.stop()
    return out


def _clean(kind: str, db, child: Optional[TracedChildCapture], source_id: str, ok: bool, say) -> None:
    if child is not None:
        try:
            child.stop(120 if ok else 10)
        except Exception as exc:  # keep cleaning up
            say(f"{kind} memory: stopping {source_id}: {exc}")
        shutil.rmtree(child.dir, ignore_errors=True)
    try:
        db.cleanup([source_id])
    except Exception as exc:
        say(f"{kind} memory: clean-up of {db.ns} failed: {exc}")


def _wide_dump(kind: str, rows: int, chunk: int, workdir: str, timeout: float, say) -> tuple[dict, list]:
    """The dump scenario on bench/wide.py's 30-column table (a schema and source of its own):
    the writer buffer counts events, not bytes, so wide rows weigh more per buffered event."""
    from .wide import COLUMNS, WIDE

    db = WIDE[kind]()
    source_id = db.source_ids(["wdump"])["wdump"]
    child: Optional[TracedChildCapture] = None
    ok = False
    try:
        say(f"{kind} memory: dump of {rows} wide rows ({len(COLUMNS)} columns) in {chunk}-row chunks")
        db.create()
        db.fill_event_table(rows)
        child = TracedChildCapture(db, source_id, workdir)
        idle = _prime(child)
        out = dict(
            _dump(child, "wide_dump", db.event_table, chunk, timeout, idle),
            columns=len(COLUMNS),
            idle_rss_mb=round(idle, 1),
        )
        ok = True
        return out, child.trace.get("wide_dump", [])
    finally:
        _clean(kind, db, child, source_id, ok, say)


def run(kind: str, opts: Optional[dict], workdir: str, say) -> dict:
    """The memory scenarios on one database ("pg" or "mysql"); cleans up even on failure."""
    o = {**DEFAULTS, **(opts or {})}
    n, dump_rows, chunk = int(o["txn_rows"]), int(o["dump_rows"]), int(o["chunk_size"])
    wide_rows = int(o.get("wide_dump_rows") or 0)
    db = MEMORY[kind]()
    source_id = db.source_ids(["mem"])["mem"]
    timeout = max(300.0, max(n, dump_rows, wide_rows) / 500)
    cfg = EngineConfig()
    child: Optional[TracedChildCapture] = None
    ok = False
    try:
        say(f"{kind} memory: creating {db.ns}, filling {db.dump_table} with {dump_rows} rows")
        db.create()
        db.fill_dump_table(dump_rows)
        child = TracedChildCapture(db, source_id, workdir)
        say(f"{kind} memory: priming {source_id} (dblog capture child process)")
        idle = _prime(child)
        out: dict = {
            "label": db.label,
            "idle_rss_mb": round(idle, 1),
            "target_mb": TARGET_MB,
            "target_mib": round(TARGET_MIB, 1),
            "engine_config": {k: getattr(cfg, k) for k in WRITER_SETTINGS},
            "phases": {},
        }

        say(f"{kind} memory: one transaction of {n} rows, written with the capture stopped")
        t0 = time.perf_counter()
        target = db.load(1, n, n)
        out["txn_write_s"] = round(time.perf_counter() - t0, 2)
        db.insert_primer(SENTINEL_KEY)  # something durable after the transaction's end
        say(f"{kind} memory: capturing it")
        out["phases"]["txn"] = _capture(child, "txn", target, n, timeout, idle)

        if o["control"]:
            say(f"{kind} memory: control, {n} rows in {INSERT_TXN}-row transactions")
            target = db.load(n + 1, 2 * n, INSERT_TXN)
            db.insert_primer(SENTINEL_KEY + 1)
            out["phases"]["control"] = _capture(child, "control", target, n, timeout, idle)

        say(f"{kind} memory: dump of {dump_rows} rows in {chunk}-row chunks (fresh process)")
        out["phases"]["dump"] = _dump(child, "dump", db.dump_table, chunk, timeout, idle)
        out["trace"] = {ph: _thin(pts) for ph, pts in child.trace.items() if ph != "idle"}
        if wide_rows:
            out["phases"]["wide_dump"], pts = _wide_dump(kind, wide_rows, chunk, workdir, timeout, say)
            out["trace"]["wide_dump"] = _thin(pts)

        phases = out["phases"]
        out["peak_rss_mb"] = max(p["peak_rss_mb"] for p in phases.values())
        out["met"] = out["peak_rss_mb"] < TARGET_MIB
        if "control" in phases:
            extra = phases["txn"]["peak_rss_mb"] - phases["control"]["peak_rss_mb"]
            out["txn_minus_control_mb"] = round(extra, 1)
            out["grows_with_txn"] = extra > GROWTH_MB
        for ph, p in phases.items():
            say(
                f"{kind} memory: {ph}: peak {p['peak_rss_mb']:.0f} MiB (idle {idle:.0f} MiB), "
                f"{p['rows_per_s']:,.0f} rows/s, max writer buffer {p['max_buffered_events']}"
            )
        ok = True
        return out
    finally:
        _clean(kind, db, child, source_id, ok, say)


# -- reporting ---------------------------------------------------------------------------------
SCENARIOS = {
    "txn": "one transaction of {rows} rows",
    "control": "{rows} rows in 10k-row transactions",
    "dump": "dump, {chunk} -row chunks",
    "wide_dump": "dump of 30-column rows, {chunk} -row chunks",
}


def _scenario(ph: str, p: dict) -> str:
    return SCENARIOS.get(ph, ph).format(rows=_n(p["rows"]), chunk=_n(p.get("chunk_size"))).replace(" -row", "-row")


def markdown(results: dict) -> str:
    lines = [
        "### Peak memory of `dblog capture` (one huge transaction, chunked dumps)",
        "",
        "`python -m airflow_provider_dblog.cli capture` as a child process with the default engine "
        "settings, started afresh for each scenario so that the kernel's high-water mark (VmHWM) is that "
        "scenario's exact peak (the RSS is also sampled every 20 ms). *Single transaction*: with the capture "
        "stopped, one `INSERT ... SELECT` writes all rows in ONE transaction; the capture is then started and "
        "timed until its checkpoint passes the transaction's end. *Control*: the same number of rows in "
        "10k-row transactions, captured the same way (same events, only the transaction size differs: a "
        "source buffering whole transactions would show up as a higher single-transaction peak). *Dump*: a "
        "table filled before the capture existed, dumped by a fresh capture process, timed from the request "
        "to DONE"
        + (
            "; *dump of 30-column rows*: the same on the wide table of the wide-row capture benchmark"
            if any("wide_dump" in r.get("phases", {}) for r in results.values())
            else ""
        )
        + ". Baseline: the idle RSS of the same process a second after its first commit. RSS in MiB; "
        "the target is 500 MB = 477 MiB.",
        "",
        f"| Source | Scenario | Rows | Seconds | Rows/s | Idle RSS (MiB) | Peak RSS (MiB) | Peak − idle (MiB) "
        f"| Peak / idle | Max writer buffer (events) | Target < {TARGET_MB} MB ({TARGET_MIB:.0f} MiB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes = []
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} | | | | | | | | | |")
            continue
        for ph, p in r["phases"].items():
            met = "met" if p["peak_rss_mb"] < TARGET_MIB else "**missed**"
            lines.append(
                f"| {r['label']} | {_scenario(ph, p)} | {_n(p['rows'])} | {p['seconds']:,.1f} | "
                f"{_n(p['rows_per_s'])} | {_n(p.get('idle_rss_mb', r['idle_rss_mb']))} | "
                f"{_n(p['peak_rss_mb'])} | "
                f"{_n(p['over_idle_mb'])} | {p['peak_vs_idle']:.2f}× | {_n(p['max_buffered_events'])} "
                f"| {met} |"
            )
        if "txn_minus_control_mb" in r:
            verdict = (
                "memory **grows with the transaction size**"
                if r["grows_with_txn"]
                else "no growth with the transaction size"
            )
            notes.append(
                f"{name}: single-transaction peak − control peak = {r['txn_minus_control_mb']:+,.0f} MiB "
                f"({verdict}; threshold {GROWTH_MB} MiB)."
            )
    cfg = next((r["engine_config"] for r in results.values() if "engine_config" in r), None)
    if cfg:
        notes.append(
            "Writer settings in force (EngineConfig defaults): "
            + ", ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in cfg.items())
            + "."
        )
    notes.append(
        "Max writer buffer is the largest `buffered=` of the capture's status lines (printed every 5 s), "
        "so short peaks between two lines are not seen."
    )
    return "\n".join(lines + [""] + notes) + "\n"


def plot(results: dict, path: str) -> Optional[str]:
    ok = {k: r for k, r in results.items() if "error" not in r and r.get("trace")}
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ok), figsize=(6.5 * len(ok), 4.5), squeeze=False, sharey=True)
    colours = {"txn": "#d62728", "control": "#1f77b4", "dump": "#2ca02c", "wide_dump": "#9467bd"}
    for ax, (_kind, r) in zip(axes[0], ok.items()):
        for ph, pts in r["trace"].items():
            if pts:
                p = r["phases"].get(ph, {})
                ax.plot(
                    [t for t, _ in pts],
                    [v for _, v in pts],
                    color=colours.get(ph),
                    label=f"{_scenario(ph, p) if p else ph} (peak {_n(p.get('peak_rss_mb'))} MiB)",
                )
        ax.axhline(r["idle_rss_mb"], color="#7f7f7f", linestyle="--", label=f"idle baseline {_n(r['idle_rss_mb'])} MiB")
        ax.axhline(TARGET_MIB, color="black", linestyle=":", label=f"target {TARGET_MB} MB ({TARGET_MIB:.0f} MiB)")
        ax.set_title(f"{r['label']}")
        ax.set_xlabel("seconds since the capture process started")
        ax.set_ylabel("RSS of dblog capture (MiB)")
        ax.set_ylim(0, max(TARGET_MIB, r["peak_rss_mb"]) * 1.15)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.suptitle("RSS of dblog capture (a fresh process per scenario)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends sit below the axes
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(MEMORY), help="one database only")
    p.add_argument(
        "--txn-rows",
        type=int,
        default=DEFAULTS["txn_rows"],
        help="rows of the single transaction (default %(default)s)",
    )
    p.add_argument(
        "--dump-rows", type=int, default=DEFAULTS["dump_rows"], help="rows of the dumped table (default %(default)s)"
    )
    p.add_argument(
        "--chunk-size", type=int, default=DEFAULTS["chunk_size"], help="dump chunk size (default %(default)s)"
    )
    p.add_argument("--no-control", action="store_true", help="skip the 10k-row-transaction control")
    p.add_argument(
        "--wide-dump-rows",
        type=int,
        default=DEFAULTS["wide_dump_rows"],
        help="also dump this many 30-column rows (default %(default)s: off)",
    )
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    args = p.parse_args(argv)
    opts = {
        "txn_rows": args.txn_rows,
        "dump_rows": args.dump_rows,
        "chunk_size": args.chunk_size,
        "control": not args.no_control,
        "wide_dump_rows": args.wide_dump_rows,
    }

    return standalone(
        "memory",
        sys.modules[__name__],
        [args.only] if args.only else list(MEMORY),
        opts,
        args.plot,
        shown=lambda r: {k: v for k, v in r.items() if k != "trace"},
    )


if __name__ == "__main__":
    sys.exit(main())
