"""The contracts the engine is written against: Source, Output, StateStore and LeaderLease,
and the optional capabilities a source or an output declares on top of them.

Sources (sources/), outputs (outputs/) and state stores and leases (state/) implement these;
the engine (core/engine.py) knows nothing else about them. A capability is a small protocol
checked with ``isinstance`` (never found by probing attributes or signatures):

=====================  ====================================================  ==============
capability             what it adds                                          declared by
=====================  ====================================================  ==============
ParallelChunkReaders   ``chunk_readers(n)``: more connections for one chunk  both sources
RangeDigests           ``range_digest`` and ``row_hasher`` (verify --ranges)  both sources
RowTextChunks          ``select_chunk(..., texts=True)``: rows as JSON text  both sources
RowTextLog             ``start_log(..., texts=True)``: log images as text    both sources
RowTextOutput          takes a chunk's rows as their JSON text               the Delta output
FullRowIndex           which keys of a table have a full row                 the Delta output
=====================  ====================================================  ==============

A wrapper (core/fencing.py's FencedOutput, the tests' fault injectors) declares exactly the
capabilities of what it wraps: ``__getattr__`` delegation is invisible to ``isinstance`` on
Python 3.12 and later.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, runtime_checkable

from .batch import LogRows
from .dumps import Dump, DumpControl, DumpSpec, DumpStatus, TableProgress
from .errors import DBLogError
from .events import ChangeEvent, Key, LogItem, Position, Row, TableSchema


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    """Rows of one chunk SELECT, in key order, canonical values.

    ``invisible_txids``: transactions the SELECT's snapshot did not see although they may
    commit before the high watermark (PostgreSQL's commit order in the WAL and visibility
    order can differ). Their log events remove keys from the chunk like window events do.

    ``texts``: the rows are their changelog JSON texts and ``keys`` their keys, in order
    (``select_chunk(..., texts=True)``; core/row_text.py); the texts may be a TextColumn
    (core/text_column.py), which may come with the keys' JSON texts too (``key_texts``).
    """

    rows: Sequence[Any]  # Row dicts, or JSON texts (texts)
    invisible_txids: frozenset[str] = frozenset()
    keys: Optional[list[Key]] = None
    texts: bool = False
    key_texts: Optional[Sequence[str]] = None


@runtime_checkable
class Source(Protocol):
    source_id: str

    # Every method that talks to the server raises SourceUnavailable (core/errors.py) for a
    # lost or refused connection that a reconnect can cure; the engine then reopens the source
    # and resumes from its last position. Anything else stops the capture (or fails a dump).

    def open(self) -> None:
        """Connect and validate the configuration; raise ConfigurationError with the fix.

        Creates what DBLog needs if absent: the watermark table and this source's row,
        replication slot and publication (PostgreSQL)."""

    def tables(self) -> list[str]:
        """The captured tables, as "schema.table"."""

    def table_schema(self, table: str) -> TableSchema:
        """Current schema; RequestError for an unknown table, ConfigurationError without a key."""

    def catalog_schema(self, table: str) -> TableSchema:
        """The table's schema as the catalog has it now, read afresh (no cache): the engine
        compares it with the recorded one to notice schema changes (core/schema_watch.py)."""

    def start_log(self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None) -> None:
        """Start reading the log so that every event with a position > ``after`` is delivered
        (some events <= ``after`` may be delivered again; the engine drops them). ``None``:
        from the source's own bookmark (PostgreSQL: the slot; MySQL: where this source object
        first started, else the current end); ``from_end``: from the current end of the log
        (a reset). PositionLostError when the log is gone. ``floor``: the highest position
        already in the changelog; a source whose positions could start lower on a new server
        (MySQL GTID positions after a failover that lost transactions) starts above it.
        (``RowTextLog``: a source that can also give the log's images as JSON text.)"""

    def reset_log(self) -> None:
        """Make the log readable again from its current end after PositionLostError (the
        engine's opt-in recovery, then ``start_log(None, from_end=True)``): PostgreSQL
        recreates a dropped or lost slot; MySQL needs nothing."""

    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        """Up to about ``max_items`` log items in log order (a ``LogRows`` block counts as its
        changes and is never cut); waits at most ``timeout`` seconds for the first one and
        returns [] when the log is idle."""

    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        """This process holds the source's leader lease (called before ``open``). The source
        then calls ``check()`` (it raises StaleEpochError once the lease is lost) before every
        connection its log reader opens, so a deposed process opens none; and it ends a
        previous holder's replication session that still holds the log (a paused or cut-off
        old leader) instead of waiting for the server to time it out. ``previous``: the
        previous holder's last ``log_status()`` report, where a source can find that session.
        ``domain``: the lease's ``domain``. The source marks its log reader with it and ends
        only a reader marked alike; a reader of another domain (a capture with a separate
        state store, which the lease cannot exclude) is a ConfigurationError naming it."""

    def write_watermark(self, uuid: str) -> None:
        """Commit one UPDATE of this source's watermark row (it then appears in the log)."""

    def replication_lag(self) -> Optional[float]:
        """Seconds the source's most lagging replica is behind (inf: one is not replicating),
        None when the source knows of no replica: a signal of adaptive dumps (core/pacing.py)."""

    def check_predicate(self, schema: TableSchema, where: str) -> None:
        """RequestError unless the database accepts ``where`` in this table's chunk query
        (it plans the query, EXPLAIN, without running it): before a filtered dump is recorded."""

    def select_chunk(
        self,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key] = None,
        where: Optional[str] = None,
    ) -> ChunkResult:
        """``WHERE key > after_key AND key <= upper_key ORDER BY key LIMIT limit`` as its own
        autocommit statement (None: no such bound); with ``where`` also ``AND (where)``, in a
        read-only transaction. RequestError when the table or a column is gone or no longer
        readable, or the filter fails (that dump fails, the capture goes on). (``RowTextChunks``:
        a source that can also give the rows as their JSON text.)"""

    def max_key(self, schema: TableSchema) -> Optional[Key]:
        """The table's greatest key now (``ORDER BY key DESC LIMIT 1``), canonical like the
        keys of chunk rows; None for an empty table. A table dump fixes it as its upper bound
        when it starts. RequestError as for ``select_chunk``."""

    def select_keys(self, schema: TableSchema, keys: Sequence[Key]) -> ChunkResult:
        """The rows with exactly these keys (missing keys are simply absent)."""

    def acknowledge(self, position: Position) -> None:
        """Everything up to ``position`` is durable in the output (PostgreSQL: flush feedback)."""

    def estimate_rows(self, table: str) -> int:
        """A cheap estimate of the table's row count (statistics, not COUNT(*))."""

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        """(table, key, position) of the changes decoded since the last call whose ``after``
        lacks a value the log did not carry (PostgreSQL: an unchanged TOASTed column without
        REPLICA IDENTITY FULL, core/toast.py); the engine queues a key-list dump for them.
        Sources whose log always carries whole rows return []."""

    def log_status(self) -> dict[str, Any]:
        """The source's current log head and how far behind the reader is."""

    def close(self) -> None: ...


@runtime_checkable
class Output(Protocol):
    """Where the ordered stream goes. ``write`` returns only when the batch is durable."""

    def open(self) -> None: ...

    def register_schema(self, schema: TableSchema) -> None:
        """Store a table schema (idempotent by schema id) before events reference it."""

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        """``register_schema`` of each, at once where the output can (one commit): a capture
        of a thousand tables registers a thousand schemas before its first batch."""

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        """Make the batch durable as one commit. Events at or below ``last_position`` of
        their source are skipped, so retrying a batch after an unknown outcome is safe.

        The engine's writer passes a ``core.batch.EventBatch``: iterate it like any sequence
        of ChangeEvents (dump rows are made into events on the fly), or read its
        ``segments`` to handle a chunk's rows as one block. A ``RowTextOutput`` gets those
        blocks' rows as their changelog JSON text (``DumpRows.texts``, core/row_text.py)."""

    def last_position(self, source_id: str) -> Optional[Position]:
        """The highest durable position of this source (None when nothing is written)."""

    def close(self) -> None: ...


# -- capabilities a source or an output may declare ------------------------------------------

ChunkReader = Callable[..., ChunkResult]  # select_chunk's signature, without ``texts``


@runtime_checkable
class OwnRowForm(Protocol):
    """An output whose ``scan`` gives rows in a form of its own rather than the canonical
    values (Kafka's Debezium envelope with Connect schemas: Debezium's types). ``dblog
    verify`` puts the source's rows into that form before it compares them."""

    def source_form(self, schema: TableSchema) -> Optional[Callable[[dict[Key, Row]], dict[Key, Row]]]:
        """The conversion of a table's source rows (by key) into the rows and keys ``scan``
        gives; None where ``scan`` gives canonical values."""


@runtime_checkable
class ParallelChunkReaders(Protocol):
    """A source that reads one chunk's key ranges on several connections at once (a dump's
    ``--readers``, core/parallel.py); without it the ranges are read one after another."""

    def chunk_readers(self, n: int) -> list[ChunkReader]:
        """``n`` more ways to run ``select_chunk`` (without ``texts``), each on a connection of
        its own, opened on first use and kept for the next chunks (closed with the source)."""


@runtime_checkable
class Preflight(Protocol):
    """A source that validates its settings without changing anything (``dblog doctor``):
    ``open``'s server settings, privileges and table checks, but no lease, no slot, no
    publication and no watermark row."""

    def preflight(self) -> None:
        """Raise ConfigurationError naming the first problem and its fix; SourceUnavailable
        when the server cannot be reached."""


@runtime_checkable
class CatalogFingerprints(Protocol):
    """A source that tells in one round trip whether tables' catalog definitions moved: the
    periodic schema check (core/schema_step.py) then reads the catalog of those tables only,
    so an idle capture's cost does not grow with its table count."""

    def catalog_fingerprints(self, tables: Sequence[str]) -> dict[str, str]:
        """A text per table that changes whenever what ``catalog_schema`` reads of it changes
        (columns, their types and nullability, the key); a table that does not exist is left
        out."""


@runtime_checkable
class CatalogSchemas(Protocol):
    """A source that reads many tables' catalog schemas in a few queries: the schema check's
    first and every full pass then cost a few round trips, not a few per table."""

    def catalog_schemas(self, tables: Sequence[str]) -> dict[str, TableSchema | DBLogError]:
        """Each table's ``catalog_schema``, or the error that would raise for it (a dropped
        table, a table without a key); SourceUnavailable for the whole read."""


@runtime_checkable
class RangeDigests(Protocol):
    """A source that digests a key range where the rows are (``dblog verify --ranges``,
    core/range_verify.py); without it a table is compared whole."""

    def range_digest(self, schema: TableSchema, after_key: Optional[Key], upper_key: Optional[Key]) -> tuple[int, int]:
        """(rows, sum of row hashes) of the key range (after_key, upper_key], computed by the
        database: only the two numbers leave the server."""

    def row_hasher(self, schema: TableSchema) -> Callable[[Row], int]:
        """The hash ``range_digest`` sums, computed in Python from a row's canonical values."""


@runtime_checkable
class RowTextChunks(Protocol):
    """A source whose ``select_chunk`` can give the rows as their changelog JSON text with
    their keys (``ChunkResult.texts``), made a few thousand rows at a time (core/row_text.py):
    asked for when the output is a ``RowTextOutput``. ``selects_row_text`` is the declaration
    (a wrapper answers for what it wraps); without it the engine encodes the rows itself."""

    selects_row_text: bool

    def select_chunk(
        self,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key] = None,
        where: Optional[str] = None,
        texts: bool = False,
    ) -> ChunkResult: ...


@runtime_checkable
class RowTextLog(Protocol):
    """A source whose ``start_log`` takes ``texts``: a change's ``before``/``after`` may then
    come as their changelog JSON text instead of dicts (core/row_text.py), except the
    ``before`` of an update that changes the key, which stays a dict (the engine splits it),
    and changes of one table, op and transaction may come as one ``LogRows`` block
    (core/batch.py). Asked for when the output is a ``RowTextOutput``; ``logs_row_text`` is
    the declaration, as for ``RowTextChunks``."""

    logs_row_text: bool

    def start_log(
        self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None, texts: bool = False
    ) -> None: ...


@runtime_checkable
class RowTextOutput(Protocol):
    """An output that stores rows as their changelog JSON text anyway (the Delta changelog):
    a chunk's rows wait for HW and for the writer as that text (``DumpRows.texts``), which
    costs a fraction of the memory of dicts. ``takes_row_text`` is the declaration."""

    takes_row_text: bool


class ReadableOutput(Output, Protocol):
    def scan(self, source_id: str, table: str) -> Iterator[ChangeEvent]:
        """Every stored event of one table, in any order (used by ``dblog verify``)."""


@runtime_checkable
class FullRowIndex(Protocol):
    """An output that can say which keys of a table it holds a full row of (core/toast.py):
    the capture then repairs only the unchanged-TOAST placeholders nothing fills."""

    def full_row_keys(self, source_id: str, table: str) -> list[Key]:
        """Keys whose newest insert or dump row is newer than their last delete and the
        table's last TRUNCATE."""


@runtime_checkable
class WholeRowConsumers(Protocol):
    """An output whose consumers take each row image as the whole row (a Debezium envelope:
    a sink connector writes what ``after`` holds), so an unchanged-TOAST placeholder would
    be written as a value: the capture repairs every one with a key-list dump (core/toast.py)."""

    def needs_whole_rows(self) -> bool:
        """True when the output's records go to such consumers (its format says)."""


@dataclasses.dataclass(frozen=True)
class Fence:
    """Proof that the writer holds a source's leader lease at ``epoch`` (invariant 7), in the
    form the state store can check atomically with each write: ZooKeeper checks that the
    holder's contender znode ``holder`` still exists and the epoch znode still has
    ``version``; the local store checks the epoch it keeps for the source."""

    source_id: str
    epoch: int
    holder: str = ""
    version: int = -1


@runtime_checkable
class StateStore(Protocol):
    """Checkpoints, dump requests and their progress. Shared by the engine and the CLI."""

    def fenced(self, fence: Fence) -> "StateStore":
        """A view of this store for the lease holder: reads as usual; every write (checkpoint,
        dump status and progress, values) happens only if ``fence`` still holds, in one atomic
        step with that check, and raises StaleEpochError otherwise. Its checkpoints never move
        backwards (a lower position than the stored one is not written)."""

    def get_checkpoint(self, source_id: str) -> Optional[Position]: ...

    def set_checkpoint(self, source_id: str, position: Position) -> None: ...

    def clear_checkpoint(self, source_id: str) -> None: ...

    def add_dump(self, spec: DumpSpec, control: Optional[DumpControl] = None) -> None: ...

    def get_dump(self, dump_id: str) -> Dump:
        """RequestError when unknown."""

    def list_dumps(self, source_id: Optional[str] = None) -> list[Dump]:
        """All dumps (oldest first), with their control, status and progress."""

    def set_control(self, dump_id: str, control: DumpControl) -> None:
        """User side: pause/resume/cancel, chunk size and delay (the engine polls these)."""

    def set_status(self, dump_id: str, status: DumpStatus, error: Optional[str] = None) -> None:
        """Engine side: the dump's lifecycle."""

    def save_progress(self, dump_id: str, table: str, progress: TableProgress) -> None:
        """Engine side, only after the output made the chunk durable (invariant 5)."""

    def put_value(self, key: str, value: str) -> None:
        """Small named values (e.g. log status for ``dblog status``)."""

    def get_value(self, key: str) -> Optional[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class LeaderLease(Protocol):
    """One writer per source (DESIGN invariant 7): every capture instance of a source
    contends for the lease; only the holder reads the log and writes the output.

    Each acquisition gets an **epoch** strictly greater than every earlier one of the same
    source; the engine writes it with every output commit, and the output refuses a commit
    whose epoch is lower than one it already holds (the deposed leader that wakes up)."""

    identity: str  # who contends, e.g. "host:pid" (shown by `dblog status`)

    @property
    def domain(self) -> str:
        """Which captures this lease coordinates: equal for those sharing its store (the
        leader and its standbys), different for a capture coordinated by another store."""

    def acquire(
        self, stop: threading.Event, on_standby: Optional[Callable[[Optional[dict[str, Any]]], None]] = None
    ) -> Optional[int]:
        """Block until this instance holds the lease and return the new epoch; ``None`` when
        ``stop`` was set first. While waiting, ``on_standby(leader())`` is called each time
        another holder is seen."""

    def held(self) -> bool:
        """Cheap, local view: False once the lease is known lost or its connection is
        suspended (then call ``check``). No I/O."""

    def check(self) -> None:
        """Authoritative: returns only if this instance still holds the lease (asking the
        coordinator; waits while its connection is suspended); otherwise raises
        StaleEpochError. Called before every output commit and checkpoint."""

    def leader(self) -> Optional[dict[str, Any]]:
        """The current holder: {"identity", "epoch", "acquired_at", "standby"}; None if none."""

    def fence(self) -> Fence:
        """The proof of the current holding, for ``StateStore.fenced`` (after ``acquire``)."""

    def release(self) -> None: ...
