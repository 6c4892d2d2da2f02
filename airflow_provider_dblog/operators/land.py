"""The landing's operators.

``SparkSubmitLandOperator``: Airflow's ``SparkSubmitOperator`` running the landing job (the
``dblog_land`` DAG's event and schedule modes), reporting its OpenLineage datasets.

``ContinuousLandOperator``: the Spark landing as one long-lived, deferrable task. The
continuous counterpart of the SparkSubmitOperator runs: the task defers to a ``LandTrigger``
that runs the landing job in continuous mode (a micro-batch every ``trigger_seconds``) for one
session, then defers again, like ``CaptureOperator``. A failed session fails the task with the
job's own last lines (retries resume from the checkpoint).
"""

from __future__ import annotations

from typing import Any, Optional

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..triggers.land import LandTrigger


class DBLogLandError(AirflowException):
    """The continuous landing process failed; the message is its last output."""


class SparkSubmitLandOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` for the landing job: the job's ``--lake`` / ``--source`` /
    ``--mirrors`` come from these arguments (before ``application_args``), and its lineage too.

    Why a subclass and not ``inlets``/``outlets``: the OpenLineage provider turns a plain
    SparkSubmitOperator's inlets and outlets into datasets only through the asset converters
    of whichever providers are installed (``file`` from common-io, ``s3`` from amazon, none
    for ``s3a``), names them by its rule, not lineage.py's, and knows them at parse time,
    when the mirrors a run lands are unknown; outlets would also emit asset events. These two
    methods reuse lineage.py, as ``ContinuousLandOperator`` does.

    :param lake: the changelog's root (the job's ``--lake``).
    :param source: land only this source id (default: every source).
    :param mirrors: root of the mirror tables (default ``<lake>/mirrors``).
    """

    template_fields = (*SparkSubmitOperator.template_fields, "lake", "source", "mirrors")

    def __init__(
        self,
        *,
        lake: str,
        source: Optional[str] = None,
        mirrors: Optional[str] = None,
        application_args: Optional[list[Any]] = None,
        **kwargs: Any,
    ) -> None:
        job_args = [
            "--lake",
            lake,
            *(["--source", source] if source else []),
            *(["--mirrors", mirrors] if mirrors else []),
        ]
        super().__init__(application_args=[*job_args, *(application_args or [])], **kwargs)
        self.lake = lake
        self.source = source
        self.mirrors = mirrors

    def get_openlineage_facets_on_start(self) -> Any:
        """OpenLineage (lineage.py; called by Airflow's OpenLineage provider when installed):
        the changelog feeds the mirrors that exist when the job starts."""
        from .. import lineage

        return lineage.operator_lineage(*lineage.landing_datasets(self.lake, self.mirrors, self.source))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """As at the start, listed again: the mirrors this run created are there now."""
        return self.get_openlineage_facets_on_start()


class ContinuousLandOperator(BaseOperator):
    """Land the changelog into the Delta mirrors continuously.

    :param lake: the changelog's root (what ``land_changelog --lake`` takes).
    :param source: land only this source id (default: every source).
    :param mirrors: root of the mirror tables (default ``<lake>/mirrors``).
    :param trigger_seconds: the streaming query's processing-time trigger.
    :param session_seconds: length of one session before the task defers again.
    :param max_sessions: stop (successfully) after this many sessions; None: run for ever.
    :param parallel_tables: tables of a micro-batch landed at once (the job's
        ``--parallel-tables``); None: the job's default.
    :param jars: the Delta jars (comma-separated paths) for the child's Spark session;
        default: what ``resolve_jars`` finds in the triggerer's environment.
    """

    template_fields = ("lake", "source", "mirrors")
    ui_color = "#e6f4d7"

    def __init__(
        self,
        *,
        lake: str,
        source: Optional[str] = None,
        mirrors: Optional[str] = None,
        trigger_seconds: float = 5.0,
        session_seconds: float = 3600.0,
        max_sessions: Optional[int] = None,
        parallel_tables: Optional[int] = None,
        jars: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if trigger_seconds <= 0 or session_seconds <= 0:
            raise ValueError("trigger_seconds and session_seconds must be positive")
        if parallel_tables is not None and parallel_tables < 1:
            raise ValueError(f"parallel_tables is {parallel_tables}: give 1 (one table after another) or more")
        self.parallel_tables = parallel_tables
        self.lake = lake
        self.source = source
        self.mirrors = mirrors
        self.trigger_seconds = trigger_seconds
        self.session_seconds = session_seconds
        self.max_sessions = max_sessions
        self.jars = jars

    def _trigger(self, session: int) -> LandTrigger:
        return LandTrigger(
            self.lake,
            source=self.source,
            mirrors=self.mirrors,
            trigger_seconds=self.trigger_seconds,
            session_seconds=self.session_seconds,
            session=session,
            parallel_tables=self.parallel_tables,
            jars=self.jars,
        )

    def execute(self, context: Any) -> None:
        self.log.info("landing %s continuously (every %.0f s)", self.lake, self.trigger_seconds)
        self.defer(trigger=self._trigger(1), method_name="execute_complete")

    def get_openlineage_facets_on_start(self) -> Any:
        """OpenLineage (lineage.py; called by Airflow's OpenLineage provider when installed):
        the changelog feeds the mirrors that exist when the task starts."""
        from .. import lineage

        return lineage.operator_lineage(*lineage.landing_datasets(self.lake, self.mirrors, self.source))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Optional[dict[str, Any]]:
        session = int(event.get("session", 1))
        if event.get("status") != "session_end":
            raise DBLogLandError(
                f"continuous landing session {session} failed (exit code {event.get('returncode')}):\n"
                f"{event.get('message', '')}"
            )
        self.log.info("continuous landing session %d ended: %s", session, event.get("last"))
        if self.max_sessions is not None and session >= self.max_sessions:
            return {"sessions": session}
        self.defer(trigger=self._trigger(session + 1), method_name="execute_complete")
        return None
