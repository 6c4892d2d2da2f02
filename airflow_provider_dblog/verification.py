"""One verify run, as ``dblog verify``, ``VerifyOperator`` and spark/verify_mirror.py do it:
compare each table of the source with the changelog's replay or the mirrors, then request a
key-list dump of exactly the keys that differ (docs/cli.md "Drift repair").

The callers differ only in what they compare with (``against_replay`` here; the mirrors'
comparison needs Spark and lives in spark/verify_mirror.py), how they report (print, log,
XCom) and how they open the state store; those are parameters. No Airflow, no Spark here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from .core.dump_requests import request_repairs
from .core.dumps import DEFAULT_CHUNK_SIZE
from .core.events import Key
from .core.protocols import StateStore
from .core.range_verify import RangeStats, check_table_by_ranges
from .core.range_verify import describe as describe_ranges
from .core.verify import LANDING_FAULTS, Mismatch, check_table


@dataclasses.dataclass(frozen=True)
class TableComparison:
    """One table of the source against its replay or its mirror."""

    table: str
    source_rows: int
    other_rows: int  # rows of the changelog's replay, or of the mirror
    mismatches: list[Mismatch]
    by_ranges: bool = False  # compared by key-range digests where the source and key allow it
    ranges: Optional[RangeStats] = None  # digests run and source rows read; None: read whole

    @property
    def keys(self) -> list[Key]:
        """The keys a repair dump can set right (not a mirror's duplicate rows or a history
        mirror's overlapping versions: landing faults)."""
        return [m.key for m in self.mismatches if m.kind not in LANDING_FAULTS]

    def describe(self, other: str) -> str:
        """The report line: ``other`` names the other side ("in the mirror")."""
        how = describe_ranges(self.ranges) if self.by_ranges else ""
        return (
            f"{self.table}: {self.source_rows} rows in the source, {self.other_rows} {other}, "
            f"{len(self.mismatches)} mismatches{how}"
        )


Compare = Callable[[str], TableComparison]


def against_replay(source: Any, output: Any, by_ranges: bool) -> Compare:
    """Compare with the replay of the changelog in ``output`` (both open)."""

    def compare(table: str) -> TableComparison:
        stats = None
        if by_ranges:
            check, stats = check_table_by_ranges(source, output, table)
        else:
            check = check_table(source, output, table)
        return TableComparison(table, check.source_rows, check.replay_rows, check.mismatches, by_ranges, stats)

    return compare


def verify(
    source: Any,
    tables: Optional[Sequence[str]],
    compare: Compare,
    on_table: Callable[[TableComparison], None] = lambda _: None,
) -> dict[str, TableComparison]:
    """Compare each table (default: every captured table) of the open ``source``, reporting
    each through ``on_table`` as soon as it is compared."""
    done = {}
    for table in tables or source.tables():
        done[table] = result = compare(table)
        on_table(result)
    return done


def mismatched(results: dict[str, TableComparison]) -> dict[str, list[Key]]:
    return {table: r.keys for table, r in results.items()}


def drifted(results: dict[str, TableComparison]) -> bool:
    return any(r.mismatches for r in results.values())


def printer(other: str, show: int) -> Callable[[TableComparison], None]:
    """The command lines' report of a table: its line and up to ``show`` mismatches."""

    def report(result: TableComparison) -> None:
        print(result.describe(other))
        for m in result.mismatches[:show]:
            print(f"  {m.describe()}")

    return report


def print_repair(table: str, spec: Any, keys: int) -> None:
    print(f"{table}: repair dump {spec.dump_id} of {keys} keys requested")


def repair(
    results: dict[str, TableComparison],
    make_source: Callable[[], Any],
    open_state: Callable[[], StateStore],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_repair: Callable[[str, Any, int], None] = lambda *_: None,
) -> dict[str, Any]:
    """A key-list dump per drifted table of exactly its mismatched keys (table -> DumpSpec);
    nothing, and no state store opened, when nothing drifted. ``on_repair(table, spec,
    keys)`` reports each request. The source is made anew (a dump request checks the keys
    against its catalog; the compared one is closed by then)."""
    keys = mismatched(results)
    if not any(keys.values()):
        return {}
    state = open_state()
    try:
        specs = request_repairs(make_source(), state, keys, chunk_size)
        for table, spec in specs.items():
            on_repair(table, spec, len(keys[table]))
        return specs
    finally:
        state.close()
