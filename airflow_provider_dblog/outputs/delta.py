"""The embedded default output: a Delta Lake changelog written with delta-rs (``deltalake``).

Layout under ``root`` (outputs/lake_layout.py): ``changelogs/<source_id>/``, one table per
source (one row per change event, format in docs/changelog-format.md; ``changelog/``, one
table for all, in a lake written before) and ``schemas/`` (one row per table schema, by
content id).

Each ``write`` is exactly one append commit (a capture's batch is one source's). Its custom
commit metadata carries, for every source the table holds, the highest position written
(``dblog.last_position.<source>``) and the highest leader epoch (``dblog.epoch.<source>``),
plus ``dblog.seen_version``: the table version whose commits are all summarised by these
maxima. So when a table is opened the newest dblog commit usually tells everything, and a
retry after an unknown outcome finds its own
commit and writes nothing twice. Before each write the table is refreshed and newer commits
(another writer's, or our own that timed out) are folded in: that is how a deposed leader
meets the newer epoch and is refused.
"""

from __future__ import annotations

import json
import math
import operator
import os
from itertools import repeat
from typing import Any, Iterator, Optional, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..core.batch import DumpRows, EventBatch, LogRows
from ..core.errors import CommitConflict, ConfigurationError
from ..core.events import SUB_WIDTH, ChangeEvent, Op, Origin, TableSchema
from ..core.protocols import FullRowIndex, RowTextOutput
from ..core.text_column import TextColumn
from ._common import (
    CHANGELOG_FIELDS,
    EPOCH_KEY,
    Bookkeeping,
    dumps,
    dumps_row,
    event_from_fields,
    now_micros,
    storage_errors,
)
from ._urls import refuse_credentials
from .lake_layout import changelog_path, changelogs_root, schemas_path
from .object_store import is_remote, list_dirs, require_put_if_absent

SEEN_VERSION_KEY = "dblog.seen_version"

_TS = pa.timestamp("us", tz="UTC")
_STRING = pa.string()
# Position.encode() of each event as two C-level calls (a Position is a (coord, sub) tuple).
_COORD_OF, _SUB_OF = operator.itemgetter(0), operator.itemgetter(1)  # of a Position (a tuple)
_NO_SUB = pa.scalar("." + "0" * SUB_WIDTH)  # what encode() adds for sub 0

CHANGELOG_SCHEMA = pa.schema(
    [
        pa.field("source_id", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("before", pa.string()),
        pa.field("after", pa.string()),
        pa.field("position", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("dump_id", pa.string()),
        pa.field("schema_id", pa.string()),
        pa.field("commit_ts", _TS),
        pa.field("txid", pa.string()),
        pa.field("epoch", pa.int64()),
        pa.field("written_at", _TS, nullable=False),
    ]
)
assert tuple(CHANGELOG_SCHEMA.names) == CHANGELOG_FIELDS

SCHEMAS_SCHEMA = pa.schema(
    [
        pa.field("schema_id", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("schema_json", pa.string(), nullable=False),
        pa.field("registered_at", _TS, nullable=False),
    ]
)

# Commit history is read newest first in pages of this many commits, growing.
_HISTORY_PAGE = 16


def _deltalake():
    try:
        import deltalake
    except ImportError as exc:  # pragma: no cover - deltalake is a hard dependency
        raise ConfigurationError(
            f"the Delta output needs the 'deltalake' package, which cannot be imported ({exc}).",
            "pip install 'deltalake>=1,<2' (it is a dependency of airflow-provider-dblog).",
        ) from exc
    return deltalake


class _Changelog:
    """One changelog table and the bookkeeping folded from its commits (module docstring)."""

    def __init__(self, uri: str, table: Any, storage_options: Optional[dict]) -> None:
        self.uri, self.table, self.storage_options = uri, table, storage_options
        self.book = Bookkeeping()
        self.seen_version = -1
        self.loaded_version = table.version()  # the version the table object was loaded at
        self._load_bookkeeping()

    def _load_bookkeeping(self) -> None:
        """Fold commit metadata newest-first until a cumulative commit covers the rest."""
        dt = self.table
        latest = dt.version()
        covered = -1  # every version <= covered is summarised by a commit already folded in
        next_version = latest  # the newest version not processed yet
        limit = _HISTORY_PAGE
        while next_version > covered:
            page = dt.history(limit=limit)
            for commit in page:  # newest first
                v = commit["version"]
                if v > next_version:
                    continue  # processed in an earlier, shorter page
                if v <= covered:
                    break
                self.book.merge_metadata(commit)
                if SEEN_VERSION_KEY in commit:
                    covered = max(covered, int(commit[SEEN_VERSION_KEY]))
                next_version = v - 1
            if len(page) < limit:
                break  # reached the oldest commit still in the log
            limit *= 4
        self.seen_version = latest

    def catch_up(self, reload_every: int) -> None:
        """Fold in commits made since we last looked (other writers, or ours with an unknown outcome)."""
        dt = self.table
        if dt.version() - self.loaded_version >= reload_every:
            # A DeltaTable kept up to date incrementally carries every commit since it was
            # loaded, and each append got slower with their number (delta-rs: 22 ms after
            # 200 commits, 92 ms after 800, measured); a fresh load starts from the latest
            # checkpoint (one per 100 commits by default) and stays flat.
            dt = self.table = _deltalake().DeltaTable(self.uri, storage_options=self.storage_options)
            self.loaded_version = dt.version()
        else:
            dt.update_incremental()
        v = dt.version()
        if v > self.seen_version:
            for commit in dt.history(limit=v - self.seen_version):
                if commit["version"] > self.seen_version:
                    self.book.merge_metadata(commit)
            self.seen_version = v

    def append(self, fresh: Sequence[ChangeEvent], epoch: Optional[int], nxt: Bookkeeping, root: str) -> None:
        """One append commit of ``fresh``, recording ``nxt`` (the bookkeeping past it)."""
        meta: dict[str, Any] = nxt.metadata()
        meta[SEEN_VERSION_KEY] = self.seen_version
        if epoch is not None:
            meta[EPOCH_KEY] = epoch
        dl = _deltalake()
        # With fencing on, never let delta-rs rebase this commit over one that landed after
        # our epoch check (a paused, deposed leader would otherwise commit after the new
        # leader): fail instead; the writer's retry re-reads the log and meets the new epoch.
        retries = 0 if epoch is not None else None
        try:
            with storage_errors(root):
                dl.write_deltalake(
                    self.table,
                    changelog_batch(fresh, epoch),
                    mode="append",
                    commit_properties=dl.CommitProperties(custom_metadata=meta, max_commit_retries=retries),
                )
        except dl.exceptions.CommitFailedError as exc:
            raise CommitConflict(
                f"another writer committed changelog version {self.table.version() + 1} of {self.uri} first"
            ) from exc
        self.book.adopt(nxt)
        # Our commit is the only new one unless another writer slipped in; then the next
        # catch_up reads the gap (ours included, folding it again is harmless).
        if self.table.version() == self.seen_version + 1:
            self.seen_version += 1


class DeltaChangelogOutput(RowTextOutput, FullRowIndex):
    """``Output``/``ReadableOutput`` over the Delta changelog tables of a lake root (see
    module docstring); it declares ``RowTextOutput`` and ``FullRowIndex`` (core/protocols.py).

    Each source's events go to its own table (``changelogs/<source_id>``, opened or created at
    its first write or ``last_position``), so captures sharing a root never race for a
    version; in a lake of the layout before (``changelog`` exists) every source stays in that
    one shared table (outputs/lake_layout.py)."""

    reload_every = 100  # commits between fresh loads of a changelog table (see _Changelog.catch_up)
    # A chunk's rows may come as their JSON text (core/row_text.py): that is what is stored.
    takes_row_text = True

    def __init__(self, root: str, storage_options: Optional[dict] = None):
        root = str(root)
        refuse_credentials(root)  # would reach the table's location in its commit info
        # Local paths are made absolute so the table location does not depend on the cwd.
        if "://" not in root:
            root = os.path.abspath(root)
        self.root = root.rstrip("/") or "/"
        self.storage_options = {str(k): str(v) for k, v in storage_options.items()} if storage_options else None
        self.shared_uri = changelog_path(self.root)
        self.schemas_uri = schemas_path(self.root)
        self._shared: Optional[_Changelog] = None  # the lake's one table, in the layout before
        self._tables: dict[str, _Changelog] = {}  # per source, opened as they come
        self._schemas: Any = None
        self._schema_ids: set[str] = set()
        self._open = False
        # Imported now (about 0.3 s), not at open: a standby capture constructs its output
        # long before it wins the lease and opens it, and the takeover's first row waits on
        # open (issue 39 part 6).
        _deltalake()

    def __repr__(self) -> str:  # storage options may hold secrets: never shown
        return f"DeltaChangelogOutput({self.root!r})"

    def changelog_uri(self, source_id: str) -> str:
        """The table ``source_id``'s events go to (and are read from)."""
        if self._open:
            return self.shared_uri if self._shared is not None else changelog_path(self.root, source_id)
        return lake_changelogs(self.root, source_id, self.storage_options)[0]

    # -- lifecycle ---------------------------------------------------------------------
    def open(self) -> None:
        if is_remote(self.root):
            require_put_if_absent(self.root, self.storage_options)  # fencing needs atomic commits
        self._tables = {}
        self._shared = None
        if written_before(self.root, self.storage_options):
            self._shared = self._changelog_at(self.shared_uri)
        self._schemas = self._open_table(self.schemas_uri, SCHEMAS_SCHEMA)
        ids = self._schemas.to_pyarrow_dataset().to_table(columns=["schema_id"]).column(0)
        self._schema_ids = set(ids.to_pylist())
        self._open = True

    def close(self) -> None:
        self._shared = None
        self._tables = {}
        self._schemas = None
        self._open = False

    def _changelog_at(self, uri: str) -> _Changelog:
        return _Changelog(uri, self._open_table(uri, CHANGELOG_SCHEMA), self.storage_options)

    def _changelog(self, source_id: str) -> _Changelog:
        """The open table of ``source_id`` (created if new)."""
        if self._shared is not None:
            return self._shared
        table = self._tables.get(source_id)
        if table is None:
            table = self._tables[source_id] = self._changelog_at(changelog_path(self.root, source_id))
        return table

    def _open_table(self, uri: str, schema: pa.Schema):
        dl = _deltalake()
        try:
            if not dl.DeltaTable.is_deltatable(uri, self.storage_options):
                dl.DeltaTable.create(uri, schema, mode="ignore", storage_options=self.storage_options)
            table = dl.DeltaTable(uri, storage_options=self.storage_options)
        except Exception as exc:  # deltalake raises several unrelated types (OSError, DeltaError...)
            raise ConfigurationError(
                f"cannot open or create the Delta table at {uri}: {type(exc).__name__}: {exc}",
                "check the output URL and that the storage is reachable and writable "
                "(for object stores: the storage options / credentials in the environment).",
            ) from exc
        have = {f.name for f in table.schema().fields}
        missing = [n for n in schema.names if n not in have]
        if missing:
            raise ConfigurationError(
                f"the Delta table at {uri} is not a DBLog table: it lacks columns {missing}.",
                "point the output at an empty location or at an existing DBLog output root.",
            )
        return table

    def _require_open(self) -> None:
        if not self._open:
            raise RuntimeError("DeltaChangelogOutput used before open()")

    def last_position(self, source_id: str):
        self._require_open()
        if self._shared is None and source_id not in self._tables:
            if not _deltalake().DeltaTable.is_deltatable(changelog_path(self.root, source_id), self.storage_options):
                return None  # nothing written yet; the table comes with the first write, not with a look
        return self._changelog(source_id).book.positions.get(source_id)

    # -- writing ---------------------------------------------------------------------------
    def register_schema(self, schema: TableSchema) -> None:
        self.register_schemas([schema])

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        """The new ones in one commit: one per schema cost a capture of 1,000 tables 90 s
        before its first batch (bench/many_tables.py)."""
        self._require_open()
        new = list({s.schema_id(): s for s in schemas if s.schema_id() not in self._schema_ids}.items())
        if not new:
            return
        rows = pa.Table.from_arrays(
            [
                pa.array([sid for sid, _ in new], pa.string()),
                pa.array([s.table for _, s in new], pa.string()),
                pa.array([s.to_json() for _, s in new], pa.string()),
                pa.array([now_micros()] * len(new), _TS),
            ],
            schema=SCHEMAS_SCHEMA,
        )
        with storage_errors(self.root):
            _deltalake().write_deltalake(self._schemas, rows, mode="append")
        self._schema_ids.update(sid for sid, _ in new)

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        """One append commit per table: a capture's batch is one source's, so one commit."""
        self._require_open()
        if not events:
            return
        sources = Bookkeeping().source_ids(events)  # one pass over the batch, for routing and the epoch check
        if self._shared is not None or len(sources) == 1:
            self._write(self._changelog(sources[0]), events, epoch, sources)
            return
        for sid in sources:  # several sources in one batch (a test, a replay): a commit each
            self._write(self._changelog(sid), [e for e in events if e.source_id == sid], epoch, [sid])

    def _write(
        self, table: _Changelog, events: Sequence[ChangeEvent], epoch: Optional[int], sources: list[str]
    ) -> None:
        table.catch_up(self.reload_every)
        table.book.check_epoch(sources, epoch)
        fresh = table.book.fresh(events)
        if not fresh:
            return  # a retry of a batch that is already durable
        table.append(fresh, epoch, table.book.advanced(fresh, epoch), self.root)

    def compact(self, target_size: Optional[int] = None) -> dict:
        """Merge the small files of one-commit-per-flush into bigger ones (no vacuum: the
        replaced files stay for time travel and readers until the user vacuums); the
        changelog tables' metrics, summed."""
        total: dict = {}
        for uri, metrics in self.compact_tables(target_size):
            if uri == self.schemas_uri:
                continue
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
        return total

    def changelog_uris(self) -> list[str]:
        """Every changelog table under the root: the shared one (layout before) or one per source."""
        return lake_changelogs(self.root, None, self.storage_options)

    def compact_tables(
        self, target_size: Optional[int] = None, vacuum_retain_hours: Optional[float] = None
    ) -> list[tuple[str, dict]]:
        """Compact (and, given a retention, vacuum) the changelog tables and the schema store
        of an existing output: (uri, metrics) of each. delta-rs commits as the capture does
        (put-if-absent on object stores), so this is safe while a capture writes
        (spark/maintenance.py runs it, never Spark's OPTIMIZE). The retention is rounded up
        to whole hours (delta-rs takes hours): nothing younger than asked is removed."""
        out = []
        for uri in [*self.changelog_uris(), self.schemas_uri]:
            table = self._read_table(uri)
            metrics = table.optimize.compact(target_size=target_size)
            if vacuum_retain_hours is not None:
                table.vacuum(
                    retention_hours=math.ceil(vacuum_retain_hours), dry_run=False, enforce_retention_duration=False
                )
            out.append((uri, dict(metrics)))
        return out

    # -- reading ---------------------------------------------------------------------------
    def _read_table(self, uri: str):
        dl = _deltalake()
        if not dl.DeltaTable.is_deltatable(uri, self.storage_options):
            raise ConfigurationError(
                f"there is no DBLog output at {uri}.",
                "check the output URL and the source id; a capture creates its table at its first commit.",
            )
        return dl.DeltaTable(uri, storage_options=self.storage_options)

    def _events(self, source_id: str) -> tuple[Any, Any]:
        """The dataset of ``source_id``'s changelog table and the filter of its events; the
        dataset is None for a source of an existing output that has written nothing yet."""
        dl = _deltalake()
        uri = self.changelog_uri(source_id)
        if not dl.DeltaTable.is_deltatable(uri, self.storage_options):
            self._read_table(self.schemas_uri)  # no output at all: the error naming it
            return None, None
        table = dl.DeltaTable(uri, storage_options=self.storage_options)  # checked just above
        return table.to_pyarrow_dataset(), pc.field("source_id") == source_id

    def scan(self, source_id: str, table: str) -> Iterator[ChangeEvent]:
        dataset, flt = self._events(source_id)
        if dataset is None:
            return
        for batch in dataset.to_batches(filter=flt & (pc.field("table") == table)):
            yield from events_from_batch(batch)

    def full_row_keys(self, source_id: str, table: str) -> list[tuple]:
        """The keys of ``table`` whose newest row event with every value in it — an insert
        (a log ``c`` at sub 0: the create half of a split key update is at sub 1 and may hold
        a TOAST placeholder) or a dump row (``r``) — is newer than their last delete and the
        table's last TRUNCATE: a placeholder of such a key is filled by the replay
        (core/toast.py). Reads three columns of the table's events, not their row images."""
        dataset, flt = self._events(source_id)
        if dataset is None:
            return []
        flt = flt & (pc.field("table") == table)
        events = dataset.to_table(
            columns=["op", "key", "position"], filter=flt & pc.field("op").isin(["c", "r", "d", "t"])
        )
        op, position = events.column("op"), events.column("position")
        truncated = pc.max(events.filter(pc.equal(op, "t")).column("position")).as_py()
        if truncated is not None:
            events = events.filter(pc.greater(position, truncated))
            op, position = events.column("op"), events.column("position")
        whole = pc.or_(pc.equal(op, "r"), pc.and_(pc.equal(op, "c"), pc.ends_with(position, _NO_SUB.as_py())))
        rows = events.filter(whole).group_by("key").aggregate([("position", "max")])
        gone = events.filter(pc.equal(op, "d")).group_by("key").aggregate([("position", "max")])
        gone = pa.table({"key": gone.column("key"), "deleted_at": gone.column("position_max")})
        joined = rows.join(gone, "key", join_type="left outer")
        kept = joined.filter(
            pc.or_kleene(
                pc.is_null(joined.column("deleted_at")),
                pc.greater(joined.column("position_max"), joined.column("deleted_at")),
            )
        )
        return [tuple(orjson.loads(k)) for k in kept.column("key").to_pylist()]

    def read_schemas(self) -> dict[str, TableSchema]:
        tbl = self._read_table(self.schemas_uri).to_pyarrow_dataset().to_table(columns=["schema_id", "schema_json"])
        ids, texts = tbl.column("schema_id").to_pylist(), tbl.column("schema_json").to_pylist()
        return {sid: TableSchema.from_json(text) for sid, text in zip(ids, texts)}


def written_before(root: str, storage_options: Optional[dict] = None) -> bool:
    """Whether the lake ``root`` holds the one changelog table of the layout before the table
    per source (outputs/lake_layout.py): the one check every writer and reader makes (on an
    object store, a request)."""
    return bool(_deltalake().DeltaTable.is_deltatable(changelog_path(root), storage_options))


def lake_changelogs(root: str, source_id: Optional[str] = None, storage_options: Optional[dict] = None) -> list[str]:
    """The changelog tables under the lake ``root``: its one shared table in a lake written
    before the table per source; else ``source_id``'s (created or not yet), or every source's."""
    if written_before(root, storage_options):
        return [changelog_path(root)]
    if source_id is not None:
        return [changelog_path(root, source_id)]
    return [changelog_path(root, sid) for sid in list_sources(root, storage_options)]


def list_sources(root: str, storage_options: Optional[dict] = None) -> list[str]:
    """The sources with a changelog table under the lake ``root`` (``changelogs/<source_id>``)."""
    return [d for d in list_dirs(changelogs_root(root), storage_options) if not d.startswith((".", "_"))]


def changelog_batch(events: Sequence[ChangeEvent], epoch: Optional[int]) -> pa.Table:
    """Events as one Arrow table, built column by column (no per-row dicts); an EventBatch's
    blocks without making their events (core/batch.py). Log events and log blocks in a row
    make one table: a binlog rows event of wide rows holds a few dozen changes, and a
    one-row transaction's block one, too few to build Arrow columns for each."""
    written_at = now_micros()
    if not isinstance(events, EventBatch):
        return _LogColumns().add_events(events).table(epoch, written_at)
    parts: list[pa.Table] = []
    run: Optional[_LogColumns] = None  # the columns of consecutive log segments
    for seg in events.segments:
        if isinstance(seg, DumpRows):
            if run is not None:
                parts.append(run.table(epoch, written_at))
                run = None
            parts.append(_dump_rows_table(seg, epoch, written_at))
        else:
            if run is None:
                run = _LogColumns()
            if isinstance(seg, LogRows):
                run.add_block(seg)
            else:
                run.add_events(seg)
    if run is not None or not parts:
        parts.append((run or _LogColumns()).table(epoch, written_at))
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _json_columns(keys: Sequence, befores: Sequence, afters: Sequence) -> tuple[list, list, list]:
    """Keys and row images as JSON text (orjson); an image that is its text already (a
    source's, core/row_text.py) as it is. Each bytes object orjson returns is decoded to
    ``str`` at once: kept as bytes, each held several kB beyond its length (orjson 3.13) and
    encoding a 20,000-row batch took 3.6 µs (narrow rows) to 8.5 µs (30 columns) per row,
    against 0.5 and 1.1 µs decoded (``Arrow`` then reads the str's UTF-8 in place). A value
    orjson refuses (an integer beyond 64 bits) sends the whole block through ``dumps``'
    fallback."""
    try:
        enc = orjson.dumps
        return (
            [enc(k).decode() for k in keys],
            [b if b is None or b.__class__ is str else enc(b).decode() for b in befores],
            [a if a is None or a.__class__ is str else enc(a).decode() for a in afters],
        )
    except (orjson.JSONEncodeError, TypeError):
        return ([dumps(list(k)) for k in keys], [dumps_row(b) for b in befores], [dumps_row(a) for a in afters])


# A ChangeEvent's field of each changelog column, in _LogColumns' order.
_EVENT_FIELDS = tuple(
    map(
        operator.attrgetter,
        "source_id table op key before after position origin dump_id schema_id commit_ts txid".split(),
    )
)


class _LogColumns:
    """The changelog's columns (before JSON encoding) of log events and log blocks, appended
    to in stream order: source_id, table, op, key, before, after, position, origin, dump_id,
    schema_id, commit_ts, txid."""

    __slots__ = ("cols",)

    def __init__(self) -> None:
        self.cols: tuple[list, ...] = tuple([] for _ in range(12))

    def add_block(self, seg: LogRows) -> None:
        src, table, op, keys, befores, afters, positions, origin, dump_id, schema_id, commit_ts, txid = self.cols
        n = len(seg)
        if n == 1:  # a one-row transaction's change: appended, no iterators
            src.append(seg.source_id)
            table.append(seg.table)
            op.append(seg.op)
            keys.append(seg.keys[0])
            befores.append(seg.befores[0])
            afters.append(seg.afters[0])
            positions.append(seg.positions[0])
            origin.append(Origin.LOG)
            dump_id.append(None)
            schema_id.append(seg.schema_id)
            commit_ts.append(seg.commit_ts)
            txid.append(seg.txid)
            return
        src.extend(repeat(seg.source_id, n))
        table.extend(repeat(seg.table, n))
        op.extend(repeat(seg.op, n))
        keys.extend(seg.keys)
        befores.extend(seg.befores)
        afters.extend(seg.afters)
        positions.extend(seg.positions)
        origin.extend(repeat(Origin.LOG, n))
        dump_id.extend(repeat(None, n))
        schema_id.extend(repeat(seg.schema_id, n))
        commit_ts.extend(repeat(seg.commit_ts, n))
        txid.extend(repeat(seg.txid, n))

    def add_events(self, seg: Sequence[ChangeEvent]) -> "_LogColumns":
        for col, field in zip(self.cols, _EVENT_FIELDS):
            col.extend(map(field, seg))
        return self

    def table(self, epoch: Optional[int], written_at: int) -> pa.Table:
        src, table, op, keys, befores, afters, positions, origin, dump_id, schema_id, commit_ts, txid = self.cols
        keys, befores, afters = _json_columns(keys, befores, afters)
        string = _STRING
        arrays = [
            pa.array(src, string),
            pa.array(table, string),
            pa.array(op, string),  # str enums: Arrow takes their value
            pa.array(keys, string),
            pa.array(befores, string),
            pa.array(afters, string),
            _encoded_positions(positions),
            pa.array(origin, string),
            pa.array(dump_id, string),
            pa.array(schema_id, string),
            pa.array(commit_ts, _TS),
            pa.array(txid, string),
        ]
        return _table(arrays, len(src), epoch, written_at)


def _encoded_positions(positions: Sequence) -> pa.Array:
    """Each position's ``encode()``, joined by Arrow from the coordinates and the subs (half
    the time of formatting each in Python; a quarter where every sub is 0, as in PostgreSQL's
    log: then the sub is one suffix)."""
    coords = pa.array(list(map(_COORD_OF, positions)), _STRING)
    if not any(map(_SUB_OF, positions)):
        return pc.binary_join_element_wise(coords, _NO_SUB, "")
    subs = pa.array(list(map(_SUB_OF, positions)), pa.int64())
    padded = pc.utf8_lpad(pc.cast(subs, _STRING), width=SUB_WIDTH, padding="0")
    return pc.binary_join_element_wise(coords, padded, ".")


def _repeated(value: Any, n: int, typ: pa.DataType = _STRING) -> pa.Array:
    return pa.nulls(n, typ) if value is None else pa.repeat(pa.scalar(value, typ), n)


def _strings(texts: Sequence) -> Any:
    """A string column of ``texts``: a TextColumn's Arrow array as it is (no copy)."""
    return texts.array if isinstance(texts, TextColumn) else pa.array(texts, _STRING)


def _dump_rows_table(block: DumpRows, epoch: Optional[int], written_at: int) -> pa.Table:
    """One chunk's rows: constant columns repeated, positions ``HW.sub`` built by Arrow."""
    n = len(block)
    # The rows' JSON, and the keys', may be there already (core/row_text.py, core/text_column.py).
    keys = block.key_texts if block.key_texts is not None else _json_columns(block.keys, (), ())[0]
    afters = block.rows if block.texts else _json_columns((), (), block.rows)[2]
    subs = pc.utf8_lpad(
        pc.cast(pa.array(range(block.first_sub, block.first_sub + n), pa.int64()), pa.string()),
        width=SUB_WIDTH,
        padding="0",
    )
    positions = pc.binary_join_element_wise(pa.scalar(block.hw.coord + "."), subs, "")

    arrays = [
        _repeated(block.source_id, n),
        _repeated(block.table, n),
        _repeated(Op.READ.value, n),
        _strings(keys),
        _repeated(None, n),
        _strings(afters),
        positions,
        _repeated(Origin.DUMP.value, n),
        _repeated(block.dump_id, n),
        _repeated(block.schema_id, n),
        _repeated(None, n, _TS),
        _repeated(None, n),
    ]
    return _table(arrays, n, epoch, written_at)


def _table(arrays: list, n: int, epoch: Optional[int], written_at: int) -> pa.Table:
    arrays += [
        pa.nulls(n, pa.int64()) if epoch is None else pa.repeat(pa.scalar(epoch, pa.int64()), n),
        pa.repeat(pa.scalar(written_at, _TS), n),
    ]
    return pa.Table.from_arrays(arrays, schema=CHANGELOG_SCHEMA)


def events_from_batch(batch: pa.RecordBatch) -> Iterator[ChangeEvent]:
    cols = {name: batch.column(name) for name in CHANGELOG_FIELDS if name not in ("epoch", "written_at")}
    cols["commit_ts"] = cols["commit_ts"].cast(pa.int64())  # microseconds, as in ChangeEvent
    py = {name: col.to_pylist() for name, col in cols.items()}
    loads = json.loads
    for i in range(batch.num_rows):
        before, after = py["before"][i], py["after"][i]
        yield event_from_fields(
            source_id=py["source_id"][i],
            table=py["table"][i],
            op=py["op"][i],
            key=loads(py["key"][i]),
            before=None if before is None else loads(before),
            after=None if after is None else loads(after),
            position=py["position"][i],
            origin=py["origin"][i],
            dump_id=py["dump_id"][i],
            schema_id=py["schema_id"][i],
            commit_ts=py["commit_ts"][i],
            txid=py["txid"][i],
        )
