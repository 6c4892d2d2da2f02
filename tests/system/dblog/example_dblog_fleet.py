"""System test of the example DAG file ``dblog_fleet.py`` (airflow_provider_dblog/example_dags/dblog_fleet.py).

The file publishes its DAGs from ``DBLOG_FLEET``; with the system environment's source as the
fleet, its backfill DAG (``dblog_backfill__dblog_system_source``) dumps every table.
"""

from __future__ import annotations

from tests.system.utils import SOURCE_CONN_ID, example_dag, get_test_run

dag = example_dag("dblog_fleet.py", f"dblog_backfill__{SOURCE_CONN_ID}", DBLOG_FLEET=SOURCE_CONN_ID)

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag, env={"DBLOG_FLEET": SOURCE_CONN_ID})
