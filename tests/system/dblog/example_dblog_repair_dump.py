"""System test of the example DAG ``dblog_repair_dump`` (airflow_provider_dblog/example_dags/dblog_repair_dump.py).

The repair form's default run (the first table of ``DBLOG_REPAIR_TABLES``, no keys: the whole
table), recorded by ``DumpOperator``, performed by the system environment's capture, waited
for by ``DumpTrigger``.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_repair_dump import dag
from tests.system.utils import get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag)
