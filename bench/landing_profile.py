"""Where a first landing's time goes, step by step, against a plain Delta append of the same
rows in the same run and session (local[2]).

    DBLOG_SPARK_JARS=$(scripts/spark-jars) python -m bench.landing_profile [--events 1000000] [--tables 5]

The changelog is generated in the capture's format (``bench.landing.ChangelogBuilder``: creates
of distinct keys, half dump rows, one commit per 10,000 rows). After a throw-away warm-up:

1. the baseline: the landing's streaming read with a plain Delta append as the sink;
2. the real job (``land_changelog.land``, one table at a time so the steps add up), timed
   inside by a ``Lander`` subclass: the whole micro-batch, each table's step, mirror creation;
3. the job's steps again, one by one, on the same changelog read as a batch, each ending in
   Spark's ``noop`` sink (computed, not written) unless it says Delta: read, persist to disk,
   the per-table facts pass, per-table filter, newest event per key, ``from_json`` alone, the
   whole typed row (``merge_rows``), and that row written to Delta.

Source-agnostic (the changelog is generated), so ``run(kind, ...)`` ignores ``kind``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Optional

from .common import agnostic_main, spark_bench
from .common import fmt_n as _n
from .landing import ChangelogBuilder, append_job, first_plan

DEFAULTS = {"events": 1_000_000, "tables": 5}
MASTER = "local[2]"


def timed_lander():
    """A Lander that adds up the time of its micro-batches, table steps and mirror creations."""
    from airflow_provider_dblog.spark.lander import Lander

    class TimedLander(Lander):
        spent: dict[str, float] = {}

        def _add(self, name: str, t0: float) -> None:
            self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0

        def land_batch(self, batch, batch_id):
            t0 = time.perf_counter()
            try:
                return super().land_batch(batch, batch_id)
            finally:
                self._add("micro-batches", t0)

        def land_table(self, *args, **kwargs):
            t0 = time.perf_counter()
            ensure = self.upkeep.ensure

            def timed_ensure(*a, **k):
                t1 = time.perf_counter()
                try:
                    return ensure(*a, **k)
                finally:
                    self._add("mirror creation", t1)

            self.upkeep.ensure = timed_ensure
            try:
                return super().land_table(*args, **kwargs)
            finally:
                self.upkeep.ensure = ensure
                self._add("table steps", t0)

    return TimedLander


def steps(spark, lake: str, work: str, tables: list[str], say: Callable[[str], None]) -> list[tuple[str, float]]:
    """The job's steps one by one (module docstring, 3.)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from airflow_provider_dblog.outputs.lake_layout import changelog_path, mirror_path, mirrors_root, schemas_path
    from airflow_provider_dblog.spark import mirror_types as mt
    from airflow_provider_dblog.spark.merge_rows import TableFacts, merge_rows
    from airflow_provider_dblog.spark.mirror_tables import META_NAMES
    from airflow_provider_dblog.spark.schema_store import SchemaStore

    out: list[tuple[str, float]] = []

    def timed(name: str, fn: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        fn()
        out.append((name, time.perf_counter() - t0))
        say(f"{name}: {out[-1][1]:.2f} s")

    noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
    src = spark.read.format("delta").load(changelog_path(lake, "bench"))  # bench.landing's source
    timed("read the changelog", lambda: noop(src))
    cols = ("source_id", "table", "op", "key", "after", "position", "origin", "schema_id", "commit_ts")
    batch = src.select(*cols).persist(StorageLevel.DISK_ONLY)
    timed("persist the batch to disk", batch.count)
    timed(
        "facts pass (one aggregation, all tables)",
        lambda: batch.groupBy("source_id", "table", "schema_id").agg(*TableFacts.columns()).collect(),
    )
    store = SchemaStore(spark, schemas_path(lake))
    target = spark.read.format("delta").load(mirror_path(mirrors_root(lake), "bench", tables[0])).schema

    def per_table(kind: str) -> None:
        for t in tables:
            ev = batch.where(F.col("table") == t)
            versions = store.versions(t, [r[0] for r in ev.select("schema_id").distinct().collect()])
            wanted = mt.data_columns(t, "-", versions)
            types = {**{f.name: None for f in target.fields if f.name not in META_NAMES}, **wanted}
            if kind == "filter":
                df = ev
            elif kind == "newest":
                newest = F.max_by(F.struct("op", "after", "position", "origin", "commit_ts"), "position")
                df = ev.groupBy("key").agg(newest.alias("e")).select("key", "e.*")
            elif kind == "parse":
                df = ev.select(F.from_json("after", mt.parse_struct(wanted)).alias("r")).select("r.*")
            else:
                df = merge_rows(ev, wanted, versions[-1].key, target, types)
            if kind == "delta":
                df.write.format("delta").mode("overwrite").save(os.path.join(work, "steps", t))
            else:
                noop(df)

    timed("per table: filter", lambda: per_table("filter"))
    timed("per table: filter + newest event per key", lambda: per_table("newest"))
    timed("per table: filter + from_json alone", lambda: per_table("parse"))
    timed("per table: filter + typed rows (merge_rows)", lambda: per_table("rows"))
    timed("per table: filter + typed rows, written to Delta", lambda: per_table("delta"))
    batch.unpersist()
    return out


def run(kind: str, opts: dict, workdir: str, say: Callable[[str], None]) -> dict:
    """``kind`` is ignored (source-agnostic)."""
    from airflow_provider_dblog.spark.land_changelog import land

    o = {**DEFAULTS, **(opts or {})}
    with spark_bench("landing-profile", workdir, MASTER) as (spark, work):
        warm = os.path.join(work, "warm")
        ChangelogBuilder(warm, o["tables"], 10_000).append(first_plan(20_000, o["tables"]))
        land(spark, warm, register=False, log=lambda m: None)
        append_job(spark, warm, os.path.join(work, "warm-append"))
        lake = os.path.join(work, "lake")
        ChangelogBuilder(lake, o["tables"], 10_000).append(first_plan(o["events"], o["tables"]))
        app = append_job(spark, lake, os.path.join(work, "append"))
        say(f"plain append: {app['seconds']:.2f} s ({app['rows']:,} rows)")
        lander = timed_lander()
        t0 = time.perf_counter()
        stats = land(spark, lake, register=False, log=lambda m: None, lander_class=lander, parallel_tables=1)
        land_s = time.perf_counter() - t0
        if stats["events"] != o["events"] or app["rows"] != o["events"]:
            raise RuntimeError(f"expected {o['events']} events, landed {stats['events']}, appended {app['rows']}")
        inside = dict(lander.spent)
        say(f"landing: {land_s:.2f} s, inside: {json.dumps({k: round(v, 2) for k, v in inside.items()})}")
        tables = [f"bench.t{i}" for i in range(o["tables"])]
        return {
            "name": "Where a first landing's time goes",
            "source_agnostic": True,
            "master": MASTER,
            "spark": spark.version,
            "events": o["events"],
            "tables": o["tables"],
            "append_s": round(app["seconds"], 2),
            "land_s": round(land_s, 2),
            "ratio": round(app["seconds"] / land_s, 3),
            "inside": {k: round(v, 2) for k, v in inside.items()},
            "steps": [(n, round(s, 2)) for n, s in steps(spark, lake, work, tables, say)],
        }


def markdown(results: dict) -> str:
    lines = ["### Where a first landing's time goes", ""]
    r = next(iter(results.values()))
    if "error" in r:
        return "\n".join(lines + [f"**Failed:** `{r}`", ""])
    inside = r["inside"]
    batch = inside.get("micro-batches", 0.0)
    tables = inside.get("table steps", 0.0)
    lines += [
        f"{_n(r['events'])} creates over {r['tables']} tables, first landing into new mirrors, `{r['master']}`, "
        f"Spark {r['spark']}, tables one after another. Plain append of the same rows {r['append_s']:.2f} s, "
        f"landing {r['land_s']:.2f} s: **{r['ratio']:.2f}×** (goal ≥ 0.5×).",
        "",
        "| Inside the job | Seconds | Share of the landing |",
        "|---|---:|---:|",
        f"| streaming query (offsets, changelog log, checkpoint) | {r['land_s'] - batch:.2f} | {(r['land_s'] - batch) / r['land_s']:.0%} |",
        f"| read, persist and facts pass | {batch - tables:.2f} | {(batch - tables) / r['land_s']:.0%} |",
        f"| table steps (mirror creation {inside.get('mirror creation', 0.0):.2f} s) | {tables:.2f} | {tables / r['land_s']:.0%} |",
        "",
        "| Step alone (noop sink unless written to Delta) | Seconds |",
        "|---|---:|",
    ]
    lines += [f"| {n} | {s:.2f} |" for n, s in r["steps"]]
    return "\n".join(lines + [""])


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.landing_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=DEFAULTS["events"])
    p.add_argument("--tables", type=int, default=DEFAULTS["tables"])
    args = p.parse_args(argv)
    return agnostic_main("landing-profile", run, markdown, {"events": args.events, "tables": args.tables})


if __name__ == "__main__":
    sys.exit(main())
