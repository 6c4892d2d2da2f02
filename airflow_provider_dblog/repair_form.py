"""The on-call repair form: a DAG whose trigger form re-emits rows of one table (all, a list of
keys, or a row filter) into the changelog, through the running capture.

Airflow validates the form against the Params before the run starts; the DumpOperator then
validates the table and the keys against the source's schema before it records anything.
``dags/dblog_repair_dump.py`` publishes it for one source, ``fleet.py`` for a fleet (the form
then offers the fleet's sources to choose from).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional, Sequence

SOURCE_HELP = (
    "Airflow connection id of the source database: the one that captures the table (a table of "
    "another source fails the run before anything is recorded, naming both)."
)


def repair_dag(
    sources: Sequence[str],
    state_conn_id: str,
    asset: Any,
    tags: Sequence[str] = ("dblog",),
    tables: Optional[Sequence[str]] = None,
    poll_interval: float = 2.0,
    dag_id: str = "dblog_repair_dump",
    changelog: Optional[str] = None,
) -> Any:
    """The form's DAG. ``sources``: the source connection ids (several: a select of them; one:
    the default of a free-text field); ``tables``: the tables offered in a select (None: free
    text, ``schema.table``); ``asset``: the asset, or a list of them, emitted when the dump is
    done (it schedules landing: ``assets.dblog.changelog_outlets``);
    ``changelog``: the captures' changelog URL, for lineage only (DumpOperator)."""
    from airflow.sdk import DAG, Param

    from .operators.dump import DumpOperator

    if len(sources) > 1:
        source_param = Param(sources[0], type="string", enum=list(sources), title="Source", description=SOURCE_HELP)
    else:
        source_param = Param(sources[0], type="string", minLength=1, title="Source connection", description=SOURCE_HELP)
    if tables:
        table_param = Param(
            tables[0], type="string", enum=list(tables), title="Table", description="The table to repair."
        )
    else:
        table_param = Param(
            type="string",
            pattern=r"^[^.\s]+\.[^.\s]+$",
            title="Table",
            description="schema.table (PostgreSQL) or database.table (MySQL).",
        )
    with DAG(
        dag_id=dag_id,
        description="Re-emit rows of one table (all, or a list of keys) into the DBLog changelog",
        schedule=None,
        start_date=dt.datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=4,
        tags=list(tags),
        params={
            "source": source_param,
            "table": table_param,
            "keys": Param(
                "",
                type=["null", "string"],
                format="multiline",
                title="Keys, one per line",
                description='Each line a key: 42, "abc", ["eu", 7] (composite, in key order) or '
                '{"region": "eu", "order_no": 7}. Empty: the whole table.',
            ),
            "where": Param(
                "",
                type=["null", "string"],
                title="Row filter (SQL)",
                description="Only rows this expression accepts, e.g. updated_at >= '2026-11-01' or region = 'eu'. "
                "Checked by the database before the dump starts; not with keys. Empty: every row.",
            ),
            "chunk_size": Param(
                1000,
                type="integer",
                minimum=1,
                maximum=1_000_000,
                title="Chunk size",
                description="Rows per chunk (between a low and a high watermark).",
            ),
            "delay_ms": Param(
                0,
                type="integer",
                minimum=0,
                maximum=600_000,
                title="Pause between chunks (ms)",
                description="Throttles the dump on a busy source: the capture waits this long after each chunk.",
            ),
            "readers": Param(
                1,
                type="integer",
                minimum=1,
                maximum=16,
                title="Parallel readers",
                description="Connections selecting each chunk's key ranges at once (whole-table dumps; "
                "more load on the source, faster on a database with idle cores).",
            ),
        },
    ) as dag:
        # Templates render as text (no render_template_as_native_obj): a native rendering would
        # re-type the form's text, so that "2600" became an int and "[2600, 1]" two keys. The
        # operator reads keys as one per line and the counts as whole numbers.
        DumpOperator(
            task_id="dump",
            source_conn_id="{{ params.source }}",
            state_conn_id=state_conn_id,
            tables="{{ params.table }}",
            keys="{{ params['keys'] or '' }}",
            where="{{ params['where'] or '' }}",
            chunk_size="{{ params.chunk_size }}",
            delay_ms="{{ params.delay_ms }}",
            readers="{{ params.readers }}",
            poll_interval=poll_interval,
            changelog=changelog,
            outlets=list(asset) if isinstance(asset, (list, tuple)) else [asset],  # dblog_land lands them
        )
    return dag
