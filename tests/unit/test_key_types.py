"""Key values of dump requests checked against their column's type (core/key_types.py): a
value the column cannot hold is refused with the table, column, type and value; no cast."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dblog.core.dumps import key_from_value, parse_key
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Column, TableSchema
from airflow_provider_dblog.core.key_types import check_key_value


def one(col_type: str) -> TableSchema:
    return TableSchema("s.t", (Column("k", col_type, False), Column("v", "text")), ("k",))


@pytest.mark.parametrize(
    "col_type,value,expected",
    [
        ("integer", 42, 42),
        ("bigint", -(2**63), -(2**63)),
        ("bigint unsigned", 2**64 - 1, 2**64 - 1),
        ("int(11)", 7, 7),
        ("smallint", 32767, 32767),
        ("numeric(10,2)", 12.5, "12.5"),
        ("numeric(10,2)", "12.50", "12.50"),
        ("decimal(10,2)", 3, "3"),
        ("numeric", "123456789012345678901234.5", "123456789012345678901234.5"),
        ("text", "abc", "abc"),
        ("character varying(20)", "abc", "abc"),
        ("varchar(3)", "abc", "abc"),
        ("char(36)", "0b9e6c6e-4f7a-4f0e-9d3e-3f1c2a5b6d7e", "0b9e6c6e-4f7a-4f0e-9d3e-3f1c2a5b6d7e"),
        ("uuid", "0B9E6C6E4F7A4F0E9D3E3F1C2A5B6D7E", "0b9e6c6e-4f7a-4f0e-9d3e-3f1c2a5b6d7e"),
        ("date", "2024-05-31", "2024-05-31"),
        ("timestamp without time zone", "2024-05-31 12:00:00", "2024-05-31T12:00:00"),
        ("timestamp(6) with time zone", "2024-05-31T12:00:00+02:00", "2024-05-31T12:00:00+02:00"),
        ("datetime(6)", "2024-05-31T12:00:00.5", "2024-05-31T12:00:00.500000"),
        ("timestamp", "2024-05-31T12:00:00+00:00", "2024-05-31T12:00:00"),  # MySQL: UTC session
        ("boolean", True, True),
        ("double precision", 1.5, 1.5),
        ("inet", "10.0.0.1", "10.0.0.1"),  # no family: a number or a string
    ],
)
def test_values_of_the_columns_type_are_accepted(col_type, value, expected):
    assert check_key_value("s.t", Column("k", col_type), value) == expected


@pytest.mark.parametrize(
    "col_type,value,needle",
    [
        ("integer", "abc", "a JSON integer"),
        ("int", "42", "a JSON integer"),
        ("integer", 1.5, "a JSON integer"),
        ("bigint", True, "a JSON integer"),
        ("smallint", 40000, "from -32768 to 32767"),
        ("integer", 2**31, "from -2147483648 to 2147483647"),
        ("int unsigned", -1, "from 0 to 4294967295"),
        ("tinyint", 128, "from -128 to 127"),
        ("bigint", 2**63, "to 9223372036854775807"),
        ("numeric(10,2)", "abc", "decimal string"),
        ("numeric(10,2)", "1.234", "at most 2 digits after the point"),
        ("decimal(4,2)", 123, "at most 2 digits before the point"),
        ("numeric(10,2)", "NaN", "decimal string"),
        ("numeric(10,2)", False, "decimal string"),
        ("text", 42, "a string"),
        ("character varying(3)", "abcd", "at most 3 characters"),
        ("uuid", "not-a-uuid", "a UUID string"),
        ("uuid", 5, "a UUID string"),
        ("date", "31/05/2024", "an ISO date string"),
        ("date", 20240531, "an ISO date string"),
        ("timestamp without time zone", "yesterday", "an ISO timestamp"),
        ("timestamp without time zone", "2024-05-31T12:00:00+02:00", "without an offset"),
        ("timestamp", "2024-05-31T12:00:00+02:00", "in UTC"),
        ("boolean", 1, "true or false"),
        ("double", "1.5", "a JSON number"),
        ("inet", True, "a number or a string"),
    ],
)
def test_values_the_column_cannot_hold_are_refused_naming_table_column_type_and_value(col_type, value, needle):
    with pytest.raises(RequestError) as info:
        key_from_value(value, one(col_type))
    text = str(info.value)
    assert needle in text and "table s.t" in text and f"column k ({col_type})" in text, text
    assert f"key value {json.dumps(value)} for column" in text, text


def test_composite_keys_are_checked_per_column():
    t = TableSchema("s.orders", (Column("region", "varchar(8)"), Column("no", "int")), ("region", "no"))
    assert parse_key('["eu", 7]', t) == ("eu", 7)
    assert parse_key('{"no": 7, "region": "eu"}', t) == ("eu", 7)
    with pytest.raises(RequestError, match=r"column no \(int\)"):
        parse_key('["eu", "7"]', t)
    with pytest.raises(RequestError, match=r"column region \(varchar\(8\)\)"):
        parse_key("[7, 7]", t)
