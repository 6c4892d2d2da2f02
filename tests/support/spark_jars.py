"""The Delta jars as the install step resolves them (scripts/spark-jars, once into
.spark-jars/): for tests that start Spark the way a user's deployment does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spark_jars() -> str:
    """The comma-separated jar list scripts/spark-jars prints (resolving them if needed)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "spark-jars")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PY": sys.executable},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()
