"""Pieces shared by the outputs: the public JSON encoding (core/row_text.py), retry skipping
and epoch fencing.

The changelog format is public (docs/changelog-format.md), so every output encodes keys and
row images the same way: compact JSON, UTF-8 kept as is.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import os
import re
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..core.batch import spans_of
from ..core.errors import OutputStorageError, StaleEpochError
from ..core.events import ChangeEvent, Op, Origin, Position
from ..core.row_text import dumps  # noqa: F401 - the outputs' encoding, defined in core

# Column order of the changelog (Delta columns, JSON lines field names).
CHANGELOG_FIELDS = (
    "source_id",
    "table",
    "op",
    "key",
    "before",
    "after",
    "position",
    "origin",
    "dump_id",
    "schema_id",
    "commit_ts",
    "txid",
    "epoch",
    "written_at",
)

# Commit metadata keys (Delta custom commit metadata; the same names are used in memory).
LAST_POSITION_PREFIX = "dblog.last_position."
EPOCH_PREFIX = "dblog.epoch."
EPOCH_KEY = "dblog.epoch"

_UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MICRO = _dt.timedelta(microseconds=1)


def dumps_row(row: Optional[dict | str]) -> Optional[str]:
    """A row image's JSON text (an image that is its text already, core/row_text.py, as is)."""
    return row if row is None or isinstance(row, str) else dumps(row)


def now_micros() -> int:
    return (_dt.datetime.now(_dt.timezone.utc) - _UNIX_EPOCH) // _MICRO


@functools.lru_cache(maxsize=4096)  # a transaction's events share their commit time
def micros_to_iso(us: Optional[int]) -> Optional[str]:
    if us is None:
        return None
    return (_UNIX_EPOCH + _dt.timedelta(microseconds=us)).isoformat(timespec="microseconds")


def iso_to_micros(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    # Exact integer arithmetic: float seconds would lose microseconds far from 1970.
    return (_dt.datetime.fromisoformat(text) - _UNIX_EPOCH) // _MICRO


def event_from_fields(
    *,
    source_id: str,
    table: str,
    op: str,
    key: Any,
    before: Any,
    after: Any,
    position: str,
    origin: str,
    dump_id: Optional[str],
    schema_id: Optional[str],
    commit_ts: Optional[int],
    txid: Optional[str],
) -> ChangeEvent:
    """Rebuild a ChangeEvent from stored fields (key/before/after already decoded)."""
    return ChangeEvent(
        source_id=source_id,
        table=table,
        op=Op(op),
        key=tuple(key),
        before=before,
        after=after,
        position=Position.parse(position),
        commit_ts=commit_ts,
        txid=txid,
        origin=Origin(origin),
        dump_id=dump_id,
        schema_id=schema_id,
    )


class Bookkeeping:
    """Per-source highest durable position and highest leader epoch, kept by each output.

    ``fresh`` filters a batch down to what is not durable yet, which makes ``write``
    idempotent on retry; ``check_epoch`` refuses a deposed leader (DESIGN invariant 7).
    Epochs are tracked per source because each source has its own leader lease.
    """

    def __init__(self) -> None:
        self.positions: dict[str, Position] = {}
        self.epochs: dict[str, int] = {}

    def merge_position(self, source_id: str, position: Position) -> None:
        old = self.positions.get(source_id)
        if old is None or position > old:
            self.positions[source_id] = position

    def merge_epoch(self, source_id: str, epoch: int) -> None:
        if epoch > self.epochs.get(source_id, epoch - 1):
            self.epochs[source_id] = epoch

    def merge_metadata(self, meta: dict) -> None:
        """Fold one commit's metadata (``dblog.*`` keys, other keys ignored) into the maxima."""
        for k, v in meta.items():
            if not isinstance(k, str):
                continue
            if k.startswith(LAST_POSITION_PREFIX) and isinstance(v, str):
                self.merge_position(k[len(LAST_POSITION_PREFIX) :], Position.parse(v))
            elif k.startswith(EPOCH_PREFIX):
                self.merge_epoch(k[len(EPOCH_PREFIX) :], int(v))

    def check_epoch(self, source_ids: Iterable[str], epoch: Optional[int]) -> None:
        if epoch is None:
            return
        for sid in source_ids:
            known = self.epochs.get(sid)
            if known is not None and epoch < known:
                raise StaleEpochError(
                    f"refused to write for source {sid!r} with leader epoch {epoch}: the "
                    f"output already holds commits of epoch {known}, so another capture "
                    "process has taken over leadership.",
                    "stop this capture process; only the current lease holder may write "
                    "(it resumes from the output's last position).",
                )

    def fresh(self, events: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
        """Events above their source's last durable position (batch order kept); the batch
        itself when all are (the usual case; an EventBatch keeps its dump blocks)."""
        if not self.positions:
            return events
        spans = spans_of(events)
        if all(sid not in self.positions or lo > self.positions[sid] for sid, (lo, _) in spans.items()):
            return events
        out = []
        for e in events:  # a retry of a partly durable batch: rare, so per event
            last = self.positions.get(e.source_id)
            if last is None or e.position > last:
                out.append(e)
        return out

    def advanced(self, events: Sequence[ChangeEvent], epoch: Optional[int]) -> "Bookkeeping":
        """A copy moved past ``events``. The caller adopts it only once the commit succeeded:
        advancing before would make a retry skip events that never became durable."""
        nxt = Bookkeeping()
        nxt.positions = dict(self.positions)
        nxt.epochs = dict(self.epochs)
        for sid, (_, hi) in spans_of(events).items():
            nxt.merge_position(sid, hi)
            if epoch is not None:
                nxt.merge_epoch(sid, epoch)
        return nxt

    def adopt(self, other: "Bookkeeping") -> None:
        for s, p in other.positions.items():
            self.merge_position(s, p)
        for s, e in other.epochs.items():
            self.merge_epoch(s, e)

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {LAST_POSITION_PREFIX + s: p.encode() for s, p in self.positions.items()}
        meta.update({EPOCH_PREFIX + s: e for s, e in self.epochs.items()})
        return meta

    def source_ids(self, events: Sequence[ChangeEvent]) -> list[str]:
        return list(spans_of(events))


# The storage refusing writes: the operator must act (retrying cannot help for long).
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}
_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how delta-rs (Rust's io::Error) reports an errno


def storage_error(exc: BaseException, location: str) -> Optional[OutputStorageError]:
    """The OutputStorageError (cause and fix) for a write the storage at ``location``
    refused because it is full or not writable; None for any other failure."""
    code = exc.errno if isinstance(exc, OSError) and exc.errno else None
    if code is None:
        found = _OS_ERROR.search(str(exc))
        code = int(found.group(1)) if found else None
    if code in _FULL:
        problem, fix = "is full", f"free space (or raise the quota or file size limit) at {location}"
    elif code in _NOT_WRITABLE:
        problem = "is not writable"
        fix = f"make {location} writable by this user (permissions, a read-only mount, an immutable attribute)"
    else:
        return None
    return OutputStorageError(
        f"the changelog's storage at {location} {problem} ({os.strerror(code)}). Nothing was lost: "
        "the checkpoint stays before the batch that failed.",
        f"{fix}, then start the capture again; it resumes from its checkpoint.",
    )


@contextlib.contextmanager
def storage_errors(location: str) -> Iterator[None]:
    """Turn the storage's refusal of a write (full, read-only) into an OutputStorageError."""
    try:
        yield
    except Exception as exc:
        failed = storage_error(exc, location)
        if failed is None:
            raise
        raise failed from exc
