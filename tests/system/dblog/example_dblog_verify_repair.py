"""System test of the example DAG ``dblog_verify_repair`` (airflow_provider_dblog/example_dags/dblog_verify_repair.py).

``VerifyOperator`` compares every captured table with the replay of the system environment's
changelog by range digests, and requests a dump of any key that differs.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_verify_repair import dag
from tests.system.utils import get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag)
