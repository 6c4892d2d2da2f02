"""``dblog doctor``: checks an environment the way a deployment uses it and prints each
problem with its fix, so a misconfiguration shows up before the first capture or landing run
fails on it.

Each check gives one ``Finding``: ``ok``, ``warn`` (works, but not as intended: e.g. the slow
decoding path, jars downloaded on every run) or ``fail`` (a deployment would stop). The
command exits 1 when anything failed. Checks change nothing: the source is validated by its
``preflight`` (no slot, publication or watermark row), the state store is opened without
creating it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Callable, Iterable, Optional

from ..core.errors import DBLogError

OK, WARN, FAIL = "ok", "warn", "fail"
JAVA_MIN = 17  # Spark 4


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status:4}] {self.check}: {self.detail}"
        return text + (f"\n       fix: {self.fix}" if self.fix else "")


def _run(cmd: list[str], env: Optional[dict[str, str]] = None, timeout: float = 60) -> tuple[int, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def check_package() -> Iterable[Finding]:
    from .. import __version__
    from ..sources import native

    yield Finding("package", OK, f"airflow-provider-dblog {__version__} on Python {sys.version.split()[0]}")
    if native.compiled():
        yield Finding("compiled decoder", OK, "installed (rows are decoded natively)")
    else:
        yield Finding(
            "compiled decoder",
            WARN,
            f"not installed ({native.IMPORT_ERROR}): rows are decoded in Python, several times slower",
            "install the manylinux wheel of airflow-provider-dblog, or build it with a Rust toolchain "
            "(docs/install.md)",
        )


def java_major(text: str) -> Optional[int]:
    """The major version in ``java -version``'s output (``1.8.0_402`` is 8)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> Iterable[Finding]:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        yield Finding(
            "java",
            FAIL,
            f"no java ({'JAVA_HOME=' + home if home else 'none on PATH, JAVA_HOME unset'}): Spark cannot start",
            f"install Java {JAVA_MIN} or 21 (Debian: apt install openjdk-17-jre-headless) and put it on PATH "
            "or set JAVA_HOME",
        )
        return
    code, out = _run([java, "-version"])
    major = java_major(out)
    if code != 0 or major is None:
        yield Finding("java", FAIL, f"{java} -version failed: {out[-300:]}", "reinstall Java or fix JAVA_HOME")
    elif major < JAVA_MIN:
        yield Finding(
            "java", FAIL, f"{java} is Java {major}; Spark 4 needs {JAVA_MIN} or later", f"install Java {JAVA_MIN} or 21"
        )
    else:
        yield Finding("java", OK, f"{java} (Java {major})")


def check_spark() -> Iterable[Finding]:
    try:
        import pyspark
    except ImportError:
        yield Finding("pyspark", FAIL, "not importable in this Python", "pip install airflow-provider-dblog")
        return
    submit = shutil.which("spark-submit")
    if submit is None:
        yield Finding(
            "spark-submit",
            FAIL,
            "not on PATH: the Spark provider runs spark-submit by name (dblog_land)",
            f"put the venv's bin directory on PATH of every Airflow process (PATH={os.path.dirname(sys.executable)}:$PATH)",
        )
    else:
        code, out = _run([submit, "--version"])
        m = re.search(r"version (\d+\.\d+\.\d+)", out)
        if m and m.group(1) != pyspark.__version__:
            yield Finding(
                "spark-submit",
                FAIL,
                f"{submit} is Spark {m.group(1)}, but this Python's pyspark is {pyspark.__version__}",
                "use the spark-submit of the venv that has airflow-provider-dblog (put its bin first on PATH)",
            )
        elif m:
            yield Finding("spark-submit", OK, f"{submit} (Spark {m.group(1)}, as pyspark)")
        else:
            yield Finding("spark-submit", FAIL, f"{submit} --version failed: {out[-300:]}", "check Java (above)")
    driver = os.environ.get("PYSPARK_PYTHON") or shutil.which("python3")
    if driver is None:
        yield Finding(
            "driver python",
            FAIL,
            "no python3 on PATH and PYSPARK_PYTHON unset",
            "set PYSPARK_PYTHON to this venv's python",
        )
        return
    code, out = _run([driver, "-c", "import airflow_provider_dblog, pyspark; print(pyspark.__version__)"])
    if code != 0:
        yield Finding(
            "driver python",
            FAIL,
            f"{driver} (what Spark starts the job's driver and workers with) cannot import the package: {out.splitlines()[-1] if out else code}",
            f"set PYSPARK_PYTHON={sys.executable}, or put this venv's bin first on PATH",
        )
    elif out.splitlines()[-1] != pyspark.__version__:
        yield Finding(
            "driver python",
            FAIL,
            f"{driver} has pyspark {out.splitlines()[-1]}, not {pyspark.__version__}",
            f"set PYSPARK_PYTHON={sys.executable}",
        )
    else:
        yield Finding("driver python", OK, f"{driver}")


def check_jars(lake: Optional[str]) -> Iterable[Finding]:
    from ..spark import jars, session

    try:
        delta = session.resolve_jars()
    except FileNotFoundError as exc:
        yield Finding("spark jars", FAIL, str(exc).split(" Fix:")[0], "run: dblog spark-jars")
        return
    if delta is None:
        yield Finding(
            "spark jars",
            WARN,
            f"no Delta jars resolved in {jars.jars_dir()}: every landing run downloads them (--packages)",
            "run once: dblog spark-jars (and set DBLOG_SPARK_JARS_DIR for every Airflow process if elsewhere)",
        )
    else:
        yield Finding("spark jars", OK, f"{len(delta.split(','))} Delta jars in {jars.jars_dir()}")
    if lake and lake.startswith(session.S3_SCHEMES):
        try:
            s3a = session.resolve_s3a_jars()
        except FileNotFoundError as exc:
            s3a, detail = None, str(exc)
        else:
            detail = "not resolved"
        if s3a:
            yield Finding("s3a jars", OK, f"the S3A connector for {lake}")
        else:
            yield Finding(
                "s3a jars", FAIL, f"the lake {lake} is on S3 but the S3A connector is {detail}", "run: dblog spark-jars"
            )


def check_source(make_source: Callable[[], Any]) -> Iterable[Finding]:
    from ..core.protocols import Preflight

    try:
        source: Any = make_source()
    except DBLogError as exc:
        yield Finding("source", FAIL, _cause(exc), _fix(exc))
        return
    name = f"source {source.source_id}"
    if not isinstance(source, Preflight):
        yield Finding("source", WARN, f"{type(source).__name__} has no preflight check", "")
        return
    try:
        source.preflight()
    except DBLogError as exc:
        yield Finding(name, FAIL, _cause(exc), _fix(exc))
    else:
        yield Finding(name, OK, "server settings, privileges and tables as a capture needs them")


def check_state(make_state: Callable[[], Any]) -> Iterable[Finding]:
    from ..state.local import NoCaptureState

    try:
        store = make_state()
    except NoCaptureState as exc:  # a fresh deployment
        yield Finding("state store", WARN, f"{exc.cause} In a fresh deployment: the first capture creates it.", "")
        return
    except DBLogError as exc:
        yield Finding("state store", FAIL, _cause(exc), _fix(exc))
        return
    try:
        client = getattr(store, "client", None)
        if client is None:
            yield Finding("state store", OK, f"{type(store).__name__} opened")
            return
        acls, _ = client.get_acls(store.chroot or "/")
        open_to_all = [a for a in acls if a.id.scheme == "world"]
        if open_to_all:
            yield Finding(
                "state store",
                WARN,
                f"ZooKeeper {store.hosts}{store.chroot}: anyone who reaches ZooKeeper can read and change it "
                "(ACL world:anyone): a stray client can move checkpoints or take the leader lease",
                "set [state] auth_user (a dblog_state connection: the auth_user extra) and its password; the "
                "next capture secures the tree (docs/state.md)",
            )
        else:
            yield Finding(
                "state store", OK, f"ZooKeeper {store.hosts}{store.chroot}, ACL {[a.id.scheme for a in acls]}"
            )
    finally:
        store.close()


def check_connections(conn_ids: list[str], state_conn_id: Optional[str]) -> Iterable[Finding]:
    """Each Airflow connection named, as the operators read it (DBLogHook)."""
    try:
        from ..hooks.dblog import DBLogHook
    except ImportError as exc:
        yield Finding("airflow", FAIL, f"cannot import the provider's hook: {exc}", "pip install apache-airflow")
        return
    for conn_id in conn_ids:
        hook = DBLogHook(source_conn_id=conn_id, state_conn_id=state_conn_id)
        try:
            hook.source_config()
        except Exception as exc:  # noqa: BLE001 - Airflow raises its own types for a missing connection
            yield Finding(f"connection {conn_id}", FAIL, _cause(exc), _fix(exc) or "airflow connections add ...")
            continue
        yield Finding(f"connection {conn_id}", OK, "a DBLog source")
        yield from check_source(hook.get_source)
    if state_conn_id:
        from ..config import make_state

        state_config = DBLogHook(state_conn_id=state_conn_id).state_config
        # create=False: the doctor opens a store only if a capture made it (changes nothing)
        yield from check_state(lambda: make_state(state_config(), create=False))


def _cause(exc: BaseException) -> str:
    return exc.cause if isinstance(exc, DBLogError) else f"{type(exc).__name__}: {exc}"


def _fix(exc: BaseException) -> str:
    return exc.fix if isinstance(exc, DBLogError) else ""


def run_checks(checks: Iterable[Iterable[Finding]], out=sys.stdout) -> int:
    """Prints every finding; 1 when any failed."""
    failed = False
    for group in checks:
        for finding in group:
            print(finding.line(), file=out, flush=True)
            failed |= finding.status == FAIL
    return 1 if failed else 0
