"""parent_pipe.py with real processes: a child started with a pipe on its standard input stops
when its parent is SIGKILLed, and only then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support.processes import running

CHILD = """
import sys, threading
from airflow_provider_dblog.parent_pipe import stop_with_parent
stop = threading.Event()
stop_with_parent(stop)
print("ready", flush=True)
sys.exit(0 if stop.wait(120) else 3)
"""

# The parent holds the pipe's write end and never writes, as the triggers do.
PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE)
print(child.pid, flush=True)
child.wait()
"""


def test_the_child_stops_when_its_parent_is_killed_and_not_before():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "ready"
        time.sleep(1)
        assert running(child), "the child stopped while its parent lived"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        end = time.monotonic() + 30
        while running(child) and time.monotonic() < end:
            time.sleep(0.1)
        assert not running(child), "the child outlived its parent"
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)
