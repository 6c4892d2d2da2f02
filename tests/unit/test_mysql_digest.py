"""mysql_digest's Python renderings against the text MariaDB 10.11 printed for the same values
(recorded with ``SELECT CAST(d AS CHAR)`` and the FLOAT rounding of ``column_sql``)."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.events import Column
from airflow_provider_dblog.sources.mysql_digest import column_renderer, double_text

# (the double, the server's CAST(d AS CHAR))
DOUBLES = [
    (1.7976931348623157e308, "1.7976931348623157e308"),
    (-2.2250738585072014e-308, "-2.2250738585072014e-308"),
    (0.0, "0"),
    (-0.0, "0"),
    (9007199254740992.0, "9.007199254740992e15"),
    (1e15, "1e15"),
    (2346404348710384.5, "2346404348710384.5"),
    (123456789012345.6, "123456789012345.6"),
    (100.0, "100"),
    (16777217.0, "16777217"),
    (1e-05, "0.00001"),
    (1e-15, "0.000000000000001"),
    (1e-16, "1e-16"),
    (4.0232471301911964e-13, "0.00000000000040232471301911964"),
    (3.2534565487599637e24, "3.2534565487599637e24"),
    (-155786.00007716962, "-155786.00007716962"),
    (-0.001, "-0.001"),
]

# (a FLOAT's canonical value: 7 significant digits, what the server's rounding printed)
FLOATS = [
    (3.4e38, "3.4000000000000003e38"),
    (9007199000000000.0, "9.007199e15"),
    (1.234568e17, "1.234568e17"),
    (16777220.0, "16777220"),
    (4.023247e-13, "0.0000000000004023247"),
    (9.64051e-08, "0.0000000964051"),
    (2130298000000.0, "2130298000000"),
    (-155786.0, "-155786"),
    (0.0, "0"),
]


@pytest.mark.parametrize("value, text", DOUBLES)
def test_doubles_print_as_the_server_prints_them(value, text):
    assert double_text(value) == text
    assert column_renderer(Column("d", "double"))(value) == text


@pytest.mark.parametrize("value, text", FLOATS)
def test_floats_round_as_the_server_rounds_them(value, text):
    assert column_renderer(Column("f", "float"))(value) == text


def test_a_mirrors_single_precision_value_renders_as_its_canonical_7_digits():
    render = column_renderer(Column("f", "float"))
    assert render(0.699999988079071) == render(0.7) == "0.7"  # float32(0.7), as Spark returns it
    assert render(3.3999999521443642e38) == render(3.4e38)


def test_other_kinds():
    assert column_renderer(Column("t", "time(1)"))("-00:00:00.500000") == "-00:00:00.5"
    assert column_renderer(Column("t", "time(3)"))("838:59:59") == "838:59:59.000"
    assert column_renderer(Column("t", "time"))("12:00:01") == "12:00:01"
    assert column_renderer(Column("s", "datetime(6)"))("2024-01-02T03:04:05") == "2024-01-02T03:04:05.000000"
    assert (
        column_renderer(Column("s", "timestamp(3)"))("2024-01-02T03:04:05.5+00:00")
        == "2024-01-02T03:04:05.500000+00:00"
    )
    assert column_renderer(Column("b", "varbinary(4)"))({"$b64": "AAH/"}) == "0001FF"
    assert column_renderer(Column("j", "json"))({"b": [1, "é"], "a": None}) == '{"b":[1,"é"],"a":null}'
    assert column_renderer(Column("j", "json"), mariadb=False)({"bb": 1, "a": "é"}) == '{"a": "é", "bb": 1}'
