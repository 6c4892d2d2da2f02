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

import json
import threading
import time
from functools import partial
from typing import Any, Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs._common import dumps
from airflow_provider_dblog.outputs.lake_layout import absolute, history_path, mirror_path, mirrors_root, schemas_path
from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.history import TOAST_FIX, ensure_history, fill_toast, land_history
from airflow_provider_dblog.spark.merge_rows import TableFacts, batch_keys, merge_condition, merge_rows, toast_merge
from airflow_provider_dblog.spark.mirror_commits import BatchCommit, tagged, writer_options
from airflow_provider_dblog.spark.mirror_tables import META_NAMES, MirrorUpkeep, quote_name, register_mirrors
from airflow_provider_dblog.spark.parallel_tables import WorkerSessions, run_all, workers_for
from airflow_provider_dblog.spark.schema_store import SchemaStore


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
        history: Optional[list[str]] = None,
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
        self.mirrors = mirrors_root(self.lake, mirrors)
        self.schemas = SchemaStore(spark, schemas_path(self.lake))
        self.register, self._log = register, log
        self.events = 0
        self.landed: set[tuple[str, str]] = set()
        self.stopped: dict[str, str] = {}  # "source table" -> why its mirror no longer lands
        self.upkeep = MirrorUpkeep(lambda: self.spark, self.log, deletion_vectors)
        # The streaming checkpoint (set by ``land``): its query id names this landing in the
        # mirrors' transaction ids. None: commits are not idempotent, only monotonic.
        self.checkpoint: Optional[str] = None
        self._landing: Optional[str] = None
        self.metrics: Any = None  # a metrics.landing.LandingMetrics (set by ``land``), or None
        # Tables ("schema.table", or "*" for all) that also get a history mirror (spark/history.py).
        self.history = set(history or ())

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
                    # the metrics' freshness, as epoch microseconds (no time zone in the way); None: dump rows
                    F.max(F.unix_micros("commit_ts")).alias("newest_commit"),
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
            reason = self.upkeep.stopped_reason(path)
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
                    self.upkeep.stop(path, reason)
            with self._lock:
                if reason is not None:  # this table only: the other tables go on landing
                    self.stopped[f"{source_id} {table}"] = reason
                    self.log(f"batch {batch_id}: {source_id} {table}: {n} events not landed: {reason}")
                    if self.metrics is not None:
                        self.metrics.stopped(source_id, table)
                    return
                self.events += n
                self.landed.add((source_id, table))
                now = time.time()
                self.log(f"landed batch {batch_id}: {source_id} {table}: {n} events in {now - t0:.1f} s")
            if self.metrics is not None:
                newest = max((g.newest_commit for g in gs if g.newest_commit is not None), default=None)
                self.metrics.landed(source_id, table, n, now - t0, newest / 1e6 if newest is not None else None, now)
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
        row_events = events.where(~F.col("op").isin("k", "t"))  # every one, for the history mirror
        truncates = events.where(F.col("op") == "t")
        range_rows: list = []
        if facts.has_ranges:  # all of them: the history mirror ends versions at those before a TRUNCATE too
            range_rows = (
                events.where(F.col("op") == "k").select("after", "position", "commit_ts").orderBy(F.desc("position"))
            ).collect()
            events = events.where(F.col("op") != "k")
        if truncated_at is not None:
            events = events.where((F.col("op") != "t") & (F.col("position") > truncated_at))
        # newest first: a key covered twice becomes a tombstone at the newer one's position;
        # the mirror's TRUNCATE makes tombstones of every row older than it anyway.
        ranges = [
            (json.loads(r.after), r.position) for r in range_rows if truncated_at is None or r.position > truncated_at
        ]
        with self._lock:  # the schema store is shared and re-read on an unknown id
            versions = self.schemas.versions(table, schema_ids)
        key = versions[-1].key
        wanted = mt.data_columns(table, path, versions)
        target = self.upkeep.ensure(path, source_id, table, key, wanted)
        source_types = {**{f.name: None for f in target.fields if f.name not in META_NAMES}, **wanted}
        # Unchanged TOAST placeholders in this batch: fill them from earlier events, else keep
        # the mirror's value (the slower path, only for such batches).
        toast = [c for c, t in source_types.items() if t is not None and c not in key] if facts.has_toast else []
        updates = merge_rows(events, wanted, key, target, source_types, toast)
        if path in self.upkeep.fresh and not toast:
            # A mirror this job created holds no row yet: every key is new, so the merge
            # would only insert. A plain append writes the same rows without its two joins.
            # Same transaction id as the merge: a replay (which finds the mirror not fresh and
            # merges) is skipped all the same.
            options = writer_options(commit, "merge")
            updates.write.format("delta").mode("append").options(**options).save(path)
        else:
            on = merge_condition(key, target, facts, batch_keys(events, facts))
            merge = DeltaTable.forPath(self.spark, path).alias("t").merge(updates.alias("s"), on)
            if toast:
                merge = toast_merge(merge, target, toast)
            else:
                # Monotonic: an event never replaces a row written at a newer (or the same) position.
                merge = merge.whenMatchedUpdateAll(condition="s._position > t._position").whenNotMatchedInsertAll()
            with tagged(self.spark, commit, "merge"):
                merge.execute()
        self.upkeep.fresh.discard(path)
        if ranges:
            with tagged(self.spark, commit, "ranges"):
                self._repair_ranges(path, key, target, ranges)
        if truncated_at is not None:
            with tagged(self.spark, commit, "truncate"):
                self._truncate(path, key, target, truncated_at, truncates)
        if "*" in self.history or table in self.history:
            # a Spark job only for a batch that holds a TRUNCATE (truncated_at: land_batch's one pass)
            rows = truncates.select("position", "commit_ts").collect() if truncated_at is not None else []
            spans = [(r.position, r.commit_ts) for r in rows]
            cuts = [(json.loads(r.after), r.position, r.commit_ts) for r in range_rows]
            self._land_history(
                source_id, table, row_events, target, wanted, key, source_types, toast, spans, cuts, commit
            )

    def _land_history(
        self,
        source_id: str,
        table: str,
        row_events: DataFrame,
        target: T.StructType,
        wanted: dict,
        key: tuple,
        source_types: dict,
        toast: list[str],
        truncates: list,
        ranges: list,
        commit: Optional[BatchCommit],
    ) -> None:
        """The table's history mirror (spark/history.py), after its mirror: one MERGE of the
        batch's versions, and one UPDATE ending versions at its TRUNCATEs and range events.
        ``toast``: the columns whose placeholders the mirror's merge filled (land_table's)."""
        path = history_path(self.mirrors, source_id, table)
        if self.upkeep.stopped_reason(path) is not None:
            return
        history = ensure_history(self.spark, path, source_id, table, target)
        # Unchanged-TOAST placeholders (the mirror's columns): filled from the batch, else from the key's open version.
        typed = merge_rows(row_events, wanted, key, target, source_types, toast, every_event=True)
        if toast:
            typed, unfilled = fill_toast(self.spark, path, typed, toast)
            if unfilled:
                reason = (
                    f"the changelog holds unchanged-TOAST placeholders for {table} of keys the history "
                    "has no earlier value of"
                )
                self.upkeep.stop(path, f"{reason}; fix: {TOAST_FIX}")
                self.log(f"history {path} stopped: {reason}; fix: {TOAST_FIX}")
                return
        land_history(self.spark, path, typed, history, truncates, ranges, lambda step: tagged(self.spark, commit, step))

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
            quote_name(f.name): F.lit(None).cast(f.dataType)
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

    # -- catalog ----------------------------------------------------------------------------
    def register_all(self) -> list[str]:
        """Register every mirror under ``self.mirrors`` (not only this run's) in the catalog."""
        return register_mirrors(self.spark, self.mirrors)
