"""A JSON lines output: ``changelog.jsonl`` and ``schemas.jsonl`` in one directory.

For small setups, tests and piping into other tools (``jq``, ``tail -f``). One JSON object
per line with the field names of the Delta changelog (docs/changelog-format.md); ``key``,
``before`` and ``after`` are embedded JSON values, timestamps ISO-8601 strings.

Durability: each ``write`` appends its lines with one ``write`` call and ``fsync``s before
returning. A crash can leave a torn last line (or, for a large batch, a prefix of the batch);
``open`` truncates the torn tail, and since ``last_position`` is recomputed from the lines
that survived, the engine's retry skips exactly the events already present.
Leader-epoch fencing here only sees this process and what was on disk at ``open``: use the
Delta output when several capture processes may compete.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Iterator, Optional, Sequence

from ..core.errors import ConfigurationError
from ..core.events import ChangeEvent, Position, TableSchema
from ..core.row_text import as_row
from ._common import (
    Bookkeeping,
    dumps,
    event_from_fields,
    iso_to_micros,
    micros_to_iso,
    now_micros,
    storage_errors,
)

log = logging.getLogger(__name__)


def _parse_line(raw: bytes) -> Optional[dict]:
    """The record of one complete line, or None when the line is torn or not a JSON object."""
    if not raw.endswith(b"\n"):
        return None
    try:
        obj = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        return None
    return obj if isinstance(obj, dict) else None


def _read_records(path: str, on_record: Callable[[dict[str, Any]], object], repair: bool) -> None:
    """Feed every valid line to ``on_record``; a bad tail is a torn write, a bad line
    followed by good ones is corruption (never skipped silently: DESIGN invariant 8)."""
    good_end = 0
    bad_line: Optional[int] = None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        offset = 0
        for lineno, raw in enumerate(f, start=1):
            obj = _parse_line(raw)
            if obj is None:
                bad_line = bad_line or lineno
            elif bad_line is not None:
                raise ConfigurationError(
                    f"{path} line {bad_line} is not a valid JSON record but later lines are, "
                    "so the file was damaged (not just torn by a crash).",
                    f"inspect {path}, repair or delete line {bad_line}, then start again.",
                )
            else:
                on_record(obj)
                good_end = offset + len(raw)
            offset += len(raw)
    if bad_line is not None and repair:
        log.warning("truncating torn tail of %s after byte %d (line %d)", path, good_end, bad_line)
        with open(path, "r+b") as torn:
            torn.truncate(good_end)
            torn.flush()
            os.fsync(torn.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonLinesOutput:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(str(directory))
        self.changelog_path = os.path.join(self.directory, "changelog.jsonl")
        self.schemas_path = os.path.join(self.directory, "schemas.jsonl")
        self._book = Bookkeeping()
        self._schema_ids: set[str] = set()
        self._fds: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"JsonLinesOutput({self.directory!r})"

    def open(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the JSON lines output directory {self.directory}: {exc}",
                "choose a writable directory for the jsonl:// output.",
            ) from exc
        self._book = Bookkeeping()
        self._schema_ids = set()

        def on_event(rec: dict) -> None:
            self._book.merge_position(rec["source_id"], Position.parse(rec["position"]))
            if rec.get("epoch") is not None:
                self._book.merge_epoch(rec["source_id"], int(rec["epoch"]))

        _read_records(self.changelog_path, on_event, repair=True)
        _read_records(self.schemas_path, lambda rec: self._schema_ids.add(rec["schema_id"]), repair=True)
        for path in (self.changelog_path, self.schemas_path):
            self._fds[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fsync_dir(self.directory)  # make the files' directory entries durable too

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def last_position(self, source_id: str) -> Optional[Position]:
        return self._book.positions.get(source_id)

    def _append(self, path: str, lines: list[str]) -> None:
        if not self._fds:
            raise RuntimeError("JsonLinesOutput used before open()")
        fd = self._fds[path]
        data = "".join(lines).encode("utf-8")
        size = os.fstat(fd).st_size
        with storage_errors(self.directory):
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                # Best effort: do not leave a torn line that the next append would bury.
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        for schema in schemas:
            self.register_schema(schema)

    def register_schema(self, schema: TableSchema) -> None:
        sid = schema.schema_id()
        if sid in self._schema_ids:
            return
        rec = {
            "schema_id": sid,
            "table": schema.table,
            "schema_json": schema.to_json(),
            "registered_at": micros_to_iso(now_micros()),
        }
        self._append(self.schemas_path, [dumps(rec) + "\n"])
        self._schema_ids.add(sid)

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        self._book.check_epoch(self._book.source_ids(events), epoch)
        fresh = self._book.fresh(events)
        if not fresh:
            return
        written_at = micros_to_iso(now_micros())
        lines = [dumps(_record(e, epoch, written_at)) + "\n" for e in fresh]
        nxt = self._book.advanced(fresh, epoch)
        self._append(self.changelog_path, lines)
        self._book.adopt(nxt)

    def scan(self, source_id: str, table: str) -> Iterator[ChangeEvent]:
        found: list[ChangeEvent] = []

        def on_record(rec: dict) -> None:
            if rec["source_id"] == source_id and rec["table"] == table:
                found.append(_event(rec))

        # A reader must not truncate under a live writer: the torn tail is just ignored.
        _read_records(self.changelog_path, on_record, repair=False)
        return iter(found)

    def read_schemas(self) -> dict[str, TableSchema]:
        out: dict[str, TableSchema] = {}
        _read_records(
            self.schemas_path,
            lambda rec: out.setdefault(rec["schema_id"], TableSchema.from_json(rec["schema_json"])),
            repair=False,
        )
        return out


def _record(e: ChangeEvent, epoch: Optional[int], written_at: Optional[str]) -> dict[str, Any]:
    return {
        "source_id": e.source_id,
        "table": e.table,
        "op": e.op.value,
        "key": list(e.key),
        "before": as_row(e.before),
        "after": as_row(e.after),
        "position": e.position.encode(),
        "origin": e.origin.value,
        "dump_id": e.dump_id,
        "schema_id": e.schema_id,
        "commit_ts": micros_to_iso(e.commit_ts),
        "txid": e.txid,
        "epoch": epoch,
        "written_at": written_at,
    }


def _event(rec: dict) -> ChangeEvent:
    return event_from_fields(
        source_id=rec["source_id"],
        table=rec["table"],
        op=rec["op"],
        key=rec["key"],
        before=rec["before"],
        after=rec["after"],
        position=rec["position"],
        origin=rec["origin"],
        dump_id=rec["dump_id"],
        schema_id=rec["schema_id"],
        commit_ts=iso_to_micros(rec["commit_ts"]),
        txid=rec["txid"],
    )
