"""Partitioned tables under capture: partitions attached, created and detached meanwhile.

A partitioned table is captured as one table under its own name: the publication publishes
its partitions' changes via the root (``publish_via_partition_root``), chunk SELECTs read the
root, and its key (which PostgreSQL makes include the partition key) names the rows. What
the log does not carry is rows joining or leaving the table without a row change:

* ``ATTACH PARTITION`` brings the attached table's rows in (``CREATE TABLE .. PARTITION OF``
  an empty partition): the partition's keys are queued for key-list dumps of the root, which
  read those rows through the ordinary watermark path.
* ``DETACH PARTITION`` takes the partition's rows out: its keys, read from the now
  stand-alone table, are queued the same way. The dumps' chunks find the keys gone and say so
  (op k listing them), which removes them in replay, ``dblog verify`` and the landing.
* A partition that was dropped before the capture saw it leave, and a TRUNCATE of a partition
  without its root (pgoutput does not even send it), leave no keys to list: the source warns
  (log and ``dblog status``) with the fix, a dump of the table.

The keys reach the engine through ``take_unchanged_toast`` (the keys whose current row the
log did not carry), in batches of ``KEY_BATCH``, each batch one key-list dump. The partitions
are compared every ``interval`` seconds while the log is read and whenever the source opens
again after a lost connection; a new process starts from the partitions it finds, so a change
made while no capture ran needs a dump of the table.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any, Callable, Optional

import psycopg2.errors

from ...core.events import SUB_WIDTH, Key, Position
from .catalog import captured_ancestor, leaf_partitions, table_name_of

log = logging.getLogger(__name__)

KEY_BATCH = 10_000  # keys per key-list dump queued for a partition that joined or left
Leaves = dict[str, dict[int, str]]  # partitioned table -> {leaf partition OID: its name}


@dataclasses.dataclass
class KeyScan:
    """A partition (or former partition) whose keys are being listed, a batch at a time."""

    root: str
    oid: int
    name: str  # as last seen: found again by OID (a detached table may be renamed)
    change: str  # "joined" or "left"
    after: Optional[Key] = None  # the last key listed
    listed: int = 0


def diff_leaves(old: Leaves, new: Leaves) -> tuple[list[KeyScan], list[KeyScan]]:
    """The partitions that joined and that left each partitioned table between two readings
    (by OID: a renamed partition is the same partition). A table missing from either reading
    (first sight, or dropped) is not compared."""
    joined: list[KeyScan] = []
    left: list[KeyScan] = []
    for root, leaves in new.items():
        before = old.get(root)
        if before is None:
            continue
        joined += [KeyScan(root, oid, name, "joined") for oid, name in leaves.items() if oid not in before]
        left += [KeyScan(root, oid, name, "left") for oid, name in before.items() if oid not in leaves]
    return joined, left


class Partitions:
    """The leaf partitions of one source's captured partitioned tables, the partition name ->
    table map the log decoder uses, and the key lists owed to the engine.

    ``cursor()`` gives a cursor of the source's autocommit connection; ``read_keys(root,
    table, after, limit)`` lists up to ``limit`` keys of ``table`` (in the root's key
    columns, canonical) after ``after``, in key order; ``position()`` is a position after
    everything the log reader has handed out (the engine drops key lists at or below its
    resume position). Each listed key gets a position of its own there, ``sub`` 1, 2, ...:
    no log event or dump row has that coordinate (index 0), so none is taken for it."""

    def __init__(
        self,
        cursor: Callable[[], Any],
        read_keys: Callable[[str, str, Optional[Key], int], list[Key]],
        position: Callable[[], Position],
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._cursor = cursor
        self._read_keys = read_keys
        self._position = position
        self.interval = interval
        self._clock = clock
        self.roots: dict[str, int] = {}  # captured partitioned table -> its OID
        self.leaves: Optional[Leaves] = None  # None until first read: nothing to compare with
        self._root_of: dict[str, Optional[str]] = {}
        self.scans: collections.deque[KeyScan] = collections.deque()
        self.hits: list[tuple[str, Key, Position]] = []
        self.warnings: collections.deque[str] = collections.deque(maxlen=20)
        self._next = 0.0
        self._sub = 0  # the last sub handed out (see the class docstring)

    # -- which table a change belongs to ---------------------------------------------------
    def root_of(self, name: str) -> Optional[str]:
        """The captured partitioned table that ``name`` is a partition of, or None. Known
        partitions come from the last reading; another name is looked up once (a partition
        created since), and a miss is remembered until a reading finds it attached."""
        if not self.roots:
            return None
        try:
            return self._root_of[name]
        except KeyError:
            pass
        with self._cursor() as cur:
            root = captured_ancestor(cur, name, self.roots)
        self._root_of[name] = root
        return root

    # -- readings ------------------------------------------------------------------------------
    def read(self, roots: dict[str, int]) -> dict[str, dict[int, tuple[str, str]]]:
        """The leaves (OID -> (name, relkind)) of the partitioned tables ``roots``, which from
        now on are the ones followed."""
        self.roots = dict(roots)
        with self._cursor() as cur:
            return leaf_partitions(cur, self.roots)

    def compare(self, found: dict[str, dict[int, tuple[str, str]]]) -> None:
        """Take a reading (``read``): queue the keys of partitions that joined or left since
        the last one; the first reading is only remembered."""
        new = {root: {oid: name for oid, (name, _kind) in leaves.items()} for root, leaves in found.items()}
        old, self.leaves = self.leaves, new
        for root, kinds in found.items():
            for name, kind in kinds.values():
                if kind != "r" and (old is None or name not in old.get(root, {}).values()):
                    self._warn(
                        f"partition {name} of {root} is a foreign table: changes of its rows never reach the log.",
                        f"detach it from {root}, or leave {root} out of the capture.",
                    )
        for root, names in new.items():  # the decoder's map follows the reading
            for name in names.values():
                self._root_of[name] = root
        if old is None:
            return
        joined, left = diff_leaves(old, new)
        for scan in left:
            if self._root_of.get(scan.name) == scan.root:
                self._root_of[scan.name] = None  # its later changes are no longer the root's
        for scan in joined + left:
            log.warning(
                "partition %s %s %s, so rows were %s without row events: listing its keys for key-list dumps",
                scan.name,
                scan.change,
                scan.root,
                "added" if scan.change == "joined" else "removed",
            )
            self.scans.append(scan)

    def due(self) -> bool:
        return bool(self.roots) and self._clock() >= self._next

    def step(self) -> None:
        """Compare the partitions when due, then list one batch of keys owed. Driver errors
        other than a missing table pass through (the source turns a lost connection into
        SourceUnavailable)."""
        if self.due():
            self.compare(self.read(self.roots))
            self._next = self._clock() + self.interval
        if self.scans:
            self._list_keys(self.scans[0])

    def _list_keys(self, scan: KeyScan) -> None:
        with self._cursor() as cur:
            name = table_name_of(cur, scan.oid)
        keys: Optional[list[Key]] = None
        if name is not None:
            scan.name = name
            at = self._position()
            try:
                keys = self._read_keys(scan.root, name, scan.after, KEY_BATCH)
            except psycopg2.errors.UndefinedTable:
                keys = None  # dropped between the two statements
            except psycopg2.errors.InsufficientPrivilege:
                # SELECT on the root does not cover reading a partition on its own.
                self.scans.popleft()
                outcome = "are missing from" if scan.change == "joined" else "stay in"
                self._warn(
                    f"partition {name} {scan.change} {scan.root}, but the capture's role may not read it to "
                    f"list its keys ({scan.listed} listed): its rows {outcome} {scan.root}'s changelog.",
                    f"GRANT SELECT ON {name} (and on future partitions: ALTER DEFAULT PRIVILEGES) to the role, "
                    f"then dump {scan.root} (dblog dump --table {scan.root}).",
                )
                return
        if keys is None:
            self.scans.popleft()
            if scan.change == "left":
                self._warn(
                    f"partition {scan.name} left {scan.root} and was dropped before the capture could "
                    f"list its keys ({scan.listed} listed): its rows stay in {scan.root}'s changelog.",
                    f"dump {scan.root} (dblog dump --table {scan.root}): with integer keys its chunks "
                    "remove keys no longer in the table. Before dropping a partition, DETACH it and "
                    "wait for the capture's 'partition ... left' log line.",
                )
            return  # a joined partition dropped again: its rows left with it
        first = self._sub
        self._sub = (first + len(keys)) % (10**SUB_WIDTH - KEY_BATCH - 1)
        self.hits += [(scan.root, key, Position(at.coord, first + 1 + i)) for i, key in enumerate(keys)]
        scan.listed += len(keys)
        if len(keys) < KEY_BATCH:
            self.scans.popleft()
            log.info("partition %s (%s %s): %d key(s) queued for dumps", scan.name, scan.change, scan.root, scan.listed)
        else:
            scan.after = keys[-1]

    def take_hits(self) -> list[tuple[str, Key, Position]]:
        hits, self.hits = self.hits, []
        return hits

    def partial_truncate(self, partition: str, root: str, position: Position) -> None:
        self._warn(
            f"TRUNCATE of partition {partition} without its table {root} (at {position}) removed rows "
            f"the log does not list: they stay in {root}'s changelog.",
            f"dump {root} (dblog dump --table {root}): with integer keys its chunks remove keys no "
            "longer in the table. DELETE FROM a partition (not TRUNCATE) keeps every row in the log.",
        )

    def _warn(self, cause: str, fix: str) -> None:
        # In log_status()'s warnings: the capture logs each once and shows it in dblog status.
        self.warnings.append(f"{cause} Fix: {fix}")
