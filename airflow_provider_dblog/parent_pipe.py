"""A child that stops when the process that started it dies, however it dies.

The capture and the continuous-landing triggers start their child with a pipe on its
standard input and never write to it. When the triggerer process ends (a SIGKILL, the OOM
killer, a node drain), the kernel closes the pipe's write end and the child reads
end-of-file. The child then stops as on SIGTERM: the capture at a checkpoint, releasing its
leader lease, replication slot or binlog connection; the landing between micro-batches. So
no orphan keeps the source from the capture that Airflow restarts under another triggerer.

A pipe rather than Linux's parent-death signal: it works on every POSIX system, and the
signal fires when the *thread* that forked the child ends, which in a triggerer is not the
process's end.
"""

from __future__ import annotations

import os
import threading


def stop_with_parent(stop: threading.Event, fd: int = 0) -> threading.Thread:
    """Set ``stop`` once ``fd`` (standard input: the parent's pipe) reaches end-of-file."""

    def watch() -> None:
        try:
            while os.read(fd, 65536):
                pass  # the parent writes nothing; anything it does write is ignored
        except OSError:
            pass
        # Nobody reads our stdout and stderr any more: a write there would raise
        # BrokenPipeError in the middle of the graceful stop.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
        stop.set()

    thread = threading.Thread(target=watch, name="dblog-parent-pipe", daemon=True)
    thread.start()
    return thread
