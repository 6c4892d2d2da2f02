"""``VerifyOperator``: compare each captured table with the replay of its changelog, and
request a dump of exactly the keys that differ (``dblog verify --repair`` as a task).

The comparison reads the changelog in the worker and, with ``ranges`` (the default), compares
the source by key-range digests computed in the database, reading only the ranges that differ
(core/range_verify.py; tables whose keys do not allow it are read whole, core/verify.py); a
repair is a key-list dump recorded in the state store, which the running capture performs
(docs/cli.md "Drift repair"). The task's XCom is a summary per table: rows on each side, the
mismatches found, and the repair dump's id.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..core.range_verify import check_table_by_ranges
from ..core.requests import request_repairs
from ..core.verify import check_table
from ..hooks.dblog import DBLogHook


class DBLogDriftError(AirflowException):
    """The changelog's replay differs from the source (and ``repair`` is off)."""


class VerifyOperator(BaseOperator):
    """Verify the changelog against the source; with ``repair``, re-dump what differs.

    :param source_conn_id: the source's Postgres or MySQL connection.
    :param state_conn_id: ``dblog_state`` connection; or ``state`` (path or ``zk://`` URL).
    :param changelog: the changelog URL (``delta://DIR``, ``kafka://...``); or ``changelog_conn_id``.
    :param tables: tables to verify (default: every captured table).
    :param repair: request a key-list dump of the mismatched keys of each table.
    :param ranges: compare by key-range digests computed in the database (``dblog verify
        --ranges``), reading only the source rows of ranges that differ; False reads every row.
    :param fail_on_mismatch: fail the task when mismatches are found and not repaired.
    :param chunk_size: rows per chunk of the repair dumps.
    """

    template_fields = ("source_conn_id", "state_conn_id", "state", "changelog", "tables")
    ui_color = "#e0f0e3"

    def __init__(
        self,
        *,
        source_conn_id: str,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        changelog: Optional[str] = None,
        changelog_conn_id: Optional[str] = None,
        source_id: Optional[str] = None,
        tables: Union[None, str, Sequence[str]] = None,
        repair: bool = True,
        ranges: bool = True,
        fail_on_mismatch: bool = True,
        chunk_size: int = 1_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_conn_id, self.state_conn_id, self.state = source_conn_id, state_conn_id, state
        self.changelog, self.changelog_conn_id, self.source_id = changelog, changelog_conn_id, source_id
        self.tables = tables
        self.repair, self.fail_on_mismatch, self.chunk_size = repair, fail_on_mismatch, chunk_size
        self.ranges = ranges

    def execute(self, context: Any) -> dict[str, Any]:
        hook = DBLogHook(
            self.source_conn_id,
            self.state_conn_id,
            state=self.state,
            output=self.changelog,
            output_conn_id=self.changelog_conn_id,
            source_id=self.source_id,
        )
        source, output = hook.get_source(), hook.get_output()
        source.open()
        output.open()
        summary: dict[str, Any] = {}
        try:
            tables = [self.tables] if isinstance(self.tables, str) else list(self.tables or source.tables())
            for table in tables:
                stats = None
                if self.ranges:
                    check, stats = check_table_by_ranges(source, output, table)
                else:
                    check = check_table(source, output, table)
                summary[table] = {
                    "source_rows": check.source_rows,
                    "replay_rows": check.replay_rows,
                    "mismatches": len(check.mismatches),
                    # by ranges: the digests run and the source rows read; None: read whole
                    "range_digests": stats.digests if stats is not None else None,
                    "source_rows_read": stats.rows_read if stats is not None else check.source_rows,
                    "keys": [list(m.key) for m in check.mismatches],
                }
                self.log.info("%s: %s", table, {k: v for k, v in summary[table].items() if k != "keys"})
                for m in check.mismatches[:20]:
                    self.log.info("  %s", m.describe())
        finally:
            source.close()
            output.close()
        bad = {t: [tuple(k) for k in s.pop("keys")] for t, s in summary.items()}
        if any(bad.values()) and self.repair:
            state = hook.get_state()
            try:
                for table, spec in request_repairs(hook.get_source(), state, bad, self.chunk_size).items():
                    summary[table]["repair_dump_id"] = spec.dump_id
                    self.log.info("%s: repair dump %s of %d keys requested", table, spec.dump_id, len(bad[table]))
            finally:
                state.close()
        elif any(bad.values()) and self.fail_on_mismatch:
            raise DBLogDriftError(
                "the changelog differs from the source: "
                + ", ".join(f"{t} ({len(k)} keys)" for t, k in bad.items() if k)
                + ". Fix: run with repair=True (or `dblog verify --repair`) to re-dump exactly those keys."
            )
        return summary
