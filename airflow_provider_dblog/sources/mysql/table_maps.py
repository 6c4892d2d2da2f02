"""A table's binlog table map parsed once per definition, not once per transaction.

MySQL and MariaDB write a table map before the row events of every transaction that changes
the table: with one-row transactions, mysql-replication's parse of it (a ``Column`` object per
column, the optional metadata, the column-info sync) was a third of the binlog reader thread,
and the reader thread is what limits a MariaDB capture. The library's own remedy,
``freeze_schema``, trusts the table id alone, and the library itself warns that it does not
follow ALTER TABLE.

Here a table map whose bytes (table id, names, types, metadata; the checksum and header
excluded) equal those of the map already held for that table id in the stream's
``table_map`` is skipped as ``freeze_schema`` skips it: the row events that follow use the
held map, which describes the very same definition. Any other byte sends it through the
library's parse, and on to the capture, as before. The library empties ``table_map`` at every
binlog file (table ids are reused after a server restart, which always starts a new file),
so nothing outlives it.

Only streams whose control connection carries ``CACHE_MARK`` (the capture's own,
sources/mysql/log.py) are affected: the library's class is shared by the whole process.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.row_event import TableMapEvent

CACHE_MARK = "dblog_cache_table_maps"  # an attribute of the stream's control connection
_HELD = "dblog_table_map"  # the bytes a held map (a library Table) was parsed from

_library_init = TableMapEvent.__init__


def _raw_body(packet: Any, size: int) -> bytes | None:
    """The event's ``size`` bytes after its header, as they are in PyMySQL's packet, without
    reading them; None where the library's wrapper holds bytes of its own."""
    if packet._BinLogPacketWrapper__data_buffer:
        return None
    raw = packet.packet
    start = raw._position
    return raw._data[start : start + size]


def _init(self: TableMapEvent, from_packet: Any, event_size: int, table_map: dict, ctl_connection: Any, **kw: Any):
    body = _raw_body(from_packet, event_size) if getattr(ctl_connection, CACHE_MARK, False) else None
    if body is not None and len(body) == event_size:
        held = table_map.get(int.from_bytes(body[:6], "little"))
        if held is not None and getattr(held, _HELD, None) == body:
            self._processed = False  # the wrapper drops the event; table_map keeps `held`
            return
    _library_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
    if body is not None and self._processed:
        setattr(self.table_obj, _HELD, body)


def install() -> None:
    """Puts the check in front of the library's parse, once per process."""
    if TableMapEvent.__init__ is not _init:
        TableMapEvent.__init__ = _init
