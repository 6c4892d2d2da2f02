"""Start-up checks of the MySQL source that need server settings the test server cannot
change at runtime (binlog filters, log_bin): driven by a stub session."""

from __future__ import annotations

import pytest

pytest.importorskip("pymysqlreplication")

from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.sources.mysql_catalog import ConnectionSettings  # noqa: E402
from airflow_provider_dblog.sources.mysql_checks import StartupChecks  # noqa: E402


class StubSession:
    def __init__(self, answers: dict):
        self.answers = answers

    def query(self, sql, params=None):
        for prefix, rows in self.answers.items():
            if sql.startswith(prefix):
                return rows
        raise AssertionError(f"unexpected query {sql}")


def checks(**answers) -> StartupChecks:
    return StartupChecks(StubSession(answers), ConnectionSettings("h", 1, "u", "secret"), mariadb=True)


@pytest.mark.parametrize(
    "do_db, ignore_db, hidden",
    [
        ("shop", "", "dblog"),  # only shop is logged: the watermarks are not
        ("", "dblog", "dblog"),
        ("", "shop,other", "shop"),
    ],
)
def test_binlog_filters_hiding_needed_databases_are_refused(do_db, ignore_db, hidden):
    c = checks(**{"SHOW BINARY LOG STATUS": [("mysql-bin.000001", 4, do_db, ignore_db)]})
    with pytest.raises(ConfigurationError) as err:
        c.filters(["shop.orders"], "dblog")
    assert hidden in err.value.cause and "binlog_do_db" in err.value.fix


def test_binlog_filters_that_keep_everything_needed_pass():
    c = checks(**{"SHOW BINARY LOG STATUS": [("mysql-bin.000001", 4, "shop,dblog", "other")]})
    c.filters(["shop.orders"], "dblog")


def test_binlog_off_is_refused():
    c = checks(**{"SHOW GLOBAL VARIABLES": [("log_bin", "OFF"), ("binlog_format", "ROW")]})
    with pytest.raises(ConfigurationError) as err:
        c.binlog_settings()
    assert "log_bin" in err.value.cause and "restart" in err.value.fix


def test_source_satisfies_the_protocol_and_ids_are_stable():
    from airflow_provider_dblog.core.protocols import Source
    from airflow_provider_dblog.sources.mysql import MySQLSource, default_server_id

    src = MySQLSource(source_id="shop", host="h", port=1, user="u", password="s3cr3t-pw")
    assert isinstance(src, Source)
    assert src.server_id == default_server_id("shop") != default_server_id("shop2")
    assert 10000 <= src.server_id < 2**31
    assert "s3cr3t-pw" not in repr(src._settings)
    with pytest.raises(ConfigurationError):
        MySQLSource(source_id="s", host="h", port=1, user="u", password="p", use_gtid=True)
