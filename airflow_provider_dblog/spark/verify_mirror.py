"""Spark-side verify: compare a mirror table with its source table row by row, typed.

The mirror's typed values are turned back into comparable values and compared with the
source's rows as the chunk SELECT reads them, with the same ``compare`` as ``dblog verify``.
Comparison is by value, not by re-parsed text: decimals as ``Decimal`` numbers (1.00E-10 is
0.0000000001), JSON as parsed JSON, except that a mirror holding the *text* ``null`` where
the source has SQL NULL is a mismatch (it is corruption, not a JSON null). So a wrong type
mapping (a lost decimal scale, a shifted time zone, mangled bytes or JSON, a NULL turned into
text) shows up as a mismatch, not only a missing row.

    python -m airflow_provider_dblog.spark.verify_mirror --config dblog.toml --lake /data/lake
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

from airflow_provider_dblog.core.events import Key, Row, TableSchema
from airflow_provider_dblog.core.verify import Mismatch, compare, read_all
from airflow_provider_dblog.spark import mirror_types as mt
from airflow_provider_dblog.spark.land_changelog import absolute, mirror_path


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


def mirror_rows(spark: SparkSession, path: str, schema: TableSchema) -> dict[Key, Row]:
    """Current rows of a mirror (tombstones excluded) as canonical rows, by key."""
    df = spark.read.format("delta").load(path).where("NOT _deleted")
    cols = []
    for c in schema.columns:
        col = F.col(f"`{c.name}`")
        if isinstance(mt.mirror_type(c.type), T.TimestampType):
            # Read as the UTC wall clock: collect() would otherwise apply the driver's zone.
            col = col.cast(T.TimestampNTZType())
        cols.append(col.alias(c.name))
    out: dict[Key, Row] = {}
    for r in df.select(*cols).collect():
        row = {c.name: _canonical(r[c.name], c.type) for c in schema.columns}
        out[schema.key_of(row)] = row
    return out


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


def verify_table(spark: SparkSession, source, mirrors: str, table: str) -> tuple[int, int, list[Mismatch]]:
    """(source rows, mirror rows, mismatches) for one table of an open ``Source``."""
    schema = source.table_schema(table)
    src = _by_value(read_all(source, schema), schema)
    mir = _by_value(mirror_rows(spark, mirror_path(mirrors, source.source_id, table), schema), schema)
    return len(src), len(mir), compare(src, mir)


def main(argv: Optional[list[str]] = None) -> int:
    from airflow_provider_dblog.config import load_config, make_source
    from airflow_provider_dblog.spark.session import get_session

    p = argparse.ArgumentParser(prog="verify_mirror", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the dblog config file (its [source] section)")
    p.add_argument("--lake", required=True)
    p.add_argument("--mirrors", help="default <lake>/mirrors")
    p.add_argument("--table", action="append")
    p.add_argument("--show", type=int, default=10)
    args = p.parse_args(argv)
    src_cfg = load_config(args.config)["source"]
    source = make_source(src_cfg)
    source.open()
    spark = get_session("dblog-verify-mirror")
    bad = 0
    try:
        for table in args.table or source.tables():
            n_src, n_mir, mism = verify_table(
                spark, source, absolute(args.mirrors) if args.mirrors else f"{absolute(args.lake)}/mirrors", table
            )
            bad += len(mism)
            print(f"{table}: {n_src} rows in the source, {n_mir} in the mirror, {len(mism)} mismatches")
            for m in mism[: args.show]:
                print(f"  {m.describe()}")
    finally:
        source.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
