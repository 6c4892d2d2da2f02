"""pyinstrument over every thread of an in-process capture (engine loop, writer, binlog reader).

pyinstrument samples only the thread that started it, and the capture's work is spread over
threads the engine and the sources start themselves. So while profiling, every new thread
runs under a profiler of its own (``Thread._bootstrap_inner`` wrapped; CPython 3.10-3.13),
and the sessions are merged into one table of self time per function.

Times are wall clock: a thread blocked in a lock, ``select`` or a socket read shows that as
self time of the blocking call. Those calls are reported separately as *waiting*, so the hot
spots list only where a thread was busy.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from typing import Iterator

# Builtins in which a thread waits rather than works.
WAITS = {"acquire", "wait", "select", "sleep", "recv_into", "recv", "poll", "get", "join", "read"}


class ThreadProfiles:
    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.sessions: list[tuple[str, object]] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def active(self) -> Iterator["ThreadProfiles"]:
        from pyinstrument import Profiler

        original = threading.Thread._bootstrap_inner
        profiles = self

        def bootstrap_inner(thread):  # runs in the new thread
            p = Profiler(interval=profiles.interval, async_mode="disabled")
            p.start()
            try:
                original(thread)
            finally:
                session = p.stop()
                with profiles._lock:
                    profiles.sessions.append((thread.name, session))

        threading.Thread._bootstrap_inner = bootstrap_inner
        try:
            yield self
        finally:
            threading.Thread._bootstrap_inner = original

    def thread_label(self, name: str) -> str:
        if name.startswith("dblog-binlog"):
            return "binlog reader"
        return {"dblog-engine": "engine loop", "dblog-writer": "writer"}.get(name, name)

    def summary(self, top: int = 10, repo: str = "") -> dict:
        """Per thread: wall and waiting time. Hot spots: busy self time per function, with the
        project functions it was reached through (``via``), so that time spent inside a library
        (json, dataclasses, pymysqlreplication) points at the project line that asked for it.
        Project functions: busy inclusive time (waits below them subtracted), thread-wide
        wrappers (>= 90 % of their thread's busy time) left out."""
        busy: collections.Counter = collections.Counter()
        waiting: collections.Counter = collections.Counter()
        project: collections.Counter = collections.Counter()
        threads: dict[str, dict[str, float]] = {}
        for name, session in self.sessions:
            label = self.thread_label(name)
            root = session.root_frame()
            if root is None:
                continue
            th = threads.setdefault(label, {"wall_s": 0.0, "waiting_s": 0.0})
            th["wall_s"] += root.time
            seen: collections.Counter = collections.Counter()

            def walk(frame, via: tuple, label=label, seen=seen) -> float:
                """Returns the waiting time in this subtree."""
                where = _where(frame, repo)
                mine = where.startswith("airflow_provider_dblog/")
                own = sum(c.time for c in frame.children if c.is_synthetic and c.function == "[self]")
                waited = 0.0
                if own:
                    if frame.file_path_short == "<built-in>" and frame.function.rsplit(".", 1)[-1] in WAITS:
                        waiting[(label, where)] += own
                        waited += own
                    else:
                        busy[(label, where, via[-2:] if not mine else via[-1:])] += own
                seen[where] += 1
                below = via + (where,) if mine else via
                for c in frame.children:
                    if not c.is_synthetic:
                        waited += walk(c, below)
                seen[where] -= 1
                if mine and not seen[where]:  # outermost call of a recursion only
                    project[(label, where)] += frame.time - waited
                return waited

            th["waiting_s"] += walk(root, ())
        thread_busy = {k: v["wall_s"] - v["waiting_s"] for k, v in threads.items()}
        return {
            "threads": {
                k: {"wall_s": round(v["wall_s"], 2), "waiting_s": round(v["waiting_s"], 2)} for k, v in threads.items()
            },
            "hot_spots": [
                {
                    "thread": t,
                    "function": w,
                    "via": list(reversed(v)),
                    "self_s": round(s, 2),
                    "share_of_thread": round(s / thread_busy[t], 3) if thread_busy[t] > 0 else 0.0,
                }
                for (t, w, v), s in busy.most_common(top)
            ],
            "waits": [{"thread": t, "function": w, "self_s": round(s, 2)} for (t, w), s in waiting.most_common(5)],
            "project": [
                {
                    "thread": t,
                    "function": w,
                    "busy_s": round(s, 2),
                    "share_of_thread": round(s / thread_busy[t], 3) if thread_busy[t] > 0 else 0.0,
                }
                for (t, w), s in project.most_common()
                if thread_busy[t] > 0 and s < 0.9 * thread_busy[t]
            ][:top],
        }

    def write_text(self, path: str) -> None:
        """The full pyinstrument trees, one per thread, for reading the details."""
        with open(path, "w", encoding="utf-8") as f:
            for name, session in self.sessions:
                from pyinstrument.renderers import ConsoleRenderer

                f.write(f"===== thread {name} =====\n")
                f.write(ConsoleRenderer(unicode=True, color=False, show_all=False).render(session))


def _where(frame, repo: str) -> str:
    path = frame.file_path or ""
    if repo and path.startswith(repo):
        path = os.path.relpath(path, repo)
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith("/"):
        path = os.path.basename(path)
    if frame.file_path_short == "<built-in>":
        return f"{frame.function} (built-in)"
    return f"{path}:{frame.function}"
