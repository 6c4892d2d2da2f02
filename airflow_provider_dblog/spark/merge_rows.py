"""The replay rule in Spark (docs/changelog-format.md): a micro-batch's events of one table
become one row per key to merge into its mirror, typed like the mirror, with unchanged-TOAST
placeholders filled; and the MERGE's condition with its pruning conjuncts. Plain DataFrame
code, no Delta commit: the Lander (spark/lander.py) runs the merges."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any, Optional

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.mirror_tables import META_NAMES, quote_name

# Batches of at most this many events prune the MERGE's target files with the key range.
PRUNE_MAX_EVENTS = 100_000
# Batches of at most this many events name their keys in the MERGE condition (a literal set
# in the plan shipped with every task: small batches only, where the fixed cost matters).
PRUNE_MAX_KEYS = 10_000

# An unchanged TOASTed value's placeholder (core/toast.py) as the changelog's JSON writes it.
UNCHANGED_TOAST_JSON = '{"$unchanged_toast":true}'


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


def key_range(key: tuple, target: T.StructType, facts: TableFacts) -> str:
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
    return f" AND t.{quote_name(key[0])} BETWEEN {int(facts.key_lo)} AND {int(facts.key_hi)}"


def batch_keys(events: DataFrame, facts: TableFacts) -> Optional[list[str]]:
    """The distinct keys (changelog key text) of a table's row events in a micro-batch, for
    ``merge_condition``; None for a batch of more than PRUNE_MAX_KEYS events. One small
    Spark job over the persisted batch."""
    if facts.count > PRUNE_MAX_KEYS:
        return None
    return [r[0] for r in events.where(~F.col("op").isin("k", "t")).select("key").distinct().collect()]


def merge_condition(key: tuple, target: T.StructType, facts: TableFacts, keys: Optional[list[str]]) -> Column:
    """The MERGE's condition: the key, plus target-only conjuncts that let the MERGE's cost
    follow the batch rather than the mirror.

    * ``key_range``: Delta skips the files outside the batch's key range.
    * ``t._key IN (<the batch's keys>)``: with keys spread over the mirror every file is
      touched, and the MERGE's second pass (an outer join of the batch with the touched
      files, deletion vectors or not) shuffled every row of them: 10M rows for 1,000
      changes. Spark pushes a target-only conjunct of an outer join's condition below the
      join, so only the batch's own rows reach it; the files are still read, not shuffled.
      Exact: ``keys`` is every ``s._key``, and the key equality is in the condition anyway.
    """
    on = "t._key = s._key" + key_range(key, target, facts)
    if keys:
        # SQL text: ``Column.isin`` makes a py4j call per key (2.5 s for 10,000 keys).
        on += f" AND t._key IN ({','.join(map(sql_string, keys))})"
    return F.expr(on)


def sql_string(text: str) -> str:
    """A Spark SQL literal that reads back as exactly ``text`` whatever the parser's escape
    setting (``spark.sql.parser.escapedStringLiterals``): quoted as is, or through its UTF-8
    bytes when it holds a quote or a backslash. Constant folding makes either a literal."""
    if "'" in text or "\\" in text:
        return f"CAST(X'{text.encode().hex()}' AS STRING)"
    return f"'{text}'"


def merge_rows(
    events: DataFrame,
    columns: dict[str, str],
    key: tuple,
    target: T.StructType,
    source_types: dict,
    toast: Optional[list[str]] = None,
    every_event: bool = False,
) -> DataFrame:
    """One row per key: the event with the highest position, typed like the mirror
    (``every_event``: one row per event, for the history mirror, spark/history.py).

    ``toast``: columns that may hold the unchanged-TOAST placeholder. Each takes the value
    of the key's newest earlier event in the batch that has one (not across a delete);
    where there is none, ``_toast_keep_<i>`` tells the merge to keep the mirror's value (the
    history mirror: its open version's)."""
    if toast or every_event:
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
        value = F.when(~F.col(f"_toast_{i}"), F.struct(F.col(quote_name(c)).alias("v")))
        typed = typed.withColumn(f"_toast_found_{i}", F.last(value, ignorenulls=True).over(life))
    if not every_event:
        newest = Window.partitionBy("_key").orderBy(F.col("_position").desc())
        typed = typed.withColumn("_rn", F.row_number().over(newest)).where("_rn = 1")
    out = []
    for f in target.fields:
        if f.name in toast:
            i = toast.index(f.name)
            out.append(F.col(f"_toast_found_{i}.v").cast(f.dataType).alias(f.name))
        else:
            out.append(F.col(quote_name(f.name)))
    out += [
        (F.col(f"_toast_found_{i}").isNull() & ~F.col("_deleted")).alias(f"_toast_keep_{i}") for i in range(len(toast))
    ]
    return typed.select(*out)


def toast_merge(merge: Any, target: T.StructType, toast: list[str]) -> Any:
    """The monotonic merge, except that a column whose placeholder found no value in the
    batch keeps the mirror's value (NULL under a tombstone: the dump the capture queued for
    such a key brings the value)."""
    names = [f.name for f in target.fields]
    update = {
        quote_name(n): (
            F.when(F.col(f"s._toast_keep_{toast.index(n)}"), F.col(f"t.{quote_name(n)}")).otherwise(
                F.col(f"s.{quote_name(n)}")
            )
            if n in toast
            else F.col(f"s.{quote_name(n)}")
        )
        for n in names
    }
    insert = {quote_name(n): F.col(f"s.{quote_name(n)}") for n in names}
    return merge.whenMatchedUpdate(condition="s._position > t._position", set=update).whenNotMatchedInsert(
        values=insert
    )
