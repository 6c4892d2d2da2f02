"""The Spark landing job with a pause between two tables' merges, for a test that kills it
there (tests/e2e/test_landing.py)::

    python -m tests.support.slow_landing --delay-s SECONDS -- LAND_CHANGELOG-ARGUMENTS...

in place of ``python -m airflow_provider_dblog.spark.land_changelog ARGUMENTS...`` (with
``--parallel-tables 1``: landed side by side, the tables would not wait for each other).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from airflow_provider_dblog.spark import land_changelog


def slow_lander(delay_s: float) -> type[land_changelog.Lander]:
    class SlowLander(land_changelog.Lander):
        """Sleeps before merging each table but the job's first: the job's log then says
        "landed batch ..." for a table while the next one has not been touched yet."""

        def land_table(self, events, source_id, table, schema_ids, **options):
            if self.landed:
                time.sleep(delay_s)
            super().land_table(events, source_id, table, schema_ids, **options)

    return SlowLander


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m tests.support.slow_landing --delay-s S -- LAND_CHANGELOG-ARGUMENTS...")
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="slow_landing")
    p.add_argument("--delay-s", type=float, required=True, help="pause before each table's merge but the first")
    opts = p.parse_args(argv[:split])
    return land_changelog.main(argv[split + 1 :], slow_lander(opts.delay_s))


if __name__ == "__main__":
    sys.exit(main())
