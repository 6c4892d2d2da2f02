"""Spark landing throughput: changelog events merged into the mirrors, against a plain Delta
append of the same rows, in the same run and the same Spark session (local[2]).

    DBLOG_SPARK_JARS=$(scripts/spark-jars) python -m bench.landing [--events 1000000] [--tables 5]
        [--parallel-tables N]   # the job's --parallel-tables (default: its own, up to 4)

Source-agnostic: the changelog is generated here in the capture's exact format (through
``DeltaChangelogOutput``'s schema store and ``CHANGELOG_SCHEMA``), so ``run(kind, ...)``
ignores ``kind``; run it once, not once per database.

Two phases, each landed by the real job (``land_changelog.land``: availableNow streaming
read with a checkpoint, per-key latest event, typed parse, monotonic MERGE):

* **first**: N events, all creates (half dump rows ``r``, half inserts ``c``) of distinct
  keys spread over T tables, merged into empty mirrors;
* **incremental**: a second changelog batch of ``update_share`` x N events (90 % updates,
  10 % deletes, each on a distinct existing key) merged into the now full mirrors.

The baseline of each phase is the same streaming read of the same changelog versions (its
own checkpoint) with the sink replaced by a plain Delta append (``writeStream.format
("delta")``): no grouping, no typing, no merge. Ratio = append time / landing time (= landing
events/s / append rows/s). A small throw-away changelog goes through both jobs and both
phases first, so neither side pays JVM start-up, class loading or JIT warm-up.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time
from typing import Callable, Optional

import pyarrow as pa

from airflow_provider_dblog.outputs.lake_layout import changelog_path, mirrors_root

from .common import fmt_n as _n
from .common import standalone

DEFAULTS = {
    "events": 1_000_000,  # events of the first landing (all creates)
    "tables": 5,  # source tables they are spread over
    "update_share": 0.2,  # incremental batch = this share of `events` (updates + deletes)
    "per_commit": 10_000,  # changelog rows per Delta commit (one capture flush = one commit)
    "warmup_events": 20_000,  # throw-away changelog landed and appended first
    "parallel_tables": None,  # tables of a micro-batch landed at once (None: the job's default)
}
MASTER = "local[2]"
COLUMNS = [
    ("id", "bigint"),
    ("name", "text"),
    ("amount", "numeric(12,2)"),
    ("updated", "timestamp(6) without time zone"),
    ("flag", "boolean"),
]
_MERGE_LOG = re.compile(r": (\d+) events in ([0-9.]+) s$")


# -- the changelog --------------------------------------------------------------------------
class ChangelogBuilder:
    """Appends change events in the capture's format to source ``bench``'s changelog table."""

    def __init__(self, root: str, tables: int, per_commit: int):
        from airflow_provider_dblog.core.events import Column, TableSchema
        from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA, DeltaChangelogOutput

        self.root, self.per_commit, self.arrow_schema = root, per_commit, CHANGELOG_SCHEMA
        out = DeltaChangelogOutput(root)
        out.open()  # creates schemas/ (the source's table comes with the first append)
        self.schemas = [
            TableSchema(f"bench.t{i}", tuple(Column(n, t) for n, t in COLUMNS), ("id",)) for i in range(tables)
        ]
        for s in self.schemas:
            out.register_schema(s)  # the landing job types the mirrors from these
        out.close()
        self.pos = 0
        self.now = int(time.time() * 1e6)

    def append(self, plan: list[tuple[int, str, int]]) -> None:
        """``plan``: (table index, op, key) in changelog order; one commit per ``per_commit``."""
        from deltalake import write_deltalake

        for lo in range(0, len(plan), self.per_commit):
            cols: dict[str, list] = {f.name: [] for f in self.arrow_schema}
            for t, op, k in plan[lo : lo + self.per_commit]:
                self.pos += 1
                p = self.pos
                after = (
                    None
                    if op == "d"
                    else (
                        f'{{"id":{k},"name":"n{k}-{p % 97}","amount":"{p % 100000 / 100:.2f}",'
                        f'"updated":"2024-05-06T07:08:09.123456","flag":{"true" if p % 2 else "false"}}}'
                    )
                )
                for name, value in (
                    ("source_id", "bench"),
                    ("table", self.schemas[t].table),
                    ("op", op),
                    ("key", f"[{k}]"),
                    ("before", None),
                    ("after", after),
                    ("position", f"{p:016X}0000000000.000000000"),
                    ("origin", "dump" if op == "r" else "log"),
                    ("dump_id", "d1" if op == "r" else None),
                    ("schema_id", self.schemas[t].schema_id()),
                    ("commit_ts", self.now + p),
                    ("txid", None),
                    ("epoch", None),
                    ("written_at", self.now + p),
                ):
                    cols[name].append(value)
            write_deltalake(
                changelog_path(self.root, "bench"), pa.Table.from_pydict(cols, schema=self.arrow_schema), mode="append"
            )


def first_plan(events: int, tables: int) -> list[tuple[int, str, int]]:
    """Creates of keys 0..events/tables-1 per table: half dump rows, half inserts, the
    tables interleaved as in a capture's flushes."""
    per_table = events // tables
    return [(t, "r" if k < per_table // 2 else "c", k) for k in range(per_table) for t in range(tables)]


def change_plan(events: int, tables: int, keys_per_table: int, seed: int = 1) -> list[tuple[int, str, int]]:
    """``events`` updates (90 %) and deletes (10 %) of distinct existing keys, shuffled."""
    rng = random.Random(seed)
    per_table = min(events // tables, keys_per_table)
    plan = [
        (t, "d" if rng.random() < 0.1 else "u", k)
        for t in range(tables)
        for k in rng.sample(range(keys_per_table), per_table)
    ]
    rng.shuffle(plan)
    return plan


# -- the two jobs -----------------------------------------------------------------------------
def append_job(spark, lake: str, target: str) -> dict:
    """The baseline: the landing job's streaming read, sink = a plain Delta append."""
    t0 = time.perf_counter()
    q = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1000)
        .option("skipChangeCommits", "true")
        .load(changelog_path(lake, "bench"))
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", f"{target}/_checkpoint")
        .trigger(availableNow=True)
        .start(f"{target}/table")
    )
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    rows = sum(int(p.get("numInputRows", 0)) for p in q.recentProgress)
    return {"seconds": seconds, "rows": rows}


def landing_job(spark, lake: str, parallel_tables: Optional[int] = None) -> dict:
    """The real job; its per-table log lines give the time inside land_table (MERGE), summed
    over the tables (with tables landed side by side, more than the time it took)."""
    from airflow_provider_dblog.spark.land_changelog import land

    merge_s, batches = [0.0], set()

    def log(msg: str) -> None:
        m = _MERGE_LOG.search(msg)
        if m:
            merge_s[0] += float(m.group(2))
            batches.add(msg.split(":", 1)[0])

    t0 = time.perf_counter()
    stats = land(spark, lake, register=False, log=log, parallel_tables=parallel_tables)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "events": stats["events"], "merge_s": merge_s[0], "micro_batches": len(batches)}


def phase_result(events: int, app: dict, lnd: dict) -> dict:
    if app["rows"] != events or lnd["events"] != events:
        raise RuntimeError(
            f"bench.landing: expected {events} rows, the append read {app['rows']} and the landing job {lnd['events']}"
        )
    return {
        "events": events,
        "land_s": round(lnd["seconds"], 2),
        "land_events_per_s": round(events / lnd["seconds"]),
        "append_s": round(app["seconds"], 2),
        "append_rows_per_s": round(events / app["seconds"]),
        "ratio": round(app["seconds"] / lnd["seconds"], 3),
        # Time inside land_table (schema checks + MERGE) vs the rest (streaming read, the
        # per-batch grouping/persist, offsets and commits of the checkpoint).
        "merge_s": round(lnd["merge_s"], 2),
        "read_and_rest_s": round(lnd["seconds"] - lnd["merge_s"], 2),
        "merge_events_per_s": round(events / lnd["merge_s"]) if lnd["merge_s"] else None,
        "micro_batches": lnd["micro_batches"],
    }


def measure(
    spark,
    work: str,
    events: int,
    tables: int,
    update_share: float,
    per_commit: int,
    say: Callable[[str], None],
    label: str,
    parallel_tables: Optional[int] = None,
) -> dict:
    lake = os.path.join(work, label, "lake")
    b = ChangelogBuilder(lake, tables, per_commit)
    t0 = time.perf_counter()
    first = first_plan(events, tables)
    b.append(first)
    n2 = int(events * update_share)
    changes = change_plan(n2, tables, events // tables)
    say(f"landing[{label}]: changelog of {len(first):,} creates built in {time.perf_counter() - t0:.1f} s")
    out: dict = {}
    for phase, n in (("first", len(first)), ("incremental", len(changes))):
        if phase == "incremental":
            b.append(changes)
        app = append_job(spark, lake, os.path.join(work, label, "append"))
        say(f"landing[{label}] {phase}: plain append {n:,} rows in {app['seconds']:.1f} s")
        lnd = landing_job(spark, lake, parallel_tables)
        say(
            f"landing[{label}] {phase}: landing {n:,} events in {lnd['seconds']:.1f} s "
            f"(MERGE part {lnd['merge_s']:.1f} s)"
        )
        out[phase] = phase_result(n, app, lnd)
    return out


def check_mirrors(spark, work: str, tables: int, keys_per_table: int, deletes: int) -> dict:
    """The mirrors hold every key once and exactly the generated tombstones."""
    from airflow_provider_dblog.spark.land_changelog import list_mirrors

    rows = tombstones = 0
    for _, _, path in list_mirrors(spark, mirrors_root(os.path.join(work, "main", "lake"))):
        r = spark.read.format("delta").load(path).selectExpr("count(*) n", "count_if(_deleted) d").first()
        rows, tombstones = rows + r.n, tombstones + r.d
    ok = rows == tables * keys_per_table and tombstones == deletes
    return {"mirror_rows": rows, "tombstones": tombstones, "ok": ok}


# -- integration contract -------------------------------------------------------------------
def run(kind: str, opts: dict, workdir: str, say: Callable[[str], None]) -> dict:
    """``kind`` is ignored (source-agnostic: the changelog is generated); call it once."""
    from pyspark.sql import SparkSession

    from airflow_provider_dblog.spark.session import get_session

    o = {**DEFAULTS, **(opts or {})}
    work = tempfile.mkdtemp(prefix="landing-", dir=workdir)
    owned = SparkSession.getActiveSession() is None
    spark = None
    try:
        t0 = time.perf_counter()
        spark = get_session("dblog-bench-landing", master=MASTER)
        say(
            f"landing: Spark {spark.version} session up in {time.perf_counter() - t0:.1f} s; warming up "
            f"with {o['warmup_events']:,} events"
        )
        common = (o["tables"], o["update_share"], o["per_commit"])
        measure(spark, work, o["warmup_events"], *common, lambda m: None, "warmup", o["parallel_tables"])
        phases = measure(spark, work, o["events"], *common, say, "main", o["parallel_tables"])
        deletes = len(
            [
                p
                for p in change_plan(int(o["events"] * o["update_share"]), o["tables"], o["events"] // o["tables"])
                if p[1] == "d"
            ]
        )
        check = check_mirrors(spark, work, o["tables"], o["events"] // o["tables"], deletes)
        if not check["ok"]:
            raise RuntimeError(f"bench.landing: the mirrors are wrong: {check}")
        return {
            "name": "Spark landing",
            "source_agnostic": True,
            "master": MASTER,
            "spark": spark.version,
            "events": o["events"],
            "tables": o["tables"],
            "update_share": o["update_share"],
            "per_commit": o["per_commit"],
            "parallel_tables": o["parallel_tables"],
            "phases": phases,
            "mirrors": check,
            "seconds": round(time.perf_counter() - t0, 1),
        }
    finally:
        if spark is not None and owned:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _one(results: dict) -> tuple[Optional[dict], list[str]]:
    """The (single) successful result, and the errors to mention."""
    ok = [r for r in results.values() if "error" not in r]
    errors = [f"{k}: {r['error']}" for k, r in results.items() if "error" in r]
    return (ok[0] if ok else None), errors


PHASES = {
    "first": "First landing: creates into empty mirrors",
    "incremental": "Incremental: updates/deletes of existing keys",
}


def markdown(results: dict) -> str:
    r, errors = _one(results)
    lines = ["### Spark landing throughput", ""]
    if r is None:
        return "\n".join(lines + [f"**Failed:** `{'; '.join(errors)}`", ""])
    lines += [
        f"The landing job (`spark/land_changelog.py`: streaming read of the changelog with an "
        f"availableNow trigger, latest event per key, typed parse, monotonic `MERGE` per table) on "
        f"`{r['master']}`, Spark {r['spark']}, one session. First phase: {r['events']:,} events (creates "
        f"of distinct keys, half dump rows, over {r['tables']} tables, one changelog commit per "
        f"{r['per_commit']:,} rows) into empty mirrors. Incremental phase: a second batch of "
        f"{r['update_share'] * 100:.0f} % as many events (90 % updates, 10 % deletes, distinct existing "
        f"keys) into the full mirrors. Baseline, same run and session: the same streaming read of the "
        f"same changelog versions with a plain Delta append as the sink (no grouping, typing or merge). "
        f"Both jobs ran once on a throw-away changelog first (no JVM start-up or JIT warm-up in the "
        f'figures). Ratio = append time / landing time. "MERGE part" is the time inside the job\'s '
        f"per-table step (schema check + `MERGE`); the rest is the streaming read, the per-batch "
        f"grouping and the checkpoint. Source-agnostic (the changelog is generated), so run once. "
        f"The issue sets no target for this figure.",
        "",
        "| Phase | Events | Landing events/s (s) | Plain append rows/s (s) | Ratio | MERGE part (s) | "
        "Read + rest (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, p in r["phases"].items():
        lines.append(
            f"| {PHASES.get(key, key)} | {_n(p['events'])} | {_n(p['land_events_per_s'])} "
            f"({p['land_s']:.1f}) | {_n(p['append_rows_per_s'])} ({p['append_s']:.1f}) | "
            f"{p['ratio']:.2f}× | {p['merge_s']:.1f} | {p['read_and_rest_s']:.1f} |"
        )
    m = r["mirrors"]
    lines += [
        "",
        f"Check: the mirrors hold {_n(m['mirror_rows'])} rows, {_n(m['tombstones'])} of them tombstones, as generated.",
        "",
    ]
    if errors:
        lines += [f"Also failed: `{'; '.join(errors)}`", ""]
    return "\n".join(lines)


def plot(results: dict, path: str) -> Optional[str]:
    r, _ = _one(results)
    if r is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(r["phases"])
    land = [r["phases"][k]["land_events_per_s"] for k in keys]
    app = [r["phases"][k]["append_rows_per_s"] for k in keys]
    x = range(len(keys))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar([i - 0.2 for i in x], app, 0.4, label="plain Delta append (baseline)", color="#bbbbbb")
    bars = ax.bar([i + 0.2 for i in x], land, 0.4, label="landing job (MERGE into mirrors)", color="#1f77b4")
    for b, k in zip(bars, keys):
        ax.annotate(
            f"{r['phases'][k]['ratio']:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom"
        )
    ax.set_xticks(list(x), [f"{PHASES[k]}\n({r['phases'][k]['events']:,} events)" for k in keys], fontsize=8)
    ax.set_ylabel("events (rows) per second")
    ax.set_title(f"Spark landing vs plain Delta append ({r['master']}, {r['tables']} tables)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.landing", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["pg", "mysql"], help="accepted for symmetry; ignored (source-agnostic)")
    p.add_argument("--events", type=int, default=DEFAULTS["events"])
    p.add_argument("--tables", type=int, default=DEFAULTS["tables"])
    p.add_argument("--update-share", type=float, default=DEFAULTS["update_share"])
    p.add_argument("--warmup-events", type=int, default=DEFAULTS["warmup_events"])
    p.add_argument("--parallel-tables", type=int, help="the landing job's --parallel-tables (default: its own)")
    args = p.parse_args(argv)
    opts = {
        "events": args.events,
        "tables": args.tables,
        "update_share": args.update_share,
        "warmup_events": args.warmup_events,
        "parallel_tables": args.parallel_tables,
    }

    return standalone("landing", sys.modules[__name__], ["any"], opts)


if __name__ == "__main__":
    sys.exit(main())
