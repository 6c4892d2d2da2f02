"""History mirrors (slowly changing dimensions, type 2): every version of every row, with the
positions and commit times between which it held (``land_changelog --history``).

A history mirror sits beside its mirror, at ``<mirrors>/_history/<source>/<table>`` (a
directory the mirror listing skips), with the mirror's typed columns and:

* ``_valid_from`` / ``_valid_to``: the changelog positions of the event that wrote this
  version and of the one that ended it (NULL: current); the version holds for positions
  ``_valid_from <= p < _valid_to``;
* ``_valid_from_ts`` / ``_valid_to_ts``: those events' source commit times (NULL for dump
  rows, which have none);
* ``_current`` (``_valid_to IS NULL``), ``_op`` (c, u or r: what wrote it), ``_origin``,
  ``_key`` and ``_landed_at``.

A delete ends the key's version and starts none. A TRUNCATE (op t) ends every version open at
its position; a dump chunk's range event (op k) ends the versions of its keys older than its
``since`` that are still open at its position, as the mirror turns such rows into tombstones
(spark/lander.py). "The table as of position X" is then::

    SELECT * FROM delta.`<mirrors>/_history/<source>/<table>`
    WHERE _valid_from <= 'X' AND (_valid_to IS NULL OR _valid_to > 'X')

(``as_of`` below; by time: the same with ``_valid_from_ts`` / ``_valid_to_ts``, exact where
every version has a commit time). A key's history starts with the first event the changelog
has of it: a row that only came by a dump exists from that dump's position on.

Each batch is one MERGE per history mirror, committed with the batch's transaction id
(spark/mirror_commits.py), so a replayed batch is skipped; a version is only inserted if no
version of its key starts at the same position, and an open version is only ended by a newer
event, so landing the same events again from a new checkpoint changes nothing.

Unchanged-TOAST placeholders (PostgreSQL tables without REPLICA IDENTITY FULL) take the
value of the key's newest earlier event in the batch, else of its open version
(``fill_toast``). Where neither exists (the key's history starts with such a placeholder: a
history added to a table whose rows came before it), the value is unknown: the history
mirror stops at that batch (its mirror goes on), with the fix in the landing's log and the
table property ``dblog.stopped``.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.outputs._common import dumps
from airflow_provider_dblog.spark.mirror_tables import META_NAMES, PROP_SOURCE, PROP_TABLE, quote_name

HISTORY_META = T.StructType(
    [
        T.StructField("_key", T.StringType()),
        T.StructField("_valid_from", T.StringType()),
        T.StructField("_valid_to", T.StringType()),
        T.StructField("_valid_from_ts", T.TimestampType()),
        T.StructField("_valid_to_ts", T.TimestampType()),
        T.StructField("_current", T.BooleanType()),
        T.StructField("_op", T.StringType()),
        T.StructField("_origin", T.StringType()),
        T.StructField("_landed_at", T.TimestampType()),
    ]
)
HISTORY_NAMES = set(HISTORY_META.fieldNames())
TOAST_FIX = (
    "give the table REPLICA IDENTITY FULL (ALTER TABLE ... REPLICA IDENTITY FULL), so that the log "
    "carries every value, then rebuild its history mirror (delete its directory and land again "
    "from a new checkpoint)"
)


def as_of(spark: SparkSession, path: str, position: str) -> DataFrame:
    """The table as of changelog position ``position``: the versions that held then."""
    v = F.lit(position)
    return (
        spark.read.format("delta")
        .load(path)
        .where((F.col("_valid_from") <= v) & (F.col("_valid_to").isNull() | (F.col("_valid_to") > v)))
    )


def ensure_history(spark: SparkSession, path: str, source_id: str, table: str, target: T.StructType) -> T.StructType:
    """Create the history mirror with the mirror's columns, or add and widen its columns as
    the mirror's were; returns its schema."""
    from delta.tables import DeltaTable

    data = [f for f in target.fields if f.name not in META_NAMES]
    if not DeltaTable.isDeltaTable(spark, path):
        fields = [T.StructField(f.name, f.dataType, True) for f in data] + HISTORY_META.fields
        (
            DeltaTable.createIfNotExists(spark)
            .location(path)
            .addColumns(T.StructType(fields))
            .property(PROP_TABLE, table)
            .property(PROP_SOURCE, source_id)
            .execute()
        )
    schema = DeltaTable.forPath(spark, path).toDF().schema
    have = {f.name: f.dataType for f in schema.fields}
    add = [f for f in data if f.name not in have]
    if add:
        cols = ", ".join(f"{quote_name(f.name)} {f.dataType.simpleString()}" for f in add)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
    widen = [f for f in data if f.name in have and have[f.name] != f.dataType]
    if widen:  # the mirror widened these (spark/mirror_types.py checked that it may)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
        for f in widen:
            spark.sql(f"ALTER TABLE delta.`{path}` CHANGE COLUMN {quote_name(f.name)} TYPE {f.dataType.simpleString()}")
    return DeltaTable.forPath(spark, path).toDF().schema if add or widen else schema


def fill_toast(spark: SparkSession, path: str, typed: DataFrame, toast: list[str]) -> tuple[DataFrame, bool]:
    """Unchanged-TOAST placeholders the batch could not fill (``_toast_keep_<i>`` of
    merge_rows: no earlier value of the key in the batch) take the value of the key's open
    version in the history mirror: the value the placeholder says is unchanged. Returns the
    rows and whether a placeholder found no open version (its value is unknown here)."""
    from delta.tables import DeltaTable

    prev = (
        DeltaTable.forPath(spark, path)
        .toDF()
        .where(F.col("_valid_to").isNull())
        .select(
            F.col("_key").alias("_prev_key"),
            F.lit(True).alias("_prev"),
            *[F.col(quote_name(c)).alias(f"_prev_{i}") for i, c in enumerate(toast)],
        )
    )
    keep = [F.col(f"_toast_keep_{i}") for i in range(len(toast))]
    wanted = keep[0]
    for k in keep[1:]:
        wanted = wanted | k
    rows = typed.join(prev, typed["_key"] == prev["_prev_key"], "left")
    unfilled = rows.where(wanted & F.col("_prev").isNull()).limit(1).count() > 0
    for i, c in enumerate(toast):
        filled = F.when(F.col(f"_toast_keep_{i}"), F.col(f"_prev_{i}")).otherwise(F.col(quote_name(c)))
        rows = rows.withColumn(c, filled)
    return rows.drop("_prev_key", "_prev", *[f"_prev_{i}" for i in range(len(toast))]), unfilled


def land_history(
    spark: SparkSession,
    path: str,
    typed: DataFrame,
    history: T.StructType,
    truncates: list[tuple[str, Any]],
    ranges: list[tuple[dict, str, Any]],
    tagged: Callable[[str], Any],
) -> None:
    """One batch of one table into its history mirror. ``typed``: every row event of the
    batch (not op t or k), typed like the mirror (merge_rows(every_event=True)); ``truncates``:
    (position, commit time) of its TRUNCATEs; ``ranges``: (body, position, commit time) of its
    range events; ``tagged(step)``: the batch's commit context for one Delta command."""
    from delta.tables import DeltaTable

    by_key = Window.partitionBy("_key").orderBy("_position")
    ev = typed.withColumn("_next", F.lead("_position").over(by_key)).withColumn(
        "_next_ts", F.lead("_commit_ts").over(by_key)
    )
    data = [f for f in history.fields if f.name not in HISTORY_NAMES]
    have = set(typed.columns)
    values = [
        (F.col(quote_name(f.name)) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name) for f in data
    ]
    versions = ev.where(~F.col("_deleted")).select(
        *values,
        F.col("_key"),
        F.col("_position").alias("_valid_from"),
        F.col("_next").alias("_valid_to"),
        F.col("_commit_ts").alias("_valid_from_ts"),
        F.col("_next_ts").alias("_valid_to_ts"),
        F.col("_next").isNull().alias("_current"),
        F.col("_op"),
        F.col("_origin"),
        F.current_timestamp().alias("_landed_at"),
        F.lit("version").alias("_kind"),
        F.col("_position").alias("_at"),
        F.lit(None).cast(T.TimestampType()).alias("_at_ts"),
    )
    # The key's open version before this batch ends at the key's first event in it.
    firsts = (
        typed.groupBy("_key")
        .agg(F.min_by(F.struct("_position", "_commit_ts"), "_position").alias("f"))
        .select(
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in data],
            F.col("_key"),
            *[F.lit(None).cast(HISTORY_META[n].dataType).alias(n) for n in ("_valid_from", "_valid_to")],
            *[F.lit(None).cast(T.TimestampType()).alias(n) for n in ("_valid_from_ts", "_valid_to_ts")],
            F.lit(None).cast(T.BooleanType()).alias("_current"),
            *[F.lit(None).cast(T.StringType()).alias(n) for n in ("_op", "_origin")],
            F.lit(None).cast(T.TimestampType()).alias("_landed_at"),
            F.lit("end").alias("_kind"),
            F.col("f._position").alias("_at"),
            F.col("f._commit_ts").alias("_at_ts"),
        )
    )
    staged = versions.unionByName(firsts)
    on = (
        "t._key = s._key AND ((s._kind = 'end' AND t._valid_to IS NULL AND t._valid_from < s._at) "
        "OR (s._kind = 'version' AND t._valid_from = s._valid_from))"
    )
    insert: dict[str, str | Column] = {quote_name(f.name): F.col(f"s.{quote_name(f.name)}") for f in history.fields}
    with tagged("history"):
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(staged.alias("s"), on)
            .whenMatchedUpdate(
                condition="s._kind = 'end'",
                set={"_valid_to": "s._at", "_valid_to_ts": "s._at_ts", "_current": "false"},
            )
            .whenNotMatchedInsert(condition="s._kind = 'version'", values=insert)
            .execute()
        )
    ends: list[tuple[Column, str, Any]] = []
    for position, ts in truncates:  # every version open at a TRUNCATE ends there
        ends.append((F.col("_valid_from") < F.lit(position), position, ts))
    arr = T.ArrayType(T.DecimalType(38, 0))
    k = F.from_json(F.col("_key"), arr)
    for body, position, ts in ranges:  # keys a dump chunk found gone: as the mirror's tombstones
        cond = F.col("_valid_from") < F.lit(body["since"])
        if "keys" in body:
            cond = cond & F.col("_key").isin([dumps(key) for key in body["keys"]])
        if body.get("from") is not None:
            cond = cond & (k > F.from_json(F.lit(json.dumps(body["from"])), arr))
        if body.get("to") is not None:
            cond = cond & (k <= F.from_json(F.lit(json.dumps(body["to"])), arr))
        ends.append((cond, position, ts))
    if not ends:
        return
    # One UPDATE for all of them: a version ends at the earliest of those that cut it.
    ends.sort(key=lambda e: e[1])
    open_at = lambda p: F.col("_valid_to").isNull() | (F.col("_valid_to") > F.lit(p))  # noqa: E731
    end_at: Any = None
    end_ts: Any = None
    for cond, position, ts in ends:
        c = cond & open_at(position)
        ts_lit = F.lit(ts).cast(T.TimestampType())
        end_at = F.when(c, F.lit(position)) if end_at is None else end_at.when(c, F.lit(position))
        end_ts = F.when(c, ts_lit) if end_ts is None else end_ts.when(c, ts_lit)
    with tagged("history-ends"):
        DeltaTable.forPath(spark, path).update(
            condition=end_at.isNotNull(),
            set={"_valid_to": end_at, "_valid_to_ts": end_ts, "_current": F.lit(False)},
        )
