"""System test of the example DAG ``dblog_capture`` (airflow_provider_dblog/example_dags/dblog_capture.py).

One capture session of 10 s, then the task ends (``DBLOG_CAPTURE_MAX_SESSIONS``): the operator
defers, its ``CaptureTrigger`` runs ``dblog capture`` as a child, the session ends and the task
succeeds. A source id of its own (``dblog_system_capture``): the system environment's capture
leads the other one.
"""

from __future__ import annotations

from airflow_provider_dblog.example_dags.dblog_capture import dblog_capture as dag
from tests.system.utils import CAPTURE_CONN_ID, get_test_run

# Needed to run the example DAG with pytest (docs/airflow.md, "System tests")
test_run = get_test_run(
    dag,
    env={
        "DBLOG_SOURCE_CONN_ID": CAPTURE_CONN_ID,
        "DBLOG_CAPTURE_SESSION_SECONDS": "10",
        "DBLOG_CAPTURE_MAX_SESSIONS": "1",
    },
)
