import pytest

from airflow_provider_dblog.core.chunks import MYSQL, POSTGRES, chunk_query, greater_than, keys_query
from airflow_provider_dblog.core.events import Column, TableSchema

ONE = TableSchema("public.orders", (Column("id", "bigint", False), Column("v", "text")), ("id",))
TWO = TableSchema(
    "shop.items",
    (Column("a", "integer", False), Column("b", "varchar(10)", False), Column("c", "date", False), Column("v", "text")),
    ("a", "b", "c"),
)


def test_first_chunk_has_no_predicate():
    sql, params = chunk_query(POSTGRES, ONE, ['"id"::text', '"v"::text'], None, 100)
    assert sql == 'SELECT "id"::text, "v"::text FROM "public"."orders" ORDER BY "id" LIMIT 100'
    assert params == []


def test_postgres_composite_key_uses_row_comparison_with_casts():
    sql, params = chunk_query(POSTGRES, TWO, ["*"], (1, "x", "2024-01-02"), 10)
    assert '("a", "b", "c") > (%s::integer, %s::varchar(10), %s::date)' in sql
    assert sql.endswith('ORDER BY "a", "b", "c" LIMIT 10')
    assert params == [1, "x", "2024-01-02"]


def test_mysql_composite_key_expands_row_comparison():
    pred, params = greater_than(MYSQL, TWO, (1, "x", "2024-01-02"))
    assert pred == "`a` >= %s AND (`a` > %s OR (`a` = %s AND (`b` > %s OR (`b` = %s AND (`c` > %s)))))"
    assert params == [1, 1, 1, "x", "x", "2024-01-02"]


def _py_greater(key, after):
    return key > after


@pytest.mark.parametrize("after", [(1, "b", 2), (0, "z", 9), (2, "a", 0), (1, "a", 3)])
def test_mysql_expansion_means_lexicographic_greater(after):
    # Evaluate the generated predicate with Python in place of SQL on every key of a grid.
    pred, params = greater_than(
        MYSQL, TableSchema("d.t", tuple(Column(c, "int") for c in "abc"), ("a", "b", "c")), after
    )
    expr = pred.replace("`", "").replace("AND", "and").replace("OR", "or").replace(" = ", " == ")
    grid = [(a, b, c) for a in range(3) for b in "abz" for c in range(4)]
    for key in grid:
        it = iter(params)
        code = ""
        for part in expr.split("%s"):
            code += part
            v = next(it, None)
            if v is not None:
                code += repr(v)
        env = dict(zip("abc", key))
        assert eval(code, {}, env) == _py_greater(key, after), (code, key)


def test_keys_query_single_and_composite():
    sql, params = keys_query(POSTGRES, ONE, ["*"], [(1,), (5,)])
    assert 'WHERE "id" IN (%s::bigint, %s::bigint)' in sql and params == [1, 5]
    sql, params = keys_query(MYSQL, TWO, ["*"], [(1, "x", "2024-01-01")])
    assert "(`a` = %s AND `b` = %s AND `c` = %s)" in sql and params == [1, "x", "2024-01-01"]


def test_identifiers_are_quoted():
    t = TableSchema('"odd""schema".we`ird', (Column('i"d', "int"),), ('i"d',))  # core/names.py's spelling
    assert '"odd""schema"."we`ird"' in chunk_query(POSTGRES, t, ["1"], None, 1)[0]
    assert '`odd"schema`.`we``ird`' in chunk_query(MYSQL, t, ["1"], None, 1)[0]


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        chunk_query(POSTGRES, ONE, ["*"], None, 0)


def test_chunk_below_an_upper_bound_single_and_composite():
    sql, params = chunk_query(POSTGRES, ONE, ["*"], (10,), 100, (500,))
    assert 'WHERE "id" > %s::bigint AND "id" <= %s::bigint ORDER BY "id" LIMIT 100' in sql and params == [10, 500]
    sql, params = chunk_query(POSTGRES, TWO, ["*"], None, 10, (9, "z", "2024-12-31"))
    assert 'WHERE ("a", "b", "c") <= (%s::integer, %s::varchar(10), %s::date) ORDER BY' in sql
    assert params == [9, "z", "2024-12-31"]
    sql, params = chunk_query(MYSQL, TWO, ["*"], (1, "x", "2024-01-02"), 10, (9, "z", "2024-12-31"))
    assert sql.count("`a` >= %s AND (") == 1 and "AND `a` <= %s AND (`a` < %s OR" in sql
    assert params == [1, 1, 1, "x", "x", "2024-01-02", 9, 9, 9, "z", "z", "2024-12-31"]


@pytest.mark.parametrize("upper", [(1, "b", 2), (0, "z", 9), (2, "a", 0), (1, "a", 3)])
def test_mysql_upper_bound_means_lexicographic_at_most(upper):
    from airflow_provider_dblog.core.chunks import at_most

    pred, params = at_most(MYSQL, TableSchema("d.t", tuple(Column(c, "int") for c in "abc"), ("a", "b", "c")), upper)
    expr = pred.replace("`", "").replace("AND", "and").replace("OR", "or").replace(" = ", " == ")
    for key in [(a, b, c) for a in range(3) for b in "abz" for c in range(4)]:
        it = iter(params)
        code = "".join(part + (repr(v) if (v := next(it, None)) is not None else "") for part in expr.split("%s"))
        assert eval(code, {}, dict(zip("abc", key))) == (key <= upper), (code, key)


def test_max_key_query_reads_one_row_from_the_end_of_the_key():
    from airflow_provider_dblog.core.chunks import max_key_query

    assert max_key_query(POSTGRES, TWO, ["*"]) == (
        'SELECT * FROM "shop"."items" ORDER BY "a" DESC, "b" DESC, "c" DESC LIMIT 1',
        [],
    )
    assert max_key_query(MYSQL, ONE, ["`id`"])[0] == "SELECT `id` FROM `public`.`orders` ORDER BY `id` DESC LIMIT 1"
