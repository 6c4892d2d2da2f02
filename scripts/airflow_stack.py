"""A real Airflow on this machine: api-server, scheduler, dag-processor and triggerer as child
processes (LocalExecutor, a fresh metadata database in the services' PostgreSQL, the repo's
dags/ folder, connections from AIRFLOW_CONN_* variables), and a REST client for it.

Shared by tests/e2e/test_airflow_e2e.py and scripts/demo_airflow.py (``make demo``). The
settings that docker/compose.yaml uses too come from docker/airflow.env (``shared_settings``),
so the three deployments cannot drift apart (tests/unit/test_docker_compose.py).
No pytest in here: failures raise ``AirflowError`` (an AssertionError, so tests read well).
Import it as ``scripts.airflow_stack`` from the repository root.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import quote

from scripts.polling import wait_for

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_ENV_FILE = REPO / "docker" / "airflow.env"
# Set per deployment (by compose.yaml's `environment:` and by ``dag_env`` here), never shared:
# host names, paths and table lists differ, but both deployments must set them.
PER_DEPLOYMENT_DAG_SETTINGS = ("DBLOG_CHANGELOG", "DBLOG_REPAIR_TABLES")


class AirflowError(AssertionError):
    pass


def shared_settings(path: Path = AIRFLOW_ENV_FILE) -> dict[str, str]:
    """docker/airflow.env: KEY=VALUE lines; blank lines and # comments ignored."""
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            raise ValueError(f"{path}:{n}: not a KEY=VALUE line: {line!r}")
        out[key] = value
    return out


def conn_env_name(conn_id: str) -> str:
    return "AIRFLOW_CONN_" + conn_id.upper()


def dag_env(source_conn: dict, state_conn: dict, changelog: str, repair_tables: list[str]) -> dict[str, str]:
    """The example DAGs' per-deployment settings and their two connections, under the
    connection ids docker/airflow.env names."""
    s = shared_settings()
    return {
        conn_env_name(s["DBLOG_SOURCE_CONN_ID"]): json.dumps(source_conn),
        conn_env_name(s["DBLOG_STATE_CONN_ID"]): json.dumps(state_conn),
        "DBLOG_CHANGELOG": changelog,
        "DBLOG_REPAIR_TABLES": ",".join(repair_tables),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One Airflow component in its own process group (so its children stop with it)."""

    def __init__(self, name: str, args: list[str], environ: dict, log_dir: Path):
        self.name, self.args, self.environ = name, args, environ
        self.log_path = log_dir / f"{name}.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", *self.args],
            env=self.environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to the group (the component shuts down cleanly), SIGKILL after a grace."""
        self.terminate()
        self.reap(grace)

    def terminate(self) -> None:
        """SIGTERM to the group; ``reap`` waits for it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # start_new_session: the group id is our child's pid
        except ProcessLookupError:
            pass

    def reap(self, grace: float = 30) -> None:
        """Wait up to ``grace`` for the terminated component, then SIGKILL what is left of its group."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(pgid, signal.SIGKILL)  # leftovers of the group (task runners)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def kill(self) -> None:
        """SIGKILL to the group at once, as the OOM killer or a node drain ends a component.
        Children in a session of their own (a capture child) are not in the group."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.proc = None

    def tail(self, n: int = 40) -> str:
        try:
            return f"--- {self.name} ---\n" + "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return f"--- {self.name}: no log ---"


class Airflow:
    """An Airflow deployment in ``home``; the REST client authenticates like a user would."""

    def __init__(self, home: Path, sql_conn: str, extra_env: dict):
        self.home, self.port = home, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        shared = shared_settings()
        # the simple auth manager's user (airflow.env); its password is made up per run
        self.user = shared["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")[0].split(":")[0]
        self.password = secrets.token_urlsafe(12)
        home.mkdir(parents=True, exist_ok=True)
        (home / "passwords.json").write_text(json.dumps({self.user: self.password}))
        self.environ = {
            **os.environ,
            **shared,
            **extra_env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            # free ports, so that two stacks (or a system Airflow) on one machine do not clash
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        }
        logs = home / "proc-logs"
        logs.mkdir(exist_ok=True)
        self.procs = {
            "api-server": Proc(
                "api-server", ["api-server", "--port", str(self.port), "--host", "127.0.0.1"], self.environ, logs
            ),
            "scheduler": Proc("scheduler", ["scheduler"], self.environ, logs),
            "dag-processor": Proc("dag-processor", ["dag-processor"], self.environ, logs),
            "triggerer": Proc("triggerer", ["triggerer"], self.environ, logs),
        }
        self._token: Optional[str] = None

    def migrate(self) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise AirflowError(f"airflow db migrate failed:\n{out.stderr[-3000:]}")

    def start(self) -> None:
        for p in self.procs.values():
            p.start()

    def add_triggerer(self) -> str:
        """One more triggerer (Airflow spreads triggers over the live ones); its name."""
        name = f"triggerer-{sum(n.startswith('triggerer') for n in self.procs) + 1}"
        self.procs[name] = Proc(name, ["triggerer"], self.environ, self.home / "proc-logs")
        self.procs[name].start()
        return name

    def host_of(self, pid: int) -> Optional[str]:
        """The component whose process tree ``pid`` is in (walking up its parents), if any."""
        mine = {p.proc.pid: name for name, p in self.procs.items() if p.proc is not None}
        while pid > 1:
            if pid in mine:
                return mine[pid]
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except FileNotFoundError:
                return None
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: ppid
        return None

    def stop(self) -> None:
        """The triggerers first (their captures end cleanly while the rest still runs), then
        the other components, each step all at once."""
        rest = ("scheduler", "dag-processor", "api-server")
        for step in ([n for n in self.procs if n not in rest], [n for n in rest if n in self.procs]):
            for name in step:
                self.procs[name].terminate()
            for name in step:
                self.procs[name].reap()

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.procs.values())

    def assert_alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.proc is not None and not p.alive()]
        if dead:
            raise AirflowError(f"{dead} exited\n{self.tails()}")

    def wait_ready(self, dag_ids: tuple[str, ...], timeout: float = 90) -> None:
        """The api-server answers and the dag-processor has parsed ``dag_ids``."""
        wait_for(self.ready, timeout, "the api-server", alive=self.assert_alive, detail=self.tails, error=AirflowError)
        wait_for(
            lambda: all(self.dag_known(d) for d in dag_ids),
            timeout,
            "the dag-processor to parse dags/",
            alive=self.assert_alive,
            detail=self.tails,
            interval=1,
            error=AirflowError,
        )

    # -- REST ------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Optional[dict] = None, auth: bool = True) -> dict:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(
            self.base + path,
            method=method,
            headers=headers,
            data=json.dumps(body).encode() if body is not None else None,
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise AirflowError(f"{method} {path}: HTTP {e.code}: {e.read()[:2000]!r}") from None

    def token(self) -> str:
        """The simple auth manager's ``POST /auth/token`` with a configured user's password."""
        if self._token is None:
            self._token = self.request(
                "POST", "/auth/token", {"username": self.user, "password": self.password}, auth=False
            )["access_token"]
        return self._token

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/api/v2/monitor/health", timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def dag_known(self, dag_id: str) -> bool:
        try:
            self.request("GET", f"/api/v2/dags/{dag_id}")
            return True
        except AirflowError:
            return False

    def unpause(self, dag_id: str) -> None:
        if self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})["is_paused"] is not False:
            raise AirflowError(f"{dag_id} is still paused")

    def trigger(self, dag_id: str, conf: dict) -> str:
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})[
            "dag_run_id"
        ]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 120) -> str:
        """Wait until the run has finished; its final state."""
        wait_for(
            lambda: self.run_state(dag_id, run_id) in ("success", "failed"),
            timeout,
            f"run {run_id} of {dag_id} to finish",
            alive=self.assert_alive,
            detail=self.tails,
            interval=0.5,
            error=AirflowError,
        )
        return self.run_state(dag_id, run_id)

    def task_state(self, dag_id: str, task_id: str) -> Optional[str]:
        runs = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1&order_by=-run_after")["dag_runs"]
        if not runs:
            return None
        ti = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/{task_id}")
        return ti["state"]

    def capture_pids(self) -> list[int]:
        """The capture children the CaptureTrigger started, from its task log lines."""
        pids = []
        for log in (self.home / "logs" / "dag_id=dblog_capture").rglob("*trigger*"):
            pids += [
                int(m)
                for m in re.findall(r"capture session \d+ of source \S+: pid (\d+)", log.read_text(errors="replace"))
            ]
        return pids


@contextmanager
def metadata_database(host: str, port: int, superuser: str, password: str, prefix: str = "airflow") -> Iterator[str]:
    """A fresh Airflow metadata database in a PostgreSQL server (its SQLAlchemy URL), dropped
    afterwards. Fresh each time: runs never see each other's DAG runs."""
    import psycopg2

    def admin():
        c = psycopg2.connect(host=host, port=port, user=superuser, password=password, dbname="postgres")
        c.autocommit = True
        return c

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    c = admin()
    c.cursor().execute(f"CREATE DATABASE {name}")
    c.close()
    try:
        yield f"postgresql+psycopg2://{quote(superuser)}:{quote(password, safe='')}@{host}:{port}/{name}"
    finally:
        c = admin()
        c.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.close()


def changelog_keys(lake: str, source_id: str, table: str, op: Optional[str] = None) -> set:
    """Keys of ``table`` in the changelog (only events of ``op``: c/u/d/r, when given)."""
    from airflow_provider_dblog.outputs import make_output

    out = make_output(lake)
    out.open()
    try:
        return {e.key for e in out.scan(source_id, table) if op is None or e.op.value == op}
    except Exception:  # noqa: BLE001 - the changelog table does not exist before the first flush
        return set()
    finally:
        out.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
