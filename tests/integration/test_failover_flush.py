"""SIGKILL of the leader in the middle of a writer flush (issue 5): the standby takes over,
and nothing is lost or stale.

The leader runs with a slow output (tests/support/faults.py, ``--write-delay-ms``), so each
output commit takes a while (half before, half after the real write) and appends a line to a
marker file (``--write-marker``) when it begins; the
test kills it right after a flush began, i.e. before or just after that commit became
durable but always before its checkpoint. The new leader must resume from the checkpoint,
skip what the output already holds, finish the dump, and converge.
"""

from __future__ import annotations

import random
import time

import pytest

from airflow_provider_dblog.core.dumps import DumpStatus

from .capture_proc import dblog, wait_for
from .test_failover import Pair, pair  # noqa: F401 - the fixture
from .test_oracle import Workload

pytestmark = pytest.mark.integration

DELAY_MS = 400


def _flushes(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# MariaDB's in make soak: the takeover after a flush is the engine's, the same on both sources
# (make test still SIGKILLs MariaDB leaders: test_failover.py, test_gtid_failover.py).
@pytest.mark.parametrize("pair", ["postgres", pytest.param("mysql", marks=pytest.mark.soak)], indirect=True)
def test_sigkill_of_the_leader_during_a_writer_flush(pair, tmp_path):  # noqa: F811 - the fixture
    pair.setup(seed_rows=200)
    marker = tmp_path / "a-flushes"
    a = pair.start("a", faults=("--write-delay-ms", str(DELAY_MS), "--write-marker", str(marker)))
    wait_for(lambda: pair.leader_epoch("a") is not None, 90, "a to lead", a.assert_alive, detail=a.detail)
    b = pair.start("b")
    wait_for(
        lambda: "standby: a (epoch" in b.log_path.read_text(),
        60,
        "b to wait as standby",
        b.assert_alive,
        detail=b.detail,
    )
    rng = random.Random(5)
    with Workload(pair.db, seed=13):
        dump_id = dblog(pair.config, "dump", "--all", "--chunk-size", "10", "--delay-ms", "100").stdout.strip()
        wait_for(
            lambda: _flushes(marker) >= 3, 60, "a few flushes of a", a.assert_alive, detail=a.detail, interval=0.05
        )
        n = _flushes(marker)
        wait_for(
            lambda: _flushes(marker) > n, 30, "the next flush to begin", a.assert_alive, detail=a.detail, interval=0.01
        )
        time.sleep(rng.uniform(0, DELAY_MS / 1000 * 0.9))  # inside that flush
        assert pair.state.get_dump(dump_id).status is not DumpStatus.DONE, "kill a mid-dump"
        a.kill()
        # The standby takes over while the workload still runs ...
        wait_for(lambda: pair.leader_epoch("b") == 2, 60, "b to lead", b.assert_alive, detail=b.detail)
    # ... and, the workload stopped (the keyset dump would chase its inserts), finishes the dump.

    def dump_done():
        d = pair.state.get_dump(dump_id)
        assert d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), d.error
        return d.status is DumpStatus.DONE

    wait_for(dump_done, 120, "the new leader to finish the dump", b.assert_alive, detail=b.detail)
    pair.converge(b)
    pair.assert_acl_on()
    assert b.stop() == 0, b.tail()
    rows = pair.assert_epochs_never_decrease()
    assert {e for _, e, _ in rows} == {1, 2}
