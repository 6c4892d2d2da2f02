"""Land a DBLog changelog into one Delta *mirror* table per source table.

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 \\
        --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
        --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
        land_changelog.py --lake s3a://bucket/dblog [--source pg1]
    python -m airflow_provider_dblog.spark.land_changelog --lake /data/lake   # local[2]

Plain PySpark (no Airflow imports), submitted by SparkSubmitOperator or by hand.

*Incremental*: the changelog is read as a Delta streaming source with an availableNow
trigger and a checkpoint, so each run lands only the changelog versions that earlier runs
have not (then stops). *Exactly once*: each mirror commit carries a Delta transaction id
(the streaming query's id and the batch id, spark/mirror_commits.py), so a micro-batch
replayed after a crash (its offsets were logged, its commit was not) is skipped by Delta
table by table: no new version, no new file. Besides, the merge is monotonic: per key a
mirror row is only ever replaced by an event with a higher position (DBLog's replay rule,
core/verify.py), so landing again from a new checkpoint changes no row. Each mirror commit
also records the changelog position it is complete up to: spark/consistent_cut.py reads the
mirrors at one source moment. Deletes leave a
tombstone (``_deleted``) so that no older event - a late repair dump, a replayed batch - can
bring the row back; the ``current`` view hides them (vacuum: spark/maintenance.py). A
TRUNCATE (op t) turns every live row older than it into such a tombstone, and so does a dump
chunk's range event (op k) for the rows of its key range older than its low watermark.

Mirrors live at ``<mirrors>/<source_id>/<schema>.<table>`` (default ``<lake>/mirrors``)
and are registered in the session catalog as ``dblog_<source>.<schema>__<table>`` (the table,
tombstones included) and ``..._current`` (the view analysts query).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import threading
import time
from decimal import Decimal
from typing import Any, Optional

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import TableSchema
from airflow_provider_dblog.core.names import split_table
from airflow_provider_dblog.outputs._common import dumps
from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.mirror_commits import BatchCommit, tagged, writer_options
from airflow_provider_dblog.spark.session import get_session

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
# Batches of at most this many events prune the MERGE's target files with the key range.
PRUNE_MAX_EVENTS = 100_000
# Set on a mirror whose source table changed in a way the mirror cannot follow: the reason.
# Its events are no longer landed (the other tables go on) until the mirror is rebuilt.
PROP_STOPPED = "dblog.stopped"


# An unchanged TOASTed value's placeholder (core/toast.py) as the changelog's JSON writes it.
UNCHANGED_TOAST_JSON = '{"$unchanged_toast":true}'


def absolute(location: str) -> str:
    """A local path made absolute (``file:`` and object-store URLs are left as they are):
    Spark resolves ``delta.`<path>``` names and streaming checkpoints against different
    directories, and refuses a relative one in a table name outright."""
    if location.startswith("delta://"):  # the capture's output URL (delta:///data/lake) names the same root
        location = location[len("delta://") :]
    if "://" in location or location.startswith("file:"):
        return location.rstrip("/")
    return os.path.abspath(os.path.expanduser(location))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mirror_path(mirrors: str, source_id: str, table: str) -> str:
    """A mirror's directory: the table's name as the changelog spells it (core/names.py:
    ``edge."dot.ted"`` and ``"edge.dot".ted`` are two directories)."""
    return f"{mirrors.rstrip('/')}/{source_id}/{table}"


def catalog_names(source_id: str, table: str) -> tuple[str, str, str]:
    """(database, table, current view) identifiers, quoted for SQL: the schema's and the
    table's parts apart, joined by ``__`` (a dot inside a part becomes ``_``)."""
    db = "dblog_" + re.sub(r"\W", "_", source_id).lower()
    name = "__".join(re.sub(r"\W", "_", part) for part in split_table(table)).lower()
    return f"`{db}`", f"`{db}`.`{name}`", f"`{db}`.`{name}_current`"


# The first key value of a changelog key (its JSON array text), when it is an integer.
FIRST_INT_KEY = r"^\[(-?[0-9]+)[,\]]"


@dataclasses.dataclass(frozen=True)
class TableFacts:
    """What one pass over a micro-batch tells about one table's events."""

    count: int
    has_ranges: bool  # a dump chunk's range event (op k)
    has_toast: bool  # an unchanged-TOAST placeholder
    key_lo: Optional[Decimal]  # the first key column's range, when every key starts with
    key_hi: Optional[Decimal]  # an integer (else None)

    @classmethod
    def of(cls, groups: list) -> TableFacts:
        """Merged from ``land_batch``'s rows of one table (one per schema id). A group of
        range or TRUNCATE events only has no key range and does not void the others'."""
        keyed = [g for g in groups if g.row_events]
        los = [g.key_lo for g in keyed] or [None]
        his = [g.key_hi for g in keyed] or [None]
        return cls(
            count=sum(g["count"] for g in groups),
            has_ranges=any(g.has_ranges for g in groups),
            has_toast=any(g.has_toast for g in groups),
            key_lo=None if None in los else min(los),
            key_hi=None if None in his else max(his),
        )

    @staticmethod
    def columns() -> list[Column]:
        """The aggregates ``of`` reads (``count`` counts every event, range events too)."""
        row_event = ~F.col("op").isin("k", "t")  # the events that carry a row's key
        first_key = F.regexp_extract("key", FIRST_INT_KEY, 1)
        first_key = F.when(row_event & (first_key != ""), first_key.try_cast(T.DecimalType(38, 0)))
        # NULL unless every row event's key starts with an integer: no key range then.
        complete = F.count(F.when(row_event, F.lit(1))) == F.count(first_key)
        return [
            F.count(F.lit(1)).alias("count"),
            F.count(F.when(row_event, F.lit(1))).alias("row_events"),
            F.coalesce(F.max(F.col("op") == "k"), F.lit(False)).alias("has_ranges"),
            F.coalesce(F.max(F.col("after").contains(UNCHANGED_TOAST_JSON)), F.lit(False)).alias("has_toast"),
            F.when(complete, F.min(first_key)).alias("key_lo"),
            F.when(complete, F.max(first_key)).alias("key_hi"),
        ]

    @classmethod
    def of_events(cls, events: DataFrame) -> TableFacts:
        return cls.of([events.agg(*cls.columns()).first()])


class SchemaStore:
    """``<lake>/schemas`` as TableSchema objects, re-read when an unknown id shows up."""

    def __init__(self, spark: SparkSession, uri: str):
        self.spark, self.uri = spark, uri
        self.by_id: dict[str, tuple[TableSchema, Any]] = {}  # schema id -> (schema, registered_at)

    def _load(self) -> None:
        rows = (
            self.spark.read.format("delta").load(self.uri).select("schema_id", "schema_json", "registered_at").collect()
        )
        self.by_id = {r.schema_id: (TableSchema.from_json(r.schema_json), r.registered_at) for r in rows}

    def versions(self, table: str, ids: list[Optional[str]]) -> list[TableSchema]:
        """The schemas of ``ids`` oldest first; a NULL id means the table's newest schema."""
        if any(i is not None and i not in self.by_id for i in ids) or not self.by_id:
            self._load()
        missing = [i for i in ids if i is not None and i not in self.by_id]
        if missing:
            raise RuntimeError(f"{table}: schema ids {missing} are not in the schema store {self.uri}")
        picked = {i: self.by_id[i] for i in ids if i is not None}
        if None in ids:
            own = [(s, ts, i) for i, (s, ts) in self.by_id.items() if s.table == table]
            if not own:
                raise RuntimeError(
                    f"{table}: changelog rows without a schema id and no schema for the table in {self.uri}"
                )
            s, ts, i = max(own, key=lambda x: x[1])
            picked[i] = (s, ts)
        return [s for s, _ in sorted(picked.values(), key=lambda x: x[1])]


class Lander:
    """Merges micro-batches of the changelog into the mirrors (``land_batch``)."""

    def __init__(
        self,
        spark: SparkSession,
        lake: str,
        mirrors: Optional[str] = None,
        register: bool = True,
        log=print,
        deletion_vectors: Optional[bool] = None,
    ):
        self.spark, self.lake = spark, absolute(lake)
        self.deletion_vectors = deletion_vectors
        self.mirrors = absolute(mirrors) if mirrors else f"{self.lake}/mirrors"
        self.schemas = SchemaStore(spark, f"{self.lake}/schemas")
        self.register, self.log = register, log
        self.events = 0
        self.landed: set[tuple[str, str]] = set()
        self.stopped: dict[str, str] = {}  # "source table" -> why its mirror no longer lands
        self._mirror_props: dict[str, dict[str, str]] = {}
        self._mirror_stopped: dict[str, Optional[str]] = {}
        self._fresh: set[str] = set()  # mirrors this job created and has not written yet
        # The streaming checkpoint (set by ``land``): its query id names this landing in the
        # mirrors' transaction ids. None: commits are not idempotent, only monotonic.
        self.checkpoint: Optional[str] = None
        self._landing: Optional[str] = None

    # -- one micro-batch ------------------------------------------------------------------
    def land_batch(self, batch: DataFrame, batch_id: int) -> None:
        # Kept on local disk for the table steps: a first landing's batch can hold a whole
        # database's dump, and caching 10M rows in memory ran a 2 GB driver out of heap.
        batch = batch.select(
            "source_id", "table", "op", "key", "after", "position", "origin", "schema_id", "commit_ts"
        ).persist(StorageLevel.DISK_ONLY)
        try:
            # One pass gives every table's facts its merge needs (each a Spark job of its own
            # per table before: about a second per table and batch on a small batch).
            groups = (
                batch.groupBy("source_id", "table", "schema_id")
                .agg(
                    *TableFacts.columns(),
                    F.max(F.when(F.col("op") == "t", F.col("position"))).alias("truncated_at"),
                    F.min("position").alias("first"),
                    F.max("position").alias("last"),
                )
                .collect()
            )
            tables: dict[tuple[str, str], list] = {}
            sources: dict[str, list] = {}
            for g in groups:
                tables.setdefault((g.source_id, g.table), []).append(g)
                sources.setdefault(g.source_id, []).append(g)
            # Every mirror commit of this batch records how far its source is landed.
            commits = {
                s: BatchCommit(s, min(g.first for g in gs), max(g.last for g in gs), batch_id, self._landing_id())
                for s, gs in sources.items()
            }
            for (source_id, table), gs in sorted(tables.items()):
                facts = TableFacts.of(gs)
                n = facts.count
                t0 = time.time()
                path = mirror_path(self.mirrors, source_id, table)
                reason = self._stopped_reason(path)
                if reason is None:
                    try:
                        self.land_table(
                            batch.where((F.col("source_id") == source_id) & (F.col("table") == table)),
                            source_id,
                            table,
                            [g.schema_id for g in gs],
                            truncated_at=max((g.truncated_at for g in gs if g.truncated_at), default=None),
                            commit=commits[source_id],
                            facts=facts,
                        )
                    except mt.IncompatibleSchemaChange as exc:
                        reason = str(exc)
                        self._stop(path, reason)
                if reason is not None:  # this table only: the other tables go on landing
                    self.stopped[f"{source_id} {table}"] = reason
                    self.log(f"batch {batch_id}: {source_id} {table}: {n} events not landed: {reason}")
                    continue
                self.events += n
                self.landed.add((source_id, table))
                self.log(f"landed batch {batch_id}: {source_id} {table}: {n} events in {time.time() - t0:.1f} s")
        finally:
            batch.unpersist()

    def land_table(
        self,
        events: DataFrame,
        source_id: str,
        table: str,
        schema_ids: list,
        truncated_at: Optional[str] = None,
        commit: Optional[BatchCommit] = None,
        facts: Optional[TableFacts] = None,
    ) -> None:
        """Merge one table's events of a micro-batch. ``truncated_at``: the batch's latest
        TRUNCATE of the table (op t): events before it are moot, and after the merge every
        live mirror row older than it becomes a tombstone at its position. ``commit``: the
        batch's transaction id and positions for each of these commits (mirror_commits.py).
        ``facts``: what ``land_batch`` learnt of these events (None: found out here)."""
        from delta.tables import DeltaTable

        facts = facts or TableFacts.of_events(events)
        path = mirror_path(self.mirrors, source_id, table)
        truncates = events.where(F.col("op") == "t")
        if truncated_at is not None:
            events = events.where((F.col("op") != "t") & (F.col("position") > truncated_at))
        ranges = []
        if facts.has_ranges:
            ranges = [
                (json.loads(r.after), r.position)
                # newest first: a key covered twice becomes a tombstone at the newer one's position
                for r in events.where(F.col("op") == "k")
                .select("after", "position")
                .orderBy(F.desc("position"))
                .collect()
            ]
            events = events.where(F.col("op") != "k")
        versions = self.schemas.versions(table, schema_ids)
        key = versions[-1].key
        wanted = mt.data_columns(table, path, versions)
        target = self._ensure_mirror(path, source_id, table, key, wanted)
        source_types = {**{f.name: None for f in target.fields if f.name not in META_NAMES}, **wanted}
        # Unchanged TOAST placeholders in this batch: fill them from earlier events, else keep
        # the mirror's value (the slower path, only for such batches).
        toast = [c for c, t in source_types.items() if t is not None and c not in key] if facts.has_toast else []
        updates = self._updates(events, wanted, key, target, source_types, toast)
        if path in self._fresh and not toast:
            # A mirror this job created holds no row yet: every key is new, so the merge
            # would only insert. A plain append writes the same rows without its two joins.
            # Same transaction id as the merge: a replay (which finds the mirror not fresh and
            # merges) is skipped all the same.
            options = writer_options(commit, "merge")
            updates.write.format("delta").mode("append").options(**options).save(path)
        else:
            on = "t._key = s._key" + self._key_range(key, target, facts)
            merge = DeltaTable.forPath(self.spark, path).alias("t").merge(updates.alias("s"), on)
            if toast:
                merge = self._toast_merge(merge, target, toast)
            else:
                # Monotonic: an event never replaces a row written at a newer (or the same) position.
                merge = merge.whenMatchedUpdateAll(condition="s._position > t._position").whenNotMatchedInsertAll()
            with tagged(self.spark, commit, "merge"):
                merge.execute()
        self._fresh.discard(path)
        if ranges:
            with tagged(self.spark, commit, "ranges"):
                self._repair_ranges(path, key, target, ranges)
        if truncated_at is not None:
            with tagged(self.spark, commit, "truncate"):
                self._truncate(path, key, target, truncated_at, truncates)

    def _key_range(self, key: tuple, target: T.StructType, facts: TableFacts) -> str:
        """A target-only conjunct for the MERGE condition: the batch's range of the first key
        column, when that column is an integer. Delta prunes the target files whose min/max
        statistics lie outside it before it joins, so a MERGE of new keys or of a key region
        reads and rewrites only those files, not the whole mirror (the ``_key`` text is no
        use for that: ``"[10]" < "[9]"``). Exact: every key of the batch is inside the range,
        and key columns are never NULL in the mirror (tombstones keep them). Skipped for big
        batches (their range spans the mirror anyway)."""
        if facts.count > PRUNE_MAX_EVENTS or facts.key_lo is None or facts.key_hi is None:
            return ""
        col = next((f for f in target.fields if f.name == key[0]), None)
        if col is None or not isinstance(col.dataType, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            return ""
        return f" AND t.{_q(key[0])} BETWEEN {int(facts.key_lo)} AND {int(facts.key_hi)}"

    def _landing_id(self) -> Optional[str]:
        """The streaming query's id from its checkpoint (``<checkpoint>/metadata``, written
        before the first batch): the same on every restart from that checkpoint, new for a
        new one, whose batch ids start at 0 again and must not be skipped as landed."""
        if self._landing is None and self.checkpoint is not None:
            row: Any = self.spark.read.text(f"{self.checkpoint}/metadata").first()
            self._landing = json.loads(row[0])["id"]
        return self._landing

    def _repair_ranges(self, path: str, key: tuple, target: T.StructType, ranges: list) -> None:
        """Dump chunks' range events (op k): every live mirror row whose key is in a range
        (integer keys; from exclusive, to inclusive, None: no bound) or in a chunk's key list,
        and whose position is older than the event's ``since``, becomes a tombstone at the
        event's position. Run after the merge, so rows of this batch count with their new
        positions (a chunk's own rows and keys changed inside its window are newer than
        ``since``: untouched)."""
        from delta.tables import DeltaTable

        arr = T.ArrayType(T.DecimalType(38, 0))
        k = F.from_json(F.col("_key"), arr)
        tomb_at: Any = None
        for body, position in ranges:
            cond = F.col("_position") < F.lit(body["since"])
            if "keys" in body:  # a key-list chunk: the changelog's key text, compared as is
                cond = cond & F.col("_key").isin([dumps(k) for k in body["keys"]])
            if body.get("from") is not None:
                cond = cond & (k > F.from_json(F.lit(json.dumps(body["from"])), arr))
            if body.get("to") is not None:
                cond = cond & (k <= F.from_json(F.lit(json.dumps(body["to"])), arr))
            tomb_at = F.when(cond, F.lit(position)) if tomb_at is None else tomb_at.when(cond, F.lit(position))
        blank = {
            _q(f.name): F.lit(None).cast(f.dataType)
            for f in target.fields
            if f.name not in META_NAMES and f.name not in key
        }
        DeltaTable.forPath(self.spark, path).update(
            condition=tomb_at.isNotNull() & ~F.col("_deleted"),
            set={
                **blank,
                "_position": tomb_at,
                "_op": F.lit("k"),
                "_commit_ts": F.lit(None).cast(T.TimestampType()),
                "_origin": F.lit("dump"),
                "_landed_at": F.current_timestamp(),
                "_deleted": F.lit(True),
            },
        )

    def _truncate(self, path: str, key: tuple, target: T.StructType, truncated_at: str, truncates: DataFrame) -> None:
        """Every live row older than the TRUNCATE at ``truncated_at`` becomes a tombstone at
        that position (key columns kept, other columns NULL), so that, as for a delete, no
        older event can bring it back. Rows written after the TRUNCATE are newer: untouched."""
        from delta.tables import DeltaTable

        commit_ts = truncates.where(F.col("position") == truncated_at).select("commit_ts").first()
        blank = {
            f"`{f.name.replace('`', '``')}`": F.lit(None).cast(f.dataType)
            for f in target.fields
            if f.name not in META_NAMES and f.name not in key
        }
        DeltaTable.forPath(self.spark, path).update(
            condition=(F.col("_position") < F.lit(truncated_at)) & ~F.col("_deleted"),
            set={
                **blank,
                "_position": F.lit(truncated_at),
                "_op": F.lit("t"),
                "_commit_ts": F.lit(commit_ts[0] if commit_ts else None).cast(T.TimestampType()),
                "_origin": F.lit("log"),
                "_landed_at": F.current_timestamp(),
                "_deleted": F.lit(True),
            },
        )

    def _updates(
        self,
        events: DataFrame,
        columns: dict[str, str],
        key: tuple,
        target: T.StructType,
        source_types: dict,
        toast: Optional[list[str]] = None,
    ) -> DataFrame:
        """One row per key: the event with the highest position, typed like the mirror.

        ``toast``: columns that may hold the unchanged-TOAST placeholder. Each takes the value
        of the key's newest earlier event in the batch that has one (not across a delete);
        where there is none, ``_toast_keep_<i>`` tells the merge to keep the mirror's value."""
        if toast:
            latest = events  # every event: the placeholders are filled from earlier ones below
        else:
            latest = (
                events.groupBy("key")
                .agg(F.max_by(F.struct("op", "after", "position", "origin", "commit_ts"), "position").alias("e"))
                .select("key", "e.*")
            )
        # A delete has no row image: build one from the key array so the tombstone keeps its
        # typed key columns (exact JSON of each key value, through the variant type).
        key_obj = F.concat(
            F.lit("{"),
            F.concat_ws(
                ",",
                *[
                    F.concat(
                        F.lit(json.dumps(k) + ":"),
                        F.expr(f"to_json(variant_get(parse_json(key), '$[{i}]', 'variant'))"),
                    )
                    for i, k in enumerate(key)
                ],
            ),
            F.lit("}"),
        )
        image = F.when(F.col("op") == "d", key_obj).otherwise(F.col("after"))
        # Each column read as its widest type in the batch: a value beyond an older, narrower
        # type's range is read exactly.
        parsed = F.from_json(image, mt.parse_struct(columns), {"mode": "FAILFAST"})
        rows = latest.select("*", parsed.alias("_row"))
        cols = []
        for f in target.fields:
            if f.name in META_NAMES:
                continue
            type_name = source_types.get(f.name)
            if type_name is None:  # a column the source dropped: NULL from now on
                cols.append(F.lit(None).cast(f.dataType).alias(f.name))
            else:
                cols.append(mt.to_mirror(F.col("_row").getField(f.name), type_name).cast(f.dataType).alias(f.name))
        cols += [
            F.col("key").alias("_key"),
            F.col("position").alias("_position"),
            F.col("op").alias("_op"),
            F.col("commit_ts").alias("_commit_ts"),
            F.col("origin").alias("_origin"),
            F.current_timestamp().alias("_landed_at"),
            (F.col("op") == "d").alias("_deleted"),
        ]
        if not toast:
            return rows.select(*cols)
        # The raw JSON text of each column: the placeholder is exactly UNCHANGED_TOAST_JSON.
        raw = F.from_json(F.col("after"), T.StructType([T.StructField(c, T.StringType()) for c in toast]))
        flags = [
            F.coalesce(raw.getField(c) == UNCHANGED_TOAST_JSON, F.lit(False)).alias(f"_toast_{i}")
            for i, c in enumerate(toast)
        ]
        typed = rows.select(*cols, *flags)
        by_key = Window.partitionBy("_key").orderBy("_position")
        upto = Window.unboundedPreceding, Window.currentRow
        # A delete starts a new life of the key: nothing before it may fill a placeholder.
        typed = typed.withColumn("_life", F.sum(F.col("_deleted").cast("int")).over(by_key.rowsBetween(*upto)))
        life = Window.partitionBy("_key", "_life").orderBy("_position").rowsBetween(*upto)
        for i, c in enumerate(toast):
            value = F.when(~F.col(f"_toast_{i}"), F.struct(F.col(_q(c)).alias("v")))
            typed = typed.withColumn(f"_toast_found_{i}", F.last(value, ignorenulls=True).over(life))
        newest = Window.partitionBy("_key").orderBy(F.col("_position").desc())
        typed = typed.withColumn("_rn", F.row_number().over(newest)).where("_rn = 1")
        out = []
        for f in target.fields:
            if f.name in toast:
                i = toast.index(f.name)
                out.append(F.col(f"_toast_found_{i}.v").cast(f.dataType).alias(f.name))
            else:
                out.append(F.col(_q(f.name)))
        out += [
            (F.col(f"_toast_found_{i}").isNull() & ~F.col("_deleted")).alias(f"_toast_keep_{i}")
            for i in range(len(toast))
        ]
        return typed.select(*out)

    def _toast_merge(self, merge: Any, target: T.StructType, toast: list[str]) -> Any:
        """The monotonic merge, except that a column whose placeholder found no value in the
        batch keeps the mirror's value (NULL under a tombstone: the dump the capture queued for
        such a key brings the value)."""
        names = [f.name for f in target.fields]
        update = {
            _q(n): (
                F.when(F.col(f"s._toast_keep_{toast.index(n)}"), F.col(f"t.{_q(n)}")).otherwise(F.col(f"s.{_q(n)}"))
                if n in toast
                else F.col(f"s.{_q(n)}")
            )
            for n in names
        }
        insert = {_q(n): F.col(f"s.{_q(n)}") for n in names}
        return merge.whenMatchedUpdate(condition="s._position > t._position", set=update).whenNotMatchedInsert(
            values=insert
        )

    def _ensure_mirror(self, path: str, source_id: str, table: str, key: tuple, wanted: dict) -> T.StructType:
        """Create the mirror, or add new nullable columns and widen columns in place;
        returns its schema."""
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self.spark, path):
            fields = [T.StructField(n, mt.mirror_type(t), True) for n, t in wanted.items()] + METADATA.fields
            builder = (
                DeltaTable.createIfNotExists(self.spark)
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
            self._mirror_props.pop(path, None)
            self._fresh.add(path)
        self._ensure_properties(path)
        dt = DeltaTable.forPath(self.spark, path)
        schema = dt.toDF().schema
        old_key = self._mirror_key(path)
        existing = T.StructType([f for f in schema.fields if f.name not in META_NAMES])
        add, widen = mt.check_evolution(path, table, existing, wanted, key, old_key)
        if add:
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in add)
            # New columns go after the metadata columns: Delta has no ADD COLUMN ... BEFORE.
            self.spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
            self.log(f"mirror {path}: added columns {[f.name for f in add]}")
        if widen:
            self._set_properties(path, {PROP_TYPE_WIDENING: "true"})
            for f in widen:
                # Type widening changes only the schema: no data file is rewritten; files
                # written before keep the old type and are read as the new one.
                self.spark.sql(
                    f"ALTER TABLE delta.`{path}` CHANGE COLUMN {_q(f.name)} TYPE {f.dataType.simpleString()}"
                )
            self.log(f"mirror {path}: widened {[(f.name, f.dataType.simpleString()) for f in widen]}")
        if add or widen:
            schema = DeltaTable.forPath(self.spark, path).toDF().schema
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
            self.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({sets})")
            props.update(missing)
            self.log(f"mirror {path}: set {missing}")

    def _stopped_reason(self, path: str) -> Optional[str]:
        """Why the mirror at ``path`` no longer lands (its PROP_STOPPED property), or None."""
        from delta.tables import DeltaTable

        if path not in self._mirror_stopped:
            reason = None
            if DeltaTable.isDeltaTable(self.spark, path):
                rows = self.spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
                reason = {r[0]: r[1] for r in rows}.get(PROP_STOPPED)
            self._mirror_stopped[path] = reason
        return self._mirror_stopped[path]

    def _stop(self, path: str, reason: str) -> None:
        """Mark the mirror stopped (kept by later runs: their batches do not hold the events
        this one skips), unless there is no mirror yet to mark."""
        from delta.tables import DeltaTable

        self._mirror_stopped[path] = reason
        if DeltaTable.isDeltaTable(self.spark, path):
            quoted = reason.replace("\\", "\\\\").replace("'", "\\'")
            self.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROP_STOPPED}' = '{quoted}')")

    def _props(self, path: str) -> dict[str, str]:
        """The mirror's table properties, read once per job and kept up to date by this job's
        own changes. SHOW TBLPROPERTIES reads the log's metadata only: DESCRIBE DETAIL
        (``DeltaTable.detail``) ran a table-state job of seconds per table and batch."""
        if path not in self._mirror_props:
            rows = self.spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
            self._mirror_props[path] = {r[0]: r[1] for r in rows}
        return self._mirror_props[path]

    def _mirror_key(self, path: str) -> Optional[list]:
        """The key a mirror was created with (its PROP_KEY property; fixed for its life)."""
        props = self._props(path)
        return json.loads(props[PROP_KEY]) if PROP_KEY in props else None

    # -- catalog ----------------------------------------------------------------------------
    def register_all(self) -> list[str]:
        """Register every mirror under ``self.mirrors`` (not only this run's) in the catalog."""
        out = []
        for source_id, table, path in list_mirrors(self.spark, self.mirrors):
            db, tbl, view = catalog_names(source_id, table)
            ensure_database(self.spark, db)
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {tbl} USING DELTA LOCATION '{path}'")
            self.spark.sql(f"REFRESH TABLE {tbl}")
            data = [f"`{f.name}`" for f in self.spark.table(tbl).schema.fields if f.name != "_deleted"]
            self.spark.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT {', '.join(data)} FROM {tbl} WHERE NOT _deleted")
            out.append(tbl)
        return out


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


def land(
    spark: SparkSession,
    lake: str,
    source: Optional[str] = None,
    mirrors: Optional[str] = None,
    checkpoint: Optional[str] = None,
    max_files_per_batch: int = 1000,
    register: bool = True,
    log=print,
    lander_class: type[Lander] = Lander,
    trigger_seconds: Optional[float] = None,
    max_seconds: Optional[float] = None,
    stop: Optional[threading.Event] = None,
    deletion_vectors: Optional[bool] = None,
    kafka: Any = None,
) -> dict:
    """Land every changelog version not landed yet (availableNow), then return run stats.

    Continuous mode (``trigger_seconds``): one streaming query lands a micro-batch every
    ``trigger_seconds`` (a processing-time trigger) until ``max_seconds`` passed or ``stop`` is
    set; a micro-batch cut short by the stop is landed again by the next run and changes
    nothing there (idempotent merges, see ``Lander``).

    ``lander_class``: a Lander subclass to merge with (e.g. one that adds a step per table).
    ``deletion_vectors``: Delta deletion vectors on the mirrors (docs/landing.md): None (the
    default) creates new mirrors with them and leaves existing ones as they are, True also
    turns them on for existing mirrors, False creates new mirrors without them.
    ``kafka``: a ``kafka_changelog.KafkaChangelog``: read the capture's Kafka topics (and
    schema topic) instead of ``<lake>/changelog``; the mirrors still go under ``<lake>``."""
    lake = absolute(lake)
    lander = lander_class(spark, lake, mirrors, register, log, deletion_vectors=deletion_vectors)
    default = f"{lander.mirrors}/_checkpoints/{source or '_all'}" + ("@kafka" if kafka is not None else "")
    checkpoint = absolute(checkpoint) if checkpoint else default
    lander.checkpoint = checkpoint
    t0 = time.time()
    if kafka is not None:  # the same columns, from the Kafka output's topics (spark/kafka_changelog.py)
        lander.schemas = kafka.schema_store(spark)
        stream = kafka.stream(spark)
    else:
        stream = (
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", max_files_per_batch)
            # An OPTIMIZE of the changelog commits no data change and is skipped anyway;
            # this also skips a user's DELETE of old changelog rows instead of failing.
            .option("skipChangeCommits", "true")
            .load(f"{lake}/changelog")
        )
    if source:
        stream = stream.where(F.col("source_id") == source)
    writer = stream.writeStream.foreachBatch(lander.land_batch).option("checkpointLocation", checkpoint)
    if trigger_seconds:
        writer = writer.trigger(processingTime=f"{float(trigger_seconds)} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.queryName(f"dblog_land_{re.sub(r'[^A-Za-z0-9_]', '_', source or 'all')}").start()
    if trigger_seconds:
        deadline = time.monotonic() + max_seconds if max_seconds else float("inf")
        stop = stop or threading.Event()
        # Poll: the query may also end by itself (a failed batch), which awaitTermination raises.
        while not stop.is_set() and time.monotonic() < deadline and not query.awaitTermination(1):
            pass
        query.stop()
        log(f"continuous landing stopped after {time.time() - t0:.0f} s")
    else:
        query.awaitTermination()
    registered = lander.register_all() if register else []
    return {
        "events": lander.events,
        "tables": sorted(t for _, t in lander.landed),
        "seconds": round(time.time() - t0, 3),
        "registered": registered,
        "checkpoint": checkpoint,
        "stopped": lander.stopped,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="land_changelog", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--lake",
        required=True,
        help="the capture's output root (holds changelog/ and schemas/); with --kafka, the root of the mirrors",
    )
    p.add_argument(
        "--kafka",
        metavar="URL",
        help="land from the capture's Kafka output instead: its output URL, kafka://host:port?topic_prefix=...",
    )
    p.add_argument(
        "--kafka-config-env",
        default="DBLOG_SPARK_KAFKA_CONFIG",
        help="environment variable holding a JSON object of Kafka Java client settings (security, SASL, TLS)",
    )
    p.add_argument("--max-records-per-batch", type=int, help="with --kafka: Kafka records per micro-batch")
    p.add_argument("--source", help="land only this source_id (default: every source in the changelog)")
    p.add_argument("--mirrors", help="root of the mirror tables (default <lake>/mirrors)")
    p.add_argument("--checkpoint", help="streaming checkpoint (default <mirrors>/_checkpoints/<source|_all>)")
    p.add_argument(
        "--max-files-per-batch",
        type=int,
        default=1000,
        help="changelog files per micro-batch (one capture flush is one file)",
    )
    p.add_argument("--no-register", action="store_true", help="do not register the mirrors in the catalog")
    p.add_argument("--master", help="Spark master when run without spark-submit (default local[2])")
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep landing: a micro-batch every --trigger-seconds, until --max-seconds or SIGTERM",
    )
    p.add_argument("--trigger-seconds", type=float, default=5.0, help="continuous mode's trigger interval")
    p.add_argument("--max-seconds", type=float, help="continuous mode: stop after this long (default: never)")
    p.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Delta deletion vectors on the mirrors, so a MERGE's cost follows the change, not the "
        "mirror. Default: on for new mirrors, existing ones keep theirs; --deletion-vectors also "
        "turns them on for existing mirrors; --no-deletion-vectors creates new mirrors without "
        "them, for readers that lack the feature",
    )
    return p


def main(argv: Optional[list[str]] = None, lander_class: type[Lander] = Lander) -> int:
    args = build_parser().parse_args(argv)
    kafka = None
    if args.kafka:  # a wrong URL or client setting is reported before Spark starts
        from airflow_provider_dblog.spark.kafka_changelog import KafkaChangelog

        try:
            kafka = KafkaChangelog.from_url(args.kafka, args.source, args.kafka_config_env, args.max_records_per_batch)
        except ConfigurationError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
    spark = get_session("dblog-land-changelog", master=args.master)
    stop = threading.Event()
    if args.continuous:  # SIGTERM (the trigger's cleanup, a supervisor): stop between batches
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stats = land(
            spark,
            args.lake,
            args.source,
            args.mirrors,
            args.checkpoint,
            args.max_files_per_batch,
            not args.no_register,
            log=lambda m: print(m, flush=True),
            lander_class=lander_class,
            trigger_seconds=args.trigger_seconds if args.continuous else None,
            max_seconds=args.max_seconds,
            stop=stop,
            deletion_vectors=args.deletion_vectors,
            kafka=kafka,
        )
    except mt.IncompatibleSchemaChange as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - a streaming failure wraps the batch's error
        inner = _incompatible_in(exc)
        if inner:
            print(f"error: {inner}", file=sys.stderr, flush=True)
            return 2
        raise
    print(json.dumps(stats), flush=True)
    for table, reason in sorted(stats["stopped"].items()):  # landed all the others first
        print(f"error: mirror of {table} stopped: {reason}", file=sys.stderr, flush=True)
    return 2 if stats["stopped"] else 0


def _incompatible_in(exc: BaseException) -> Optional[str]:
    """The IncompatibleSchemaChange message inside a StreamingQueryException, if any."""
    text = str(exc)
    m = re.search(r"incompatible schema change in .*?(?:change the source column back\.)", text, re.S)
    return m.group(0) if m else None


if __name__ == "__main__":
    sys.exit(main())
