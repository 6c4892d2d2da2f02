"""What every mirror table carries besides the source's columns (metadata columns, table
properties), the mirrors under a root as the catalog sees them, and their upkeep by a landing
job (``MirrorUpkeep``: creation, new and widened columns, properties, the stopped mark)."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_provider_dblog.outputs.lake_layout import HISTORY, catalog_names, history_catalog_name
from airflow_provider_dblog.spark import mirror_types as mt

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
    """Register every mirror under ``mirrors`` in the catalog, with its ``_current`` view,
    and every history mirror (``<mirrors>/_history``) as ``..._history``."""
    out = []
    for source_id, table, path in list_mirrors(spark, mirrors):
        db, tbl, view = catalog_names(source_id, table)
        ensure_database(spark, db)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {tbl} USING DELTA LOCATION '{path}'")
        spark.sql(f"REFRESH TABLE {tbl}")
        data = [f"`{f.name}`" for f in spark.table(tbl).schema.fields if f.name != "_deleted"]
        spark.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT {', '.join(data)} FROM {tbl} WHERE NOT _deleted")
        out.append(tbl)
    for source_id, table, path in list_mirrors(spark, f"{mirrors.rstrip('/')}/{HISTORY}"):
        name = history_catalog_name(source_id, table)
        ensure_database(spark, catalog_names(source_id, table)[0])
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING DELTA LOCATION '{path}'")
        spark.sql(f"REFRESH TABLE {name}")
        out.append(name)
    return out


def quote_name(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


class MirrorUpkeep:
    """The mirror tables' own state, for one landing job: creating a mirror, evolving its
    columns, its table properties (read once, kept up to date by this job) and its stopped
    mark. ``spark``: the session to run on (a table's worker session on its thread);
    ``deletion_vectors`` as the landing job takes it."""

    def __init__(self, spark: Callable[[], SparkSession], log: Callable[[str], None], deletion_vectors: Optional[bool]):
        self.spark, self.log, self.deletion_vectors = spark, log, deletion_vectors
        self._props_of: dict[str, dict[str, str]] = {}
        self._stopped: dict[str, Optional[str]] = {}
        self.fresh: set[str] = set()  # mirrors this job created and has not written yet

    def ensure(self, path: str, source_id: str, table: str, key: tuple, wanted: dict) -> T.StructType:
        """Create the mirror, or add new nullable columns and widen columns in place;
        returns its schema."""
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self.spark(), path):
            fields = [T.StructField(n, mt.mirror_type(t), True) for n, t in wanted.items()] + METADATA.fields
            builder = (
                DeltaTable.createIfNotExists(self.spark())
                .location(path)
                .addColumns(T.StructType(fields))
                .property(PROP_TABLE, table)
                .property(PROP_SOURCE, source_id)
                .property(PROP_KEY, json.dumps(list(key)))
                .property(PROP_CDF, "true")
            )
            if self.deletion_vectors is not False:
                builder = builder.property(PROP_DELETION_VECTORS, "true")
            builder.execute()
            self._props_of.pop(path, None)
            self.fresh.add(path)
        self._ensure_properties(path)
        dt = DeltaTable.forPath(self.spark(), path)
        schema = dt.toDF().schema
        old_key = self._mirror_key(path)
        existing = T.StructType([f for f in schema.fields if f.name not in META_NAMES])
        add, widen = mt.check_evolution(path, table, existing, wanted, key, old_key)
        if add:
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in add)
            # New columns go after the metadata columns: Delta has no ADD COLUMN ... BEFORE.
            self.spark().sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
            self.log(f"mirror {path}: added columns {[f.name for f in add]}")
        if widen:
            self._set_properties(path, {PROP_TYPE_WIDENING: "true"})
            for f in widen:
                # Type widening changes only the schema: no data file is rewritten; files
                # written before keep the old type and are read as the new one.
                self.spark().sql(
                    f"ALTER TABLE delta.`{path}` CHANGE COLUMN {quote_name(f.name)} TYPE {f.dataType.simpleString()}"
                )
            self.log(f"mirror {path}: widened {[(f.name, f.dataType.simpleString()) for f in widen]}")
        if add or widen:
            schema = DeltaTable.forPath(self.spark(), path).toDF().schema
        return schema

    def _ensure_properties(self, path: str) -> None:
        """Turn on the change data feed (and deletion vectors, if asked for explicitly) on a
        mirror created before they were: the first time a job touches it, from then on it is
        recorded. Deletion vectors are not turned on unasked: a reader of an existing mirror
        may lack the feature."""
        want = {PROP_CDF: "true", **({PROP_DELETION_VECTORS: "true"} if self.deletion_vectors else {})}
        self._set_properties(path, want)

    def _set_properties(self, path: str, want: dict[str, str]) -> None:
        props = self._props(path)
        missing = {k: v for k, v in want.items() if props.get(k, "").lower() != v}
        if missing:
            sets = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
            self.spark().sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({sets})")
            props.update(missing)
            self.log(f"mirror {path}: set {missing}")

    def stopped_reason(self, path: str) -> Optional[str]:
        """Why the mirror at ``path`` no longer lands (its PROP_STOPPED property), or None."""
        from delta.tables import DeltaTable

        if path not in self._stopped:
            reason = None
            if DeltaTable.isDeltaTable(self.spark(), path):
                rows = self.spark().sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
                reason = {r[0]: r[1] for r in rows}.get(PROP_STOPPED)
            self._stopped[path] = reason
        return self._stopped[path]

    def stop(self, path: str, reason: str) -> None:
        """Mark the mirror stopped (kept by later runs: their batches do not hold the events
        this one skips), unless there is no mirror yet to mark."""
        from delta.tables import DeltaTable

        self._stopped[path] = reason
        if DeltaTable.isDeltaTable(self.spark(), path):
            quoted = reason.replace("\\", "\\\\").replace("'", "\\'")
            self.spark().sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROP_STOPPED}' = '{quoted}')")

    def _props(self, path: str) -> dict[str, str]:
        """The mirror's table properties, read once per job and kept up to date by this job's
        own changes. SHOW TBLPROPERTIES reads the log's metadata only: DESCRIBE DETAIL
        (``DeltaTable.detail``) ran a table-state job of seconds per table and batch."""
        if path not in self._props_of:
            rows = self.spark().sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
            self._props_of[path] = {r[0]: r[1] for r in rows}
        return self._props_of[path]

    def _mirror_key(self, path: str) -> Optional[list]:
        """The key a mirror was created with (its PROP_KEY property; fixed for its life)."""
        props = self._props(path)
        return json.loads(props[PROP_KEY]) if PROP_KEY in props else None
