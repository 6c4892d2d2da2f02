"""Row filters of dumps: the predicate's shape (core/predicates.py), the request rules
(core/dumps.py) and the chunk query it joins (core/chunks.py)."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.chunks import MYSQL, POSTGRES, chunk_query
from airflow_provider_dblog.core.dumps import DumpSpec
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Column, TableSchema
from airflow_provider_dblog.core.predicates import check_predicate

SCHEMA = TableSchema("s.t", (Column("id", "bigint", False), Column("region", "text", True)), ("id",))


@pytest.mark.parametrize(
    "where",
    [
        "region = 'eu'",
        "updated_at >= '2026-11-01' AND (region IN ('eu', 'us') OR id < 10)",
        "name = 'it''s; -- not a comment'",
        '"odd;name" > 3',
        "`odd#name` > 3",
        "name LIKE 'a%'",
        r"name = 'a\'b'",  # MySQL's backslash escape: one literal
    ],
)
def test_expressions_pass(where):
    assert check_predicate(f"  {where} ") == where


@pytest.mark.parametrize(
    "where, why",
    [
        ("", "empty"),
        ("region = 'eu'; DELETE FROM s.t", "';'"),
        ("region = 'eu' -- comment", "comment"),
        ("region = 'eu' /* x */", "comment"),
        ("region = 'eu' # x", "comment"),
        ("id = 1) OR (1 = 1", "closes a parenthesis"),
        ("(id = 1", "parenthesis open"),
        ("region = 'eu", "unterminated"),
        (r"name = 'a\\' ; DROP TABLE x; '", "';'"),  # the literal ends after \\ on MySQL
        ("id = $$1$$", "dollar quoting"),
        ("x" * 4001, "longer"),
    ],
)
def test_other_shapes_are_refused_with_the_reason(where, why):
    with pytest.raises(RequestError) as err:
        check_predicate(where)
    assert why in err.value.cause and "--where" in err.value.fix


def test_a_filter_needs_one_table_and_no_keys_and_survives_the_state_store():
    with pytest.raises(RequestError, match="exactly one table"):
        DumpSpec.new("src", None, where="id > 1")
    with pytest.raises(RequestError, match="exactly one table"):
        DumpSpec.new("src", ["s.a", "s.b"], where="id > 1")
    with pytest.raises(RequestError, match="not both"):
        DumpSpec.new("src", ["s.t"], [(1,)], where="id > 1")
    spec = DumpSpec.new("src", ["s.t"], where=" region = 'eu' ")
    assert DumpSpec.from_json(spec.to_json()) == spec and spec.where == "region = 'eu'"
    old = DumpSpec.from_json('{"dump_id":"a","source_id":"s","tables":null,"keys":null}')  # before filters
    assert old.where is None


@pytest.mark.parametrize("dialect", [POSTGRES, MYSQL], ids=["postgres", "mysql"])
def test_the_filter_joins_the_key_range_in_parentheses(dialect):
    sql, params = chunk_query(dialect, SCHEMA, ["id", "region"], (5,), 10, (90,), "region = 'eu' OR name LIKE 'a%'")
    assert sql.endswith(f"AND (region = 'eu' OR name LIKE 'a%%') ORDER BY {dialect.quote('id')} LIMIT 10")
    assert params == [5, 90]
    assert (sql % tuple("?" for _ in params)).count("'a%'") == 1  # the driver's formatting restores it
