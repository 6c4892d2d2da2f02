"""mysql_digest's Python renderings against the text MariaDB 10.11 printed for the same values
(recorded with ``SELECT CAST(d AS CHAR)`` and, for FLOAT, ``column_sql``'s
``CAST(CAST(f AS DOUBLE) AS CHAR)``)."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.events import Column
from airflow_provider_dblog.sources.mysql.digest import column_renderer, double_text

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

# (a FLOAT's canonical value: the stored float32 as a double; the server's text of
# CAST(CAST(f AS DOUBLE) AS CHAR) for the value inserted as the comment says)
FLOATS = [
    (290509.125, "290509.125"),
    (298887968.0, "298887968"),
    (0.10000000149011612, "0.10000000149011612"),  # 0.1
    (1.401298464324817e-45, "1.401298464324817e-45"),  # the least denormal
    (3.4028234663852886e38, "3.4028234663852886e38"),  # the largest float32
    (1.1754943508222875e-38, "1.1754943508222875e-38"),  # the least normal
    (1.234567991090217e17, "1.234567991090217e17"),  # 1.234568e17
    (9.640510256758716e-08, "0.00000009640510256758716"),  # 9.64051e-08
    (-155786.0, "-155786"),
    (16777216.0, "16777216"),  # 16777217
    (0.699999988079071, "0.699999988079071"),  # 0.7
    (9.999999747378752e-06, "0.000009999999747378752"),  # 1e-5
    (4.023247121738571e-13, "0.0000000000004023247121738571"),  # 4.023247e-13
    (0.0, "0"),
]


@pytest.mark.parametrize("value, text", DOUBLES)
def test_doubles_print_as_the_server_prints_them(value, text):
    assert double_text(value) == text
    assert column_renderer(Column("d", "double"))(value) == text


@pytest.mark.parametrize("value, text", FLOATS)
def test_floats_print_as_the_server_prints_their_exact_double(value, text):
    assert column_renderer(Column("f", "float"))(value) == text


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
