import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.state.local import LocalStateStore
from tests.contract.state_store_contract import FencedStateContract, StateStoreContract


class TestLocalStateStore(StateStoreContract, FencedStateContract):
    @pytest.fixture
    def store(self, tmp_path):
        s = LocalStateStore(str(tmp_path / "state.db"))
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, tmp_path):
        handles = []

        def make():
            handles.append(LocalStateStore(str(tmp_path / "state.db")))
            return handles[-1]

        yield make
        for h in handles:
            h.close()


def test_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigurationError, match="--state"):
        LocalStateStore(str(blocker / "state.db"))
