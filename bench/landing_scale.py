"""Landing cost against mirror size: 1k changes landed into a small and into a large mirror.

    DBLOG_SPARK_JARS=$(scripts/spark-jars) python -m bench.landing_scale [--sizes 100000 2000000]
        [--key-set on|off|both]   # both: each round lands once with and once without the key set

The same small change (``--changes``, default 1,000 events: 20 % inserts of new keys, 70 %
updates, 10 % deletes of existing keys drawn uniformly over the whole key range, the hard case
for file pruning) is landed by the real job (``land_changelog.land``) into a one-table mirror
of each size, ``--rounds`` times; the median round counts. A mirror is built first by landing
its creates (dump rows in key order, as a table dump writes them), untimed.

Baseline, same run and session: the same streaming read of the same changelog versions with a
plain Delta append as the sink (``bench.landing.append_job``). Printed: landing seconds per
size, the large/small ratio (goal <= 2x) and append/landing per size (goal >= 0.5x), and the
MERGE's ``operationMetrics`` from the mirror's Delta history: target rows copied (rewritten
unchanged) and target files before / after data skipping.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
from typing import Any, Callable, Optional

from airflow_provider_dblog.outputs.lake_layout import mirror_path, mirrors_root

from .common import agnostic_main, spark_bench
from .common import fmt_n as _n
from .landing import ChangelogBuilder, append_job

DEFAULTS = {
    "sizes": [100_000, 2_000_000],  # the 10M scaled down to fit 2 shared cores
    "changes": 1_000,
    "rounds": 3,
    "per_commit": 100_000,
    "deletion_vectors": True,  # the job's default for new mirrors (--no-deletion-vectors: off)
    "optimize": False,  # OPTIMIZE ZORDER BY the key after the build (spark/maintenance.py)
    "keys": "uniform",  # which old keys change: uniform over the mirror, or the most recent
    "key_set": "on",  # the MERGE names the batch's keys (on), not (off: as before), or both, alternating
}
RECENT = 10  # --keys recent: updates and deletes hit the newest RECENT x changes keys
MASTER = "local[2]"


def change_plan(
    changes: int, keys: int, next_key: int, rng: random.Random, recent: bool = False
) -> list[tuple[int, str, int]]:
    """20 % inserts above the key range, 70 % updates, 10 % deletes of distinct random keys:
    drawn over the whole mirror, or (``recent``) over its newest keys, as an OLTP table's hot
    rows are (the same number of keys whatever the mirror's size)."""
    n_ins, n_del = changes // 5, changes // 10
    lo = max(0, keys - RECENT * changes) if recent else 0
    old = rng.sample(range(lo, keys), changes - n_ins)
    plan = [(0, "c", next_key + i) for i in range(n_ins)]
    plan += [(0, "d" if i < n_del else "u", k) for i, k in enumerate(old)]
    rng.shuffle(plan)
    return plan


def merge_metrics(spark, path: str) -> dict:
    """operationMetrics of the mirror's newest MERGE (Delta history)."""
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, path).history(5).where("operation = 'MERGE'").first()
    m = dict(row["operationMetrics"]) if row else {}
    keep = (
        "numTargetRowsCopied",
        "numTargetRowsUpdated",
        "numTargetRowsInserted",
        "numTargetFilesBeforeSkipping",
        "numTargetFilesAfterSkipping",
        "numTargetFilesAdded",
        "numTargetDeletionVectorsAdded",
        "executionTimeMs",
    )
    return {k: int(m[k]) for k in keep if k in m}


def one_size(spark, work: str, size: int, o: dict, say: Callable[[str], None]) -> dict:
    from airflow_provider_dblog.spark.land_changelog import land

    lake = os.path.join(work, f"m{size}", "lake")
    b = ChangelogBuilder(lake, 1, o["per_commit"])
    t0 = time.perf_counter()
    b.append([(0, "r", k) for k in range(size)])
    dv: dict[str, Any] = {"deletion_vectors": o["deletion_vectors"]}
    stats = land(spark, lake, register=False, log=lambda m: None, **dv)
    path = mirror_path(mirrors_root(lake), "bench", "bench.t0")
    if o["optimize"]:  # as the maintenance job compacts a mirror (its default file size)
        from airflow_provider_dblog.spark.maintenance import optimize_mirror

        optimize_mirror(spark, path)
    files = spark.read.format("delta").load(path).inputFiles()
    say(
        f"{size:,}-row mirror built in {time.perf_counter() - t0:.0f} s ({stats['events']:,} events, {len(files)} files)"
    )
    append_job(spark, lake, os.path.join(work, f"m{size}", "append"))  # the build's rows: untimed
    rng = random.Random(size)
    variants = {"on": [True], "off": [False], "both": [True, False]}[o["key_set"]]
    rounds: dict[bool, list] = {v: [] for v in variants}
    next_key = size
    for r in range(o["rounds"]):
        for key_set in variants if r % 2 == 0 else variants[::-1]:  # neither always goes first
            b.append(change_plan(o["changes"], size, next_key, rng, recent=o["keys"] == "recent"))
            next_key += o["changes"] // 5
            app = append_job(spark, lake, os.path.join(work, f"m{size}", "append"))
            t0 = time.perf_counter()
            with key_set_pruning(key_set):
                st = land(spark, lake, register=False, log=lambda m: None, **dv)
            seconds = time.perf_counter() - t0
            if st["events"] != o["changes"] or app["rows"] != o["changes"]:
                raise RuntimeError(f"expected {o['changes']} events, landed {st['events']}, appended {app['rows']}")
            m = merge_metrics(spark, path)
            say(
                f"{size:,} rows, round {r}, key set {'on' if key_set else 'off'}: landing {seconds:.2f} s, "
                f"append {app['seconds']:.2f} s, MERGE {json.dumps(m)}"
            )
            rounds[key_set].append({"land_s": seconds, "append_s": app["seconds"], "merge": m})
    out: dict[str, Any] = {"size": size}
    for key_set, rs in rounds.items():
        mid = sorted(rs, key=lambda x: x["land_s"])[len(rs) // 2]
        suffix = "" if key_set else "_no_key_set"
        out.update(
            {
                f"land_s{suffix}": round(statistics.median(x["land_s"] for x in rs), 2),
                f"append_s{suffix}": round(statistics.median(x["append_s"] for x in rs), 2),
                f"merge{suffix}": mid["merge"],
                f"rounds{suffix}": rs,
            }
        )
    return out


@contextlib.contextmanager
def key_set_pruning(on: bool):
    """Off: the MERGE condition without the batch's key set (spark/merge_rows.py), as before
    it had one; the key range stays."""
    from airflow_provider_dblog.spark import merge_rows

    saved = merge_rows.PRUNE_MAX_KEYS
    merge_rows.PRUNE_MAX_KEYS = saved if on else -1
    try:
        yield
    finally:
        merge_rows.PRUNE_MAX_KEYS = saved


def run(kind: str, opts: dict, workdir: str, say: Callable[[str], None]) -> dict:
    """``kind`` is ignored (source-agnostic)."""
    o = {**DEFAULTS, **(opts or {})}
    with spark_bench("landing-scale", workdir, MASTER) as (spark, work):
        one_size(spark, work, 20_000, {**o, "rounds": 1}, lambda m: None)  # warm-up: JVM, JIT
        sizes = [one_size(spark, work, s, o, say) for s in o["sizes"]]
        for s in sizes:
            for suffix in ("", "_no_key_set"):
                if f"land_s{suffix}" in s:
                    s[f"ratio_to_append{suffix}"] = round(s[f"append_s{suffix}"] / s[f"land_s{suffix}"], 3)
        return {
            "name": "Landing cost vs mirror size",
            "source_agnostic": True,
            "master": MASTER,
            "spark": spark.version,
            "changes": o["changes"],
            "rounds": o["rounds"],
            "deletion_vectors": o["deletion_vectors"],
            "optimize": o["optimize"],
            "keys": o["keys"],
            "key_set": o["key_set"],
            "sizes": sizes,
            **{
                f"large_over_small{suffix}": round(sizes[-1][f"land_s{suffix}"] / sizes[0][f"land_s{suffix}"], 2)
                for suffix in ("", "_no_key_set")
                if f"land_s{suffix}" in sizes[0]
            },
        }


def markdown(results: dict) -> str:
    ok = [r for r in results.values() if "error" not in r]
    lines = ["### Landing cost vs mirror size", ""]
    if not ok:
        return "\n".join(lines + [f"**Failed:** `{results}`", ""])
    r = ok[0]
    variants = [(sfx, name) for sfx, name in (("", "on"), ("_no_key_set", "off")) if f"large_over_small{sfx}" in r]
    lines += [
        f"{_n(r['changes'])} changes (20 % inserts, 70 % updates, 10 % deletes, old keys "
        + ("among the newest " + _n(RECENT * r["changes"]) if r.get("keys") == "recent" else "uniform over the mirror")
        + f") landed by the job into one mirror of each size, median of {r['rounds']} rounds, "
        f"`{r['master']}`, Spark {r['spark']}; deletion vectors {'on' if r.get('deletion_vectors') else 'off'}, "
        f"mirror {'Z-ordered by key' if r.get('optimize') else 'as landed'}. Baseline: a plain Delta append of the same changelog rows "
        "(same streaming read). Large / small landing time (goal ≤ 2×): "
        + ", ".join(f"key set {name} **{r['large_over_small' + sfx]:.2f}×**" for sfx, name in variants)
        + ".",
        "",
        "| Mirror rows | Key set in the MERGE | Landing (s) | Plain append (s) | Append / landing | Rows copied | Files before / after skipping |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in r["sizes"]:
        for sfx, name in variants:
            m = s["merge" + sfx]
            lines.append(
                f"| {_n(s['size'])} | {name} | {s['land_s' + sfx]:.2f} | {s['append_s' + sfx]:.2f} | "
                f"{s['ratio_to_append' + sfx]:.2f}× | {_n(m.get('numTargetRowsCopied'))} | "
                f"{_n(m.get('numTargetFilesBeforeSkipping'))} / {_n(m.get('numTargetFilesAfterSkipping'))} |"
            )
    return "\n".join(lines + [""])


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.landing_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=DEFAULTS["sizes"])
    p.add_argument("--changes", type=int, default=DEFAULTS["changes"])
    p.add_argument("--rounds", type=int, default=DEFAULTS["rounds"])
    p.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS["deletion_vectors"],
        help="mirrors with deletion vectors (the job's default) or without (copy-on-write MERGEs)",
    )
    p.add_argument(
        "--optimize",
        action="store_true",
        help="compact each mirror after its build as the maintenance job does (ZORDER BY id)",
    )
    p.add_argument(
        "--keys",
        choices=["uniform", "recent"],
        default=DEFAULTS["keys"],
        help=f"old keys changed: uniform over the mirror, or among its newest {RECENT} x --changes",
    )
    p.add_argument(
        "--key-set",
        choices=["on", "off", "both"],
        default=DEFAULTS["key_set"],
        help="the MERGE condition names the batch's keys (on, the job's default), not (off: as before), "
        "or both in alternating rounds",
    )
    args = p.parse_args(argv)
    opts = {
        "sizes": args.sizes,
        "changes": args.changes,
        "rounds": args.rounds,
        "deletion_vectors": args.deletion_vectors,
        "optimize": args.optimize,
        "keys": args.keys,
        "key_set": args.key_set,
    }
    return agnostic_main("landing-scale", run, markdown, opts)


if __name__ == "__main__":
    sys.exit(main())
