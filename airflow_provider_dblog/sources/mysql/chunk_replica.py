"""Chunks read from a replica while the log is read from the primary (``chunk_replica``,
docs/sources.md "Chunks from a replica"), on MariaDB and MySQL.

The watermarks stay on the primary's log: LW and HW are the primary's (a watermark row's
UPDATE, or with ``watermarks = "log"`` the primary's binlog end, mysql/log_markers.py). What
moves is the chunk's SELECT, and what keeps it exact is one wait before the first chunk read
after a watermark: after it, the replica has applied every transaction of the primary's
binlog up to now, past the watermark (MariaDB: ``MASTER_GTID_WAIT`` on ``@@gtid_binlog_pos``;
MySQL: ``WAIT_FOR_EXECUTED_GTID_SET`` on ``@@GLOBAL.gtid_executed``), so the chunk's read view
holds all of them.

* LW: a SELECT after the wait misses no transaction before LW; one after LW it may or may not
  see, and that one's events come inside the window and take the key out of the chunk.
* HW: the replica applies only what the primary has written to its binlog, so every
  transaction the SELECT saw is before a binlog end read after it: HW needs no wait, and
  neither do the capture's heartbeat watermarks (a lagging replica never holds up the log).

Read-only watermarks exist on MariaDB only (mysql/log_markers.py), so MySQL reads its chunks
on a replica with table watermarks. A read-only watermark is then the binlog end (``SHOW
MASTER STATUS``), not the consistent-snapshot position the primary's own chunks use: a
transaction written to the binlog but not yet committed in the primary's InnoDB may already
be on the replica; after the wait it is in the chunk, and the end is past it.

A lagging replica delays a chunk by its lag; one that does not reach the position within
``timeout`` seconds (stopped, broken, or not a replica of this primary) fails the chunk with
``SourceUnavailable`` naming the replica, and the engine tries again.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import pymysql

from ...core.errors import ConfigurationError, SourceUnavailable
from .catalog import ConnectionSettings, Session

DEFAULT_TIMEOUT = 60.0  # seconds a chunk waits for the replica to reach the primary's position


@dataclasses.dataclass(frozen=True)
class GtidWait:
    """One server family's statements for the wait (MariaDB's GTID positions, MySQL's GTID
    sets); each answer is one value."""

    position: str  # on the primary: where its binlog is now
    reached: str  # on the replica, with the position: true when it holds it already
    wait: str  # on the replica, with the position and the timeout: 0 once it holds it
    applied: str  # on the replica: where it is (named in the error)
    replicating: str  # the setting that says what the replica follows


MARIADB = GtidWait(
    "SELECT @@gtid_binlog_pos",
    "SELECT MASTER_GTID_WAIT(%s, 0) = 0",
    "SELECT MASTER_GTID_WAIT(%s, %s)",  # 0, or -1 at the timeout
    "SELECT @@gtid_slave_pos",
    "CHANGE MASTER TO ... MASTER_USE_GTID = slave_pos",
)
MYSQL = GtidWait(
    "SELECT @@GLOBAL.gtid_executed",
    "SELECT GTID_SUBSET(%s, @@GLOBAL.gtid_executed)",
    "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)",  # 0, or 1 at the timeout (MySQL 5.7.5+)
    "SELECT @@GLOBAL.gtid_executed",
    "gtid_mode = ON on both, CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION = 1",
)


class ChunkReplica:
    """The replica's connections and the wait. ``primary``: the source's settings (user,
    password, TLS) to which only host and port are changed."""

    def __init__(self, source_id: str, host: str, port: int, primary: ConnectionSettings, timeout: float):
        self.source_id, self.host, self.port, self.timeout = source_id, host, port, timeout
        self.settings = dataclasses.replace(primary, host=host, port=port)
        self._session: Optional[Session] = None
        self.gtid = MARIADB  # set by ``check`` from the primary's family
        self.waits = 0  # waits that had to wait (the replica was behind)
        self.caught_up = False  # a wait has run: reads outside a dump (verify) need one first

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def session(self) -> Session:
        """The chunk SELECTs' connection (no leader marker: a deposed leader's read is harmless)."""
        if self._session is None:
            self._session = Session(self.settings)
        return self._session

    def reader(self) -> Session:
        """A new connection for a parallel chunk reader."""
        return Session(self.settings)

    def check(self, primary: Session, mariadb: bool) -> None:
        """At open: the replica is of the primary's family (MariaDB or MySQL), MySQL's with GTIDs
        on, and it replicates something while the primary has a GTID history. Not whether it
        has caught up: a lagging replica delays chunks, not a start (or a ``dblog dump``)."""
        session = self.session()
        try:
            server = session.conn().get_server_info()
        except pymysql.err.MySQLError as exc:
            raise ConfigurationError(
                f"source {self.source_id}: cannot connect to chunk_replica {self} ({exc}).",
                "give the host:port of a replica of this primary that the capture's user (same password "
                "and TLS settings) can connect to, or remove chunk_replica.",
            ) from None
        if ("mariadb" in server.lower()) != mariadb:
            raise ConfigurationError(
                f"source {self.source_id}: chunk_replica {self} runs {server}, and the primary is "
                f"{'MariaDB' if mariadb else 'MySQL'}: it cannot be a replica of it.",
                "give a replica of this primary, or remove chunk_replica.",
            )
        self.gtid = MARIADB if mariadb else MYSQL
        if not mariadb:
            ((mode,),) = primary.query("SELECT @@GLOBAL.gtid_mode")
            if str(mode).upper() != "ON":
                raise ConfigurationError(
                    f"source {self.source_id}: chunk_replica needs GTIDs on MySQL (gtid_mode is {mode}): the "
                    "replica is waited for by the primary's executed GTID set.",
                    "set gtid_mode = ON and enforce_gtid_consistency = ON on both servers, or remove chunk_replica.",
                )
        ((history,),) = primary.query(self.gtid.position)
        ((applied,),) = session.query(self.gtid.applied)
        if history and not applied:
            raise ConfigurationError(
                f"source {self.source_id}: chunk_replica {self} has applied no GTID while the primary is at "
                f"{history}: it is not a replica of this primary.",
                f"give a replica that replicates the primary ({self.gtid.replicating}), or remove chunk_replica.",
            )

    def catch_up(self, primary: Session) -> None:
        """Wait until the replica has applied the primary's binlog up to now."""
        ((target,),) = primary.query(self.gtid.position)
        if not target:
            self.caught_up = True
            return  # an empty binlog: nothing to wait for
        ((reached,),) = self.session().query(self.gtid.reached, [target])
        if not reached:
            self.waits += 1
            ((done,),) = self.session().query(self.gtid.wait, [target, self.timeout])
            if done != 0:
                ((applied,),) = self.session().query(self.gtid.applied)
                raise SourceUnavailable(
                    f"source {self.source_id}: chunk_replica {self} has not applied the primary's GTIDs "
                    f"{target} within {self.timeout:g} s (it is at {applied or 'nothing'}).",
                    "check that it replicates this primary and runs (SHOW REPLICA STATUS), or raise "
                    "chunk_replica_timeout; the dump goes on once it catches up.",
                )
        self.caught_up = True

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
