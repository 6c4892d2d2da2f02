"""What every benchmark module shares: names, progress lines, number formatting, and running
a scenario per database (from bench/run.py or standalone as ``python -m bench.<module>``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable, Iterable, Iterator, Optional

# Scenario modules, in run order: name -> module (each has DEFAULTS, run, markdown, plot).
# Here, not in run.py, because report.py writes their sections and run.py imports report.py.
SCENARIOS = {
    "vs_debezium": "bench.vs_debezium",
    "wide": "bench.wide",
    "memory": "bench.memory",
    "dumps": "bench.dumps",
    "impact": "bench.impact",
    "latency": "bench.latency",
    "landing": "bench.landing",
    "mirror_latency": "bench.mirror_latency",
}

NAMES = {"pg": "PostgreSQL", "mysql": "MariaDB"}


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fmt_n(x: Any) -> str:
    """A count or rate with thousands separators ("–" when missing)."""
    return f"{x:,.0f}" if isinstance(x, (int, float)) else "–"


def run_kinds(
    name: str, run: Callable, kinds: Iterable[str], opts: dict, workdir: str, log: Callable[[str], None] = say
) -> dict:
    """``run(kind, opts, workdir, say)`` per database; a failure is recorded as
    ``{"error": ...}`` and the other databases still run."""
    results: dict = {}
    for kind in kinds:
        log(f"{name} ({kind}): starting")
        t0 = time.perf_counter()
        try:
            results[kind] = run(kind, dict(opts), workdir, lambda m, _k=kind: log(f"{name} ({_k}): {m}"))
        except Exception as exc:  # report the other databases anyway
            log(f"{name} ({kind}): FAILED: {type(exc).__name__}: {exc}")
            results[kind] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"{name} ({kind}): done in {time.perf_counter() - t0:.0f} s")
    return results


def standalone(
    name: str,
    module: Any,
    kinds: Iterable[str],
    opts: dict,
    plot_path: Optional[str] = None,
    shown: Callable[[dict], dict] = lambda r: r,
) -> int:
    """``python -m bench.<name>``: run, print the JSON (``shown`` may slim it) and the
    markdown section, draw the plot if asked; exit 1 if a database failed."""
    workdir = tempfile.mkdtemp(prefix=f"dblog-bench-{name}-")
    try:
        results = run_kinds(name, module.run, kinds, opts, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({k: shown(r) for k, r in results.items()}, indent=2, default=str))
    print(module.markdown(results))
    if plot_path:
        say(f"plot: {module.plot(results, plot_path)}")
    return 1 if any("error" in r for r in results.values()) else 0


@contextlib.contextmanager
def spark_bench(name: str, workdir: str, master: str = "local[2]") -> Iterator[tuple[Any, str]]:
    """(session, work directory) of a Spark benchmark: the active session if there is one
    (bench/run.py's), else a new one stopped at the end; the directory removed at the end."""
    from pyspark.sql import SparkSession

    from airflow_provider_dblog.spark.session import get_session

    work = tempfile.mkdtemp(prefix=f"{name}-", dir=workdir)
    owned = SparkSession.getActiveSession() is None
    spark = None
    try:
        spark = get_session(f"dblog-bench-{name}", master=master)
        yield spark, work
    finally:
        if spark is not None and owned:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def agnostic_main(name: str, run: Callable, markdown: Callable[[dict], str], opts: dict) -> int:
    """``python -m bench.<name>`` of a source-agnostic benchmark (``run`` ignores the kind):
    run once, print the JSON and the markdown section; exit 1 if it failed."""
    workdir = tempfile.mkdtemp(prefix=f"dblog-bench-{name}-")
    try:
        result = run("any", opts, workdir, say)
    except Exception as exc:  # noqa: BLE001 - reported like the other benchmarks
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2, default=str))
    print(markdown({"any": result}))
    return 1 if "error" in result else 0


def raise_if_exited(proc: Optional[subprocess.Popen], log_path: str, what: str) -> None:
    """A child that should still run has exited: raise with the end of its log."""
    if proc is not None and proc.poll() is not None:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"bench: {what} exited ({proc.returncode}):\n{tail}")


def terminate(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM (a capture's clean stop), then SIGKILL after ``timeout`` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
