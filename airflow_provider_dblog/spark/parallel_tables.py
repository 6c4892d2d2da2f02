"""The tables of one landing micro-batch merged side by side (docs/landing.md).

Each table's MERGE is a few Spark jobs and as much driver work (Delta's log, planning, the
commit) that leaves the cluster idle: one table after another, a batch of 8 tables took
8 times one table. Here a thread pool lands them ``workers`` at a time.

Every worker thread runs on a Spark session of its own (``SparkSession.newSession``: the
same SparkContext, cache and catalog, its own SQL conf): Delta takes a commit's transaction
id and positions from session-wide confs (spark/mirror_commits.py ``tagged``), so one
shared session would stamp a table's commit with another table's tags.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

from airflow_provider_dblog.spark.mirror_commits import TXN_APP_ID, TXN_VERSION, USER_METADATA

# Tables landed at once when the job is not told (``--parallel-tables``): a batch of a few
# tables lands in one round, and a big one does not flood a small driver with commits.
DEFAULT_PARALLEL_TABLES = 4
# Never copied into a worker's session: they belong to one command (``tagged``).
COMMIT_TAGS = (USER_METADATA, TXN_APP_ID, TXN_VERSION)


def workers_for(parallel_tables: Optional[int], tables: int) -> int:
    """Worker threads for a batch of ``tables`` tables (None: the default)."""
    return max(1, min(parallel_tables or DEFAULT_PARALLEL_TABLES, tables))


class WorkerSessions:
    """Idle worker sessions of one job, made on first need and reused batch after batch."""

    def __init__(self, spark: Any):
        self.spark = spark
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def take(self) -> Any:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        session = self.spark.newSession()
        # A new session starts from the context's conf: the job's runtime settings
        # (session.apply_job_conf, a submitter's --conf of SQL settings) are copied over.
        for key, value in self.spark.conf.getAll.items():
            if key not in COMMIT_TAGS and self.spark.conf.isModifiable(key):
                session.conf.set(key, value)
        return session

    def give(self, session: Any) -> None:
        with self._lock:
            self._idle.append(session)


def run_all(tasks: Sequence[Callable[[], None]], workers: int) -> list[Optional[BaseException]]:
    """Run the tasks, ``workers`` at a time; each task's exception (or None), in order.

    In parallel every task runs to its end even when another failed: the caller raises once
    all are done, so no Delta command is cut off halfway by the batch failing. One at a time
    (``workers`` 1), the first failure ends the run, as it always did."""
    if workers <= 1:
        outcomes: list[Optional[BaseException]] = []
        for task in tasks:
            outcomes.append(_outcome(task))
            if outcomes[-1] is not None:
                break
        return outcomes
    with ThreadPoolExecutor(workers, thread_name_prefix="dblog-land") as pool:
        futures = [pool.submit(_outcome, task) for task in tasks]
    return [f.result() for f in futures]


def _outcome(task: Callable[[], None]) -> Optional[BaseException]:
    try:
        task()
    except BaseException as exc:  # noqa: BLE001 - handed back to the caller, which raises it
        return exc
    return None
