"""``VerifyOperator``: compare each captured table with the replay of its changelog, and
request a dump of exactly the keys that differ (``dblog verify --repair`` as a task).

The comparison reads the changelog in the worker and, with ``ranges`` (the default), compares
the source by key-range digests computed in the database, reading only the ranges that differ
(core/range_verify.py; tables whose keys do not allow it are read whole, core/verify.py); a
repair is a key-list dump recorded in the state store, which the running capture performs
(docs/cli.md "Drift repair"). The task's XCom is a summary per table: rows on each side, the
mismatches found, and the repair dump's id.

With ``mirrors``, the source is compared with the Delta mirrors instead (spark/verify_mirror.py:
Spark hashes the mirror's rows; a local Spark session in the worker, ``DBLOG_SPARK_MASTER`` /
``DBLOG_SPARK_JARS`` as for the landing job); the repair dump then reaches the mirrors through
the next landing.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Union

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ..core.dump_requests import request_repairs
from ..core.range_verify import check_table_by_ranges
from ..core.verify import check_table
from ..hooks.dblog import DBLogHook


class DBLogDriftError(AirflowException):
    """The changelog's replay differs from the source (and ``repair`` is off)."""


class VerifyOperator(BaseOperator):
    """Verify the changelog against the source; with ``repair``, re-dump what differs.

    :param source_conn_id: the source's Postgres or MySQL connection.
    :param state_conn_id: ``dblog_state`` connection; or ``state`` (path or ``zk://`` URL).
    :param changelog: the changelog URL (``delta://DIR``, ``kafka://...``); or ``changelog_conn_id``.
    :param mirrors: compare with the Delta mirrors under this directory (``<lake>/mirrors``)
        instead of the changelog's replay.
    :param tables: tables to verify (default: every captured table).
    :param repair: request a key-list dump of the mismatched keys of each table.
    :param ranges: compare by key-range digests computed in the database (``dblog verify
        --ranges``), reading only the source rows of ranges that differ; False reads every row.
    :param fail_on_mismatch: fail the task when mismatches are found and not repaired.
    :param chunk_size: rows per chunk of the repair dumps.
    """

    template_fields = ("source_conn_id", "state_conn_id", "state", "changelog", "mirrors", "tables")
    ui_color = "#e0f0e3"

    def __init__(
        self,
        *,
        source_conn_id: str,
        state_conn_id: Optional[str] = None,
        state: Optional[str] = None,
        changelog: Optional[str] = None,
        changelog_conn_id: Optional[str] = None,
        mirrors: Optional[str] = None,
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
        self.ranges, self.mirrors = ranges, mirrors

    def execute(self, context: Any) -> dict[str, Any]:
        hook = DBLogHook(
            self.source_conn_id,
            self.state_conn_id,
            state=self.state,
            output=self.changelog,
            output_conn_id=self.changelog_conn_id,
            source_id=self.source_id,
        )
        source = hook.get_source()
        source.open()
        summary: dict[str, Any] = {}
        try:
            tables = [self.tables] if isinstance(self.tables, str) else list(self.tables or source.tables())
            check = (
                self._against_mirrors(source, tables) if self.mirrors else self._against_replay(hook, source, tables)
            )
            for table, (source_rows, other_rows, mismatches, stats) in check:
                summary[table] = {
                    "source_rows": source_rows,
                    "mirror_rows" if self.mirrors else "replay_rows": other_rows,
                    "mismatches": len(mismatches),
                    # by ranges: the digests run and the source rows read; None: read whole
                    "range_digests": stats.digests if stats is not None else None,
                    "source_rows_read": stats.rows_read if stats is not None else source_rows,
                    "keys": [list(m.key) for m in mismatches],
                }
                self.log.info("%s: %s", table, {k: v for k, v in summary[table].items() if k != "keys"})
                for m in mismatches[:20]:
                    self.log.info("  %s", m.describe())
        finally:
            source.close()
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
                ("the mirrors differ" if self.mirrors else "the changelog differs")
                + " from the source: "
                + ", ".join(f"{t} ({len(k)} keys)" for t, k in bad.items() if k)
                + ". Fix: run with repair=True (or `dblog verify --repair`) to re-dump exactly those keys."
            )
        return summary

    def _against_replay(self, hook: DBLogHook, source: Any, tables: list[str]) -> Iterator[tuple]:
        output = hook.get_output()
        output.open()
        try:
            for table in tables:
                stats = None
                if self.ranges:
                    check, stats = check_table_by_ranges(source, output, table)
                else:
                    check = check_table(source, output, table)
                yield table, (check.source_rows, check.replay_rows, check.mismatches, stats)
        finally:
            output.close()

    def _against_mirrors(self, source: Any, tables: list[str]) -> Iterator[tuple]:
        from ..spark.land_changelog import absolute
        from ..spark.session import get_session
        from ..spark.verify_mirror import verify_table, verify_table_by_ranges

        spark, mirrors = get_session("dblog-verify-mirror"), absolute(str(self.mirrors))
        for table in tables:
            if self.ranges:
                yield table, verify_table_by_ranges(spark, source, mirrors, table)
            else:
                yield table, (*verify_table(spark, source, mirrors, table), None)
