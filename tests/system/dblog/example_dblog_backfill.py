"""System test of the example DAG ``dblog_backfill`` (airflow_provider_dblog/example_dags/dblog_backfill.py).

A full dump of every captured table in chunks of 7 rows, performed by the system
environment's capture while ``DumpOperator`` waits.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_backfill import dag
from tests.system.utils import get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag, env={"DBLOG_BACKFILL_CHUNK_SIZE": "7"})
