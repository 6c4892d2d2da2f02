"""Fixtures shared by the unit tests."""

import pytest

from airflow_provider_dblog.state.local import LocalStateStore


@pytest.fixture
def state(tmp_path):
    """A real local state store (one SQLite file) per test: pure and fast, no servers."""
    store = LocalStateStore(str(tmp_path / "state.db"))
    yield store
    store.close()
