"""A new leader ends the previous leader's walsender that still holds the replication slot
(issue 39 part 6): again and again while the slot stays in use, not once and then a wait.
The slot rows are what the server showed in a paused-leader takeover: the walsender, stuck
sending its error to the paused client, outlived the first pg_terminate_backend and ended at
the next one at once."""

from __future__ import annotations

import contextlib

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.postgres import PostgresSource


class StuckWalsender(PostgresSource):
    """The catalog answers of one slot whose walsender ends at the ``ends_at``-th termination."""

    def __init__(self, ends_at: int, leading: bool = True):
        super().__init__(source_id="s", host="127.0.0.1", port=1, user="u", password="p", dbname="d")
        self.ends_at, self.terminations = ends_at, 0
        self._lease_check = (lambda: None) if leading else None

    @contextlib.contextmanager
    def _cur(self):
        source = self

        class Cursor:
            def execute(self, sql, params=()):
                assert sql.startswith("SELECT pg_terminate_backend")
                source.terminations += 1

        yield Cursor()

    def _slot_row(self):
        return {"active": self.terminations < self.ends_at, "active_pid": 4242}


def test_the_previous_leaders_walsender_is_ended_again_until_the_slot_is_free():
    source = StuckWalsender(ends_at=2)
    slot = source._check_slot_free(source._slot_row(), wait=10.0)
    assert not slot["active"] and source.terminations == 2


def test_a_slot_used_by_another_process_is_not_terminated_without_the_lease():
    source = StuckWalsender(ends_at=1, leading=False)
    with pytest.raises(ConfigurationError, match="in use by another process"):
        source._check_slot_free(source._slot_row(), wait=0.3)
    assert source.terminations == 0
