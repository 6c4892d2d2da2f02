"""spark/verify_mirror.py's comparison by value, without a Spark session."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from airflow_provider_dblog.core.events import Column, TableSchema  # noqa: E402
from airflow_provider_dblog.core.verify import compare  # noqa: E402
from airflow_provider_dblog.spark.verify_mirror import _by_value, _canonical  # noqa: E402

SCHEMA = TableSchema(
    "d.wide",
    (Column("id", "bigint"), Column("bt", "bit(64)"), Column("d", "decimal(12,2)"), Column("j", "json")),
    ("id",),
)


def _mismatches(source: dict, mirror: dict) -> list:
    """As verify_table compares: the mirror's typed values made canonical, both sides by value."""
    landed = {k: {c.name: _canonical(row[c.name], c.type) for c in SCHEMA.columns} for k, row in mirror.items()}
    return compare(_by_value(source, SCHEMA), _by_value(landed, SCHEMA))


def test_a_bit_value_lands_as_its_text_in_a_string_mirror_column():
    # MySQL BIT is an integer in the changelog and a string in the mirror (mirror_types): the
    # mirror's '5' is the source's 5, its '6' is not; JSON columns keep comparing as JSON.
    source = {(1,): {"id": 1, "bt": 5, "d": "1.50", "j": {"a": [1]}}, (2,): {"id": 2, "bt": None, "d": None, "j": None}}
    mirror = {
        (1,): {"id": 1, "bt": "5", "d": "1.5", "j": '{"a":[1]}'},
        (2,): {"id": 2, "bt": None, "d": None, "j": None},
    }
    assert _mismatches(source, mirror) == []
    wrong = {**mirror, (1,): {**mirror[(1,)], "bt": "6"}}
    assert [m.describe() for m in _mismatches(source, wrong)] == ["key [1]: different (bt: source='5' changelog='6')"]
