"""What every mirror table carries besides the source's columns (metadata columns, table
properties), and the mirrors under a root as the catalog sees them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_provider_dblog.outputs.lake_layout import catalog_names

# Metadata columns of every mirror row, after the source's columns.
METADATA = T.StructType(
    [
        T.StructField("_key", T.StringType()),  # the changelog's key (JSON array text): the merge key
        T.StructField("_position", T.StringType()),  # position of the event that wrote the row
        T.StructField(
            "_op", T.StringType()
        ),  # its op: c u d r, t or k (tombstones left by a TRUNCATE or a range repair)
        T.StructField("_commit_ts", T.TimestampType()),  # source commit time (may be NULL for dump rows)
        T.StructField("_origin", T.StringType()),  # log | dump
        T.StructField("_landed_at", T.TimestampType()),  # when this job wrote the row
        T.StructField("_deleted", T.BooleanType()),  # tombstone: the key is deleted at _position
    ]
)
META_NAMES = set(METADATA.fieldNames())

PROP_TABLE, PROP_SOURCE, PROP_KEY = "dblog.source_table", "dblog.source_id", "dblog.key"
# Every mirror keeps Delta's change data feed, so downstream jobs can stream its changes
# (readChangeFeed). Writer-only table feature: every Delta reader still reads the mirror.
PROP_CDF = "delta.enableChangeDataFeed"
# Set (and the typeWidening *reader* feature added) only when a column first widens: readers
# without type widening (the deltalake package <= 1.6) keep reading mirrors that never widened.
PROP_TYPE_WIDENING = "delta.enableTypeWidening"
# On for new mirrors unless ``--no-deletion-vectors``: a MERGE then marks replaced rows instead
# of rewriting their files, so its cost follows the change, not the mirror. A reader feature:
# Spark with Delta >= 2.3 and the deltalake package's QueryBuilder read it (not its pyarrow
# dataset, up to 1.6 at least).
PROP_DELETION_VECTORS = "delta.enableDeletionVectors"

# Set on a mirror whose source table changed in a way the mirror cannot follow: the reason.
# Its events are no longer landed (the other tables go on) until the mirror is rebuilt.
PROP_STOPPED = "dblog.stopped"


def ensure_database(spark: SparkSession, db: str) -> None:
    """The catalog database, once: Spark's CREATE DATABASE IF NOT EXISTS of a database that
    exists logs "Namespace ... was created concurrently. Ignoring." (once per mirror)."""
    if not spark.catalog.databaseExists(db):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")


def list_mirrors(spark: SparkSession, mirrors: str) -> list[tuple[str, str, str]]:
    """(source_id, table, path) of the Delta tables under ``<mirrors>/<source>/<table>``."""
    from delta.tables import DeltaTable

    jvm: Any = spark._jvm  # py4j's view of the JVM: untyped
    root = jvm.org.apache.hadoop.fs.Path(mirrors)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return []
    out = []
    for src in fs.listStatus(root):
        if not src.isDirectory() or src.getPath().getName().startswith("_"):
            continue
        for tbl in fs.listStatus(src.getPath()):
            path = f"{mirrors}/{src.getPath().getName()}/{tbl.getPath().getName()}"
            if tbl.isDirectory() and DeltaTable.isDeltaTable(spark, path):
                out.append((src.getPath().getName(), tbl.getPath().getName(), path))
    return sorted(out)


def register_mirrors(spark: SparkSession, mirrors: str) -> list[str]:
    """Register every mirror under ``mirrors`` in the catalog, with its ``_current`` view."""
    out = []
    for source_id, table, path in list_mirrors(spark, mirrors):
        db, tbl, view = catalog_names(source_id, table)
        ensure_database(spark, db)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {tbl} USING DELTA LOCATION '{path}'")
        spark.sql(f"REFRESH TABLE {tbl}")
        data = [f"`{f.name}`" for f in spark.table(tbl).schema.fields if f.name != "_deleted"]
        spark.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT {', '.join(data)} FROM {tbl} WHERE NOT _deleted")
        out.append(tbl)
    return out
