"""``dblog`` with fault injection, for tests that start it as a child process::

    python -m tests.support.faulty_dblog [--window-delay-ms MS] [--write-delay-ms MS]
        [--write-marker FILE] -- DBLOG-ARGUMENTS...

in place of ``python -m airflow_provider_dblog.cli DBLOG-ARGUMENTS...`` (see faults.py for
what each option does).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from airflow_provider_dblog import cli

from .faults import faulty_parts


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m tests.support.faulty_dblog [fault options] -- DBLOG-ARGUMENTS...")
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="faulty_dblog")
    p.add_argument(
        "--window-delay-ms",
        type=float,
        default=0.0,
        help="sleep after each chunk SELECT (between the SELECT and the high watermark)",
    )
    p.add_argument("--write-delay-ms", type=float, default=0.0, help="make every output commit take this long")
    p.add_argument("--write-marker", help="append a line to this file when an output commit begins")
    opts = p.parse_args(argv[:split])
    parts = faulty_parts(opts.window_delay_ms / 1000.0, opts.write_delay_ms / 1000.0, opts.write_marker)
    return cli.main(argv[split + 1 :], parts)


if __name__ == "__main__":
    sys.exit(main())
