"""A fresh AIRFLOW_HOME with a migrated SQLite metadata database (``airflow db migrate``), for
tests that run ``dag.test()`` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def migrated_airflow_home(home: Path, timeout: float = 600) -> Path:
    environ = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=environ, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return home
