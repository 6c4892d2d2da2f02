"""``DumpOperator``: request a DBLog dump and wait (deferrably) until the capture finished it.

A dump never runs in the worker: the operator validates the request against the source's
schema (unknown table, malformed keys: the task fails before anything is recorded), records it
in the state store, and defers to a ``DumpTrigger`` that polls its progress. The running
capture (``CaptureOperator`` or ``dblog capture``) performs it between log batches.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional, Sequence, Union

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..core.dump_requests import control_dump, request_dump
from ..core.errors import RequestError
from ..hooks.connections import STATE_ONLY, DBLogConnections
from ..hooks.dblog import DBLogHook
from ..triggers.dump import DumpTrigger, progress_line


class DBLogDumpError(AirflowException):
    """The dump failed or was cancelled."""


def _key_value(text: str) -> Any:
    """A key's JSON (``42``, ``"abc"``, ``["eu", 7]``, ``{"id": 42}``), or a bare string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # an unquoted string key; the schema check still applies


def parse_keys(keys: Union[None, str, Sequence[Any]]) -> Optional[list[Any]]:
    """Key values from a list, or from text with one key per line (the UI form's textarea).
    A text line, or a string in the list, is JSON or else a bare string. A text is always one
    key per line: ``"[2600, 1]"`` is one composite key, never two keys."""
    if keys is None:
        return None
    if isinstance(keys, str):
        return [_key_value(line.strip()) for line in keys.splitlines() if line.strip()] or None
    if not isinstance(keys, (list, tuple)):
        # e.g. a template rendered as a native object turned the form's "2600" into an int
        raise TypeError(
            f"keys is {keys!r} ({type(keys).__name__}). Fix: pass a list of key values ([{keys!r}]) "
            "or a text with one key per line; render keys as text, not as a native object."
        )
    return [_key_value(k) if isinstance(k, str) else k for k in keys] or None


def _count(name: str, value: Union[int, str]) -> int:
    """A whole number from a template field (a rendered template is text): ``"1000"`` is 1000;
    anything else (``"10.5"``, ``True``) is refused rather than cast."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    raise ValueError(f"{name} is {value!r}. Fix: give a whole number, e.g. {name}=1000.")


class DumpOperator(BaseOperator):
    """Dump every captured table, some tables, or a list of keys of one table.

    :param source_conn_id: the source's Postgres or MySQL connection (to validate the request).
    :param state_conn_id: ``dblog_state`` connection; or ``state`` (path or ``zk://`` URL).
    :param tables: None or ``"all"`` for every captured table, a table, or a list of tables.
    :param keys: key values of one table (list, or text with one JSON key per line).
    :param where: only the rows this SQL expression accepts (one table; the database checks
        it before the dump is recorded, and chunks run read-only). Empty: every row.
    :param adaptive: pace chunk size and delay by the source's health (select latency, replica
        and capture lag), starting from ``chunk_size`` and ``delay_ms``.
    :param readers: connections that select each chunk of a table dump in parallel, over
        disjoint key ranges of ``chunk_size`` rows each (one watermark window per chunk).
    :param chunk_size: rows per chunk (the window between low and high watermark).
    :param delay_ms: pause between chunks (throttle).
    :param wait: wait until the dump finished (deferrable); False: return after recording it.
    :param poll_interval: seconds between progress checks.
    :param notifiers: called with the task's context plus ``dblog_dump_event`` (a dict: ``event``
        one of started, paused, resumed, table_done, completed, failed, cancelled; ``dump_id``,
        ``source_id``, and per event ``table``, ``rows``, ``chunks``, ``error``) for each event
        of the dump's lifecycle: Airflow notifiers (``BaseNotifier``: Slack, SMTP, ...) or any
        callable taking the context. The task defers again after each intermediate event.
    :param changelog: where the capture writes (its ``changelog`` URL); or ``changelog_conn_id``.
        Only for lineage (OpenLineage's output datasets): the dump itself goes through the
        running capture, which already knows its output. Unset: no output dataset is reported.
    """

    template_fields = (
        "source_conn_id",
        "state_conn_id",
        "state",
        "source_id",
        "tables",
        "keys",
        "where",
        "chunk_size",
        "delay_ms",
        "readers",
        "changelog",
        "changelog_conn_id",
    )
    ui_color = "#f8e7d7"

    def __init__(
        self,
        *,
        source_conn_id: str,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        source_id: Optional[str] = None,
        tables: Union[None, str, Sequence[str]] = None,
        keys: Union[None, str, Sequence[Any]] = None,
        where: Optional[str] = None,
        adaptive: bool = False,
        readers: Union[int, str] = 1,
        chunk_size: Union[int, str] = 10_000,
        delay_ms: Union[int, str] = 0,
        wait: bool = True,
        poll_interval: float = 5.0,
        changelog: Optional[str] = None,
        changelog_conn_id: Optional[str] = None,
        notifiers: Sequence[Callable[[Any], Any]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.changelog, self.changelog_conn_id = changelog, changelog_conn_id
        self.notifiers = list(notifiers)
        if self.notifiers and not wait:
            raise ValueError("notifiers need wait=True: the task delivers the dump's events while it waits")
        self.source_conn_id = source_conn_id
        self.state_conn_id = state_conn_id
        self.state = state
        self.source_id = source_id
        self.tables = tables
        self.keys = keys
        self.where = where
        self.adaptive = adaptive
        self.readers = readers
        self.chunk_size = chunk_size
        self.delay_ms = delay_ms
        self.wait = wait
        self.poll_interval = poll_interval
        self._dump_id: Optional[str] = None
        self._finished: Optional[dict[str, Any]] = None  # the dump's final status (lineage)

    def hook(self) -> DBLogHook:
        return DBLogConnections.of_operator(self).hook()

    def execute(self, context: Any) -> Optional[dict[str, Any]]:
        hook = self.hook()
        started = time.time()
        keys = parse_keys(self.keys)
        source, state = hook.get_source(), hook.get_state()
        try:
            spec = self._request(source, state, keys)
        finally:
            state.close()
        self._dump_id = spec.dump_id
        self.log.info(
            "dump %s recorded for source %s (tables=%s, keys=%s, where=%s, chunk size %s)",
            self._dump_id,
            spec.source_id,
            self.tables or "all",
            len(keys or []) or None,
            spec.where,
            self.chunk_size,
        )
        context["ti"].xcom_push(key="dump_id", value=self._dump_id)
        if not self.wait:
            return {"dump_id": self._dump_id, "status": "pending"}
        self._wait(started)
        return None

    def _wait(self, started: float, seen: Optional[dict[str, Any]] = None) -> None:
        assert self._dump_id is not None
        self.defer(
            trigger=DumpTrigger(
                self._dump_id,
                **DBLogConnections.of_operator(self).kwargs(*STATE_ONLY),
                poll_interval=self.poll_interval,
                notify=bool(self.notifiers),
                seen=seen,
            ),
            method_name="execute_complete",
            kwargs={"started": started},
        )

    def _notify(self, context: Any, events: Sequence[dict[str, Any]]) -> None:
        """Each lifecycle event to each notifier. A failing notifier is logged and the others
        still run: a Slack outage must not fail (or re-run) the dump's task."""
        for event in events:
            self.log.info(
                "dump %s: %s", event["dump_id"], event["event"] + (f" {event['table']}" if "table" in event else "")
            )
            for notifier in self.notifiers:
                try:
                    notifier({**context, "dblog_dump_event": event})
                except Exception:
                    self.log.exception("notifier %r failed on the dump's %s event", notifier, event["event"])

    def _request(self, source: Any, state: Any, keys: Optional[list[Any]]) -> Any:
        """Validate and record the request. Its errors name the source connection too: the
        repair form offers every source's tables, whichever connection is chosen, so a
        mismatched pair shows here, before anything is recorded."""
        try:
            return request_dump(
                source,
                state,
                self.tables,
                keys,
                chunk_size=_count("chunk_size", self.chunk_size),
                delay_ms=_count("delay_ms", self.delay_ms),
                where=self.where or None,
                adaptive=bool(self.adaptive),
                readers=_count("readers", self.readers),
            )
        except RequestError as e:
            raise RequestError(
                f"source connection {self.source_conn_id!r} (source {source.source_id}): {e.cause}",
                f"{e.fix} Or choose the source connection that captures {self.tables}.",
            ) from None

    def execute_complete(self, context: Any, event: dict[str, Any], started: Optional[float] = None) -> dict[str, Any]:
        d = event["dump"]
        self._dump_id = d["dump_id"]
        self._notify(context, event.get("events", []) if self.notifiers else [])
        if event["status"] == "progress":  # an intermediate lifecycle event: wait on
            self._wait(started or d["created_at"], event["seen"])
        self._finished = d
        self.log.info("%s", progress_line(d))
        if event["status"] != "done":
            raise DBLogDumpError(
                f"dump {d['dump_id']} {event['status']}" + (f": {d['error']}" if d.get("error") else "")
            )
        finished = d.get("updated_at") or time.time()
        summary = {
            "dump_id": d["dump_id"],
            "status": d["status"],
            "tables": {t: p["rows"] for t, p in d["progress"].items()},
            "rows": d["rows"],
            "chunks": d["chunks"],
            "duration_s": round(finished - (started or d["created_at"]), 3),
        }
        # The outlets' asset events (they schedule landing) say which dump they stand for.
        outlet_events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet_events is not None:
            for asset in self.outlets:
                outlet_events[asset].extra.update({"dblog_dump": summary})
        return summary

    # -- OpenLineage (lineage.py; called by Airflow's OpenLineage provider when installed) --
    def _requested_tables(self) -> Optional[list[str]]:
        if self.tables is None or self.tables == "all":
            return None
        return [self.tables] if isinstance(self.tables, str) else list(self.tables)

    def get_openlineage_facets_on_start(self) -> Any:
        """The requested tables, with their schemas, feed the changelog."""
        from .. import lineage

        hook = self.hook()
        source_id, inputs = lineage.source_inputs(hook, self._requested_tables())
        tables = [d.schema.table for d in inputs if d.schema]
        outputs = (
            lineage.changelog_datasets(hook.get_output(), source_id, tables, inputs) if self._knows_changelog() else []
        )
        return lineage.operator_lineage(inputs, outputs)

    def _knows_changelog(self) -> bool:
        return bool(self.changelog or self.changelog_conn_id)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What the dump wrote: the rows of each table (a changelog per table, Kafka's topics)
        or of all of them (one changelog table) as the output's statistics."""
        from .. import lineage

        d = self._finished
        if d is None:  # not waited for (wait=False): what was requested
            return self.get_openlineage_facets_on_start()
        hook = self.hook()
        source = hook.source_config()
        rows = {t: int(p["rows"]) for t, p in d["progress"].items()}
        inputs = [lineage.source_dataset(source, t) for t in rows]
        written: dict[tuple[str, str], int] = {}
        if self._knows_changelog():
            output = hook.get_output()
            for table, n in rows.items():
                for out in lineage.changelog_datasets(output, source["id"], [table]):
                    written[(out.namespace, out.name)] = written.get((out.namespace, out.name), 0) + n
        return lineage.operator_lineage(
            inputs, [lineage.LineageDataset(ns, name, row_count=n) for (ns, name), n in written.items()]
        )

    def on_kill(self) -> None:
        """Killed while recording (the deferred phase is the trigger's ``on_kill``): cancel it."""
        if self._dump_id:
            self.log.info("cancelling dump %s", self._dump_id)
            state = self.hook().get_state()
            try:
                control_dump(state, self._dump_id, "cancel")
            finally:
                state.close()
