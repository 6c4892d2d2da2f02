"""``dblog example-dags --dir DAGS_FOLDER``: copies the example DAGs the package ships
(``airflow_provider_dblog/example_dags``) into an Airflow DAGs folder. Existing files are kept
unless ``--force``: a user who edited a copy does not lose the edit to an upgrade."""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path


def example_dags() -> list[Path]:
    root = Path(str(resources.files("airflow_provider_dblog.example_dags")))
    return sorted(p for p in root.glob("dblog_*.py"))


def copy_examples(dest: Path, force: bool = False, out=sys.stdout) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for src in example_dags():
        target = dest / src.name
        if target.exists() and not force:
            kept.append(target.name)
            continue
        shutil.copyfile(src, target)
        print(f"{target}", file=out)
    if kept:
        print(f"kept (exists; --force replaces): {', '.join(kept)}", file=sys.stderr)
    return 0
