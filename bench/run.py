"""``python -m bench.run``: the benchmark suite (``make bench`` runs it via scripts/run-bench).

Per database (PostgreSQL/pgoutput, MariaDB):

1. capture throughput: N narrow-row log events written while the capture is stopped, then
   the time from starting it until the last one is checkpointed (so durable in the Delta
   changelog), against pg_recvlogical / mariadb-binlog reading the same log range;
2. dump throughput: a table of R rows dumped in chunks by the running capture, against a
   plain ``COPY ... TO STDOUT`` / ``mariadb --quick`` of the same table;
3. peak memory: the same capture and dump in a ``dblog capture`` child process.

Then the scenario modules (``--scenarios``), each measuring against its own raw baseline in
the same run: wide rows and memory (bench/wide.py, bench/memory.py), dumps at scale with and
without write load and the watermark overhead (bench/dumps.py), source impact
(bench/impact.py), commit -> changelog latency (bench/latency.py), Spark landing
(bench/landing.py) and commit -> mirror latency (bench/mirror_latency.py).

Three sources (each its own slot / checkpoint) are primed before the load is written, so
each reads the same log range once: in-process, child process, and a spare for profiling.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Optional

from airflow_provider_dblog.core.engine import EngineConfig

from .common import SCENARIOS, run_kinds, say
from .dbs import DATABASES
from .engine_runs import SENTINEL_KEY, ChildCapture, InProcessCapture
from .profiling import ThreadProfiles
from .report import print_summary, write_docs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# Issue 6's targets for this 2-core machine (printed, never enforced).
TARGETS = {
    "capture_events_per_s": 60_000,
    "capture_ratio": 0.5,
    "dump_rows_per_s": 150_000,
    "dump_ratio": 0.5,
    "dump_chunk_size": 10_000,
}
# Scenarios run once, on the first database: landing does not read a source at all, and
# mirror_latency's landing side does not depend on it (its capture + writer run on PostgreSQL).
SOURCE_AGNOSTIC = {"landing", "mirror_latency"}


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--events", type=int, default=300_000, help="log events to capture (default 300000)")
    p.add_argument("--rows", type=int, default=500_000, help="rows of the dumped table (default 500000)")
    p.add_argument("--only", choices=sorted(DATABASES), help="benchmark one database only")
    p.add_argument(
        "--chunk-sizes",
        default="10000,1000,50000",
        help="comma-separated dump chunk sizes (default 10000,1000,50000; 10000 is always run)",
    )
    p.add_argument(
        "--profile",
        choices=["auto", "always", "never"],
        default="auto",
        help="pyinstrument the capture/dump when a target is missed (auto), always or never",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the child-process (peak RSS) runs")
    p.add_argument(
        "--scenarios",
        default="core," + ",".join(SCENARIOS),
        help="comma-separated: core (capture/dump/memory above), " + ", ".join(SCENARIOS) + " (default: all)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SCENARIO.KEY=VALUE",
        help="override a scenario module's DEFAULTS, e.g. --set dumps.rows=1000000 (JSON values)",
    )
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--results", default=os.path.join(HERE, "results"), help="directory for the JSON results")
    p.add_argument(
        "--from-json",
        metavar="FILE",
        nargs="+",
        help="measure nothing: print and write docs/benchmarks.md from earlier results files "
        "(several: later files' databases and scenarios replace earlier ones', e.g. a "
        "repeated core run on a quiet machine)",
    )
    args = p.parse_args(argv)
    args.chunk_sizes = [int(x) for x in args.chunk_sizes.split(",") if x.strip()]
    args.scenarios = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    unknown = [x for x in args.scenarios if x != "core" and x not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from core, {', '.join(SCENARIOS)}")
    args.overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        scen, _, key = name.partition(".")
        if scen not in SCENARIOS or not key or not value:
            p.error(f"--set {item!r}: expected SCENARIO.KEY=VALUE with SCENARIO one of {', '.join(SCENARIOS)}")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        args.overrides.setdefault(scen, {})[key] = parsed
    if TARGETS["dump_chunk_size"] not in args.chunk_sizes:
        args.chunk_sizes.insert(0, TARGETS["dump_chunk_size"])
    return args


def ratio(value: float, baseline: float) -> float:
    return round(value / baseline, 3) if baseline else float("nan")


def bench_database(kind: str, args, workdir: str, results_dir: str, stamp: str) -> dict:
    db = DATABASES[kind]()
    roles = ["inproc"] + ([] if args.no_memory else ["child"]) + ([] if args.profile == "never" else ["profile"])
    ids = db.source_ids(roles)
    timeout = max(300.0, args.events / 500)
    out: dict = {"label": db.label, "namespace": db.ns}
    live: list = []
    ok = False
    try:
        say(f"{kind}: creating {db.ns} and filling {db.dump_table} with {args.rows} rows")
        db.create()
        db.fill_dump_table(args.rows)

        why = db.blockers() if hasattr(db, "blockers") else ""
        if why:
            say(f"{kind}: WARNING: creating replication slots will wait for {why}")
        say(f"{kind}: priming sources {', '.join(ids.values())} (slot / checkpoint before the load)")
        key = -1
        inproc = InProcessCapture(db, ids["inproc"], workdir)
        live.append(inproc)
        key = inproc.start().prime(key)
        inproc.stop()
        child = prof = None
        if "child" in ids:
            child = ChildCapture(db, ids["child"], workdir)
            live.append(child)
            key = child.start().prime(key)
            time.sleep(1.0)  # let it settle: the idle footprint after the first commit
            idle_rss, _ = child.rss_mb()
            child.stop()
        if "profile" in ids:
            prof = InProcessCapture(db, ids["profile"], workdir)
            live.append(prof)
            key = prof.start().prime(key)
            prof.stop()

        db.prepare_log_baseline()
        say(f"{kind}: writing {args.events} log events with the capture stopped")
        gen = db.generate(args.events)
        db.insert_primer(SENTINEL_KEY)  # the end marker, a transaction of its own
        out["load"] = {k: round(v, 2) if isinstance(v, float) else v for k, v in gen.items()}

        # -- 1. capture throughput ------------------------------------------------------
        say(f"{kind}: baseline {db.log_baseline_name}")
        base_s = db.run_log_baseline()
        capture: dict = {
            "baseline": {
                "name": db.log_baseline_name,
                "seconds": round(base_s, 3),
                "events_per_s": args.events / base_s,
            }
        }
        say(f"{kind}: baseline {db.library_baseline_name}")
        lib_s = db.run_library_baseline()
        capture["baseline_library"] = {
            "name": db.library_baseline_name,
            "seconds": round(lib_s, 3),
            "events_per_s": args.events / lib_s,
        }
        if kind == "mysql":
            dec_s = db.run_log_baseline(verbose=True)
            capture["baseline_decoded"] = {
                "name": "mariadb-binlog --verbose (rows decoded)",
                "seconds": round(dec_s, 3),
                "events_per_s": args.events / dec_s,
            }
        say(f"{kind}: capture in-process")
        run = inproc.capture_until_sentinel(args.events, timeout)
        run["ratio"] = ratio(run["events_per_s"], capture["baseline"]["events_per_s"])
        capture["in_process"] = run
        run["ratio_library"] = ratio(run["events_per_s"], capture["baseline_library"]["events_per_s"])
        capture["target"] = TARGETS["capture_events_per_s"]
        capture["met"] = run["events_per_s"] >= capture["target"] and run["ratio"] >= TARGETS["capture_ratio"]
        target_pos = inproc.watch.position
        say(
            f"{kind}: capture {run['events_per_s']:.0f} events/s (baseline "
            f"{capture['baseline']['events_per_s']:.0f}, ratio {run['ratio']})"
        )

        # -- 2. dump throughput (same engine, now idle) -----------------------------------
        say(f"{kind}: baseline {db.dump_baseline_name}")
        dbase_s = db.run_dump_baseline()
        dump: dict = {
            "rows": args.rows,
            "baseline": {
                "name": db.dump_baseline_name,
                "seconds": round(dbase_s, 3),
                "rows_per_s": args.rows / dbase_s,
            },
            "runs": [],
        }
        for size in args.chunk_sizes:
            say(f"{kind}: dump of {args.rows} rows, chunk size {size}")
            d = inproc.dump(db.dump_table, size, timeout)
            d["ratio"] = ratio(d["rows_per_s"], dump["baseline"]["rows_per_s"])
            dump["runs"].append(d)
            say(
                f"{kind}: dump {d['rows_per_s']:.0f} rows/s (baseline {dump['baseline']['rows_per_s']:.0f}, "
                f"ratio {d['ratio']})"
            )
        dump["target"] = TARGETS["dump_rows_per_s"]
        main_run = next(r for r in dump["runs"] if r["chunk_size"] == TARGETS["dump_chunk_size"])
        dump["met"] = main_run["rows_per_s"] >= dump["target"] and main_run["ratio"] >= TARGETS["dump_ratio"]
        inproc.stop()
        out["capture"], out["dump"] = capture, dump

        # -- 3. peak RSS in a child process ---------------------------------------------
        if child is not None:
            say(f"{kind}: capture + dump in a child process (peak RSS)")
            t0 = time.perf_counter()
            child.start()
            child.set_phase("capture")
            t1 = child.wait_checkpoint(target_pos, timeout)
            _, hwm_capture = child.rss_mb()
            child.set_phase("dump")
            cd = child.dump(db.dump_table, TARGETS["dump_chunk_size"], timeout)
            rss_end, hwm_end = child.rss_mb()
            child.stop()
            cp = {"events": args.events, "seconds": round(t1 - t0, 3), "events_per_s": args.events / (t1 - t0)}
            cp["ratio"] = ratio(cp["events_per_s"], capture["baseline"]["events_per_s"])
            capture["child_process"] = cp
            cd["ratio"] = ratio(cd["rows_per_s"], dump["baseline"]["rows_per_s"])
            dump["child_process"] = cd
            cfg = EngineConfig()
            out["memory"] = {
                "idle_rss_mb": round(idle_rss, 1),
                "capture_peak_rss_mb": round(hwm_capture, 1),
                "dump_peak_rss_mb": round(child.phase_peak.get("dump", 0.0), 1),
                "overall_peak_rss_mb": round(hwm_end, 1),
                "rss_after_dump_mb": round(rss_end, 1),
                "writer_buffer": cfg.writer_buffer,
                "writer_batch": cfg.writer_batch,
                "poll_batch": cfg.poll_batch,
            }
            say(
                f"{kind}: peak RSS capture {hwm_capture:.0f} MiB, dump {out['memory']['dump_peak_rss_mb']:.0f} MiB "
                f"(idle {idle_rss:.0f} MiB)"
            )

        # -- profile what missed its target -----------------------------------------------
        want = {"always": True, "never": False}.get(args.profile)
        prof_capture = want if want is not None else not capture["met"]
        prof_dump = want if want is not None else not dump["met"]
        out["profile"] = {}
        if prof is not None and prof_capture:
            say(f"{kind}: profiling the capture (pyinstrument, all threads)")
            tp = ThreadProfiles()
            with tp.active():
                r = prof.capture_until_sentinel(args.events, timeout)
                prof.stop()
            tp.write_text(os.path.join(results_dir, f"profile-{stamp}-{kind}-capture.txt"))
            out["profile"]["capture"] = dict(tp.summary(repo=REPO), events_per_s_profiled=round(r["events_per_s"]))
        if prof is not None and prof_dump:
            say(f"{kind}: profiling a dump (pyinstrument, all threads)")
            tp = ThreadProfiles()
            with tp.active():
                prof.start()
                r = prof.dump(db.dump_table, TARGETS["dump_chunk_size"], timeout)
                prof.stop()
            tp.write_text(os.path.join(results_dir, f"profile-{stamp}-{kind}-dump.txt"))
            out["profile"]["dump"] = dict(tp.summary(repo=REPO), rows_per_s_profiled=round(r["rows_per_s"]))
        ok = True
        return out
    finally:
        for c in live:
            try:
                c.stop(120 if ok else 10)  # after a failure, clean-up ends what is stuck
            except Exception as exc:  # keep cleaning up
                say(f"{kind}: stopping {c.source_id}: {exc}")
        try:
            db.cleanup(list(ids.values()))
        except Exception as exc:
            say(f"{kind}: clean-up of {db.ns} failed: {exc}")


def merge_results(paths: list[str]) -> dict:
    """One result from several runs: later runs' databases and scenarios win; every run's
    date and command is kept (``runs``) so the page names all of them."""
    result: dict = {}
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        runs += r.get("runs") or [
            {
                "date": r["date"],
                "command": r["command"],
                "parts": (["core"] if r.get("databases") else []) + list(r.get("scenarios") or {}),
            }
        ]
        if not result:
            result = r
            continue
        result["databases"].update(r.get("databases") or {})
        result.setdefault("scenarios", {}).update(r.get("scenarios") or {})
        if r.get("databases"):
            result["sizes"], result["engine_config"] = r["sizes"], r["engine_config"]
    if len(runs) > 1:
        result["runs"] = runs
    return result


def run_scenario(name: str, kinds: list[str], args, workdir: str, result: dict) -> bool:
    """One scenario module on each database (once if source-agnostic); True if one failed."""
    mod = importlib.import_module(SCENARIOS[name])
    opts = dict(mod.DEFAULTS, **args.overrides.get(name, {}))
    runs = run_kinds(name, mod.run, kinds[:1] if name in SOURCE_AGNOSTIC else kinds, opts, workdir)
    result["scenarios"][name] = {"opts": opts, **runs}
    return any("error" in r for r in runs.values())


def machine() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "platform": platform.platform()}


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.from_json:
        result = merge_results(args.from_json)
        print_summary(result)
        if not args.no_docs:
            write_docs(result, os.path.join(REPO, "docs", "benchmarks.md"))
            say("docs/benchmarks.md rewritten")
        return 0
    os.makedirs(args.results, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    command = os.environ.get("DBLOG_BENCH_COMMAND", "python -m bench.run")
    command = " ".join([command] + argv)
    result = {
        "date": started.isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(),
        "sizes": {"events": args.events, "rows": args.rows, "chunk_sizes": args.chunk_sizes},
        "engine_config": {k: v for k, v in dataclasses.asdict(EngineConfig()).items() if k != "epoch"},
        "targets": TARGETS,
        "databases": {},
    }
    workdir = tempfile.mkdtemp(prefix="dblog-bench-")
    failed = False
    kinds = [args.only] if args.only else list(DATABASES)
    try:
        if "core" in args.scenarios:
            for kind in kinds:
                try:
                    result["databases"][kind] = bench_database(kind, args, workdir, args.results, stamp)
                except Exception as exc:  # report the other database anyway
                    failed = True
                    say(f"{kind}: FAILED: {type(exc).__name__}: {exc}")
                    result["databases"][kind] = {"error": f"{type(exc).__name__}: {exc}"}
        result["scenarios"] = {}
        for name in [n for n in SCENARIOS if n in args.scenarios]:
            failed |= run_scenario(name, kinds, args, workdir, result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["duration_s"] = round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1)
    path = os.path.join(args.results, f"{stamp}.json")
    for p in (path, os.path.join(args.results, "latest.json")):
        with open(p, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
            f.write("\n")
    print_summary(result)
    say(f"results: {os.path.relpath(path, REPO)} (and latest.json)")
    if not args.no_docs:
        write_docs(result, os.path.join(REPO, "docs", "benchmarks.md"))
        say("docs/benchmarks.md rewritten")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
