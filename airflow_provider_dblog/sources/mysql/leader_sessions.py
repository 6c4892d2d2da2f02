"""The leader's sessions, told on the server itself, so that the next leader can end them.

A leader paused inside a chunk's transaction (a stopped VM, a long GC pause, a cut-off
network) keeps its metadata lock on the table; a TRUNCATE or ALTER queued behind that lock
stalls every later reader of the table, the next leader's chunk reads first, until the old
process wakes. So each session of a leader holds a named lock ``<marker><its connection
id>``, the marker naming the source and the lease domain (``session_marker``); the next
leader of that domain finds the connections whose lock is held by themselves and ends
them (``end_deposed_sessions``). Named locks need no privilege, end with their connection,
and a connection id reused after a server restart holds no such lock. The binlog reader's
connections are ended by the reader claim (reader_claim.py) and the previous leader's report.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Callable

import pymysql

from .catalog import Session

log = logging.getLogger(__name__)


def session_marker(source_id: str, domain: str) -> str:
    """The lock-name prefix of a leader's sessions (names are at most 64 characters: 8 + 16 +
    1 + 12 + 1, then a connection id of at most 20 digits)."""
    return f"dblog-s:{hashlib.sha256(source_id.encode()).hexdigest()[:16]}:{domain[:12]}:"


def end_deposed_sessions(session: Session, marker: str, lease_check: Callable[[], None], source_id: str) -> list[int]:
    """End every other connection holding its ``marker`` lock: the previous leader's of this
    source and domain. Called once we lead, before any reader of ours exists. Returns the
    connection ids ended."""
    lease_check()  # still ours: whoever else holds our marker is deposed
    rows = session.query(
        "SELECT ID FROM information_schema.PROCESSLIST "
        "WHERE ID <> CONNECTION_ID() AND IS_USED_LOCK(CONCAT(%s, ID)) = ID",
        [marker],
    )
    ended = []
    for (cid,) in rows:
        try:
            session.run(f"KILL CONNECTION {int(cid)}")
            ended.append(int(cid))
        except pymysql.err.MySQLError as exc:  # 1094 unknown thread: it ended by itself meanwhile
            log.info("connection %s of the previous leader of %s: %s", cid, source_id, exc)
    if ended:
        log.warning("ended the connection(s) %s of the previous leader of %s", ended, source_id)
    return ended
