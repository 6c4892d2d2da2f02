"""Landing benchmark: N changelog events across T tables into the mirrors on local[2].

    DBLOG_SPARK_JARS=$(scripts/spark-jars) python -m bench.landing [--events 1000000] [--tables 5]

Builds a changelog in the capture's format (dump rows, inserts, updates, deletes; one commit
per 10,000 events, like capture flushes), then in the same Spark session times
  1. the landing job (streaming read, per-key latest, typed parse, monotonic MERGE), and
  2. the baseline: a plain Delta append of the same changelog rows (read + write, no typing,
     no merge),
and prints events/s for both and their ratio.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

COLUMNS = [("id", "bigint"), ("name", "text"), ("amount", "numeric(12,2)"),
           ("updated", "timestamp(6) without time zone"), ("flag", "boolean")]


def build_changelog(root: Path, events: int, tables: int, per_commit: int = 10_000, seed: int = 1) -> None:
    from deltalake import write_deltalake

    from airflow_provider_dblog.core.events import Column, TableSchema
    from airflow_provider_dblog.outputs.delta import CHANGELOG_SCHEMA, DeltaChangelogOutput

    out = DeltaChangelogOutput(str(root))
    out.open()
    schemas = [TableSchema(f"bench.t{i}", tuple(Column(n, t) for n, t in COLUMNS), ("id",)) for i in range(tables)]
    for s in schemas:
        out.register_schema(s)
    rng = random.Random(seed)
    per_table = events // tables
    keys = max(1, per_table // 2)  # half the events create keys (dump rows, inserts), half change them
    now = 1_700_000_000_000_000
    pos = 0
    rows = {f.name: [] for f in CHANGELOG_SCHEMA}

    def flush():
        if rows["op"]:
            write_deltalake(str(root / "changelog"), pa.Table.from_pydict(rows, schema=CHANGELOG_SCHEMA), mode="append")
            for v in rows.values():
                v.clear()

    plan = []
    for t in range(tables):
        plan += [(t, "r" if k < keys // 2 else "c", k) for k in range(keys)]
        plan += [(t, "d" if rng.random() < 0.1 else "u", rng.randrange(keys)) for _ in range(per_table - keys)]
    # creates first (in key order per table), then the changes, interleaved across tables
    creates = [p for p in plan if p[1] in "rc"]
    changes = [p for p in plan if p[1] in "ud"]
    rng.shuffle(changes)
    for t, op, k in creates + changes:
        pos += 1
        after = None if op == "d" else json.dumps(
            {"id": k, "name": f"n{k}-{pos % 97}", "amount": f"{pos % 100000 / 100:.2f}",
             "updated": "2024-05-06T07:08:09.123456", "flag": pos % 2 == 0}, separators=(",", ":"))
        for name, value in (("source_id", "bench"), ("table", schemas[t].table), ("op", op), ("key", f"[{k}]"),
                            ("before", None), ("after", after), ("position", f"{pos:016X}0000000000.000000000"),
                            ("origin", "dump" if op == "r" else "log"), ("dump_id", "d1" if op == "r" else None),
                            ("schema_id", schemas[t].schema_id()), ("commit_ts", now + pos), ("txid", None),
                            ("epoch", None), ("written_at", now + pos)):
            rows[name].append(value)
        if len(rows["op"]) >= per_commit:
            flush()
    flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench.landing")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--tables", type=int, default=5)
    p.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards)")
    args = p.parse_args(argv)

    from airflow_provider_dblog.spark.land_changelog import land
    from airflow_provider_dblog.spark.session import get_session

    work = Path(args.dir or tempfile.mkdtemp(prefix="dblog-bench-landing-"))
    try:
        t0 = time.time()
        build_changelog(work / "lake", args.events, args.tables)
        print(f"changelog: {args.events} events, {args.tables} tables, built in {time.time() - t0:.1f} s", flush=True)
        spark = get_session("dblog-bench-landing", master="local[2]")
        changelog = str(work / "lake" / "changelog")
        # Warm-up (JIT, Delta's classes) on a throw-away copy so neither measurement pays it.
        spark.read.format("delta").load(changelog).limit(1000).write.format("delta").save(str(work / "warm"))

        t0 = time.time()
        spark.read.format("delta").load(changelog).write.format("delta").mode("append").save(str(work / "append"))
        append_s = time.time() - t0

        t0 = time.time()
        stats = land(spark, str(work / "lake"), register=False, log=lambda m: None)
        land_s = time.time() - t0
        assert stats["events"] == args.events, stats

        result = {
            "events": args.events, "tables": args.tables, "master": "local[2]",
            "land_seconds": round(land_s, 1), "land_events_per_s": round(args.events / land_s),
            "append_seconds": round(append_s, 1), "append_events_per_s": round(args.events / append_s),
            "land_vs_append": round(land_s / append_s, 2),
        }
        print(f"landing: {result['land_events_per_s']:,} events/s ({land_s:.1f} s); plain Delta append of the "
              f"same rows: {result['append_events_per_s']:,} rows/s ({append_s:.1f} s); landing takes "
              f"{result['land_vs_append']}x the append's time")
        print(json.dumps(result))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
