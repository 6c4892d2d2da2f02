"""The merge: micro-batches of the changelog into one Delta *mirror* table per source table.

*Exactly once*: each mirror commit carries a Delta transaction id (the streaming query's id
and the batch id, spark/mirror_commits.py), so a micro-batch replayed after a crash (its
offsets were logged, its commit was not) is skipped by Delta table by table: no new version,
no new file. Besides, the merge is monotonic: per key a mirror row is only ever replaced by an
event with a higher position (DBLog's replay rule, core/verify.py), so landing again from a
new checkpoint changes no row. Each mirror commit also records the changelog position it is
complete up to: spark/consistent_cut.py reads the mirrors at one source moment. Deletes
leave a tombstone (``_deleted``) so that no older event - a late repair dump, a replayed
batch - can bring the row back; the ``current`` view hides them (vacuum:
spark/maintenance.py). A TRUNCATE (op t) turns every live row older than it into such a
tombstone, and so does a dump chunk's range event (op k) for the rows of its key range older
than its low watermark.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from decimal import Decimal
from functools import partial
from typing import Any, Optional

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs._common import dumps
from airflow_provider_dblog.outputs.lake_layout import absolute, mirror_path, mirrors_root, schemas_path
from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.mirror_commits import BatchCommit, tagged, writer_options
from airflow_provider_dblog.spark.mirror_tables import (
    META_NAMES,
    METADATA,
    PROP_CDF,
    PROP_DELETION_VECTORS,
    PROP_KEY,
    PROP_SOURCE,
    PROP_STOPPED,
    PROP_TABLE,
    PROP_TYPE_WIDENING,
    register_mirrors,
)
from airflow_provider_dblog.spark.parallel_tables import WorkerSessions, run_all, workers_for
from airflow_provider_dblog.spark.schema_store import SchemaStore

# Batches of at most this many events prune the MERGE's target files with the key range.
PRUNE_MAX_EVENTS = 100_000

# An unchanged TOASTed value's placeholder (core/toast.py) as the changelog's JSON writes it.
UNCHANGED_TOAST_JSON = '{"$unchanged_toast":true}'


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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


class Lander:
    """Merges micro-batches of the changelog into the mirrors (``land_batch``).

    ``parallel_tables``: how many tables of a batch land at once (None: up to
    parallel_tables.DEFAULT_PARALLEL_TABLES; 1: one after another). Each table's worker
    thread has a Spark session of its own, which ``self.spark`` is on that thread."""

    def __init__(
        self,
        spark: SparkSession,
        lake: str,
        mirrors: Optional[str] = None,
        register: bool = True,
        log=print,
        deletion_vectors: Optional[bool] = None,
        parallel_tables: Optional[int] = None,
    ):
        if parallel_tables is not None and parallel_tables < 1:
            raise ConfigurationError(
                f"parallel_tables is {parallel_tables}.", "give 1 (one table after another) or more."
            )
        self._local = threading.local()  # .spark: the current table's worker session
        self._lock = threading.RLock()  # the state below that every table's worker updates
        self.spark, self.lake = spark, absolute(lake)
        self.parallel_tables = parallel_tables
        self._workers = WorkerSessions(spark)
        self.deletion_vectors = deletion_vectors
        self.mirrors = mirrors_root(self.lake, mirrors)
        self.schemas = SchemaStore(spark, schemas_path(self.lake))
        self.register, self._log = register, log
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

    @property
    def spark(self) -> SparkSession:
        """The job's session, or on a table's worker thread that worker's own session: every
        Delta command of a table (and its tags, mirror_commits.tagged) runs on it."""
        return getattr(self._local, "spark", None) or self._spark

    @spark.setter
    def spark(self, session: SparkSession) -> None:
        self._spark = session

    def log(self, message: str) -> None:
        with self._lock:  # one line at a time from the tables' workers
            self._log(message)

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
            todo = sorted(tables.items())
            workers = workers_for(self.parallel_tables, len(todo))
            tasks = [partial(self._land_one, batch, batch_id, s, t, gs, commits[s], workers > 1) for (s, t), gs in todo]
            failed = [(key, exc) for (key, _), exc in zip(todo, run_all(tasks, workers)) if exc is not None]
            if failed:  # every table is done: the batch fails as a whole, and is landed again
                for (s, t), exc in failed[1:]:  # the first one is raised: the others are told here
                    self.log(f"batch {batch_id}: {s} {t} failed too: {exc!r}")
                raise failed[0][1]
        finally:
            batch.unpersist()  # after every worker is done with it

    def _land_one(
        self, batch: DataFrame, batch_id: int, source_id: str, table: str, gs: list, commit: BatchCommit, own: bool
    ) -> None:
        """One table of ``land_batch``, on a worker session of its own if ``own``."""
        if own:
            self._local.spark = self._workers.take()
        try:
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
                        commit=commit,
                        facts=facts,
                    )
                except mt.IncompatibleSchemaChange as exc:
                    reason = str(exc)
                    self._stop(path, reason)
            with self._lock:
                if reason is not None:  # this table only: the other tables go on landing
                    self.stopped[f"{source_id} {table}"] = reason
                    self.log(f"batch {batch_id}: {source_id} {table}: {n} events not landed: {reason}")
                    return
                self.events += n
                self.landed.add((source_id, table))
                self.log(f"landed batch {batch_id}: {source_id} {table}: {n} events in {time.time() - t0:.1f} s")
        finally:
            if own:
                self._workers.give(self._local.spark)
                self._local.spark = None

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
        with self._lock:  # the schema store is shared and re-read on an unknown id
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
        return register_mirrors(self.spark, self.mirrors)
