"""The user side of dumps: record a request, change its control, read the status report.

One implementation for every front end: the ``dblog`` command (cli.py), the Airflow
operators and triggers (which build the source and the state store from connections with
``DBLogHook`` and call these functions). The running capture (core/engine.py) is the other
side: it performs the recorded requests, obeys their control and writes the report that
``read_status`` reads back under ``status_key(source_id)``.

A request is checked in full before anything is recorded: chunk size and delay, the
one-table rule of a key list, every table against the source's catalog (RequestError for an
unknown table) and every key against its table's key columns (core/dumps.py).
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional, Sequence, Union

from . import names
from .dumps import (
    DEFAULT_CHUNK_SIZE,
    DumpControl,
    DumpSpec,
    check_key_request,
    check_where_request,
    key_from_value,
    parse_key,
)
from .events import Key
from .protocols import LeaderLease, Source, StateStore

# What ``control_dump`` does, by the names of the ``dblog`` subcommands.
CONTROL_ACTIONS = ("pause", "resume", "cancel", "throttle")

# Table arguments that mean "every captured table" (Airflow forms and templates send text).
_ALL_TABLES = ("", "all", "*")

Tables = Union[None, str, Sequence[str]]


def status_key(source_id: str) -> str:
    """The state-store key under which a source's capture writes its status report."""
    return f"status/{source_id}"


def parse_tables(tables: Tables) -> Optional[list[str]]:
    """None for every captured table, else the table names.

    ``tables``: None, ``"all"`` / ``"*"`` / ``""``, one table name, or a list of names."""
    if tables is None:
        return None
    if isinstance(tables, str):
        name = tables.strip()
        return None if name.lower() in _ALL_TABLES else [names.canonical(name)]
    return [names.canonical(t) for t in tables] or None


def request_dump(
    source: Source,
    state: StateStore,
    tables: Tables = None,
    keys: Optional[Sequence[Any]] = None,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    delay_ms: int = 0,
    keys_as_json: bool = False,
    where: Optional[str] = None,
    adaptive: bool = False,
    readers: int = 1,
) -> DumpSpec:
    """Validate a dump request against the source's schemas and record it in ``state``.

    ``tables``: see ``parse_tables`` (None: every captured table). ``keys``: key values of
    exactly one table, each a scalar, a list in key order or an object naming the key
    columns; with ``keys_as_json`` each is that value's JSON text (``dblog dump --key``).
    ``where``: a row filter of exactly one table (core/predicates.py), which the source's
    database plans (EXPLAIN) before anything is recorded. ``readers``: connections that
    select a table dump's chunk ranges in parallel (core/parallel.py).
    Opens and closes ``source`` (it needs the catalog only). Nothing is recorded if any
    part is invalid; the RequestError names the cause and the fix."""
    # range checks; adaptive: chunk size and delay are where the pace starts (core/pacing.py)
    control = DumpControl(
        chunk_size=int(chunk_size), delay_ms=int(delay_ms), adaptive=bool(adaptive), readers=int(readers)
    )
    names = parse_tables(tables)
    check_key_request(names, keys)  # before connecting: the request's shape
    if isinstance(where, str) and not where.strip():
        where = None  # an empty form field: no filter
    check_where_request(names, keys, where)
    parsed: Optional[list[Key]] = None
    source.open()
    try:
        listed = names if names is not None else source.tables()
        schemas = {t: source.table_schema(t) for t in listed}  # RequestError for unknown tables
        if keys is not None and names is not None:  # check_key_request: exactly one table
            schema = schemas[names[0]]
            parsed = [parse_key(k, schema) if keys_as_json else key_from_value(k, schema) for k in keys]
        if where is not None and names is not None:  # check_where_request: exactly one table
            source.check_predicate(schemas[names[0]], where)
    finally:
        source.close()
    spec = DumpSpec.new(source.source_id, names, parsed, where)
    state.add_dump(spec, control)
    return spec


def control_dump(
    state: StateStore,
    dump_id: str,
    action: str,
    chunk_size: Optional[int] = None,
    delay_ms: Optional[int] = None,
) -> DumpControl:
    """Pause, resume, cancel or throttle a dump; returns the control now stored.

    ``chunk_size`` / ``delay_ms`` apply to ``throttle`` (None keeps the current value).
    RequestError for an unknown dump or an out-of-range value."""
    current = state.get_dump(dump_id).control
    if action == "pause":
        control = current.as_paused()
    elif action == "resume":
        control = current.as_resumed()
    elif action == "cancel":
        control = current.as_cancelled()
    elif action == "throttle":
        control = current.throttled(chunk_size, delay_ms)
    else:
        raise ValueError(f"unknown dump control action {action!r}; expected one of {CONTROL_ACTIONS}")
    state.set_control(dump_id, control)
    return control


def read_capture_report(state: StateStore, source_id: str) -> Optional[dict[str, Any]]:
    """The last status report the source's capture stored, or None before the first one."""
    raw = state.get_value(status_key(source_id))
    if not raw:
        return None
    report: dict[str, Any] = json.loads(raw)
    return report


def dump_status(state: StateStore, dump_id: str) -> dict[str, Any]:
    """One dump as ``dblog status --json`` shows it (percentages from the capture's row
    estimates), plus ``updated_at`` and ``checked_at``. RequestError for an unknown dump."""
    dump = state.get_dump(dump_id)
    report = read_capture_report(state, dump.spec.source_id) or {}
    result = dump.to_dict(report.get("estimates"))
    result["updated_at"] = dump.updated_at
    result["checked_at"] = time.time()
    return result


# A capture writes a report every ``status_interval`` seconds; one whose last report is older
# than this many intervals (plus SILENT_GRACE seconds, for a long chunk SELECT or a reconnect
# between two reports) is "silent": hung, reconnecting, or killed while its ZooKeeper session
# still holds the lease.
SILENT_INTERVALS = 3
SILENT_GRACE = 10.0


# The report's per-dump fields that only a running capture knows (core/scheduler.py
# ``health``). Everything else about a dump (status, rows, chunks, progress, control) is the
# stored record's: one source of truth, whatever the age of the report.
LIVE_DUMP_FIELDS = ("estimated_total", "rows_per_s", "eta_seconds", "waiting", "pace")


def capture_state(
    report: dict[str, Any], leader: Optional[dict[str, Any]], lease_known: bool, now: float
) -> dict[str, Any]:
    """Whether the capture that wrote ``report`` still runs: ``state`` "running", "silent"
    (it holds the lease but reports no more) or "stopped" (``stopped_at``: its last report),
    and ``why`` in words.

    The lease decides when it is known (``lease_known``: ``leader`` is the holder now, None
    for nobody) and the report names its writer's lease: a capture whose identity and epoch
    no longer hold it has stopped. The report's age against its ``status_interval`` tells a
    holder that went silent."""
    age = now - float(report["updated_at"])
    interval = report.get("status_interval")
    limit = SILENT_INTERVALS * float(interval) + SILENT_GRACE if interval else None
    writer = report.get("leader") or None
    state, why = "running", f"last report {age:.0f} s ago"
    if lease_known and writer is not None:
        holder = (leader or {}).get("identity"), (leader or {}).get("epoch")
        if leader is None:
            state, why = "stopped", "no capture holds the leader lease"
        elif holder != (writer.get("identity"), writer.get("epoch")):
            state, why = "stopped", f"the lease is now held by {holder[0]} (epoch {holder[1]})"
    if state == "running" and limit is not None and age > limit:
        state, why = "silent", f"no report for {age:.0f} s (reports every {interval:g} s)"
    return {"state": state, "stopped_at": report["updated_at"] if state == "stopped" else None, "why": why}


def read_status(state: StateStore, source_id: Optional[str], lease: Optional[LeaderLease] = None) -> dict[str, Any]:
    """What ``dblog status`` prints: the checkpoint, the capture's last report (with its age
    and whether that capture still runs, ``capture_state``), lag, warnings, and every dump of
    the source, with the capture's live rates and ETAs while it runs.

    ``source_id`` None (no source configured): no checkpoint or report, every dump listed.
    ``lease``: the source's leader lease, asked who holds it (``LeaderLease.leader()``);
    None: unknown, and the report's age alone tells."""
    leader = lease.leader() if lease is not None else None
    capture = read_capture_report(state, source_id) if source_id else None
    if capture:
        now = time.time()
        capture["age_s"] = round(now - capture["updated_at"], 1)
        capture.update(capture_state(capture, leader, lease is not None, now))
    report = capture or {}
    checkpoint = state.get_checkpoint(source_id) if source_id else None
    running = report.get("state") == "running"
    live = (report.get("dumps") or {}) if running else {}
    dumps = []
    for d in state.list_dumps(source_id):
        entry = d.to_dict(report.get("estimates"))
        if not d.status.finished:  # rates and ETAs of the dumps the running capture performs
            entry.update((k, v) for k, v in live.get(d.dump_id, {}).items() if k in LIVE_DUMP_FIELDS)
        dumps.append(entry)
    return {
        "source_id": source_id,
        "checkpoint": checkpoint.encode() if checkpoint else None,
        "leader": leader,
        "lag_bytes": report.get("lag_bytes"),
        "lag_seconds": report.get("lag_seconds"),
        "events_per_s": report.get("events_per_s"),
        "warnings": report.get("warnings") or [],
        "capture": capture,
        "dumps": dumps,
    }


def request_repairs(
    source: Source, state: StateStore, mismatched: dict[str, list[Key]], chunk_size: int = DEFAULT_CHUNK_SIZE
) -> dict[str, DumpSpec]:
    """A key-list dump per table of exactly the keys ``dblog verify`` found different,
    missing or extra (table -> its dump): the running capture re-reads those rows, and a
    listed key the source no longer has is deleted (a key-list chunk states its keys, op k).
    Reads a few rows instead of the whole table."""
    return {
        table: request_dump(source, state, [table], [list(k) for k in keys], chunk_size=chunk_size)
        for table, keys in mismatched.items()
        if keys
    }
