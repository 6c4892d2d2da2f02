"""``dblog``'s process exit (cli.run): main's exit code, output flushed, no native destructors."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN = """
import sys
from airflow_provider_dblog import cli
def fake():
    print("done", end="")  # no newline: still flushed before the hard exit
    print("note", file=sys.stderr, end="")
    {body}
cli.main = fake
cli.run()
raise SystemExit(99)  # never reached: run() ends the process
"""


@pytest.mark.parametrize(
    ("body", "code", "err"),
    [
        ("return 0", 0, "note"),
        ("return 1", 1, "note"),
        ("raise SystemExit(2)", 2, "note"),  # argparse's usage error
        ("raise SystemExit('bad')", 1, "bad"),
        ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
        ("raise KeyboardInterrupt", 130, "note"),
    ],
)
def test_run_exits_with_mains_code_and_flushed_output(body, code, err):
    proc = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "done"
    assert err in proc.stderr


def test_run_skips_exit_time_handlers():
    """A handler registered for interpreter exit (as native libraries' destructors run then)
    does not run: os._exit ends the process."""
    body = "import atexit; atexit.register(lambda: print('atexit ran')); return 0"
    proc = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "atexit ran" not in proc.stdout
