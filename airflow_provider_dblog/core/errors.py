"""User-facing errors: each names the cause and the fix (DESIGN invariant 8)."""

from __future__ import annotations

import re


class DBLogError(Exception):
    """A problem the user can fix. ``str()`` reads: '<cause> Fix: <fix>'."""

    def __init__(self, cause: str, fix: str):
        self.cause = cause
        self.fix = fix
        super().__init__(f"{cause} Fix: {fix}")


class ConfigurationError(DBLogError):
    """The source, state store or output is set up in a way DBLog cannot work with."""


class RequestError(DBLogError):
    """A dump request names an unknown table, a malformed key, or similar."""


class SchemaChanged(DBLogError):
    """A chunk's SELECT named a column the table no longer has (an ALTER TABLE since the
    engine last read the catalog): not the request's fault; the engine reads the schema
    again and selects the chunk again."""

    def __init__(self, cause: str, fix: str = ""):
        super().__init__(cause, fix or "nothing: the chunk is selected again in the table's new shape.")


class PositionLostError(DBLogError):
    """The checkpointed log position is no longer available on the source."""

    def __init__(self, cause: str, fix: str = ""):
        super().__init__(
            cause,
            fix
            or "the source no longer holds the log from the checkpoint on, so events are lost: "
            "reset the checkpoint (`dblog capture --reset-position`) and run a full dump of "
            "every table (`dblog dump --all`) to restore a complete state.",
        )


class StaleEpochError(DBLogError):
    """A deposed leader tried to write (DESIGN invariant 7)."""


class SourceUnavailable(DBLogError):
    """The connection to the source was lost or refused for a moment (server restart, killed
    session, network blip). Sources raise it for transient losses only; the engine reconnects
    with backoff and resumes from its last position."""

    def __init__(self, cause: str, fix: str = ""):
        super().__init__(
            cause,
            fix
            or "check that the database is up and reachable; the capture reconnects by itself "
            "and a restarted capture resumes from its checkpoint without loss.",
        )


class WatermarkSequenceError(RuntimeError):
    """The log showed watermarks in an order Algorithm 1 rules out (a high watermark before
    its low one), or the engine opened a second window: a bug or a tampered watermark table,
    never a user error, so the capture stops instead of emitting a chunk it cannot trust."""


class OutputUnavailable(DBLogError):
    """The output refused every retry of one batch (a broker down longer than the retries
    last, say). Nothing is lost: the checkpoint stays before the batch, and a restarted
    capture writes it again, exactly once."""


class CommitConflict(Exception):
    """Another writer committed to the changelog first (the same Delta version): nothing of
    this batch was written; the writer re-reads the log (meeting a newer leader's epoch, if
    that is who it was) and tries again after a short random pause. Seen when captures share a lake root."""


class OutputStorageError(DBLogError):
    """The changelog's storage refused a write: full, read-only, or not writable by this
    user. Nothing is lost (the checkpoint stays before the failed batch); the capture stops
    so that the operator can make room or fix the permissions, then start it again."""


# A URL's (or host's) user information: ``scheme://user:password@host`` or, without a
# scheme, ``user:password@host``. It is never repeated in a message (invariant 8).
_URL_USERINFO = re.compile(r"^(?P<lead>[A-Za-z][A-Za-z0-9+.\-]*:)?//[^/?#@\s]*@")
_BARE_USERINFO = re.compile(r"^[^/?#@\s:]*:[^/?#@\s]*@")


def has_userinfo(text: str) -> bool:
    """True if ``text`` starts like a URL or host with credentials (``user:pw@``, ``//user@``)."""
    return bool(_URL_USERINFO.match(text) or _BARE_USERINFO.match(text))


def without_userinfo(text: str) -> str:
    """``text`` with the credentials of ``has_userinfo`` replaced by ``***``, safe to show."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group('lead') or ''}//***@", text, count=1)
    return _BARE_USERINFO.sub("***@", text, count=1)
