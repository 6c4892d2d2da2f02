"""MySQL 8.4 / 9 statements and variables the MySQL source reads (sources/mysql/catalog.py,
checks.py), on the rows and errors those servers send: the new spellings first, the old ones
only after the server's parse error (1064), every other error as it came."""

from __future__ import annotations

import threading

import pymysql
import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.mysql import catalog
from airflow_provider_dblog.sources.mysql.catalog import ConnectionSettings
from airflow_provider_dblog.sources.mysql.checks import StartupChecks

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
# What MySQL 8.4 answers for a statement it no longer has (and MariaDB for one it never had).
PARSE_ERROR = pymysql.err.ProgrammingError(
    1064,
    "You have an error in your SQL syntax; check the manual that corresponds to your MySQL server "
    "version for the right syntax to use near 'MASTER STATUS' at line 1",
)


class Server:
    """Answers statements by their text: rows, or the error the server raised."""

    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []
        self.lock = threading.RLock()

    def query(self, sql, params=None):
        self.asked.append(sql)
        answer = self.answers.get(sql.split(" WHERE")[0])
        if answer is None:
            raise AssertionError(f"unexpected query {sql}")
        if isinstance(answer, Exception):
            raise answer
        return answer

    # replica_lag reads through a DictCursor of the session's connection
    def conn(self):
        return self

    def cursor(self, _cls=None):
        return _Cursor(self)


class _Cursor:
    def __init__(self, server):
        self.server, self.rows = server, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql):
        self.rows = self.server.query(sql)

    def fetchone(self):
        return self.rows[0] if self.rows else None


def test_mysql_84_binary_log_status_is_read_with_its_gtid_column():
    # MySQL 8.4: File, Position, Binlog_Do_DB, Binlog_Ignore_DB, Executed_Gtid_Set
    s = Server({"SHOW BINARY LOG STATUS": [("binlog.000003", 157, "", "", f"{UUID}:1-5")]})
    assert catalog.master_status(s) == ("binlog.000003", 157, "", "")
    assert s.asked == ["SHOW BINARY LOG STATUS"]


def test_servers_without_binary_log_status_fall_back_on_their_parse_error():
    s = Server({"SHOW BINARY LOG STATUS": PARSE_ERROR, "SHOW MASTER STATUS": [("mysql-bin.000001", 4, "", "")]})
    assert catalog.master_status(s) == ("mysql-bin.000001", 4, "", "")


@pytest.mark.parametrize(
    "error",
    [
        pymysql.err.OperationalError(
            1227, "Access denied; you need (at least one of) the SUPER, REPLICATION CLIENT privilege(s)"
        ),
        pymysql.err.ProgrammingError(1146, "Table 'performance_schema.log_status' doesn't exist"),
    ],
)
def test_other_errors_are_not_hidden_behind_the_old_statement(error):
    # On 8.4 the old spelling would only answer 1064 and hide the real cause.
    s = Server({"SHOW BINARY LOG STATUS": error, "SHOW MASTER STATUS": PARSE_ERROR})
    with pytest.raises(type(error)) as err:
        catalog.master_status(s)
    assert err.value.args[0] == error.args[0]
    r = Server({"SHOW REPLICA STATUS": error, "SHOW SLAVE STATUS": PARSE_ERROR})
    with pytest.raises(type(error)):
        catalog.replica_lag(r)


def test_replica_status_on_84_and_slave_status_on_older_servers():
    r = Server({"SHOW REPLICA STATUS": [{"Seconds_Behind_Source": 3, "Replica_IO_Running": "Yes"}]})
    assert catalog.replica_lag(r) == 3.0
    old = Server({"SHOW REPLICA STATUS": PARSE_ERROR, "SHOW SLAVE STATUS": [{"Seconds_Behind_Master": 7}]})
    assert catalog.replica_lag(old) == 7.0


def test_binlog_off_names_the_84_statement():
    with pytest.raises(ConfigurationError) as err:
        catalog.master_status(Server({"SHOW BINARY LOG STATUS": []}))
    assert "SHOW BINARY LOG STATUS" in err.value.cause and "log_bin" in err.value.fix


def test_show_binary_logs_with_the_encrypted_column():
    s = Server({"SHOW BINARY LOGS": [("binlog.000001", 180, "No"), ("binlog.000002", 4012, "No")]})
    assert catalog.binary_logs(s) == [("binlog.000001", 180), ("binlog.000002", 4012)]


def _mysql84_variables(**changed):
    # SHOW GLOBAL VARIABLES rows of a MySQL 8.4 server set up for DBLog
    values = {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "binlog_transaction_compression": "OFF",
        "binlog_row_value_options": "",
        **changed,
    }
    return [(k, v) for k, v in values.items() if v is not None]


def _checks(rows) -> StartupChecks:
    return StartupChecks(Server({"SHOW GLOBAL VARIABLES": rows}), ConnectionSettings("h", 1, "u", "p"), mariadb=False)


def test_binlog_settings_of_a_mysql_84_server_pass():
    _checks(_mysql84_variables()).binlog_settings()


def test_a_server_without_binlog_format_logs_rows_only():
    # binlog_format is deprecated since MySQL 8.0.34: a server that dropped it has rows only
    _checks(_mysql84_variables(binlog_format=None)).binlog_settings()
    with pytest.raises(ConfigurationError, match="binlog_format is STATEMENT"):
        _checks(_mysql84_variables(binlog_format="STATEMENT")).binlog_settings()


def test_compression_and_partial_json_are_refused_at_start():
    with pytest.raises(ConfigurationError, match="binlog_transaction_compression"):
        _checks(_mysql84_variables(binlog_transaction_compression="ON")).binlog_settings()
    with pytest.raises(ConfigurationError, match="PARTIAL_JSON"):
        _checks(_mysql84_variables(binlog_row_value_options="PARTIAL_JSON")).binlog_settings()
