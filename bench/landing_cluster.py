"""The landing on the Spark standalone cluster against ``local[2]``: one changelog, the same
job, the same run.

    scripts/services up spark [s3]; eval "$(scripts/services env)"
    DBLOG_SPARK_JARS=$(scripts/spark-jars) python -m bench.landing_cluster [--events 200000]
        [--tables 5] [--s3]

The changelog is bench.landing's (the capture's exact format: creates, then 90 % updates and
10 % deletes of a share of the keys). The real job lands it in a process of its own, as
dblog_land runs it in client mode (``python -m airflow_provider_dblog.spark.land_changelog``,
its driver in that process): once with master ``local[2]`` (the baseline), once with the
cluster (``DBLOG_SPARK_CLUSTER_MASTER``: two workers of one core and 1 GB each, their
executors in JVMs of their own), each into mirrors and a checkpoint of its own. Two phases:
the first landing (all creates) and an incremental one. Both sides pay a JVM start; the
cluster also its executors' start. Reported per phase and side: the process's wall time
and the job's own seconds (its stats line); ratio = local time / cluster time (above 1: the
cluster is faster). With ``--s3`` the changelog, mirrors and checkpoints are on the S3 test
store (the S3A connector on both sides). The mirrors of both sides must be equal (rows and
tombstones per table), else the run fails.

On this machine the cluster's two workers share the two cores with the driver, so the
ratio measures the cluster's overheads (task shipping, executor JVMs, shuffle between
processes), not a gain from more hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Optional

from airflow_provider_dblog.outputs.lake_layout import mirror_path, mirrors_root

from .common import say
from .landing import ChangelogBuilder, change_plan, first_plan

DEFAULTS = {"events": 200_000, "tables": 5, "update_share": 0.2, "per_commit": 10_000}


def s3_env() -> dict[str, str]:
    need = ("DBLOG_S3_ENDPOINT", "DBLOG_S3_BUCKET", "DBLOG_S3_ACCESS_KEY_ID", "DBLOG_S3_SECRET_ACCESS_KEY")
    missing = [k for k in need if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"--s3: {', '.join(missing)} unset; run `scripts/services up s3` and eval its env")
    return {
        "AWS_ENDPOINT_URL": os.environ["DBLOG_S3_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ["DBLOG_S3_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["DBLOG_S3_SECRET_ACCESS_KEY"],
        "AWS_REGION": os.environ.get("DBLOG_S3_REGION", "us-east-1"),
        "AWS_ALLOW_HTTP": "true",
    }


def land(master: str, lake: str, mirrors: str, env: dict[str, str]) -> dict:
    """The job in a process of its own; wall time and its stats line."""
    cmd = [sys.executable, "-m", "airflow_provider_dblog.spark.land_changelog", "--lake", lake]
    cmd += ["--mirrors", mirrors, "--no-register"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=3600, env={**os.environ, **env, "DBLOG_SPARK_MASTER": master}
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"landing with master {master} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    stats = json.loads([x for x in proc.stdout.splitlines() if x.startswith("{")][-1])
    return {"wall_s": round(wall, 2), "job_s": stats["seconds"], "events": stats["events"]}


def mirror_counts(mirrors: str, tables: list[str], storage: dict[str, str]) -> dict[str, tuple[int, int]]:
    """(rows, tombstones) per table, read with delta-rs's query engine (no Spark; it reads
    the mirrors' deletion vectors, which its pyarrow dataset does not)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    out = {}
    for t in tables:
        dt = DeltaTable(mirror_path(mirrors, "bench", t), storage_options=storage or None)
        sql = "SELECT count(*) AS n, sum(CASE WHEN _deleted THEN 1 ELSE 0 END) AS d FROM m"
        row = pa.table(QueryBuilder().register("m", dt).execute(sql).read_all()).to_pylist()[0]
        out[t] = (int(row["n"]), int(row["d"] or 0))
    return out


def run(opts: dict, say: Callable[[str], None]) -> dict:
    o = {**DEFAULTS, **opts}
    cluster = os.environ.get("DBLOG_SPARK_CLUSTER_MASTER")
    if not cluster:
        raise SystemExit("DBLOG_SPARK_CLUSTER_MASTER unset: `scripts/services up spark`, then eval its env")
    env: dict[str, str] = {}
    work = tempfile.mkdtemp(prefix="dblog-bench-landing-cluster-")
    if o["s3"]:
        env = s3_env()
        os.environ.update(env)  # delta-rs (the changelog's writer here) reads them
        classpath = subprocess.run(
            [sys.executable, "-m", "airflow_provider_dblog.spark.jars", "--s3a"],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        ).stdout.strip()
        env["DBLOG_SPARK_S3A_JARS"] = classpath
        root = f"s3://{os.environ['DBLOG_S3_BUCKET']}/bench-{uuid.uuid4().hex[:8]}"
    else:
        root = work
    try:
        lake = f"{root}/lake"
        b = ChangelogBuilder(lake, o["tables"], o["per_commit"])
        first = first_plan(o["events"], o["tables"])
        changes = change_plan(int(o["events"] * o["update_share"]), o["tables"], o["events"] // o["tables"])
        sides = {"local[2]": ("local[2]", f"{root}/local"), "cluster": (cluster, f"{root}/cluster")}
        phases: dict[str, dict] = {}
        for phase, plan in (("first", first), ("incremental", changes)):
            t0 = time.perf_counter()
            b.append(plan)
            say(f"landing_cluster {phase}: {len(plan):,} events written in {time.perf_counter() - t0:.1f} s")
            got = {}
            for side, (master, base) in sides.items():
                got[side] = land(master, lake, mirrors_root(base), env)
                if got[side]["events"] != len(plan):
                    raise RuntimeError(f"{side} landed {got[side]['events']} events of {len(plan)}")
                say(f"landing_cluster {phase} {side}: {got[side]}")
            got["ratio_wall"] = round(got["local[2]"]["wall_s"] / got["cluster"]["wall_s"], 3)
            got["ratio_job"] = round(got["local[2]"]["job_s"] / got["cluster"]["job_s"], 3)
            phases[phase] = {"events": len(plan), **got}
        names = [s.table for s in b.schemas]
        storage = {k: v for k, v in env.items() if k.startswith("AWS_")}
        counts = {side: mirror_counts(mirrors_root(base), names, storage) for side, (_, base) in sides.items()}
        if counts["local[2]"] != counts["cluster"]:
            raise RuntimeError(f"the mirrors differ: {counts}")
        return {
            "name": "Spark landing: standalone cluster vs local[2]",
            "cluster": cluster,
            "lake": "s3 (test store)" if o["s3"] else "local disk",
            **{k: o[k] for k in ("events", "tables", "update_share", "per_commit")},
            "phases": phases,
            "mirrors_equal": True,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(r: dict) -> str:
    lines = [
        f"Lake on {r['lake']}; {r['events']:,} events over {r['tables']} tables, then "
        f"{r['phases']['incremental']['events']:,} changes; cluster {r['cluster']} (2 workers x 1 core).",
        "",
        "| Phase | Events | local[2] wall s | local[2] job s | cluster wall s | cluster job s | Ratio (wall) | Ratio (job) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase, p in r["phases"].items():
        loc, clu = p["local[2]"], p["cluster"]
        lines.append(
            f"| {phase} | {p['events']:,} | {loc['wall_s']} | {loc['job_s']} | {clu['wall_s']} | {clu['job_s']} "
            f"| {p['ratio_wall']} | {p['ratio_job']} |"
        )
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.landing_cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=DEFAULTS["events"])
    p.add_argument("--tables", type=int, default=DEFAULTS["tables"])
    p.add_argument("--update-share", type=float, default=DEFAULTS["update_share"])
    p.add_argument("--s3", action="store_true", help="changelog, mirrors and checkpoints on the S3 test store")
    args = p.parse_args(argv)
    opts = {"events": args.events, "tables": args.tables, "update_share": args.update_share, "s3": args.s3}
    result = run(opts, say)
    print(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
