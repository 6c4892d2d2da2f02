"""The cost of one changelog append against the number of commits before it (issue 33 part
4c: the last tenth of a huge dump is slower than the first).

    python -m bench.changelog_commits [--commits 1000] [--rows 2000] [--compact-at 500]

Appends ``--commits`` batches of ``--rows`` narrow dump rows to a fresh Delta changelog
through ``DeltaChangelogOutput.write`` (one commit each, as a dump writes one per chunk), no
database: mean and median milliseconds per append in each tenth of the commits, and the last
tenth over the first. ``--compact-at N`` compacts the table (delta-rs ``optimize.compact``, as
the maintenance job does) after commit N, to tell the table's file count from its log length.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from airflow_provider_dblog.core.events import ChangeEvent, Op, Origin, Position
from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput
from airflow_provider_dblog.outputs.lake_layout import changelog_path

SOURCE = "bench_commits"


def batch(first: int, rows: int) -> list[ChangeEvent]:
    return [
        ChangeEvent(
            SOURCE,
            "public.t",
            Op.READ,
            (k,),
            None,
            {"id": k, "v": k, "s": "abcdefghij"},
            Position(f"{k:016X}{0:010d}", 0),
            origin=Origin.DUMP,
            dump_id="d1",
        )
        for k in range(first, first + rows)
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=1000)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--compact-at", type=int, metavar="N")
    a = p.parse_args()
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dblog-bench-commits-") as lake:
        out = DeltaChangelogOutput(lake)
        out.open()
        for i in range(a.commits):
            events = batch(i * a.rows, a.rows)
            t0 = time.perf_counter()
            out.write(events, epoch=1)
            times.append(time.perf_counter() - t0)
            if a.compact_at is not None and i == a.compact_at:
                import deltalake

                deltalake.DeltaTable(changelog_path(lake, SOURCE)).optimize.compact()
    tenth = max(1, a.commits // 10)
    means = []
    print("| commits | mean ms per append | median ms |\n|---|---:|---:|")
    for start in range(0, a.commits, tenth):
        part = times[start : start + tenth]
        means.append(1000 * sum(part) / len(part))
        print(f"| {start}–{start + len(part) - 1} | {means[-1]:.1f} | {1000 * statistics.median(part):.1f} |")
    print(f"last tenth / first tenth: {means[-1] / means[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
