"""Every example DAG has its system test (tests/system/dblog/example_<file>.py) and each parses,
without servers: ``make test`` checks what ``make soak`` runs (tests/system/utils.py)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest

pytest.importorskip("airflow.sdk")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "airflow_provider_dblog" / "example_dags"
SYSTEM = REPO / "tests" / "system" / "dblog"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "__init__.py")


def test_every_example_dag_file_has_a_system_test_and_every_system_test_an_example():
    assert EXAMPLE_FILES, EXAMPLES
    tests = sorted(p.name for p in SYSTEM.glob("example_*.py"))
    assert tests == [f"example_{name}" for name in EXAMPLE_FILES]


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_each_system_test_parses_its_example_dag(name):
    """Importing the module parses the example DAG (the DAG object is built); its ``test_run``
    runs that DAG of that file, and is marked for the soak (skipped by make test)."""
    stem = Path(name).stem
    module = importlib.import_module(f"tests.system.dblog.example_{stem}")
    run = module.test_run
    assert Path(run.fileloc) == (EXAMPLES / name).resolve()  # the file the run parses again
    # each file's DAG of the same name; the fleet file's backfill of the system environment's source
    assert module.dag.dag_id == run.dag_id == {"dblog_fleet": "dblog_backfill__dblog_system_source"}.get(stem, stem)
    assert {m.name for m in run.pytestmark} >= {"system", "integration", "soak"}


def test_pytest_collects_the_system_tests_and_make_test_deselects_them():
    """Airflow's name for them, ``example_*.py``, is collected under tests/system (its
    conftest); ``-m "not soak"`` leaves none, ``-m soak`` (make soak) takes every one."""

    def collected(*args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args, "tests/system"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return sorted(line for line in out.stdout.splitlines() if "::" in line)

    want = [f"tests/system/dblog/example_{name}::test_run" for name in EXAMPLE_FILES]
    assert collected("-m", "soak") == want
    assert collected("-m", "not soak") == []
