"""Maintenance of a DBLog lake: compaction and tombstone vacuum, runnable on a schedule.

    python -m airflow_provider_dblog.spark.maintenance --lake /data/lake \\
        [--tombstone-horizon-hours 168] [--vacuum-retain-hours 168] [--mirror-file-mb 64]

* **Compaction** (``OPTIMIZE``) of the changelog, the schema store and every mirror: the
  capture commits once per flush and the landing job once per table per micro-batch, so all
  of them collect small files. OPTIMIZE commits no data change: the landing job's streaming
  read of the changelog skips it. The changelog and the schema store are compacted (and
  vacuumed) by delta-rs, the capture's own writer, never by Spark: on an object store
  delta-rs commits with put-if-absent, while Spark's S3 log store is atomic among the
  writers of one driver only, so its commit could overwrite one a running capture made at
  the same version (a lost changelog commit). A mirror whose first key column is an integer is compacted
  ``ZORDER BY`` that column: its files then hold narrow key ranges, so the landing's MERGE
  (which bounds the target by the batch's key range) skips every file outside a change.
  Mirrors are compacted into files of at most ``--mirror-file-mb`` (64 MB, not Delta's 1 GB:
  a mirror is rewritten by MERGEs all the time, and a 10M-row mirror in one file would be
  read whole by every MERGE however narrow its change).
* **Tombstone vacuum**: a deleted key keeps a tombstone row (``_deleted``) so that an older
  event landed later cannot resurrect it. Tombstones landed more than the *horizon* ago are
  removed. The horizon must exceed the time within which an older event of that key can
  still reach the mirror, i.e. how far back the changelog may ever be re-landed (a lost
  checkpoint, a new mirror root): a repair dump itself never carries an older position than
  the log events already in the changelog (DBLog writes chunk rows at their high watermark
  and drops those the log changed). Default 7 days.
* Optional ``VACUUM`` of unreferenced files (off by default: time travel and readers of old
  snapshots need them; set ``--vacuum-retain-hours``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput
from airflow_provider_dblog.outputs.lake_layout import MIRRORS, absolute
from airflow_provider_dblog.spark.mirror_tables import PROP_KEY, list_mirrors
from airflow_provider_dblog.spark.session import get_session


def maintain(
    spark,
    lake: str,
    mirrors: Optional[str] = None,
    tombstone_horizon_hours: float = 168,
    vacuum_retain_hours: Optional[float] = None,
    compact_changelog: bool = True,
    log=print,
    mirror_file_mb: int = 64,
) -> dict:
    from delta.tables import DeltaTable

    lake = lake.rstrip("/")
    mirrors = (mirrors or f"{lake}/{MIRRORS}").rstrip("/")
    report: dict = {"compacted": [], "tombstones_removed": {}, "vacuumed": []}
    tables = [p for _, _, p in list_mirrors(spark, mirrors)]
    for path in tables:
        dt = DeltaTable.forPath(spark, path)
        before = dt.toDF().where("_deleted").count()
        dt.delete(
            f"_deleted AND _landed_at < current_timestamp() - INTERVAL {float(tombstone_horizon_hours) * 3600} SECONDS"
        )
        removed = before - DeltaTable.forPath(spark, path).toDF().where("_deleted").count()
        report["tombstones_removed"][path] = removed
        if removed:
            log(f"{path}: removed {removed} tombstones older than {tombstone_horizon_hours} h")
    if compact_changelog:  # by delta-rs, as the capture commits (module docstring)
        for path, metrics in DeltaChangelogOutput(absolute(lake)).compact_tables(None, vacuum_retain_hours):
            report["compacted"].append(path)
            log(f"{path}: compacted ({metrics.get('numFilesRemoved', 0)} files -> {metrics.get('numFilesAdded', 0)})")
            if vacuum_retain_hours is not None:
                report["vacuumed"].append(path)
    for path in tables:
        m = optimize_mirror(spark, path, mirror_file_mb)
        done = m.metrics if m is not None else None
        report["compacted"].append(path)
        log(f"{path}: compacted ({done.numFilesRemoved if done else 0} files -> {done.numFilesAdded if done else 0})")
    if vacuum_retain_hours is not None:
        if vacuum_retain_hours < 168:
            # Delta refuses a short retention unless told: it can break running readers.
            spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        for path in tables:
            DeltaTable.forPath(spark, path).vacuum(vacuum_retain_hours)
            report["vacuumed"].append(path)
    return report


def optimize_mirror(spark, path: str, max_file_mb: int = 64) -> Any:
    """OPTIMIZE a mirror ZORDER BY its integer first key column (else bin-packing) into files
    of at most ``max_file_mb``; the result row (its metrics)."""
    from delta.tables import DeltaTable

    conf = "spark.databricks.delta.optimize.maxFileSize"
    saved = spark.conf.get(conf, None)
    spark.conf.set(conf, str(int(max_file_mb) * 2**20))
    try:
        order = zorder_column(spark, path)
        optimize = DeltaTable.forPath(spark, path).optimize()
        return (optimize.executeZOrderBy(order) if order else optimize.executeCompaction()).first()
    finally:
        if saved is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, saved)


def zorder_column(spark, path: str) -> Optional[str]:
    """The mirror's first key column if it is an integer (the landing job prunes by it)."""
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    if PROP_KEY not in props:
        return None
    first = json.loads(props[PROP_KEY])[0]
    field = next((f for f in spark.read.format("delta").load(path).schema.fields if f.name == first), None)
    integral = ("tinyint", "smallint", "int", "bigint")
    return first if field is not None and field.dataType.simpleString() in integral else None


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="maintenance", description=__doc__.split("\n\n")[0])
    p.add_argument("--lake", required=True)
    p.add_argument("--mirrors", help="default <lake>/mirrors")
    p.add_argument("--tombstone-horizon-hours", type=float, default=168)
    p.add_argument("--vacuum-retain-hours", type=float, help="also VACUUM files older than this (default: no vacuum)")
    p.add_argument("--skip-changelog", action="store_true", help="compact only the mirrors")
    p.add_argument(
        "--mirror-file-mb", type=int, default=64, help="largest file a mirror's compaction writes (default 64)"
    )
    p.add_argument("--master")
    args = p.parse_args(argv)
    spark = get_session("dblog-maintenance", master=args.master, locations=(args.lake, args.mirrors))
    report = maintain(
        spark,
        args.lake,
        args.mirrors,
        args.tombstone_horizon_hours,
        args.vacuum_retain_hours,
        not args.skip_changelog,
        log=lambda m: print(m, flush=True),
        mirror_file_mb=args.mirror_file_mb,
    )
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
