"""The capture's logical replication slot: its catalog row, its creation, and who reads it.

One reader per slot: a new leader ends the walsender of the previous leader of its lease
domain (deposed, paused, or not yet noticed that its client died), again and again while
the slot stays in use; a reader of another domain (a capture with a state store of its own,
pg_recvlogical) is named in a ConfigurationError, never ended.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import psycopg2.errors

from ...core.errors import ConfigurationError, SourceUnavailable
from .errors import first_line

log = logging.getLogger(__name__)

# While the slot stays in use, its previous reader's walsender is ended again every this
# many seconds: a walsender blocked sending its error to a paused client ignores the first
# pg_terminate_backend, and ends at a later one at once.
TERMINATE_AGAIN = 0.5


class ReplicationSlot:
    """``name`` for ``plugin`` in the database of ``dsn`` (the source's connection settings,
    shared: ``take_over`` names the lease domain in its application_name). ``cur``: a
    cursor of the source's catalog connection. ``lease_check`` (set by the source's
    take_over) raises once this process no longer holds the leader lease."""

    def __init__(self, name: str, plugin: str, source_id: str, dsn: dict[str, Any], cur: Callable[[], Any]):
        self.name, self.plugin, self.source_id = name, plugin, source_id
        self._dsn, self._cur = dsn, cur
        self.created = False  # created by this process, and no log read from it yet
        self.lease_check: Optional[Callable[[], None]] = None

    def row(self) -> Optional[dict]:
        """The slot's pg_replication_slots row (None: no such slot)."""
        with self._cur() as cur:
            cur.execute(
                "SELECT plugin, slot_type, database, active, active_pid, confirmed_flush_lsn::text, "
                "wal_status FROM pg_replication_slots WHERE slot_name = %s",
                (self.name,),
            )
            row = cur.fetchone()
        if row is None:
            return None
        keys = ("plugin", "slot_type", "database", "active", "active_pid", "confirmed_flush", "wal_status")
        return dict(zip(keys, row))

    def create(self) -> None:
        """A new slot at the current end of the WAL."""
        with self._cur() as cur:
            cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)", (self.name, self.plugin))
        self.created = True

    def drop(self) -> None:
        with self._cur() as cur:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (self.name,))

    def ensure(self) -> None:
        """Create the slot, or check that the one there is a logical slot of our plugin and
        database. An active slot is no error yet: the CLI opens a source next to a running
        capture (to validate a dump request); only reading the log needs the slot to itself."""
        slot = self.row()
        if slot is None:
            self.create()  # after the publication: pgoutput looks it up as of each change
            return
        if slot["slot_type"] != "logical" or slot["plugin"] != self.plugin or slot["database"] != self._dsn["dbname"]:
            raise ConfigurationError(
                f"replication slot {self.name} exists but is a {slot['slot_type']} slot for plugin "
                f"{slot['plugin']} in database {slot['database']}, not a {self.plugin} slot in "
                f"{self._dsn['dbname']}.",
                "pass another slot_name, or drop that slot (SELECT pg_drop_replication_slot"
                f"('{self.name}')) if nothing else uses it.",
            )

    def holder(self, pid: int) -> Optional[dict]:
        """pg_stat_activity of the slot's walsender (None once it is gone). Other roles'
        client_addr and backend_start read as NULL without pg_read_all_stats."""
        with self._cur() as cur:
            cur.execute(
                "SELECT application_name, usename, client_addr::text, backend_start::text "
                "FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            )
            row = cur.fetchone()
        return dict(zip(("application_name", "user", "client", "since"), row)) if row else None

    def _refuse_foreign(self, pid: int, holder: dict) -> ConfigurationError:
        return ConfigurationError(
            f"replication slot {self.name} of source {self.source_id} is read by a process this "
            f"capture's leader lease does not coordinate: pid {pid}, application_name "
            f"{holder['application_name']!r}, user {holder['user']}, client {holder['client'] or 'unknown'}, "
            f"reading since {holder['since'] or 'unknown'} (this capture is {self._dsn['application_name']!r}).",
            "captures of one source must share one state store (e.g. zk://) so that the leader lease "
            "keeps one reader; or stop the other capture.",
        )

    def _end_previous_reader(self, slot: dict) -> None:
        """We hold the lease, yet the slot is in use: by a deposed leader of our lease domain
        (paused, cut off) or a walsender that has not noticed its client died. End it now
        instead of waiting for wal_sender_timeout. A reader of another domain (a capture
        with its own state store) is not ours to end: ConfigurationError naming it."""
        if self.lease_check is not None:
            self.lease_check()  # still ours: whoever holds the slot is not the leader
        holder = self.holder(slot["active_pid"])
        if holder is None:
            return  # gone meanwhile
        if holder["application_name"] != self._dsn["application_name"]:
            raise self._refuse_foreign(slot["active_pid"], holder)
        try:
            with self._cur() as cur:
                cur.execute("SELECT pg_terminate_backend(%s)", (slot["active_pid"],))
            log.warning(
                "ended the replication session (pid %s) of the previous leader on slot %s",
                slot["active_pid"],
                self.name,
            )
        except psycopg2.errors.InsufficientPrivilege as exc:  # then only the wait helps
            log.warning(
                "cannot end the previous leader's replication session on slot %s: %s", self.name, first_line(exc)
            )

    def check_free(self, slot: dict, wait: float = 10.0) -> dict:
        """A closed reader's walsender can hold the slot a moment longer: wait a little
        before deciding that another process uses it. The lease holder ends that session,
        again every TERMINATE_AGAIN seconds while it lasts. Returns the slot's row, free."""
        deadline = time.monotonic() + wait
        terminate_at = time.monotonic()
        while slot["active"]:
            now = time.monotonic()
            if self.lease_check is not None and now >= terminate_at:
                self._end_previous_reader(slot)
                terminate_at = now + TERMINATE_AGAIN
            if now >= deadline:
                break
            time.sleep(0.05)
            slot = self.row() or dict(slot, active=False)
        if slot["active"] and self.lease_check is not None:
            # Leading, so the holder is a deposed leader on its way out: retried, not fatal.
            raise SourceUnavailable(f"replication slot {self.name} is still in use by pid {slot['active_pid']}.")
        if slot["active"]:
            holder = self.holder(slot["active_pid"]) or {}
            raise ConfigurationError(
                f"replication slot {self.name} is in use by another process (pid {slot['active_pid']}, "
                f"application_name {holder.get('application_name')!r}).",
                "stop the other capture of this source (only one reader per slot), or pass another slot_name.",
            )
        return slot
