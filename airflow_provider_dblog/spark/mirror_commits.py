"""What every data commit of the landing job to a mirror carries (docs/landing.md).

* A Delta **transaction id** (``SetTransaction``: app id, version) that makes the commit
  idempotent. The app id names the landing - the streaming query's id, kept in its
  checkpoint, so a new checkpoint is a new landing - and the step (merge, range repair,
  truncate: up to three commits per table and micro-batch); the version is the micro-batch
  id. A micro-batch replayed after a crash finds its version recorded and Delta skips the
  command before it reads or writes anything: no new mirror version, no new file.
* The changelog **positions** of its micro-batch, as the commit's ``userMetadata`` (JSON):
  the mirror is complete up to ``dblog.position`` (every event of ``dblog.source_id`` at or
  below it is in this version), and ``dblog.from`` is where the micro-batch began.
  spark/consistent_cut.py turns these into versions that read one moment of the source.

MERGE and UPDATE take them from Delta's session confs, set around one command only and
restored after it (``tagged``); an append (a new mirror's first batch) as writer options.
Tables landed side by side each run on a session of their own (spark/parallel_tables.py), so
one table's confs never tag another's command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any, Iterator, Optional

# Delta's idempotent-DML confs (delta-io/delta#1555: INSERT, UPDATE, DELETE, MERGE) and the
# commit's user metadata.
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

# Keys of the userMetadata JSON.
SOURCE, POSITION, FROM, LANDING, BATCH = (
    "dblog.source_id",
    "dblog.position",
    "dblog.from",
    "dblog.landing",
    "dblog.batch",
)


@dataclasses.dataclass(frozen=True)
class BatchCommit:
    """One source's part of a landing micro-batch."""

    source_id: str
    first: str  # the micro-batch's lowest position of this source
    last: str  # and its highest: the mirrors are complete up to it once the batch landed
    batch_id: int
    landing: Optional[str]  # the streaming query's id; None: no idempotent write (no checkpoint)

    def user_metadata(self) -> str:
        return json.dumps(
            {
                SOURCE: self.source_id,
                POSITION: self.last,
                FROM: self.first,
                LANDING: self.landing,
                BATCH: self.batch_id,
            },
            sort_keys=True,
        )


def parse_user_metadata(text: Optional[str]) -> Optional[dict]:
    """The landing's metadata of a commit, or None for any other commit (OPTIMIZE, ALTER,
    a user's own write)."""
    if not text:
        return None
    try:
        meta = json.loads(text)
    except ValueError:
        return None
    if not isinstance(meta, dict) or not all(k in meta for k in (SOURCE, POSITION, FROM)):
        return None
    return meta


def writer_options(commit: Optional[BatchCommit], step: str) -> dict[str, str]:
    """The same for a DataFrameWriter's Delta write (an append), which takes them as writer
    options rather than from the session confs ``tagged`` sets."""
    if commit is None:
        return {}
    options = {"userMetadata": commit.user_metadata()}
    if commit.landing is not None:
        options.update(txnAppId=app_id(commit, step), txnVersion=str(commit.batch_id))
    return options


def app_id(commit: BatchCommit, step: str) -> str:
    return f"dblog-land/{commit.landing}/{step}"


@contextlib.contextmanager
def tagged(spark: Any, commit: Optional[BatchCommit], step: str) -> Iterator[None]:
    """Run one Delta command (the body) as ``step`` of ``commit``: idempotent, with positions.

    The confs are session-wide: the body must run exactly one Delta command, on this thread,
    and no other thread may use ``spark`` meanwhile (parallel landing: a session per worker)."""
    if commit is None:
        yield
        return
    confs = {USER_METADATA: commit.user_metadata()}
    if commit.landing is not None:
        confs[TXN_APP_ID] = app_id(commit, step)
        confs[TXN_VERSION] = str(commit.batch_id)
    saved = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
