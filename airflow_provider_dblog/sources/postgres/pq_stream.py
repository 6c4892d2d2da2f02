"""A logical replication connection's messages in batches: the compiled ``PqStream``
(native/src/pq_stream.rs) when it can use psycopg2's own libpq, psycopg2's ``read_message``
otherwise.

``read_message`` returns one message per call and reads the socket with the GIL held; over TLS
that was about one ``recv`` and decryption per change (docs/benchmarks.md). ``PqStream`` takes
all that libpq can give without waiting in one call, outside the GIL, through the same
``PGconn`` (psycopg2's documented ``connection.pgconn_ptr``).

Psycopg2 then never sees a keepalive, so this module does what ``read_message`` did with them:
it answers the ones that ask for a reply and sends a status update every ``status_interval``
seconds, both with the positions acknowledged so far (psycopg2's ``send_feedback``). Unlike
psycopg2 it never moves the flush position to a keepalive's WAL end on its own (see
sources/postgres/source.py). Failures are raised as the psycopg2 exceptions ``read_message`` raises,
with the server's SQLSTATE as ``pgcode``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any, Optional

import psycopg2
import psycopg2.errors
import psycopg2.extensions

import airflow_provider_dblog.sources.native as native

log = logging.getLogger(__name__)

# Bytes of payloads one read takes at most: bounds what a batch holds in memory.
MAX_BATCH_BYTES = 8 << 20

_SEVERITY = re.compile(r"^[A-Z]+:  ")
_compiled: dict[str, Any] = {}  # class name -> its instance, or False when it cannot be used


def _loaded_libpq() -> list[str]:
    """The paths of the libpq libraries mapped into this process (psycopg2 has loaded its own)."""
    found = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(("libpq.so", "libpq-")) and path not in found:
                    found.append(path)
    except OSError:  # not Linux
        pass
    return found


def compiled(name: str, instead: str) -> Optional[Any]:
    """The extension's class ``name`` (``PqStream``, ``PqCopy``) bound to psycopg2's libpq, or
    None (no extension, switched off, or not exactly one libpq of psycopg2's version in the
    process); then the reason is logged once, after ``instead``: what is used in its place."""
    if name not in _compiled:
        _compiled[name] = False
        paths = _loaded_libpq()
        if not native.enabled():
            log.info("%s (the compiled extension is off)", instead)
        elif len(paths) != 1:
            log.info("%s (libpq libraries found: %s)", instead, paths or "none")
        else:
            obj = getattr(native.extension, name)(paths[0])
            if obj.lib_version() == psycopg2.extensions.libpq_version():
                _compiled[name] = obj
            else:
                log.info("%s (%s is not psycopg2's libpq)", instead, paths[0])
    return _compiled[name] or None


def compiled_reader() -> Optional[Any]:
    """The PqStream bound to psycopg2's libpq, or None."""
    return compiled("PqStream", "replication stream: psycopg2's read_message")


def server_error(sqlstate: str, message: str) -> psycopg2.Error:
    """The server's error as psycopg2 raises it: the class of its SQLSTATE (``pgcode``), the
    text without its severity ("ERROR:  "), ``pgerror`` with it."""
    try:
        cls = psycopg2.errors.lookup(sqlstate)
    except KeyError:
        cls = psycopg2.DatabaseError
    exc = cls(_SEVERITY.sub("", message, count=1))
    exc.__setstate__({"pgerror": message, "pgcode": sqlstate})
    return exc


def libpq_error(message: str, connection_bad: bool) -> psycopg2.Error:
    """libpq's failure as psycopg2's pq_raise raises it: OperationalError once the
    connection is bad."""
    return (psycopg2.OperationalError if connection_bad else psycopg2.DatabaseError)(
        message or "no message from the libpq"
    )


def _copy_ended(sqlstate: str, message: str) -> psycopg2.Error:
    if not sqlstate:
        return psycopg2.OperationalError("the server ended the replication stream")
    return server_error(sqlstate, message)


def _failure(end: tuple) -> psycopg2.Error:
    kind, a, b = end
    if kind == "copy":
        return _copy_ended(a, b)
    if kind == "broken":
        return libpq_error(a, b)
    return psycopg2.OperationalError(f"unrecognized replication message type {bytes([a])!r}")


class ReplicationStream:
    """The messages of one started replication (``cursor.start_replication``)."""

    def __init__(self, conn: Any, cursor: Any, status_interval: float):
        self._conn = conn
        self._cursor = cursor
        self._reader = compiled_reader()
        self._interval = status_interval
        self._last_feedback = time.monotonic()
        self.data_start = 0  # the highest XLogData start read
        self._wal_end = 0

    @property
    def wal_end(self) -> int:
        """The server's WAL end as of the last message or keepalive."""
        return self._wal_end if self._reader is not None else (getattr(self._cursor, "wal_end", 0) or 0)

    def read(self, max_messages: int) -> tuple[list[bytes], Optional[BaseException]]:
        """The payloads that are there or can be read without waiting (at most
        ``max_messages``; none: wait on the socket), and the error that came after them."""
        if self._reader is None:
            return self._read_messages(max_messages)
        payloads, data_start, wal_end, reply, end = self._reader.read(
            self._conn.pgconn_ptr, max_messages, MAX_BATCH_BYTES
        )
        self.data_start = max(self.data_start, data_start)
        self._wal_end = max(self._wal_end, wal_end)
        failure: Optional[BaseException] = _failure(end) if end is not None else None
        if failure is None and (reply or time.monotonic() - self._last_feedback >= self._interval):
            try:
                self.feedback()
            except psycopg2.Error as exc:
                failure = exc
        return payloads, failure

    def _read_messages(self, max_messages: int) -> tuple[list[bytes], Optional[BaseException]]:
        payloads: list[bytes] = []
        try:
            while len(payloads) < max_messages:
                msg = self._cursor.read_message()
                if msg is None:
                    break
                payloads.append(msg.payload)
                self.data_start = max(self.data_start, msg.data_start)
        except psycopg2.Error as exc:
            return payloads, exc
        return payloads, None

    def feedback(self, lsn: int = 0) -> None:
        """A status update confirming ``lsn`` (0: the positions confirmed before)."""
        if lsn:
            self._cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
        else:
            self._cursor.send_feedback(force=True)
        self._last_feedback = time.monotonic()
