"""Where a GTID position is in a server's binlog, and the GTID history at a file offset.

Used at every start of the log in GTID mode: the position's transaction is looked up by its
GTID, so the same code resumes on the server that wrote the position and on a promoted
replica. Files are searched newest first by the history each file starts with (MariaDB's
Gtid_list, MySQL's Previous_gtids), then the one file that holds the transaction is read with
SHOW BINLOG EVENTS, a page at a time.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ...core.errors import PositionLostError
from . import catalog
from .catalog import Session
from .gtid import (
    Gtid,
    History,
    MariaDBHistory,
    MySQLHistory,
    empty_history,
    gtid_of_event,
    history_of_event,
    locate,
    parse_gtid,
)

_PAGE = 5000
_DUMP_FIX = (
    "this server's binlog cannot continue the changelog: reset the checkpoint "
    "(`dblog capture --reset-position`) and run a full dump of every table (`dblog dump --all`), "
    "or let the capture do both (`--redump-on-position-lost`)."
)


def binlog_events(session: Session, name: str, start: int = 4) -> Iterator[tuple[int, str, str]]:
    """(offset, event type, info) of every event of binlog file ``name`` from ``start``."""
    pos = start
    while True:
        rows = session.query(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT {_PAGE}", [name])
        for r in rows:
            yield int(r[1]), str(r[2]), str(r[5] or "")
        if len(rows) < _PAGE:
            return
        pos = int(rows[-1][4])  # End_log_pos of the last one: the next event's offset


def server_history(session: Session, mariadb: bool) -> History:
    """Everything the server has in its binlog (MariaDB gtid_binlog_pos, MySQL gtid_executed)."""
    name = "gtid_binlog_pos" if mariadb else "gtid_executed"
    text = catalog.global_variables(session, [name]).get(name, "")
    return MariaDBHistory.parse(text) if mariadb else MySQLHistory.parse(text)


def _file_start(session: Session, name: str, mariadb: bool) -> History:
    for _pos, event_type, info in _first_events(session, name):
        h = history_of_event(event_type, info)
        if h is not None:
            return h
    return empty_history(mariadb)


def _first_events(session: Session, name: str) -> list[tuple[int, str, str]]:
    rows = session.query("SHOW BINLOG EVENTS IN %s LIMIT 4", [name])
    return [(int(r[1]), str(r[2]), str(r[5] or "")) for r in rows]


def history_at(session: Session, name: str, pos: int, mariadb: bool) -> History:
    """The GTID history at offset ``pos`` of binlog file ``name`` (an event boundary): the
    file's starting history plus the transactions before ``pos``."""
    if mariadb:  # the server computes it from the file's Gtid_list and the events after it
        rows = session.query("SELECT BINLOG_GTID_POS(%s, %s)", [name, int(pos)])
        return MariaDBHistory.parse(str(rows[0][0] or "")) if rows else MariaDBHistory()
    history: History = _file_start(session, name, mariadb)
    for offset, event_type, info in binlog_events(session, name):
        if offset >= pos:
            break
        g = gtid_of_event(event_type, info)
        if g is not None:
            history.advance(g)
    return history


def resume_point(
    session: Session, gtid_text: str, counter: int, mariadb: bool, what: str = "the checkpoint's"
) -> tuple[str, int, History]:
    """(file, offset, history before it) of the transaction ``gtid_text`` on this server,
    whose counter must be ``counter``; PositionLostError naming why it cannot be found
    (``what``: whose transaction it is, for the message)."""
    gtid: Gtid = parse_gtid(gtid_text)
    logs = [name for name, _size in catalog.binary_logs(session)]
    holder: Optional[str] = None
    for name in reversed(logs):  # newest first: the transaction is usually near the end
        if not _file_start(session, name, mariadb).contains(gtid):
            holder = name
            break
    if holder is not None:
        found = locate(binlog_events(session, holder), gtid)
        if found is not None:
            offset, before = found
            at = before.copy().advance(gtid)
            if at != counter:
                raise PositionLostError(
                    f"{what} transaction {gtid} is in {holder} of this server, but "
                    f"after a different history (GTID counter {at}, the changelog has {counter}): "
                    "the server applied its transactions in another order or holds others.",
                    _DUMP_FIX,
                )
            return holder, offset, before
    have = server_history(session, mariadb)
    if not have.contains(gtid):
        raise PositionLostError(
            f"this server's GTID state ({have or 'empty'}) does not contain {what} "
            f"transaction {gtid}: it is behind (a replica promoted before it received that "
            "transaction) or it is another server.",
            _DUMP_FIX,
        )
    if holder is None:  # every file starts after it
        oldest = logs[0] if logs else "(none)"
        raise PositionLostError(
            f"{what} transaction {gtid} is older than this server's oldest binlog file "
            f"{oldest}: it was purged (binlog_expire_logs_seconds / expire_logs_days / PURGE BINARY LOGS)."
        )
    raise PositionLostError(
        f"this server's GTID state ({have}) passes {what} transaction {gtid}, but its "
        "binlog does not hold that transaction: the server's history diverged from the one the "
        "changelog was read from (another transaction took its number).",
        _DUMP_FIX,
    )
