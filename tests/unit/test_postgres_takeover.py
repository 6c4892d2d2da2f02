"""A new leader ends the previous leader's walsender that still holds the replication slot
(issue 39 part 6): again and again while the slot stays in use, not once and then a wait.
The slot rows are what the server showed in a paused-leader takeover: the walsender, stuck
sending its error to the paused client, outlived the first pg_terminate_backend and ended at
the next one at once. Only a walsender of the leader's own lease domain (its
application_name) is ended: another capture's is named in a ConfigurationError (issue 39
part 5; end to end in integration/test_two_captures.py)."""

from __future__ import annotations

import contextlib

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.postgres.slot import ReplicationSlot
from airflow_provider_dblog.sources.postgres.source import PostgresSource


class StuckWalsender(ReplicationSlot):
    """The catalog answers of one slot whose walsender ends at the ``ends_at``-th termination,
    as the source's slot (its take_over names the lease domain)."""

    def __init__(self, ends_at: int, leading: bool = True, holder: str = "dblog-d0main-s"):
        source = PostgresSource(source_id="s", host="127.0.0.1", port=1, user="u", password="p", dbname="d")
        if leading:
            source.take_over(lambda: None, None, "d0main")
        super().__init__(source.slot_name, source.plugin, "s", source._dsn, self._cursor)
        self.lease_check = source.slot.lease_check
        self.ends_at, self.terminations, self.holder_name = ends_at, 0, holder

    @contextlib.contextmanager
    def _cursor(self):
        source = self

        class Cursor:
            def execute(self, sql, params=()):
                if sql.startswith("SELECT application_name"):
                    self.row = (source.holder_name, "u", "10.0.0.7/32", "2026-01-01 00:00:00+00")
                    return
                assert sql.startswith("SELECT pg_terminate_backend")
                source.terminations += 1

            def fetchone(self):
                return self.row

        yield Cursor()

    def row(self):
        return {"active": self.terminations < self.ends_at, "active_pid": 4242}


def test_the_previous_leaders_walsender_is_ended_again_until_the_slot_is_free():
    source = StuckWalsender(ends_at=2)
    slot = source.check_free(source.row(), wait=10.0)
    assert not slot["active"] and source.terminations == 2


def test_a_slot_used_by_another_process_is_not_terminated_without_the_lease():
    source = StuckWalsender(ends_at=1, leading=False)
    with pytest.raises(ConfigurationError, match="in use by another process"):
        source.check_free(source.row(), wait=0.3)
    assert source.terminations == 0


@pytest.mark.parametrize("holder", ["dblog-0ther0domain-s", "dblog-s", "pg_recvlogical"])
def test_a_walsender_of_another_lease_domain_is_named_not_terminated(holder):
    source = StuckWalsender(ends_at=1, holder=holder)
    assert source._dsn["application_name"] == "dblog-d0main-s"
    with pytest.raises(ConfigurationError) as err:
        source.check_free(source.row(), wait=10.0)
    assert source.terminations == 0
    assert "pid 4242" in str(err.value) and repr(holder) in str(err.value) and "10.0.0.7/32" in str(err.value)
    assert "share one state store" in str(err.value)


def test_a_leaders_application_name_names_the_domain_and_a_long_source_whole():
    """The next leader ends the sessions carrying its application_name: two sources whose
    long ids share the first 63 bytes must not share it (PostgreSQL keeps 63 bytes)."""
    from airflow_provider_dblog.sources.postgres.source import leader_application_name

    assert leader_application_name("d0main", "orders") == "dblog-d0main-orders"
    one, two = (leader_application_name("d0main", "x" * 80 + tail) for tail in ("1", "2"))
    assert one != two and len(one.encode()) <= 63 and len(two.encode()) <= 63
    assert len(leader_application_name("d0main", "é" * 40).encode()) <= 63  # cut on a character


def test_a_mysql_leaders_session_lock_fits_mysqls_64_characters():
    from airflow_provider_dblog.sources.mysql.leader_sessions import session_marker

    marker = session_marker("s" * 200, "d0main012345")
    assert len(marker) + len(str(2**64 - 1)) <= 64
    assert session_marker("a", "d") != session_marker("b", "d") != session_marker("a", "e")
