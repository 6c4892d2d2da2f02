"""The landing's tables side by side (spark/parallel_tables.py): the pure parts."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_dblog.spark import parallel_tables as pt
from airflow_provider_dblog.spark.mirror_commits import TXN_APP_ID, USER_METADATA


def test_in_parallel_every_table_finishes_and_each_failure_is_handed_back():
    started, done = threading.Barrier(3, timeout=30), []

    def task(name, fail=False):
        def run():
            started.wait()  # all three at once: they do run side by side
            done.append(name)
            if fail:
                raise RuntimeError(name)

        return run

    out = pt.run_all([task("a"), task("b", fail=True), task("c")], workers=3)
    assert sorted(done) == ["a", "b", "c"]  # the failure cut nothing short
    assert out[0] is None and out[2] is None and str(out[1]) == "b"


def test_one_at_a_time_the_first_failure_ends_the_batch():
    done = []

    def fail():
        raise ValueError("x")

    out = pt.run_all([lambda: done.append(1), fail, lambda: done.append(3)], workers=1)
    assert done == [1] and len(out) == 2 and isinstance(out[1], ValueError)


def test_workers_default_to_a_few_and_never_exceed_the_tables():
    assert pt.workers_for(None, 8) == pt.DEFAULT_PARALLEL_TABLES == 4
    assert pt.workers_for(None, 2) == 2 and pt.workers_for(16, 3) == 3 and pt.workers_for(1, 8) == 1
    assert pt.workers_for(None, 0) == 1


class FakeConf:
    def __init__(self, values, static=()):
        self.values, self.static = dict(values), set(static)

    @property
    def getAll(self):  # noqa: N802 - pyspark's name
        return dict(self.values)

    def isModifiable(self, key):  # noqa: N802
        return key not in self.static

    def set(self, key, value):
        assert key not in self.static
        self.values[key] = value


class FakeSession:
    def __init__(self, conf):
        self.conf = conf

    def newSession(self):  # noqa: N802
        return FakeSession(FakeConf({}))


def test_a_worker_session_has_the_jobs_settings_but_never_a_commits_tags():
    job = FakeSession(
        FakeConf(
            {"spark.sql.shuffle.partitions": "2", "spark.master": "local[2]", USER_METADATA: "{}", TXN_APP_ID: "x"},
            static={"spark.master"},
        )
    )
    sessions = pt.WorkerSessions(job)
    worker = sessions.take()
    assert worker.conf.values == {"spark.sql.shuffle.partitions": "2"}
    sessions.give(worker)
    assert sessions.take() is worker  # reused, not a new session per batch


def test_a_wrong_parallel_tables_option_stops_with_the_fix(capsys):
    pytest.importorskip("pyspark")
    from airflow_provider_dblog.core.errors import ConfigurationError
    from airflow_provider_dblog.spark import land_changelog

    for bad in ("0", "-1", "x"):
        with pytest.raises(SystemExit):
            land_changelog.build_parser().parse_args(["--lake", "/l", "--parallel-tables", bad])
        assert "1 or more" in capsys.readouterr().err
    assert land_changelog.build_parser().parse_args(["--lake", "/l", "--parallel-tables", "3"]).parallel_tables == 3
    with pytest.raises(ConfigurationError, match="Fix: give 1"):
        land_changelog.Lander(None, "/lake", parallel_tables=0)  # type: ignore[arg-type]
