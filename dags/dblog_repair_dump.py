"""dblog_repair_dump: an on-call form to re-emit rows into the changelog.

Trigger it from the UI ("Trigger DAG" shows the form) or the REST API with a conf such as
``{"table": "shop.orders", "keys": "42\\n43", "chunk_size": 1000}`` (one key per line: ``"42"`` alone is one key). Airflow validates the
form against the Params before the run starts; the operator then validates the table and the
keys against the source's schema before it records anything. An empty key list dumps the
whole table; a row filter (``"where": "region = 'eu'"``) dumps only the rows it accepts, after
the database checked it. The running ``dblog_capture`` performs the dump; this task waits (deferred) and
logs its progress.

Deployment settings (environment of the scheduler / dag-processor / workers):
  DBLOG_SOURCE_CONN_ID   the source's Postgres/MySQL connection (default ``dblog_source``)
  DBLOG_STATE_CONN_ID    the ``dblog_state`` connection (default ``dblog_state_default``)
  DBLOG_REPAIR_TABLES    comma-separated tables offered in the form's select (else free text)
  DBLOG_DUMP_POLL_INTERVAL  seconds between progress checks (default 2)
  DBLOG_CHANGELOG_ASSET  the asset emitted when the dump is done (default ``dblog_changelog``)
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Asset, Param

from airflow_provider_dblog.operators.dump import DumpOperator

SOURCE_CONN_ID = os.environ.get("DBLOG_SOURCE_CONN_ID", "dblog_source")
STATE_CONN_ID = os.environ.get("DBLOG_STATE_CONN_ID", "dblog_state_default")
CHANGELOG_ASSET = Asset(os.environ.get("DBLOG_CHANGELOG_ASSET", "dblog_changelog"))
TABLES = [t.strip() for t in os.environ.get("DBLOG_REPAIR_TABLES", "").split(",") if t.strip()]

if TABLES:
    table_param = Param(TABLES[0], type="string", enum=TABLES, title="Table", description="The table to repair.")
else:
    table_param = Param(
        type="string",
        pattern=r"^[^.\s]+\.[^.\s]+$",
        title="Table",
        description="schema.table (PostgreSQL) or database.table (MySQL).",
    )

with DAG(
    dag_id="dblog_repair_dump",
    description="Re-emit rows of one table (all, or a list of keys) into the DBLog changelog",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["dblog"],
    params={
        "source": Param(
            SOURCE_CONN_ID,
            type="string",
            minLength=1,
            title="Source connection",
            description="Airflow connection id of the source database: the one that captures the table "
            "(the table list offers every source's tables; a table of another source fails the run "
            "before anything is recorded, naming both).",
        ),
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
        state_conn_id=STATE_CONN_ID,
        tables="{{ params.table }}",
        keys="{{ params['keys'] or '' }}",
        where="{{ params['where'] or '' }}",
        chunk_size="{{ params.chunk_size }}",
        readers="{{ params.readers }}",
        poll_interval=float(os.environ.get("DBLOG_DUMP_POLL_INTERVAL", "2")),
        outlets=[CHANGELOG_ASSET],  # dblog_land lands the repaired rows
    )
