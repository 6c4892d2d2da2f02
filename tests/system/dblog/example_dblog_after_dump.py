"""System test of the example DAG ``dblog_after_dump`` (airflow_provider_dblog/example_dags/dblog_after_dump.py).

Run by hand (no triggering asset event): its task finds no dump summary and succeeds.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_after_dump import dag
from tests.system.utils import get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag)
