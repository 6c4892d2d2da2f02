"""``CaptureOperator``: continuous log capture as one long-lived, deferrable task.

The task defers at once to a ``CaptureTrigger`` that supervises ``dblog capture`` for one
bounded session; at the end of each session it defers again. So no worker slot is held, a
triggerer restart costs at most one session (the engine resumes from its checkpoint), killing
the task stops the child (the trigger's ``cleanup``), and a crash of the engine fails the task
with the engine's own error message (cause and fix).
"""

from __future__ import annotations

from typing import Any, Optional

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..hooks.connections import DBLogConnections
from ..triggers.capture import CaptureTrigger
from ..ui.links import DBLogStatusLink


class DBLogCaptureError(AirflowException):
    """The capture process failed; the message is its error output."""


class CaptureOperator(BaseOperator):
    """Capture a source's log (and run requested dumps) into the changelog, for ever.

    :param source_conn_id: Postgres or MySQL connection (DBLog options in its extras).
    :param state_conn_id: ``dblog_state`` connection; or ``state`` (path or ``zk://`` URL).
    :param changelog: changelog URL (``delta://DIR``, ``s3://...``, ``jsonl://DIR``); or
        ``changelog_conn_id``, a connection whose extra ``url`` (or ``path``) names it.
    :param session_seconds: length of one capture session before the task defers again.
    :param max_sessions: stop (successfully) after this many sessions; None: run for ever.
    :param status_interval: seconds between the engine's progress lines in the task log.
    :param redump_on_position_lost: when the log position is lost (a dropped or lost slot, a
        purged binlog), start at the log's end and dump every table instead of failing.
    """

    template_fields = ("source_conn_id", "state_conn_id", "state", "changelog", "changelog_conn_id", "source_id")
    ui_color = "#d7eaf8"
    operator_extra_links = (DBLogStatusLink(),)  # the capture's state in the UI (docs/operations.md)

    def __init__(
        self,
        *,
        source_conn_id: str,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        changelog: Optional[str] = None,
        changelog_conn_id: Optional[str] = None,
        source_id: Optional[str] = None,
        session_seconds: float = 3600.0,
        max_sessions: Optional[int] = None,
        status_interval: float = 30.0,
        redump_on_position_lost: bool = False,
        metrics_port: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if session_seconds <= 0:
            raise ValueError("session_seconds must be positive")
        self.source_conn_id = source_conn_id
        self.state_conn_id = state_conn_id
        self.state = state
        self.changelog = changelog  # not "output": BaseOperator.output is the XComArg
        self.changelog_conn_id = changelog_conn_id
        self.source_id = source_id
        self.session_seconds = session_seconds
        self.max_sessions = max_sessions
        self.status_interval = status_interval
        self.redump_on_position_lost = redump_on_position_lost
        # the capture's Prometheus endpoint on the triggerer's host (docs/operations.md)
        self.metrics_port = metrics_port

    @property
    def connections(self) -> DBLogConnections:
        return DBLogConnections.of_operator(self)

    def _trigger(self, session: int) -> CaptureTrigger:
        return CaptureTrigger(
            **self.connections.kwargs(),
            session_seconds=self.session_seconds,
            status_interval=self.status_interval,
            session=session,
            redump_on_position_lost=self.redump_on_position_lost,
            metrics_port=self.metrics_port,
        )

    def execute(self, context: Any) -> None:
        # Fail here, in the worker, on a connection that cannot describe a source: clearer
        # than a trigger error, and nothing is started.
        cfg = self.connections.hook().engine_config()
        self.log.info(
            "capturing source %s (%s) into %s",
            cfg["source"]["id"],
            cfg["source"]["type"],
            cfg["output"].get("url", "the default changelog"),
        )
        self.defer(trigger=self._trigger(1), method_name="execute_complete")

    def get_openlineage_facets_on_start(self) -> Any:
        """OpenLineage (lineage.py; called by Airflow's OpenLineage provider when installed):
        the captured tables, with their schemas, feed the changelog. A capture runs for ever,
        so this start event is its lineage."""
        from .. import lineage

        hook = self.connections.hook()
        source_id, inputs = lineage.source_inputs(hook)
        tables = [d.schema.table for d in inputs if d.schema]
        outputs = lineage.changelog_datasets(hook.get_output(), source_id, tables, inputs)
        return lineage.operator_lineage(inputs, outputs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Optional[dict[str, Any]]:
        session = int(event.get("session", 1))
        if event.get("status") != "session_end":
            raise DBLogCaptureError(
                f"capture session {session} failed (exit code {event.get('returncode')}):\n{event.get('message', '')}"
            )
        self.log.info("capture session %d ended: %s", session, event.get("last_status"))
        if self.max_sessions is not None and session >= self.max_sessions:
            return {"sessions": session, "source_id": event.get("source_id")}
        self.defer(trigger=self._trigger(session + 1), method_name="execute_complete")
        return None
