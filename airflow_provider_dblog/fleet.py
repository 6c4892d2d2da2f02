"""Many sources from one declaration: the capture and backfill DAGs of each source of a fleet,
and one repair form for all of them.

A DAG file declares its sources once and publishes what this builds::

    from airflow_provider_dblog.fleet import FleetSource, fleet_dags

    globals().update(
        fleet_dags(
            [FleetSource("shop_db"), FleetSource("billing_db", backfill="@daily", delay_ms=20)],
            state_conn_id="dblog_state_default",
            changelog="delta://s3://lake/dblog",
        )
    )

Per source: ``dblog_capture__<name>`` (one long-lived deferrable capture task, as
``dags/dblog_capture.py``) and, unless ``backfill=None``, ``dblog_backfill__<name>`` (a
scheduled full dump, as ``dags/dblog_backfill.py``). For the fleet: ``dblog_repair_dump``, the
repair form, whose source is chosen from the declared ones. Each source keeps settings of its
own (its changelog, session length, the backfill's schedule, tables and pacing); what it does
not set comes from the fleet's arguments. The tables a source captures are its connection's
(``tables`` in the connection's extra), as for a single source. A source's DAGs emit the asset
of the changelog it writes (``dblog://changelog/<lake>``, named by its URI: two lakes, two
assets), which schedules the landing (``dags/dblog_land.py``), and the name-only
``changelog_asset`` (``dblog_changelog``) that earlier builds emitted; the repair form emits
the assets of all the sources' changelogs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, Optional, Sequence

from .core.errors import ConfigurationError

START = dt.datetime(2024, 1, 1)


@dataclasses.dataclass(frozen=True)
class FleetSource:
    """One source of the fleet. ``conn_id``: its Airflow connection (Postgres or MySQL);
    ``name``: what its DAG ids end with (default: the connection id); ``None`` settings take the
    fleet's value."""

    conn_id: str
    name: Optional[str] = None
    capture: bool = True  # False: its capture DAG is published elsewhere (only the backfill here)
    changelog: Optional[str] = None
    session_seconds: Optional[float] = None
    # end the capture task (successfully) after this many sessions; None: it runs for ever
    max_sessions: Optional[int] = None
    redump_on_position_lost: bool = False
    backfill: Optional[str] = "@weekly"  # cron or preset of the full dump; None: no backfill DAG
    backfill_tables: Optional[Sequence[str]] = None  # None: every captured table
    chunk_size: int = 10_000
    delay_ms: int = 0
    adaptive: bool = False  # pace the backfill by the source's load (core/pacing.py)
    # its capture's Prometheus endpoint (docs/operations.md): a port of its own per source, as
    # any triggerer may run it
    metrics_port: Optional[int] = None

    @property
    def dag_name(self) -> str:
        return self.name or self.conn_id


def fleet_dags(
    sources: Sequence[FleetSource],
    *,
    state_conn_id: str,
    changelog: str,
    session_seconds: float = 3600.0,
    status_interval: float = 30.0,
    changelog_asset: Optional[str] = "dblog_changelog",
    repair: bool = True,
    tags: Sequence[str] = ("dblog",),
    single: bool = False,
    backfill_poll_interval: float = 10.0,
) -> dict[str, Any]:
    """The DAGs of ``sources`` by DAG id: put them in the DAG file's globals. ``single``: one
    source, its DAG ids without its name (``dblog_capture``, ``dblog_backfill``: the example
    DAGs of one source). ``changelog_asset``: the name-only asset emitted beside each
    changelog's own, for DAGs scheduled on it as earlier builds named it (None: none)."""
    from .assets.dblog import changelog_outlets
    from .operators.dump import DumpOperator

    _check(sources)
    if single and len(sources) != 1:
        raise ConfigurationError(f"single=True with {len(sources)} sources.", "declare one source, or drop single.")
    dags: dict[str, Any] = {}
    every: list = []  # the assets of all the sources' changelogs (the repair form's outlets)
    for s in sources:
        name = s.dag_name
        suffix, source_tags = ("", list(tags)) if single else (f"__{name}", [*tags, name])
        # dblog://changelog/<lake> of the changelog the source writes (assets/dblog.py), as
        # dblog_land builds it, and the name-only asset of earlier builds
        outlets = changelog_outlets(s.changelog or changelog, changelog_asset)
        every.extend(a for a in outlets if a not in every)
        if s.capture:
            dags.update(
                _capture_dag(
                    s, suffix, source_tags, state_conn_id, changelog, session_seconds, status_interval, outlets
                )
            )
        if s.backfill is None:
            continue
        # max_active_runs 1: a second full dump while one runs only doubles the work
        with _one_run_dag(
            f"dblog_backfill{suffix}", f"Scheduled full-state DBLog dump of {s.conn_id}", s.backfill, source_tags
        ) as backfill:
            DumpOperator(
                task_id="dump_all",
                source_conn_id=s.conn_id,
                state_conn_id=state_conn_id,
                tables=list(s.backfill_tables) if s.backfill_tables else None,
                chunk_size=s.chunk_size,
                delay_ms=s.delay_ms,
                adaptive=s.adaptive,
                poll_interval=backfill_poll_interval,
                changelog=s.changelog or changelog,  # lineage only
                outlets=list(outlets),
            )
        dags[backfill.dag_id] = backfill
    if repair:
        from .repair_form import repair_dag

        # lineage only: the changelog they share (none when sources write to different ones)
        shared = {s.changelog or changelog for s in sources}
        dag = repair_dag(
            [s.conn_id for s in sources],
            state_conn_id,
            sorted(every, key=lambda a: not a.uri.startswith("dblog://")),  # the name-only one last
            tags,
            changelog=shared.pop() if len(shared) == 1 else None,
        )
        dags[dag.dag_id] = dag
    return dags


def _capture_dag(
    s: FleetSource,
    suffix: str,
    tags: list[str],
    state_conn_id: str,
    changelog: str,
    session_seconds: float,
    status_interval: float,
    outlets: list,
) -> dict[str, Any]:
    """One long-lived deferrable capture task (dags/dblog_capture.py's docstring)."""

    from .operators.capture import CaptureOperator

    # max_active_runs 1: two captures of one source would fight over the slot / lease
    with _one_run_dag(
        f"dblog_capture{suffix}", f"Continuous DBLog capture of {s.conn_id} into the changelog", "@once", tags
    ) as dag:
        CaptureOperator(
            task_id="capture",
            source_conn_id=s.conn_id,
            state_conn_id=state_conn_id,
            changelog=s.changelog or changelog,
            session_seconds=s.session_seconds or session_seconds,
            max_sessions=s.max_sessions,
            status_interval=status_interval,
            redump_on_position_lost=s.redump_on_position_lost,
            metrics_port=s.metrics_port,
            retries=3,
            retry_delay=dt.timedelta(seconds=30),
            # Emitted when the task ends (max_sessions); while it runs, the landing's schedule
            # and the dump DAGs' asset events pick up the new changelog data.
            outlets=list(outlets),
        )
    return {dag.dag_id: dag}


def _one_run_dag(dag_id: str, description: str, schedule: str, tags: list[str]) -> Any:
    """A DAG of at most one active run, from the fleet's start date, without catch-up."""
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=tags,
    )


def _check(sources: Sequence[FleetSource]) -> None:
    """Every source named once, with a name a DAG id can end with: stop at parse time with
    the source at fault, rather than publish one source's DAG over another's."""
    if not sources:
        raise ConfigurationError("the fleet declares no source.", "pass at least one FleetSource.")
    seen: dict[str, str] = {}
    for s in sources:
        name = s.dag_name
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigurationError(
                f"source {s.conn_id!r}: {name!r} cannot end a DAG id (letters, digits, '_', '.', '-' only).",
                "give it a name=... of those characters.",
            )
        if name in seen:
            raise ConfigurationError(
                f"sources {seen[name]!r} and {s.conn_id!r} would both be named {name!r} in their DAG ids.",
                "give one of them another name=....",
            )
        seen[name] = s.conn_id
        if s.max_sessions is not None and s.max_sessions < 1:
            raise ConfigurationError(
                f"source {s.conn_id!r}: max_sessions {s.max_sessions} ends the capture before it starts.",
                "give 1 or more, or None for a capture that runs for ever.",
            )
        if s.chunk_size < 1 or s.delay_ms < 0:
            raise ConfigurationError(
                f"source {s.conn_id!r}: chunk_size {s.chunk_size} / delay_ms {s.delay_ms} out of range.",
                "chunk_size 1 or more, delay_ms 0 or more.",
            )
