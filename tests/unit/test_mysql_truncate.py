"""Recognising a TRUNCATE statement of a captured table in MariaDB's binlog (sources/mysql/log.py)."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.sources.mysql.log import truncated_table

CAPTURED = {"shop.orders", "shop.we`ird", "Other.T1"}


@pytest.mark.parametrize(
    "query, current_db, table",
    [
        ("TRUNCATE TABLE shop.orders", "x", "shop.orders"),
        ("truncate orders", "shop", "shop.orders"),
        ("TRUNCATE `shop`.`orders`", "x", "shop.orders"),
        ("TRUNCATE TABLE `orders` NOWAIT", "shop", "shop.orders"),
        ("/* a comment */ TRUNCATE shop . orders WAIT 3;", "x", "shop.orders"),
        ("TRUNCATE TABLE `we``ird`", "shop", "shop.we`ird"),
        ("TRUNCATE other.t1", "x", "Other.T1"),
        # not captured, or not a TRUNCATE: left alone
        ("TRUNCATE TABLE shop.orders2", "x", None),
        ("TRUNCATE TABLE orders", "other", None),
        ("DELETE FROM orders", "shop", None),
        ("CREATE TABLE truncate_log (id int)", "shop", None),
        ("TRUNCATE TABLE a.b.c", "x", None),
    ],
)
def test_truncate_statements_of_captured_tables_only(query, current_db, table):
    assert truncated_table(query, current_db, CAPTURED) == table
