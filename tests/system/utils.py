"""``get_test_run``: an example DAG as a pytest test, in the convention of Airflow's providers.

Airflow's providers end each ``tests/system/<provider>/example_*.py`` with::

    from tests_common.test_utils.system_tests import get_test_run

    test_run = get_test_run(dag)

``tests_common`` is Airflow's own test package and is not on PyPI, so this is the small shim
of it (docs/handwritten.md). It differs in where the run happens: ``dag.test()`` runs in a
child Python with a migrated metadata database of its own (``system_airflow_home``) and the
system environment's settings (``dblog_system``, tests/system/conftest.py), because the
example DAGs read their deployment settings from the environment when their file is parsed
and Airflow fixes its configuration once per process. The child parses the DAG's file afresh
(``dag.fileloc``), runs ``dag.test()`` and prints each task's state, the execution summary
Airflow's shim logs; the test passes when the run succeeded.

The tests need real servers (a PostgreSQL source; Spark in the worker for ``dblog_land``), so
they are marked ``system``, ``integration`` and ``soak``: ``make soak`` runs them, ``make test``
collects them (tests/unit/test_system_tests.py checks that every example DAG has one and that
each parses) and skips them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DAGS = (REPO / "airflow_provider_dblog" / "example_dags").resolve()
# The connection ids the system environment defines (conftest.py), which the DAGs read from
# DBLOG_SOURCE_CONN_ID and DBLOG_STATE_CONN_ID; CAPTURE_CONN_ID is the same database under a
# source id of its own, for dblog_capture's test (the environment's capture leads the other).
SOURCE_CONN_ID, CAPTURE_CONN_ID, STATE_CONN_ID = "dblog_system_source", "dblog_system_capture", "dblog_system_state"
RUN_TIMEOUT = 600

RUNNER = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
path, dag_id, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
bag = DagBag(dag_folder=path)
assert not bag.import_errors, bag.import_errors
dag_run = bag.dags[dag_id].test(**kwargs)
for ti in sorted(dag_run.get_task_instances(), key=lambda t: (str(t.end_date), t.task_id)):
    print(f"TASK {ti.task_id} {ti.state}")
print("RUN_STATE=" + str(dag_run.state))
"""


def get_test_run(dag: Any, *, env: Optional[dict[str, str]] = None, **test_kwargs: Any) -> Callable[..., None]:
    """A pytest test that runs ``dag`` with ``dag.test(**test_kwargs)`` (JSON values, e.g.
    ``run_conf``) in the system environment, with ``env`` on top of it (settings of this DAG's
    own), and requires the run to succeed."""
    fileloc, dag_id = str(published_in(dag)), dag.dag_id
    overrides = dict(env or {})

    @pytest.mark.system
    @pytest.mark.integration
    @pytest.mark.soak
    def test_run(dblog_system: Any, system_airflow_home: Path, tmp_path: Path) -> None:
        # a DAGs folder of this one file: dag.test() parses its whole folder into the metadata
        # database, and the other example files would parse under this DAG's settings
        folder = tmp_path / "dags"
        folder.mkdir()
        dag_file = shutil.copy(fileloc, folder)
        environ = {
            **os.environ,
            **dblog_system.env,
            **overrides,
            "AIRFLOW_HOME": str(system_airflow_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        }
        out = subprocess.run(
            [sys.executable, "-c", RUNNER, str(dag_file), dag_id, json.dumps(test_kwargs)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        summary = "\n".join(line for line in out.stdout.splitlines() if line.startswith(("TASK ", "RUN_STATE=")))
        print(f"EXECUTION SUMMARY of {dag_id}:\n{summary}")
        assert out.returncode == 0 and "RUN_STATE=success" in out.stdout, (
            f"The system test of {dag_id} failed: its tasks and their logs follow.\n{summary}\n"
            f"{out.stdout[-4000:]}\n{out.stderr[-6000:]}"
        )

    test_run.dag_id = dag_id  # type: ignore[attr-defined]  # what tests/unit/test_system_tests.py checks
    test_run.fileloc = fileloc  # type: ignore[attr-defined]
    return test_run


def published_in(dag: Any) -> Path:
    """The example DAG file that publishes ``dag``, which the run parses again. ``dag.fileloc``
    is where the DAG object was made, which for the DAGs built by fleet.py and repair_form.py is
    that module; DagBag sets it to the file of the module holding the DAG (as this does)."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().parent == EXAMPLE_DAGS and any(v is dag for v in vars(module).values()):
            return Path(file).resolve()
    return Path(dag.fileloc).resolve()


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def example_dag(file_name: str, dag_id: str, **environ: str) -> Any:
    """The DAG ``dag_id`` of the example file ``file_name``, parsed with ``environ`` set for the
    parse only: for a file that publishes its DAGs from a setting (``dblog_fleet.py``:
    DBLOG_FLEET). The other example DAGs are plain imports."""
    path = EXAMPLE_DAGS / file_name
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with _environ(**environ):
        spec.loader.exec_module(module)
    found = {v.dag_id: v for v in vars(module).values() if type(v).__name__ == "DAG"}
    found[dag_id].fileloc = str(path)  # the file that publishes it, as DagBag sets it
    return found[dag_id]
