"""The version of each mirror of a source that together read one moment of the source.

    python -m airflow_provider_dblog.spark.consistent_cut --lake /data/lake --source pg1 \\
        [--position 00000001A2B3C5F00000000002.000000000]

prints ``{"position": ..., "versions": {"shop.orders": 12, ...}, "sql": {...}}``: read each
mirror ``VERSION AS OF`` its version and a join across them sees every source transaction
at or below ``position`` and none above: no half-applied multi-table transaction.

How: every data commit of the landing job records its micro-batch's first and last position
of the source (spark/mirror_commits.py). After a micro-batch, each mirror of the source holds
exactly the source's events up to the batch's last position, so a *cut* can only fall on a
batch boundary, and only on one that does not split a source transaction (the capture
commits the changelog by size and time, not by transaction). The cut for a position is the
newest such boundary at or below it. A boundary's transaction has ended when the next event
of the source is of another transaction: the next landed batch's first position, or for the
newest batch the changelog's next event (none yet: not provable, so the newest batch counts
only once the capture has written past it).

History mirrors (``land_changelog --history``, spark/history.py) are read at the cut by
position, not by version: ``history_sql`` selects the versions that held at the cut's
position (``history.as_of``), which is exact in any version of the history that has landed up
to the cut. A history that has not (landed only up to an earlier batch) or that stopped is
left out, with the reason in ``histories_left_out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Callable, Optional, Sequence

from airflow_provider_dblog import sources
from airflow_provider_dblog.outputs.lake_layout import absolute, history_path, mirrors_root
from airflow_provider_dblog.spark import mirror_commits as mc
from airflow_provider_dblog.spark.changelog_tables import changelog_of


class NoConsistentCut(RuntimeError):
    pass


def transaction_of(position: str) -> str:
    """The part of an encoded position (``<coordinate>.<sub>``) shared by every event of its
    source transaction (dump rows share their high watermark's)."""
    transaction = sources.transaction_of(position)  # each source's descriptor knows its positions
    if transaction is None:
        raise ValueError(
            f"cannot tell the transaction of position {position!r}: not a PostgreSQL, MySQL or MariaDB position"
        )
    return transaction


@dataclasses.dataclass(frozen=True)
class MirrorHistory:
    table: str
    path: str
    commits: list[tuple[int, Optional[dict]]]  # (version, the landing's metadata or None), ascending
    stopped: Optional[str] = None  # the mirror's dblog.stopped reason: it no longer follows the source


@dataclasses.dataclass(frozen=True)
class Cut:
    source_id: str
    position: str  # the moment read: every event of the source at or below it, none above
    versions: dict[str, Optional[int]]  # table -> mirror version (None: no mirror yet, empty then)
    paths: dict[str, str]
    stopped: dict[str, str]  # mirrors left out: stopped by an incompatible schema change
    histories: dict[str, str] = dataclasses.field(default_factory=dict)  # table -> history mirror path
    histories_left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # table -> why

    def sql(self, table: str) -> str:
        """A FROM item reading ``table``'s mirror at the cut."""
        path = self.paths[table].replace("`", "``")
        return f"delta.`{path}` VERSION AS OF {self.versions[table]}"

    def history_sql(self, table: str) -> str:
        """A FROM item reading ``table``'s history mirror as of the cut: the versions that held
        at its position (history.as_of)."""
        path = self.histories[table].replace("`", "``")
        at = self.position.replace("'", "''")
        return (
            f"(SELECT * FROM delta.`{path}` WHERE _valid_from <= '{at}' AND (_valid_to IS NULL OR _valid_to > '{at}'))"
        )

    def as_dict(self) -> dict:
        out = {
            "source_id": self.source_id,
            "position": self.position,
            "versions": self.versions,
            "sql": {t: self.sql(t) for t, v in self.versions.items() if v is not None},
            "stopped": self.stopped,
        }
        if self.histories or self.histories_left_out:
            out["history_sql"] = {t: self.history_sql(t) for t in self.histories}
            out["histories_left_out"] = self.histories_left_out
        return out


def find_cut(
    source_id: str,
    mirrors: list[MirrorHistory],
    position: Optional[str] = None,
    next_event: Optional[Callable[[str], Optional[str]]] = None,
    histories: Sequence[MirrorHistory] = (),
) -> Cut:
    """The newest consistent cut at or below ``position`` (default: the newest landed).

    ``next_event(p)``: the source's first changelog position above ``p``, or None: tells
    whether the newest landed batch ended a transaction (the next batch tells for the others).
    ``histories``: the source's history mirrors, read at the cut's position where they have
    landed up to it."""
    tagged = {m.table: _tagged(m, source_id) for m in mirrors if m.stopped is None}
    batches = [c for cs in tagged.values() for c in cs]
    if not batches:
        raise NoConsistentCut(f"no mirror of source {source_id!r} has a landing commit with positions")
    landed = max(c.last for c in batches)
    if position is not None and position > landed:
        # Beyond the landed end only if the changelog has no event in between.
        following = next_event(landed) if next_event is not None else None
        if following is None or following <= position:
            raise NoConsistentCut(f"source {source_id!r} is landed only up to {landed}, not yet to {position}")
    starts = sorted({c.first for c in batches})
    for cut in sorted({c.last for c in batches if position is None or c.last <= position}, reverse=True):
        if not _ends_transaction(cut, starts, next_event):
            continue
        versions = {m.table: _version_at(m.commits, tagged[m.table], cut) for m in mirrors if m.stopped is None}
        if all(v is not False for v in versions.values()):
            spans = {t: (min(c.first for c in cs), cs[-1].complete) for t, cs in tagged.items() if cs}
            held, left_out = _histories_at(histories, spans, source_id, cut)
            return Cut(
                source_id,
                cut,
                {t: v for t, v in versions.items() if v is not False},
                {m.table: m.path for m in mirrors if m.stopped is None},
                {m.table: m.stopped for m in mirrors if m.stopped is not None},
                held,
                left_out,
            )
    raise NoConsistentCut(
        f"no consistent cut of source {source_id!r} at or below {position or landed}: every landed batch boundary "
        "there splits a source transaction (or the next event is not in the changelog yet)"
    )


def _histories_at(
    histories: Sequence[MirrorHistory], spans: dict[str, tuple[str, str]], source_id: str, cut: str
) -> tuple[dict[str, str], dict[str, str]]:
    """(table -> path of the histories that hold the cut, table -> why the others do not).
    ``spans``: each mirror's first landed position and the position it is complete up to.

    A history holds every event of its table up to its last commit's position; past it, up to
    its mirror's (a batch commits the mirror, then the history: one that caught up with its
    mirror lacks nothing the mirror has, and a table without events in a batch gets no commit
    in either, so a quiet table's history is exact far past its last commit). One whose first
    batch began after its mirror's (added to a landing later) lacks the keys not changed since."""
    held, left_out = {}, {}
    for h in histories:
        tagged = _tagged(h, source_id)
        landed = tagged[-1].complete if tagged else None
        began, mirror = spans.get(h.table, (None, None))
        if h.stopped is not None:
            left_out[h.table] = f"stopped: {h.stopped}"
        elif landed is None:
            left_out[h.table] = "nothing landed yet"
        elif began is not None and (first := min(c.first for c in tagged)) > began:
            left_out[h.table] = f"added after its mirror: its first batch began at {first}"
        elif landed >= cut or (mirror is not None and landed >= mirror):
            held[h.table] = h.path
        else:
            left_out[h.table] = f"landed only up to {landed}, its mirror up to {mirror}"
    return held, left_out


@dataclasses.dataclass(frozen=True)
class _Commit:
    version: int
    first: str
    last: str
    complete: str  # the mirror is complete up to here: the highest ``last`` so far


def _tagged(m: MirrorHistory, source_id: str) -> list[_Commit]:
    out: list[_Commit] = []
    for version, meta in m.commits:
        if meta is None or meta[mc.SOURCE] != source_id:
            continue
        complete = max(meta[mc.POSITION], out[-1].complete) if out else meta[mc.POSITION]
        out.append(_Commit(version, meta[mc.FROM], meta[mc.POSITION], complete))
    return out


def _ends_transaction(cut: str, starts: list[str], next_event: Optional[Callable[[str], Optional[str]]]) -> bool:
    # The next landed batch's start (exact: a landing's batches are contiguous), else, after
    # the newest batch, the changelog's next event (old changelog rows may have been deleted).
    following = next((s for s in starts if s > cut), None)
    if following is None and next_event is not None:
        following = next_event(cut)
    return following is not None and transaction_of(following) != transaction_of(cut)


def _version_at(commits: list[tuple[int, Optional[dict]]], tagged: list[_Commit], cut: str) -> Any:
    """The mirror's newest version holding exactly its events up to ``cut``; None when it has
    no version yet; False when no version does (a later commit may hold events at or below
    ``cut``)."""
    before = [c for c in tagged if c.complete <= cut]
    after = [c for c in tagged if c.complete > cut]
    if after and not (after[0].first > cut or (before and before[-1].complete == cut)):
        return False
    # Any commit up to the next landing commit: other commits (OPTIMIZE, ADD COLUMNS,
    # maintenance) change no row's value.
    limit = after[0].version if after else None
    versions = [v for v, _ in commits if limit is None or v < limit]
    return versions[-1] if versions else None


# -- Spark ----------------------------------------------------------------------------------
def read_histories(spark: Any, mirrors: str, source_id: str, history: bool = False) -> list[MirrorHistory]:
    """The commit history of every mirror of ``source_id`` under ``mirrors``; with
    ``history``, of those mirrors' history mirrors (where a table has one)."""
    from delta.tables import DeltaTable

    from airflow_provider_dblog.spark.mirror_tables import PROP_STOPPED, list_mirrors

    out = []
    for sid, table, path in list_mirrors(spark, mirrors):
        if sid != source_id:
            continue
        if history:
            path = history_path(mirrors, sid, table)
            if not DeltaTable.isDeltaTable(spark, path):
                continue
        rows = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
        props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
        commits = sorted((r.version, mc.parse_user_metadata(r.userMetadata)) for r in rows)
        out.append(MirrorHistory(table, path, commits, props.get(PROP_STOPPED)))
    return out


def changelog_next_event(spark: Any, changelog: str, source_id: str) -> Callable[[str], Optional[str]]:
    """``next_event`` for find_cut, from the changelog (data skipping on ``position``)."""
    from pyspark.sql import functions as F

    events = spark.read.format("delta").load(changelog).where(F.col("source_id") == source_id)
    return lambda p: events.where(F.col("position") > p).agg(F.min("position")).first()[0]


def consistent_cut(
    spark: Any, lake: str, source_id: str, position: Optional[str] = None, mirrors: Optional[str] = None
) -> Cut:
    """find_cut over the mirrors of ``source_id`` (default root ``<lake>/mirrors``)."""
    lake = absolute(lake)
    root = mirrors_root(lake, mirrors)
    return find_cut(
        source_id,
        read_histories(spark, root, source_id),
        position,
        changelog_next_event(spark, changelog_of(spark, lake, source_id), source_id),
        read_histories(spark, root, source_id, history=True),
    )


def read_at(spark: Any, cut: Cut, table: str) -> Any:
    """``table``'s mirror as of the cut (a DataFrame, tombstones included)."""
    return spark.read.format("delta").option("versionAsOf", cut.versions[table]).load(cut.paths[table])


def main(argv: Optional[list[str]] = None) -> int:
    from airflow_provider_dblog.spark.session import get_session

    p = argparse.ArgumentParser(prog="consistent_cut", description=__doc__.split("\n\n")[0])
    p.add_argument("--lake", required=True, help="the capture's output root (holds changelogs/<source>)")
    p.add_argument("--source", required=True, help="source_id: positions are comparable within one source")
    p.add_argument("--position", help="an encoded position, as in the changelog (default: the newest landed)")
    p.add_argument("--mirrors", help="root of the mirror tables (default <lake>/mirrors)")
    p.add_argument("--master", help="Spark master when run without spark-submit (default local[2])")
    args = p.parse_args(argv)
    spark = get_session("dblog-consistent-cut", master=args.master, locations=(args.lake, args.mirrors))
    try:
        cut = consistent_cut(spark, args.lake, args.source, args.position, args.mirrors)
    except NoConsistentCut as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps({"requested": args.position, **cut.as_dict()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
