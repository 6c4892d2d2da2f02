"""Source impact: write TPS on the source during a full dump, against TPS without capture.

    python -m bench.impact [--only pg|mysql] [--seconds 30] [--rows 2000000] [--clients 4]

A closed-loop OLTP load (each client: BEGIN; two point UPDATEs by random key; one INSERT;
COMMIT) runs against the run's own ``ev`` table in phases of the same length:
  a  the load alone (no slot, no capture);
  b  the capture running in this process, capturing the load's events (log only);
  c  the capture also dumping a large table in 10k-row chunks for the whole phase;
  d  the same with an adaptive dump (``--adaptive``: chunk size and delay paced by the source's
     health, core/pacing.py), starting from the same chunk size;
  a' the load alone again (capture stopped), so that drift of the shared machine shows.
The dump's own impact is d / b (c / b for a fixed pace): the capture's CPU is in both.
The baseline is the mean of a and a'. The load runs outside this process in every phase
(pgbench on PostgreSQL; one spawned pymysql process per client on MariaDB), so the GIL of
the capture cannot throttle it. A sampler thread looks for lock waits every 50 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Optional

from .common import NAMES, standalone
from .common import fmt_n as _n
from .dbs import DATABASES
from .lock_waits import LockSampler, row_lock_waits
from .oltp import MariaLoad, PgLoad

DEFAULTS = {
    "seconds": 30,  # length of each phase
    "rows": 2_000_000,  # rows of the dumped table
    "clients": 4,  # load clients (pgbench -c / pymysql processes)
    "keys_per_client": 10_000,  # rows each client owns and updates (disjoint ranges: no conflicts)
    "chunk_size": 10_000,  # dump chunk size
    "baseline_after": True,  # run phase a' after the capture phases
    "sample_interval": 0.05,  # lock-wait sampling period, seconds
}
TARGET_RATIO = 0.9
PHASES = [
    ("baseline", "a: load alone"),
    ("capture", "b: capture, log only"),
    ("capture_dump", "c: capture + full dump"),
    ("capture_adaptive", "d: capture + adaptive dump"),
    ("baseline_after", "a': load alone again"),
]


class DumpKeeper:
    """Keeps a full dump of the big table running; if one finishes while the load still runs,
    a new one is requested at once (counted as a restart and reported)."""

    def __init__(self, cap, table: str, chunk_size: int, adaptive: bool = False):
        self.cap, self.table, self.chunk_size, self.adaptive = cap, table, chunk_size, adaptive
        self.ids: list[str] = []
        self.restarts = 0

    def request(self) -> None:
        from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec

        spec = DumpSpec.new(self.cap.source_id, [self.table], None)
        self.cap.state.add_dump(spec, DumpControl(chunk_size=self.chunk_size, adaptive=self.adaptive))
        self.ids.append(spec.dump_id)

    def rows(self) -> int:
        """Rows made durable by all dumps so far; requests a new dump if the last one is done."""
        from airflow_provider_dblog.core.dumps import DumpStatus

        self.cap.check()
        total = 0
        for i in self.ids:
            d = self.cap.state.get_dump(i)
            total += sum(p.rows for p in d.progress.values())
        if d.status is DumpStatus.DONE:
            self.restarts += 1
            self.request()
        elif d.status.finished:
            raise RuntimeError(f"bench: dump {d.dump_id} ended {d.status.value}: {d.error}")
        return total

    def cancel(self) -> None:
        from airflow_provider_dblog.core.dumps import DumpControl

        self.cap.state.set_control(
            self.ids[-1], DumpControl(cancelled=True, chunk_size=self.chunk_size, adaptive=self.adaptive)
        )


# -- phases ---------------------------------------------------------------------------------------
def _phase(
    name: str,
    kind: str,
    db,
    load,
    sampler: LockSampler,
    o: dict,
    phase_no: int,
    tick: Callable[[], None] = lambda: None,
    cap=None,
) -> dict:
    import psutil

    # the engine's count of log events read (private; skipped if it is ever renamed)
    counted = cap is not None and hasattr(cap.engine, "_events_in")
    ev0 = cap.engine.events_in if counted else 0
    me = psutil.Process()
    sampler.set_phase(name)
    rlw0, cpu0, busy0 = row_lock_waits(db, kind), me.cpu_times(), psutil.cpu_times()
    t0 = time.perf_counter()
    load.start(o["seconds"], phase_no)
    while load.running():
        tick()
        time.sleep(0.05)
    res = load.result()
    wall = time.perf_counter() - t0
    cpu1, busy1 = me.cpu_times(), psutil.cpu_times()
    sampler.set_phase(None)
    res["locks"] = sampler.summary(name)
    if rlw0 is not None:
        res["locks"]["innodb_row_lock_waits_server_wide"] = row_lock_waits(db, kind) - rlw0
    if counted:  # log events the capture read while the load ran, per event written
        res["log_events_read_share"] = round((cap.engine.events_in - ev0) / max(1, 3 * res["transactions"]), 3)
    res["bench_process_cores"] = round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall, 2)
    idle = (busy1.idle + getattr(busy1, "iowait", 0)) - (busy0.idle + getattr(busy0, "iowait", 0))
    total = sum(busy1) - sum(busy0)
    res["machine_cpu_busy_pct"] = round(100 * (1 - idle / total), 1) if total else None
    return res


def run(kind: str, opts: dict, workdir: str, say) -> dict:
    from .engine_runs import SENTINEL_KEY, InProcessCapture, wait_for

    o = {**DEFAULTS, **(opts or {})}
    db = DATABASES[kind]()
    ids = db.source_ids(["impact"])
    sid = ids["impact"]
    load = (PgLoad if kind == "pg" else MariaLoad)(db, o["clients"], o["keys_per_client"], workdir)
    sampler = LockSampler(db, kind, load.app, f"dblog-{sid}"[:63], o["sample_interval"])
    cap = None
    out: dict = {"label": db.label, "opts": o, "phases": {}}
    try:
        say(
            f"impact {kind}: creating {db.ns}, {o['clients'] * o['keys_per_client']:,} load rows, "
            f"{o['rows']:,} rows to dump"
        )
        db.create()
        load.prepare()
        db.fill_dump_table(o["rows"])
        sampler.start()
        ph = out["phases"]
        say(f"impact {kind}: phase a, load alone for {o['seconds']} s")
        ph["baseline"] = _phase("baseline", kind, db, load, sampler, o, 0)
        cap = InProcessCapture(db, sid, workdir)
        cap.start().prime(-1)
        say(f"impact {kind}: phase b, load with the capture running")
        ph["capture"] = _phase("capture", kind, db, load, sampler, o, 1, cap.check, cap)
        # How far behind the load the capture fell: time from the load's end until a row
        # written then is durable in the changelog.
        t0 = time.perf_counter()
        db.insert_primer(SENTINEL_KEY)
        wait_for(lambda: cap.watch.position is not None, 600, "the catch-up row", cap.check)
        cap.wait_checkpoint(cap.watch.position, 600)
        ph["capture"]["catch_up_s"] = round(time.perf_counter() - t0, 2)

        for phase, no, adaptive in (("capture_dump", 2, False), ("capture_adaptive", 3, True)):
            say(f"impact {kind}: phase {phase}, load during a {'n adaptive' if adaptive else ''} full dump")
            keeper = DumpKeeper(cap, db.dump_table, o["chunk_size"], adaptive)
            keeper.request()
            wait_for(lambda k=keeper: k.rows() > 0, 300, "the dump's first chunk", cap.check)
            marks: list[tuple[float, int]] = []

            def tick(k=keeper, m=marks) -> None:
                m.append((time.perf_counter(), k.rows()))

            tick()
            ph[phase] = _phase(phase, kind, db, load, sampler, o, no, tick, cap)
            tick()
            (t0, r0), (t1, r1) = marks[0], marks[-1]
            ph[phase]["dump"] = {
                "rows_during_load": r1 - r0,
                "rows_per_s": (r1 - r0) / (t1 - t0),
                "restarts": keeper.restarts,
                "dumps": len(keeper.ids),
                "pace": ((cap.engine.scheduler.health().get(keeper.ids[-1]) or {}).get("pace")),
            }
            if keeper.restarts:
                say(
                    f"impact {kind}: WARNING: the dump finished {keeper.restarts}x before the load ended "
                    "(restarted at once); use more --rows"
                )
            keeper.cancel()
            time.sleep(1.0)  # the cancel is read within control_interval
        cap.stop()
        cap = None
        if o["baseline_after"]:
            say(f"impact {kind}: phase a', load alone again")
            ph["baseline_after"] = _phase("baseline_after", kind, db, load, sampler, o, 4)
        base = [ph[p]["tps"] for p in ("baseline", "baseline_after") if p in ph]
        out["baseline_tps"] = sum(base) / len(base)
        out["ratio_capture"] = round(ph["capture"]["tps"] / out["baseline_tps"], 3)
        out["ratio_capture_dump"] = round(ph["capture_dump"]["tps"] / out["baseline_tps"], 3)
        out["ratio_capture_adaptive"] = round(ph["capture_adaptive"]["tps"] / out["baseline_tps"], 3)
        # the dump's own impact: against the capture alone (issue 15's measure)
        out["dump_vs_capture"] = round(ph["capture_dump"]["tps"] / ph["capture"]["tps"], 3)
        out["adaptive_vs_capture"] = round(ph["capture_adaptive"]["tps"] / ph["capture"]["tps"], 3)
        out["target"] = TARGET_RATIO
        out["met"] = out["ratio_capture_dump"] >= TARGET_RATIO
        out["lock_waits_capture"] = sum(p["locks"]["waits_capture"] for p in ph.values())
        out["lock_waits_load_only"] = sum(p["locks"]["waits_load_only"] for p in ph.values())
        if sampler.error:
            out["sampler_error"] = sampler.error
        say(
            f"impact {kind}: TPS a {ph['baseline']['tps']:.0f}, b {ph['capture']['tps']:.0f} "
            f"({out['ratio_capture']}x), c {ph['capture_dump']['tps']:.0f} ({out['ratio_capture_dump']}x), "
            f"dump {ph['capture_dump']['dump']['rows_per_s']:.0f} rows/s, "
            f"d (adaptive) {ph['capture_adaptive']['tps']:.0f} ({out['ratio_capture_adaptive']}x; "
            f"{out['adaptive_vs_capture']}x of b), dump {ph['capture_adaptive']['dump']['rows_per_s']:.0f} rows/s, "
            f"lock waits involving the capture {out['lock_waits_capture']}"
        )
        return out
    finally:
        load.stop()
        sampler.halt.set()
        if sampler.is_alive():
            sampler.join(5)
        if cap is not None:
            try:
                cap.stop(10)
            except Exception as exc:
                say(f"impact {kind}: stopping the capture: {exc}")
        try:
            db.cleanup(list(ids.values()))
        except Exception as exc:
            say(f"impact {kind}: clean-up of {db.ns} failed: {exc}")


# -- report ---------------------------------------------------------------------------------------
def markdown(results: dict) -> str:
    o = next((r["opts"] for r in results.values() if "opts" in r), DEFAULTS)
    lines = [
        "### Source impact: write TPS during a full dump",
        "",
        f"A closed-loop OLTP load of {o['clients']} clients runs for {o['seconds']} s per phase against "
        "a table of the run's schema: each transaction updates two random rows by primary key and "
        "inserts one new row (pgbench with a custom script on PostgreSQL; a sysbench-like pymysql "
        "client per process on MariaDB). Every client updates only its own key range and inserts keys "
        "no other client uses, so its clients never wait for each other's row locks. Phases: (a) the "
        "load alone, no capture; (b) the capture running in the benchmark process, capturing the load's "
        f"events; (c) the capture also dumping a {o['rows']:,}-row table in {o['chunk_size']:,}-row "
        "chunks for the whole phase (restarted if it finishes early); (a') the load alone again. The "
        "baseline is the mean of a and a'. Lock waits are sampled every 50 ms (PostgreSQL `pg_locks` "
        "not granted and `pg_stat_activity.wait_event_type = 'Lock'`; MariaDB `INNODB_LOCK_WAITS` and "
        "`Waiting for ... lock` states in the process list) and each wait is counted once: *involving "
        "the capture* when a capture session (log reader, watermark write, chunk SELECT) waits or "
        "blocks, or the lock is on the dumped or the watermark table (zero expected); *load-only* "
        "when only the load's clients take part (on PostgreSQL, concurrent INSERTs waiting to extend "
        "the table, which happens without any capture too). Waits of other jobs on the shared server "
        "are not counted; `Innodb_row_lock_waits` is server-wide and shown for reference. The "
        "database, the load and the capture share the machine's CPUs, so part of a TPS loss is CPU "
        "the capture takes rather than interference at the source (its CPU use is shown).",
        "",
        "| Source | Baseline TPS (a / a') | Capture TPS | Ratio | Capture + dump TPS | Ratio | "
        "Dump rows/s during the load | Benchmark process CPU (capture + sampler), cores b / c | "
        "Lock waits involving the capture (load-only) | Target ≥ 0.9 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes = []
    for kind, r in results.items():
        name = NAMES.get(kind, kind)
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} | | | | | | | | |")
            continue
        ph = r["phases"]
        a2 = ph.get("baseline_after", {}).get("tps")
        d = ph["capture_dump"]["dump"]
        waits = f"{r['lock_waits_capture']} ({r['lock_waits_load_only']})"
        lines.append(
            f"| {r['label']} | {_n(ph['baseline']['tps'])} / {_n(a2)} | {_n(ph['capture']['tps'])} | "
            f"{r['ratio_capture']:.2f}× | {_n(ph['capture_dump']['tps'])} | {r['ratio_capture_dump']:.2f}× | "
            f"{_n(d['rows_per_s'])} | {ph['capture']['bench_process_cores']:.2f} / "
            f"{ph['capture_dump']['bench_process_cores']:.2f} | {waits} | "
            f"{'met' if r['met'] else 'missed'} |"
        )
        if d["restarts"]:
            notes.append(f"{name}: the dump finished {d['restarts']}× during phase c and was restarted at once.")
        srv = [p["locks"].get("innodb_row_lock_waits_server_wide") for p in ph.values()]
        if any(x is not None for x in srv):
            notes.append(
                f"{name}: `Innodb_row_lock_waits` (server-wide) per phase: " + ", ".join(_n(x) for x in srv) + "."
            )
        if r.get("sampler_error"):
            notes.append(f"{name}: the lock sampler failed: {r['sampler_error']}.")
        b, c = ph["capture"], ph["capture_dump"]
        if "log_events_read_share" in b:
            notes.append(
                f"{name}: log events the capture read while the load ran, per event written: "
                f"{b['log_events_read_share']:.0%} (b) / {c.get('log_events_read_share', 0):.0%} (c); "
                f"after phase b it needed {b.get('catch_up_s', 0):.1f} s to make a new row durable."
            )
        ex = [e for p in ph.values() for e in p["locks"]["examples"]]
        if ex:
            notes.append(f"{name}: lock waits seen, e.g. `{ex[0]}`.")
    lines += [
        "",
        "Fixed and adaptive dump side by side, against the capture alone (the dump's own impact: "
        "issue 15 asks ≥ 0.9× for the adaptive one while the dump still progresses):",
        "",
        "| Source | Capture TPS (b) | Fixed dump TPS (c) | c / b | Fixed dump rows/s | Adaptive dump TPS (d) | "
        "d / b | Adaptive dump rows/s | Pace at the end | d / b ≥ 0.9 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results.values():
        if "error" in r or "capture_adaptive" not in r.get("phases", {}):
            continue
        ph = r["phases"]
        pace = ph["capture_adaptive"]["dump"].get("pace") or {}
        lines.append(
            f"| {r['label']} | {_n(ph['capture']['tps'])} | {_n(ph['capture_dump']['tps'])} | "
            f"{r['dump_vs_capture']:.2f}× | {_n(ph['capture_dump']['dump']['rows_per_s'])} | "
            f"{_n(ph['capture_adaptive']['tps'])} | {r['adaptive_vs_capture']:.2f}× | "
            f"{_n(ph['capture_adaptive']['dump']['rows_per_s'])} | "
            f"{pace.get('chunk_size', '–')} rows, {pace.get('delay_ms', '–')} ms ({pace.get('signal', '–')}) | "
            f"{'met' if r['adaptive_vs_capture'] >= TARGET_RATIO else 'missed'} |"
        )
    return "\n".join(lines + [""] + [f"* {n}" for n in notes]) + "\n"


def plot(results: dict, path: str) -> Optional[str]:
    ok = {k: r for k, r in results.items() if "phases" in r}
    if not ok:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used as matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.2
    colors = ["#9e9e9e", "#64b5f6", "#1565c0", "#2e7d32", "#cfcfcf"]
    for i, kind in enumerate(ok):
        ph = ok[kind]["phases"]
        for j, (key, label) in enumerate(PHASES):
            if key not in ph:
                continue
            x = i + (j - 2) * width
            ax.bar(x, ph[key]["tps"], width, color=colors[j], label=label if i == 0 else None)
            if key.startswith("capture"):
                ratio = ok[kind][
                    {"capture": "ratio_capture", "capture_dump": "ratio_capture_dump"}.get(
                        key, "ratio_capture_adaptive"
                    )
                ]
                ax.text(x, ph[key]["tps"], f"{ratio:.2f}×", ha="center", va="bottom", fontsize=8)
        base = ok[kind]["baseline_tps"]
        ax.hlines(
            TARGET_RATIO * base,
            i - 0.45,
            i + 0.45,
            colors="black",
            linestyles="dashed",
            lw=0.8,
            label=f"target: {TARGET_RATIO}× the baseline (mean of a, a')" if i == 0 else None,
        )
    ax.set_xticks(range(len(ok)), [ok[k]["label"] for k in ok])
    ax.set_ylabel("write transactions / s (source)")
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.set_ylim(top=ax.get_ylim()[1] * 1.3)  # room for the legend above the bars
    ax.set_title("Source impact: OLTP TPS alone, with capture, and during a full dump")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.impact", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", choices=sorted(DATABASES))
    p.add_argument("--seconds", type=int, default=DEFAULTS["seconds"], help="seconds per phase")
    p.add_argument("--rows", type=int, default=DEFAULTS["rows"], help="rows of the dumped table")
    p.add_argument("--clients", type=int, default=DEFAULTS["clients"])
    p.add_argument("--chunk-size", type=int, default=DEFAULTS["chunk_size"])
    p.add_argument("--no-baseline-after", action="store_true", help="skip phase a'")
    p.add_argument("--plot", metavar="PNG", help="also write the plot here")
    a = p.parse_args(argv)
    opts = {
        "seconds": a.seconds,
        "rows": a.rows,
        "clients": a.clients,
        "chunk_size": a.chunk_size,
        "baseline_after": not a.no_baseline_after,
    }

    return standalone("impact", sys.modules[__name__], [a.only] if a.only else list(DATABASES), opts, a.plot)


if __name__ == "__main__":
    sys.exit(main())
