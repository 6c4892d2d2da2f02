"""System test of the example DAG ``dblog_land`` (airflow_provider_dblog/example_dags/dblog_land.py).

Event mode (the default): its ``SparkSubmitLandOperator`` runs this venv's ``spark-submit``
with ``spark_default`` = ``local[2]`` and the jars resolved once, and lands the system
environment's changelog (a full dump of the source) into the mirrors.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_land import dag
from tests.system.utils import get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(dag)
