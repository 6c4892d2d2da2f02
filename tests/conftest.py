"""Soak runs: long randomized variants of the oracle-style tests (``@pytest.mark.soak``).

``make test`` (CI) runs each randomized test in a bounded version and skips its soak variants;
``make soak`` (``DBLOG_SOAK=1``) runs only them: more seeds, longer workloads (README,
"Tests")."""

from __future__ import annotations

import os

import pytest


def soak_enabled() -> bool:
    return os.environ.get("DBLOG_SOAK", "0") == "1"


def pytest_collection_modifyitems(config, items):
    if soak_enabled():
        return
    skip = pytest.mark.skip(reason="soak run: `make soak` runs it (DBLOG_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
