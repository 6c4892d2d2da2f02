"""Who reads a source's binlog, told on the server itself (docs/sources.md, "One reader").

Two readers of one source share its server_id and knock each other off the server, and a
leader lease excludes only the captures of its own state store. So the lease holder, before
it reads the binlog, holds two named locks (GET_LOCK) on a connection of its own:
``dblog-reader:<source>`` (one reader per source) and ``dblog-reader:<source>:<domain>``
(its lease domain, ``LeaderLease.domain``). Named locks need no privilege, end with their
connection however the process dies, and IS_USED_LOCK names the holder's connection id:

* the source lock is free: take both;
* its holder holds our domain's lock too: the deposed leader of our own store (we hold the
  lease): end its connection (KILL), then take the locks;
* else: a capture coordinated elsewhere: ConfigurationError naming it, nothing ended.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Callable, Optional

import pymysql

from ...core.errors import ConfigurationError, SourceUnavailable
from .catalog import ConnectionSettings, Session, connect

log = logging.getLogger(__name__)

_TAKE_WAIT = 10.0  # for a killed holder's locks to be released


class ReaderClaim:
    """The named locks of the binlog reader of ``source_id`` in lease domain ``domain``."""

    def __init__(self, source_id: str, domain: str, lease_check: Callable[[], None]):
        self.source_id = source_id
        # Lock names are at most 64 characters: the source id hashed.
        self.source_lock = "dblog-reader:" + hashlib.sha256(source_id.encode()).hexdigest()[:16]
        self.domain_lock = f"{self.source_lock}:{domain}"
        self._lease_check = lease_check
        self._conn: Optional[pymysql.connections.Connection] = None
        self._settings: Optional[ConnectionSettings] = None

    def _holds(self, settings: ConnectionSettings) -> bool:
        if self._conn is None or self._settings != settings:
            return False
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", [self.source_lock])
                return bool(cur.fetchone()[0])
        except pymysql.err.MySQLError:
            return False  # the connection is gone, and its locks with it

    def take(self, settings: ConnectionSettings, session: Session) -> None:
        """Hold the locks (again, after a lost connection or on a new primary), ending the
        holder if it is our domain's deposed leader. ``session``: for looking the holder up."""
        if self._holds(settings):
            return
        self.close()
        self._conn, self._settings = connect(settings), settings
        with self._conn.cursor() as cur:  # idle for days: not closed by the server's wait_timeout
            cur.execute("SET SESSION wait_timeout = 31536000")
        deadline = time.monotonic() + _TAKE_WAIT
        while True:
            with self._conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, 0), GET_LOCK(%s, 0)", [self.source_lock, self.domain_lock])
                got_source, got_domain = cur.fetchone()
                if got_source and got_domain:
                    return
                cur.execute("SELECT IS_USED_LOCK(%s), IS_USED_LOCK(%s)", [self.source_lock, self.domain_lock])
                holder, domain_holder = cur.fetchone()
            other = domain_holder if got_source else holder  # None: released meanwhile
            if not got_source and other is not None and other != domain_holder:
                raise self._foreign(int(other), session)
            if other is not None:
                self._end_deposed(int(other), session)
            if time.monotonic() >= deadline:
                raise SourceUnavailable(
                    f"the binlog reader claim of {self.source_id} is still held by a deposed leader."
                )
            time.sleep(0.05)

    def _end_deposed(self, cid: int, session: Session) -> None:
        self._lease_check()  # still ours: the holder is not the leader
        try:
            session.run(f"KILL CONNECTION {cid}")
            log.warning("ended connection %d of the previous leader of %s (it read the binlog)", cid, self.source_id)
        except pymysql.err.MySQLError as exc:  # 1094 unknown thread: ended by itself meanwhile
            log.info("connection %d of the previous leader of %s: %s", cid, self.source_id, exc)

    def _foreign(self, cid: int, session: Session) -> ConfigurationError:
        rows = session.query("SELECT USER, HOST, TIME FROM information_schema.PROCESSLIST WHERE ID = %s", [cid])
        who = f"user {rows[0][0]}, client {rows[0][1]}, connected {rows[0][2]} s ago" if rows else "not visible"
        return ConfigurationError(
            f"the binlog of source {self.source_id} is read by a capture this capture's leader lease "
            f"does not coordinate: its claim is held by connection {cid} ({who}); a second reader "
            "with the same server_id would knock it off the server and be knocked off in turn.",
            "captures of one source must share one state store (e.g. zk://) so that the leader lease "
            "keeps one reader; or stop the other capture.",
        )

    def close(self) -> None:
        conn, self._conn, self._settings = self._conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken connection
                log.debug("closing the binlog reader claim of %s: %s", self.source_id, exc)
