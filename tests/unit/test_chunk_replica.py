"""The wait of chunks read on a replica (sources/mysql/chunk_replica.py), per server family,
on a stub session giving the answers MySQL 8 and MariaDB give (their GTID sets and
positions as the servers print them). A real MariaDB pair runs it in
tests/integration/test_replica_chunks.py; no MySQL 8 server runs here."""

from __future__ import annotations

import pytest

pytest.importorskip("pymysqlreplication")

from airflow_provider_dblog.core.errors import ConfigurationError, SourceUnavailable  # noqa: E402
from airflow_provider_dblog.sources.mysql.catalog import ConnectionSettings  # noqa: E402
from airflow_provider_dblog.sources.mysql.chunk_replica import ChunkReplica  # noqa: E402

# @@GLOBAL.gtid_executed of a MySQL 8.4 primary that was failed over once (two server UUIDs).
MYSQL_SET = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4811,\n8a94f357-aab4-11df-86ab-c80aa9429562:1-37"


class Server:
    """Answers by statement prefix; each answer a value or a list consumed in order."""

    def __init__(self, info: str, answers: dict):
        self.info, self.answers, self.statements = info, {k: list(v) for k, v in answers.items()}, []

    def conn(self):
        return self

    def get_server_info(self) -> str:
        return self.info

    def query(self, sql, params=None):
        self.statements.append((sql, list(params or [])))
        for prefix, values in self.answers.items():
            if sql.startswith(prefix):
                return [(values.pop(0) if len(values) > 1 else values[0],)]
        raise AssertionError(f"unexpected statement {sql}")


def replica_of(primary: Server, replica: Server, mariadb: bool) -> ChunkReplica:
    r = ChunkReplica("src", "db2", 3306, ConnectionSettings("db1", 3306, "u", "secret"), timeout=7)
    r._session = replica  # the stub in place of a connection
    r.check(primary, mariadb)
    return r


def test_mysql_waits_for_the_primarys_executed_gtid_set():
    primary = Server("8.4.3", {"SELECT @@GLOBAL.gtid_mode": ["ON"], "SELECT @@GLOBAL.gtid_executed": [MYSQL_SET]})
    replica = Server(
        "8.4.3",
        {
            "SELECT @@GLOBAL.gtid_executed": ["3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4790"],
            "SELECT GTID_SUBSET": [1, 0, 0],  # caught up; then behind twice
            "SELECT WAIT_FOR_EXECUTED_GTID_SET": [0, 1],  # reached; then the timeout
        },
    )
    r = replica_of(primary, replica, mariadb=False)
    r.catch_up(primary)  # already there: no wait
    assert r.waits == 0 and r.caught_up
    r.catch_up(primary)  # behind: waits, and gets there
    assert r.waits == 1
    assert ("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)", [MYSQL_SET, 7]) in replica.statements
    with pytest.raises(SourceUnavailable) as err:
        r.catch_up(primary)
    assert "db2:3306" in err.value.cause and "within 7 s" in err.value.cause and "1-4790" in err.value.cause
    assert "chunk_replica_timeout" in err.value.fix


def test_mariadb_waits_for_the_primarys_gtid_position():
    primary = Server("10.11.9-MariaDB", {"SELECT @@gtid_binlog_pos": ["0-11-3017,1-11-12"]})
    replica = Server(
        "10.11.9-MariaDB-log",
        {
            "SELECT @@gtid_slave_pos": ["0-11-2005"],
            "SELECT MASTER_GTID_WAIT(%s, 0) = 0": [0],
            "SELECT MASTER_GTID_WAIT(%s, %s)": [-1],
        },
    )
    r = replica_of(primary, replica, mariadb=True)
    with pytest.raises(SourceUnavailable, match="0-11-2005"):
        r.catch_up(primary)
    assert ("SELECT MASTER_GTID_WAIT(%s, %s)", ["0-11-3017,1-11-12", 7]) in replica.statements


@pytest.mark.parametrize(
    "primary, replica, mariadb, cause",
    [
        (  # another family: not its replica
            {"SELECT @@gtid_binlog_pos": ["0-11-5"]},
            ("8.0.36", {}),
            True,
            "runs 8.0.36, and the primary is MariaDB",
        ),
        (  # MySQL without GTIDs: nothing to wait for
            {"SELECT @@GLOBAL.gtid_mode": ["OFF_PERMISSIVE"]},
            ("8.0.36", {}),
            False,
            "gtid_mode is OFF_PERMISSIVE",
        ),
        (  # a server that replicates nothing while the primary has a history
            {"SELECT @@gtid_binlog_pos": ["0-11-5"]},
            ("10.11.9-MariaDB", {"SELECT @@gtid_slave_pos": [""]}),
            True,
            "has applied no GTID while the primary is at 0-11-5",
        ),
    ],
)
def test_a_replica_that_cannot_be_waited_for_is_refused_at_start(primary, replica, mariadb, cause):
    with pytest.raises(ConfigurationError) as err:
        replica_of(Server("x", primary), Server(*replica), mariadb)
    assert cause in err.value.cause and "remove chunk_replica" in err.value.fix
