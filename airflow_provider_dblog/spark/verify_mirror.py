"""Spark-side verify: compare a mirror table with its source table row by row, typed.

The mirror's typed values are turned back into comparable values and compared with the
source's rows as the chunk SELECT reads them, with the same ``compare`` as ``dblog verify``.
Comparison is by value, not by re-parsed text: decimals as ``Decimal`` numbers (1.00E-10 is
0.0000000001), JSON as parsed JSON, except that a mirror holding the *text* ``null`` where
the source has SQL NULL is a mismatch (it is corruption, not a JSON null). So a wrong type
mapping (a lost decimal scale, a shifted time zone, mangled bytes or JSON, a NULL turned into
text) shows up as a mismatch, not only a missing row.

    python -m airflow_provider_dblog.spark.verify_mirror --config dblog.toml --lake /data/lake

With ``--ranges`` (tables with integer keys on sources with range digests), the source is not
read whole: Spark hashes every mirror row where the mirror is (the same row text the source
computes in SQL, core/row_digest.py), only (key, hash) pairs reach the driver, and key ranges
are compared by digest and bisected as ``dblog verify --ranges`` does (core/range_verify.py);
only the ranges that differ are read from the source and from the mirror, and compared typed.
``--repair`` then requests a key-list dump of exactly the mismatched keys, which the running
capture performs and the next landing applies.

With ``--history`` the tables' history mirrors (spark/history.py) are compared instead: their
current versions (``_current``) with the source, by the same rules, and their versions with
each other: a key whose versions overlap, or with more than one current version, is a landing
fault (``overlap``) that no dump repairs.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import decimal
import json
import math
import sys
from typing import Any, Optional

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_dblog import verification
from airflow_provider_dblog.core.events import Key, Row, TableSchema
from airflow_provider_dblog.core.range_verify import RangeStats, find_drift, read_range, supports_ranges
from airflow_provider_dblog.core.verify import Mismatch, compare, read_all
from airflow_provider_dblog.outputs.lake_layout import history_path, mirror_path, mirrors_root
from airflow_provider_dblog.spark import mirror_types as mt


class _JsonNullText:
    """A mirror's JSON column holding the text 'null': equal to nothing (a SQL NULL in the
    source must be SQL NULL in the mirror)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "'null' (text)"


def _canonical(value: Any, type_name: str) -> Any:
    if value is None:
        return None
    if mt.is_json(type_name):
        return _JsonNullText() if value.strip() == "null" else json.loads(value)
    if isinstance(value, decimal.Decimal):
        return int(value) if mt.is_integer(type_name) else format(value, "f")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray)):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        tz = isinstance(mt.mirror_type(type_name), T.TimestampType)
        return value.isoformat() + ("+00:00" if tz else "")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _mirror_frame(spark: SparkSession, path: str, schema: TableSchema, history: bool = False) -> Any:
    """The mirror's current rows (tombstones excluded; of a history mirror its current
    versions), the source's columns in its order."""
    df = spark.read.format("delta").load(path).where("_current" if history else "NOT _deleted")
    cols = []
    for c in schema.columns:
        col = F.col(f"`{c.name}`")
        if isinstance(mt.mirror_type(c.type), T.TimestampType):
            # Read as the UTC wall clock: collect() would otherwise apply the driver's zone.
            col = col.cast(T.TimestampNTZType())
        cols.append(col.alias(c.name))
    return df.select(*cols)


def _canonical_rows(rows: Any, schema: TableSchema) -> dict[Key, Row]:
    out: dict[Key, Row] = {}
    for r in rows:
        row = {c.name: _canonical(r[c.name], c.type) for c in schema.columns}
        out[schema.key_of(row)] = row
    return out


def mirror_rows(spark: SparkSession, path: str, schema: TableSchema, history: bool = False) -> dict[Key, Row]:
    """Current rows of a mirror (tombstones excluded) as canonical rows, by key."""
    return _canonical_rows(_mirror_frame(spark, path, schema, history).collect(), schema)


def mirror_hashes(
    spark: SparkSession, path: str, schema: TableSchema, row_hash: Any, history: bool = False
) -> dict[Key, int]:
    """key -> the hash of the mirror's row (``row_hash`` of its canonical values), computed
    by Spark's Python workers where the rows are: only the pairs reach the driver."""
    columns = [(c.name, c.type) for c in schema.columns]

    def hashed(rows: Any) -> Any:
        for r in rows:
            row = {name: _canonical(r[name], type_name) for name, type_name in columns}
            yield schema.key_of(row), row_hash(row)

    return dict(_mirror_frame(spark, path, schema, history).rdd.mapPartitions(hashed).collect())


def mirror_rows_of(
    spark: SparkSession, path: str, schema: TableSchema, keys: list[Key], history: bool = False
) -> dict[Key, Row]:
    """The mirror's rows of these keys, as canonical rows (a join with the keys, one job)."""
    df = _mirror_frame(spark, path, schema, history)
    key_schema = T.StructType([df.schema[k] for k in schema.key])
    wanted = spark.createDataFrame([tuple(k) for k in keys], key_schema)
    return _canonical_rows(df.join(wanted, on=list(schema.key)).collect(), schema)


def _by_value(rows: dict[Key, Row], schema: TableSchema) -> dict[Key, Row]:
    """Rows with decimal values (canonical strings) as ``Decimal``: compared as numbers, so a
    scale written differently (1.00E-10, 0.0000000001) is no mismatch, a different value is.
    A value that is no string in a string mirror column (MySQL BIT's canonical integer) as the
    JSON text the landing job's ``from_json`` keeps there."""
    decimals = [
        c.name
        for c in schema.columns
        if isinstance(mt.mirror_type(c.type), T.DecimalType) and not mt.is_integer(c.type)
    ]
    texts = [
        c.name for c in schema.columns if isinstance(mt.mirror_type(c.type), T.StringType) and not mt.is_json(c.type)
    ]
    if not decimals and not texts:
        return rows
    out = {}
    for row in rows.values():
        row = dict(row)
        for name in decimals:
            if isinstance(row.get(name), str):
                row[name] = decimal.Decimal(row[name])
        for name in texts:
            if row.get(name) is not None and not isinstance(row[name], str):
                row[name] = json.dumps(row[name], separators=(",", ":"), ensure_ascii=False)
        out[schema.key_of(row)] = row  # a decimal key column is a Decimal on both sides
    return out


def duplicates(spark: SparkSession, path: str) -> list[Mismatch]:
    """Keys with more than one row in the mirror, tombstones included (one Spark job). The
    comparisons below read the mirror by key, where a second row would go unseen."""
    dup = spark.read.format("delta").load(path).groupBy("_key").count().where("count > 1").select("_key")
    return [Mismatch(tuple(json.loads(r[0])), "duplicate", None, None) for r in dup.orderBy("_key").collect()]


def overlaps(spark: SparkSession, path: str) -> list[Mismatch]:
    """Keys of a history mirror whose versions overlap: a version that ends after the next one
    starts, that is still open while a later one exists, or that ends where it starts (one
    Spark job). The comparison below reads one current version per key, where a second would
    go unseen."""
    from pyspark.sql import Window

    versions = spark.read.format("delta").load(path)
    w = Window.partitionBy("_key").orderBy("_valid_from", "_valid_to")
    nxt = F.lead("_valid_from").over(w)
    bad = (
        versions.select("_key", "_valid_from", "_valid_to", "_current", nxt.alias("_next"))
        .where(
            (F.col("_current") != F.col("_valid_to").isNull())
            | (F.col("_valid_to") <= F.col("_valid_from"))
            | (F.col("_next").isNotNull() & (F.col("_valid_to").isNull() | (F.col("_valid_to") > F.col("_next"))))
        )
        .select("_key")
        .distinct()
    )
    return [Mismatch(tuple(json.loads(r[0])), "overlap", None, None) for r in bad.orderBy("_key").collect()]


def _target(mirrors: str, source_id: str, table: str, history: bool) -> str:
    return (history_path if history else mirror_path)(mirrors, source_id, table)


def _faults(spark: SparkSession, path: str, history: bool) -> list[Mismatch]:
    return overlaps(spark, path) if history else duplicates(spark, path)


def verify_table(
    spark: SparkSession, source, mirrors: str, table: str, history: bool = False
) -> tuple[int, int, list[Mismatch]]:
    """(source rows, mirror rows, mismatches) for one table of an open ``Source``; with
    ``history``, of its history mirror's current versions."""
    schema = source.table_schema(table)
    path = _target(mirrors, source.source_id, table, history)
    src = _by_value(read_all(source, schema), schema)
    mir = _by_value(mirror_rows(spark, path, schema, history), schema)
    return len(src), len(mir), compare(src, mir) + _faults(spark, path, history)


def verify_table_by_ranges(
    spark: SparkSession,
    source: Any,
    mirrors: str,
    table: str,
    span: int = 10_000,
    leaf: int = 64,
    history: bool = False,
) -> tuple[int, int, list[Mismatch], Optional[RangeStats]]:
    """``verify_table`` by key ranges where the source and the key allow it (stats None:
    compared whole)."""
    schema = source.table_schema(table)
    if not supports_ranges(source, schema):
        return (*verify_table(spark, source, mirrors, table, history), None)
    path = _target(mirrors, source.source_id, table, history)
    hashes = mirror_hashes(spark, path, schema, source.row_hasher(schema), history)
    found, stats = find_drift(
        lambda low, high: source.range_digest(schema, low, high),
        lambda low, high: _by_value(read_range(source, schema, low, high), schema),
        hashes,
        lambda keys: _by_value(mirror_rows_of(spark, path, schema, keys, history), schema),
        span,
        leaf,
    )
    n_src = len(hashes) + sum(m.kind == "missing" for m in found) - sum(m.kind == "extra" for m in found)
    return n_src, len(hashes), found + _faults(spark, path, history), stats


def against_mirrors(
    spark: SparkSession, source: Any, mirrors: str, by_ranges: bool, history: bool = False
) -> verification.Compare:
    """Compare with the Delta mirrors under ``mirrors`` (the verify use case's other side);
    with ``history``, with the tables' history mirrors."""

    def compare(table: str) -> verification.TableComparison:
        if by_ranges:
            n_src, n_mir, mism, stats = verify_table_by_ranges(spark, source, mirrors, table, history=history)
            return verification.TableComparison(table, n_src, n_mir, mism, True, stats)
        return verification.TableComparison(table, *verify_table(spark, source, mirrors, table, history))

    return compare


def main(argv: Optional[list[str]] = None) -> int:
    from airflow_provider_dblog.config import load_config, make_source
    from airflow_provider_dblog.spark.session import get_session

    p = argparse.ArgumentParser(prog="verify_mirror", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the dblog config file (its [source]; [state] for --repair)")
    p.add_argument("--lake", required=True)
    p.add_argument("--mirrors", help="default <lake>/mirrors")
    p.add_argument("--table", action="append")
    p.add_argument("--show", type=int, default=10)
    p.add_argument(
        "--ranges",
        action="store_true",
        help="compare key ranges by row digests (SQL on the source, Spark on the mirror), reading only "
        "the ranges that differ",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="compare the tables' history mirrors (their current versions; overlapping versions are "
        "a fault) instead of the mirrors",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="request a dump of exactly the mismatched keys (the config's [state]); the running capture "
        "performs it and the next landing applies it",
    )
    args = p.parse_args(argv)
    config = load_config(args.config)
    source = make_source(config["source"])
    source.open()
    spark = get_session("dblog-verify-mirror", locations=(args.lake, args.mirrors))
    mirrors = mirrors_root(args.lake, args.mirrors)
    report = verification.printer("in the history mirror" if args.history else "in the mirror", args.show)
    compare_with = against_mirrors(spark, source, mirrors, args.ranges, args.history)
    try:
        results = verification.verify(source, args.table, compare_with, report)
    finally:
        source.close()
    if args.repair:
        from airflow_provider_dblog.config import make_state

        verification.repair(
            results,
            lambda: make_source(config["source"]),
            lambda: make_state(config.get("state", {})),
            on_repair=verification.print_repair,
        )
    return 1 if verification.drifted(results) else 0


if __name__ == "__main__":
    sys.exit(main())
