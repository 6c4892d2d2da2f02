"""Start-up checks of the MySQL source that need server settings the test server cannot
change at runtime (binlog filters, log_bin): driven by a stub session."""

from __future__ import annotations

import pytest

pytest.importorskip("pymysqlreplication")

from airflow_provider_dblog.core.errors import ConfigurationError  # noqa: E402
from airflow_provider_dblog.sources.mysql.catalog import ConnectionSettings  # noqa: E402
from airflow_provider_dblog.sources.mysql.checks import StartupChecks  # noqa: E402


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
    from airflow_provider_dblog.sources.mysql.source import MySQLSource, default_server_id

    src = MySQLSource(source_id="shop", host="h", port=1, user="u", password="s3cr3t-pw")
    assert isinstance(src, Source)
    assert src.server_id == default_server_id("shop") != default_server_id("shop2")
    assert 10000 <= src.server_id < 2**31
    assert "s3cr3t-pw" not in repr(src._settings)
    with pytest.raises(ConfigurationError, match="use_gtid"):  # a host list needs GTID positions
        MySQLSource(source_id="s", host="h1,h2:2", port=1, user="u", password="p")
    listed = MySQLSource(source_id="s", host="h1, h2:2", port=1, user="u", password="p", use_gtid=True)
    assert listed._endpoints == [("h1", 1), ("h2", 2)]


def test_gtid_positions_on_mysql_need_gtid_mode_on():
    off = StartupChecks(
        StubSession({"SHOW GLOBAL VARIABLES": [("gtid_mode", "OFF_PERMISSIVE")]}),
        ConnectionSettings("h", 1, "u", "secret"),
        mariadb=False,
    )
    with pytest.raises(ConfigurationError) as err:
        off.gtid_mode()
    assert "OFF_PERMISSIVE" in err.value.cause and "gtid_mode = ON" in err.value.fix
    on = StartupChecks(StubSession({"SHOW GLOBAL VARIABLES": [("gtid_mode", "ON")]}), off.settings, mariadb=False)
    on.gtid_mode()
    checks().gtid_mode()  # MariaDB: every transaction has a GTID


def test_use_gtid_must_be_a_boolean_in_the_config():
    from airflow_provider_dblog.config import make_source

    src = {"type": "mysql", "id": "s", "user": "u", "password_env": "NOPE_UNSET_X", "use_gtid": "yes"}
    with pytest.raises(ConfigurationError, match="use_gtid must be true or false"):
        make_source(src, password="p")
    made = make_source({**src, "use_gtid": True, "host": "a:1,b:2"}, password="p")
    assert made._use_gtid and made._endpoints == [("a", 1), ("b", 2)]


class RefusingSession:
    """SELECTs of table ``refused`` fail as MariaDB refuses them (1142); the statements run
    are kept."""

    def __init__(self, refused: str):
        self.refused, self.statements = refused, []

    def query(self, sql, params=None):
        import pymysql

        self.statements.append(sql)
        if sql.startswith("SELECT CURRENT_USER()"):
            return [("u@%",)]
        if f"`{self.refused}`" in sql:
            raise pymysql.err.OperationalError(
                1142, f"SELECT command denied to user 'u'@'h' for table `{self.refused}`"
            )
        return []


def test_every_table_is_checked_readable_in_a_few_statements_and_a_refused_one_is_named():
    tables = [f"shop.t{i:03d}" for i in range(450)]
    ok = RefusingSession("none")
    StartupChecks(ok, ConnectionSettings("h", 1, "u", "secret"), mariadb=True).readable_all(tables)
    assert len(ok.statements) == 3  # 200 tables a statement, not one each
    assert [s.count("LIMIT 0") for s in ok.statements] == [200, 200, 50]
    bad = RefusingSession("t321")
    with pytest.raises(ConfigurationError) as err:
        StartupChecks(bad, ConnectionSettings("h", 1, "u", "secret"), mariadb=True).readable_all(tables)
    assert "cannot SELECT from shop.t321" in err.value.cause
    assert "GRANT SELECT ON `shop`.`t321` TO 'u'@'%'" in err.value.fix
