"""GTID positions for the MySQL/MariaDB source (``use_gtid = true``).

A binlog file and offset mean nothing on a promoted replica: its binlog holds the same
transactions at other offsets. A transaction's GTID does survive a failover, so in GTID mode a
position is built from it:

    g EE CCCCCCCCCCCCCCCCCCCC RRRRRRRRRR / <gtid>

``C`` is the transaction's *counter*: the size of the server's GTID history once the
transaction is in it (MySQL: the number of transactions in ``gtid_executed``; MariaDB: the sum
of each replication domain's last sequence number). It grows by at least one per transaction,
in commit order, and is the same on every server that applied the same history, so positions
read from the new primary sort after those read from the old one. ``R`` numbers the rows of
the transaction that belong to captured tables and the watermark table, in order, which is
also the same everywhere (a restart in the middle of a transaction must capture the same tables
as before it, or that transaction's rows are numbered differently).
The GTID itself (MariaDB ``domain-server-seq``, MySQL ``uuid:n``) follows, so that a restart
can find the transaction in any server's binlog; it never decides the order (the part before
it is unique). ``g`` sorts after every digit: a source switched from file positions to GTID
positions keeps its changelog in order.

``E``, the era, is raised when the capture has to start over on a server whose counter is
behind the changelog (a failover that lost transactions, then a re-dump): the new server's
positions still sort after everything already in the changelog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

from ...core.errors import ConfigurationError

_ERA_W, _COUNTER_W, _ROWNO_W = 2, 20, 10
_HEAD_W = 1 + _ERA_W + _COUNTER_W + _ROWNO_W
_PREFIX = "g"


def is_gtid_coord(coord: str) -> bool:
    return coord.startswith(_PREFIX)


def encode_gtid_coord(era: int, counter: int, rowno: int, gtid: str) -> str:
    return f"{gtid_coord_prefix(era, counter)}{rowno:0{_ROWNO_W}d}/{gtid}"


def gtid_coord_prefix(era: int, counter: int) -> str:
    """The part of every coordinate of one transaction before its row number."""
    if not (0 <= era < 10**_ERA_W and 0 <= counter < 10**_COUNTER_W):
        raise ValueError(f"GTID coordinate out of range: era {era}, counter {counter}")
    return f"{_PREFIX}{era:0{_ERA_W}d}{counter:0{_COUNTER_W}d}"


@dataclass(frozen=True)
class GtidCoord:
    era: int
    counter: int
    rowno: int
    gtid: str


def decode_gtid_coord(coord: str) -> GtidCoord:
    """The parts of a GTID coordinate; ValueError for anything else."""
    head, slash, gtid = coord.partition("/")
    if not is_gtid_coord(coord) or not slash or len(head) != _HEAD_W or not head[1:].isdigit():
        raise ValueError(f"not a GTID position: {coord!r}")
    parse_gtid(gtid)
    c = 1 + _ERA_W
    return GtidCoord(int(head[1:c]), int(head[c : c + _COUNTER_W]), int(head[c + _COUNTER_W :]), gtid)


def era_after(floor: Optional[str], start_counter: int) -> int:
    """The era for positions read from a point whose history has ``start_counter``
    transactions, so that they sort after the changelog's highest coordinate ``floor``."""
    if floor is None or not is_gtid_coord(floor):
        return 0  # nothing yet, or file positions: "g..." sorts after them anyway
    top = decode_gtid_coord(floor)
    if start_counter >= top.counter:
        return top.era  # the next transaction's counter is above the floor's
    if top.era + 1 >= 10**_ERA_W:
        raise ValueError(f"GTID position era out of range after {floor}")
    return top.era + 1


# -- one GTID --------------------------------------------------------------------------------
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_GTID = re.compile(
    r"^([0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})(?::([A-Za-z_][A-Za-z0-9_]*))?:(\d+)$"
)


@dataclass(frozen=True)
class MariaDBGtid:
    domain: int
    server: int
    seq: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.seq}"


@dataclass(frozen=True)
class MySQLGtid:
    source: str  # "uuid" or "uuid:tag" (MySQL 8.3+ tagged GTIDs), lower case
    gno: int

    def __str__(self) -> str:
        return f"{self.source}:{self.gno}"


Gtid = Union[MariaDBGtid, MySQLGtid]


def parse_gtid(text: str) -> Gtid:
    m = _MARIADB_GTID.match(text)
    if m:
        return MariaDBGtid(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = _MYSQL_GTID.match(text)
    if m:
        source = m.group(1).lower() + (f":{m.group(2).lower()}" if m.group(2) else "")
        return MySQLGtid(source, int(m.group(3)))
    raise ValueError(f"not a GTID: {text!r}")


# -- a server's GTID history -----------------------------------------------------------------
class GtidOrderError(ConfigurationError):
    """A transaction's GTID does not extend the history: positions would not be ordered."""


@dataclass
class MariaDBHistory:
    """A MariaDB GTID position (``gtid_binlog_pos``): the last GTID of each domain."""

    last: dict[int, MariaDBGtid] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "MariaDBHistory":
        h = cls()
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            g = parse_gtid(part)
            if not isinstance(g, MariaDBGtid):
                raise ValueError(f"not a MariaDB GTID position: {text!r}")
            h.last[g.domain] = g
        return h

    def counter(self) -> int:
        return sum(g.seq for g in self.last.values())

    def contains(self, gtid: Gtid) -> bool:
        """The transaction is at or before the end of this history (in its domain)."""
        assert isinstance(gtid, MariaDBGtid)
        last = self.last.get(gtid.domain)
        return last is not None and last.seq >= gtid.seq

    def advance(self, gtid: Gtid) -> int:
        """Add the next transaction; the new counter."""
        assert isinstance(gtid, MariaDBGtid)
        last = self.last.get(gtid.domain)
        if last is not None and gtid.seq <= last.seq:
            raise GtidOrderError(
                f"the binlog holds GTID {gtid} after {last}: sequence numbers of domain {gtid.domain} "
                "go backwards, so GTID positions would not follow the commit order.",
                "turn on gtid_strict_mode (SET GLOBAL gtid_strict_mode = ON, and in my.cnf) on every "
                "server of the replication group, or set use_gtid = false (file positions).",
            )
        self.last[gtid.domain] = gtid
        return self.counter()

    def copy(self) -> "MariaDBHistory":
        return MariaDBHistory(dict(self.last))

    def __str__(self) -> str:
        return ",".join(str(self.last[d]) for d in sorted(self.last))


@dataclass
class MySQLHistory:
    """A MySQL GTID set (``gtid_executed``): per source, sorted disjoint closed intervals."""

    intervals: dict[str, list[list[int]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "MySQLHistory":
        """``uuid:1-5:7,uuid2:1-3`` (newlines allowed, as the server prints long sets), also
        with MySQL 8.3 tags: ``uuid:tag:1-4``."""
        h = cls()
        for part in filter(None, (p.strip() for p in re.split(r"[,\n]", text or ""))):
            fields = part.split(":")
            uuid, tag = fields[0].lower(), ""
            for f in fields[1:]:
                if re.match(r"^[A-Za-z_]", f):
                    tag = f.lower()
                    continue
                lo, _, hi = f.partition("-")
                a, b = int(lo), int(hi or lo)
                if not 0 < a <= b:
                    raise ValueError(f"not a GTID set: {text!r}")
                h._add_interval(f"{uuid}:{tag}" if tag else uuid, a, b)
        return h

    def _add_interval(self, source: str, lo: int, hi: int) -> None:
        ivs = self.intervals.setdefault(source, [])
        ivs.append([lo, hi])
        ivs.sort()
        merged: list[list[int]] = []
        for a, b in ivs:
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.intervals[source] = merged

    def counter(self) -> int:
        return sum(b - a + 1 for ivs in self.intervals.values() for a, b in ivs)

    def contains(self, gtid: Gtid) -> bool:
        assert isinstance(gtid, MySQLGtid)
        return any(a <= gtid.gno <= b for a, b in self.intervals.get(gtid.source, ()))

    def advance(self, gtid: Gtid) -> int:
        assert isinstance(gtid, MySQLGtid)
        if self.contains(gtid):
            raise GtidOrderError(
                f"the binlog holds GTID {gtid} twice: GTID positions would not be unique.",
                "set use_gtid = false (file positions) for this server.",
            )
        ivs = self.intervals.setdefault(gtid.source, [])
        if ivs and ivs[-1][1] + 1 == gtid.gno:  # the usual case: the next number
            ivs[-1][1] = gtid.gno
        else:
            self._add_interval(gtid.source, gtid.gno, gtid.gno)
        return self.counter()

    def copy(self) -> "MySQLHistory":
        return MySQLHistory({s: [list(iv) for iv in ivs] for s, ivs in self.intervals.items()})

    def __str__(self) -> str:
        return ",".join(
            s + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in ivs) for s, ivs in sorted(self.intervals.items())
        )


History = Union[MariaDBHistory, MySQLHistory]


def empty_history(mariadb: bool) -> History:
    return MariaDBHistory() if mariadb else MySQLHistory()


# -- SHOW BINLOG EVENTS ----------------------------------------------------------------------
# The Info column of the events that matter here, as both servers print it:
#   MariaDB  Gtid            "BEGIN GTID 0-1-42" / "GTID 0-1-42" (DDL) / "BEGIN GTID 0-1-42 cid=7"
#   MariaDB  Gtid_list       "[0-1-41,1-2-7]"
#   MySQL    Gtid            "SET @@SESSION.GTID_NEXT= '3e11fa47-...:42'"
#   MySQL    Gtid_tagged_log_event  "SET @@SESSION.GTID_NEXT= '3e11fa47-...:tag:42'" (8.3+: a
#            tagged GTID's event type is another, named by get_event_type_as_string in MySQL's
#            libs/mysql/binlog/event/binlog_event.cpp)
#   MySQL    Previous_gtids  "3e11fa47-...:1-41,\n5a...:1-3"
_INFO_MARIADB_GTID = re.compile(r"GTID (\d+-\d+-\d+)")
_INFO_MYSQL_GTID = re.compile(r"GTID_NEXT\s*=\s*'([^']+)'")
_GTID_EVENT_TYPES = ("Gtid", "Gtid_tagged_log_event")


def gtid_of_event(event_type: str, info: str) -> Optional[Gtid]:
    """The GTID a ``SHOW BINLOG EVENTS`` row starts a transaction with, or None."""
    if event_type not in _GTID_EVENT_TYPES:
        return None
    m = _INFO_MARIADB_GTID.search(info) or _INFO_MYSQL_GTID.search(info)
    if m is None or m.group(1) == "ANONYMOUS":
        return None
    return parse_gtid(m.group(1))


def history_of_event(event_type: str, info: str) -> Optional[History]:
    """The history a binlog file starts with (its Gtid_list / Previous_gtids event), or None."""
    if event_type == "Gtid_list":
        return MariaDBHistory.parse(info.strip().strip("[]"))
    if event_type == "Previous_gtids":
        return MySQLHistory.parse(info)
    return None


def locate(events: Iterable[tuple[int, str, str]], gtid: Gtid) -> Optional[tuple[int, History]]:
    """In one binlog file's events (offset, type, info), the offset of ``gtid``'s transaction
    and the history just before it (the file's starting history plus the transactions before
    it); None when the file does not hold it."""
    history: Optional[History] = None
    for pos, event_type, info in events:
        start = history_of_event(event_type, info)
        if start is not None:
            history = start
            continue
        g = gtid_of_event(event_type, info)
        if g is None:
            continue
        if history is None:
            history = empty_history(isinstance(g, MariaDBGtid))
        if g == gtid:
            return pos, history.copy()
        history.advance(g)
    return None
