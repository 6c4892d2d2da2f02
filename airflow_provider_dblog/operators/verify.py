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

from typing import Any, Optional, Sequence, Union

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from .. import verification
from ..hooks.connections import DBLogConnections


class DBLogDriftError(AirflowException):
    """The changelog's replay differs from the source (and ``repair`` is off)."""


class VerifyOperator(BaseOperator):
    """Verify the changelog against the source; with ``repair``, re-dump what differs.

    :param source_conn_id: the source's Postgres or MySQL connection.
    :param state_conn_id: ``dblog_state`` connection; or ``state`` (path or ``zk://`` URL).
    :param changelog: the changelog URL (``delta://DIR``, ``kafka://...``); or ``changelog_conn_id``.
    :param mirrors: compare with the Delta mirrors under this directory (``<lake>/mirrors``)
        instead of the changelog's replay.
    :param history: with ``mirrors``, compare the tables' history mirrors instead (their current
        versions; overlapping versions are mismatches no repair dump undoes).
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
        history: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if history and not mirrors:
            raise ValueError(
                "VerifyOperator: history=True compares history mirrors, which need mirrors= (the <lake>/mirrors "
                "directory). Fix: pass mirrors, or drop history."
            )
        self.history = history
        self.source_conn_id, self.state_conn_id, self.state = source_conn_id, state_conn_id, state
        self.changelog, self.changelog_conn_id, self.source_id = changelog, changelog_conn_id, source_id
        self.tables = tables
        self.repair, self.fail_on_mismatch, self.chunk_size = repair, fail_on_mismatch, chunk_size
        self.ranges, self.mirrors = ranges, mirrors
        self._lineage: Optional[tuple[dict[str, Any], dict[str, Any], dict[str, int]]] = None

    def execute(self, context: Any) -> dict[str, Any]:
        hook = DBLogConnections.of_operator(self).hook()
        source = hook.get_source()
        source.open()
        summary: dict[str, Any] = {}

        def report(result: verification.TableComparison) -> None:
            summary[result.table] = {
                "source_rows": result.source_rows,
                "mirror_rows" if self.mirrors else "replay_rows": result.other_rows,
                "mismatches": len(result.mismatches),
                # by ranges: the digests run and the source rows read; None: read whole
                "range_digests": result.ranges.digests if result.ranges is not None else None,
                "source_rows_read": result.ranges.rows_read if result.ranges is not None else result.source_rows,
            }
            self.log.info("%s: %s", result.table, summary[result.table])
            for m in result.mismatches[:20]:
                self.log.info("  %s", m.describe())

        try:
            tables = [self.tables] if isinstance(self.tables, str) else list(self.tables or source.tables())
            schemas = {t: source.table_schema(t) for t in tables}  # read at open: for lineage
            if self.mirrors:
                results = self._against_mirrors(source, tables, report)
            else:
                output = hook.get_output()
                output.open()
                try:
                    results = verification.verify(
                        source, tables, verification.against_replay(source, output, self.ranges), report
                    )
                finally:
                    output.close()
        finally:
            source.close()
        drifted = {t: len(r.mismatches) for t, r in results.items() if r.mismatches}
        self._lineage = (hook.source_config(), schemas, {t: len(r.mismatches) for t, r in results.items()})
        if drifted and self.repair:

            def record(table: str, spec: Any, keys: int) -> None:
                summary[table]["repair_dump_id"] = spec.dump_id
                self.log.info("%s: repair dump %s of %d keys requested", table, spec.dump_id, keys)

            verification.repair(results, hook.get_source, hook.get_state, self.chunk_size, record)
        elif drifted and self.fail_on_mismatch:
            raise DBLogDriftError(
                ("the mirrors differ" if self.mirrors else "the changelog differs")
                + " from the source: "
                + ", ".join(f"{t} ({n} keys)" for t, n in drifted.items())
                + ". Fix: run with repair=True (or `dblog verify --repair`) to re-dump exactly those keys."
            )
        return summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (lineage.py; called by Airflow's OpenLineage provider when installed):
        the source tables and the changelog (or mirrors) compared, with one ``equals_source``
        data quality assertion per table on the changelog's (mirror's) side. A repair writes
        nothing here: the capture performs the dumps it requests."""
        if self._lineage is None:  # failed before comparing anything
            return None
        from .. import lineage
        from ..outputs.lake_layout import absolute

        source, schemas, mismatches = self._lineage
        inputs = [lineage.source_dataset(source, t, s) for t, s in schemas.items()]
        by_dataset: dict[tuple[str, str], list[tuple[str, int]]] = {}
        if self.mirrors:
            root = absolute(str(self.mirrors))
            for t, n in mismatches.items():
                (d,) = lineage.mirror_datasets(root, [(source["id"], schemas[t])], self.history)
                by_dataset[(d.namespace, d.name)] = [(t, n)]
        else:
            output = DBLogConnections.of_operator(self).hook().get_output()
            for t, n in mismatches.items():
                for d in lineage.changelog_datasets(output, source["id"], [t]):
                    by_dataset.setdefault((d.namespace, d.name), []).append((t, n))
        checked = [lineage.LineageDataset(ns, name, assertions=tuple(a)) for (ns, name), a in by_dataset.items()]
        return lineage.operator_lineage(inputs + checked, [])

    def _against_mirrors(self, source: Any, tables: list[str], report: Any) -> dict[str, Any]:
        from ..outputs.lake_layout import absolute
        from ..spark.session import get_session
        from ..spark.verify_mirror import against_mirrors

        spark, mirrors = get_session("dblog-verify-mirror"), absolute(str(self.mirrors))
        compare = against_mirrors(spark, source, mirrors, self.ranges, self.history)
        return verification.verify(source, tables, compare, report)
