"""A real Airflow, end to end: api-server, scheduler, dag-processor and triggerer as child
processes (LocalExecutor, a fresh metadata database in the services' PostgreSQL), the repo's
dags/ folder, connections from AIRFLOW_CONN_* variables, MariaDB as the source.

1. ``dblog_capture`` is unpaused: its one task defers and the triggerer runs the capture child.
2. ``dblog_repair_dump`` is triggered through ``POST /api/v2/dags/{id}/dagRuns`` with a conf
   (a 100-key repair dump); the keys must arrive in the changelog and the run must succeed.
   The time from the REST call to the rows being durable in the changelog is printed.
3. The triggerer is stopped while the capture runs, rows are written, the triggerer starts
   again: the capture resumes and every written row arrives (nothing lost across the gap).
"""
from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip("airflow")

from airflow_provider_dblog.outputs import make_output  # noqa: E402
from tests.integration.capture_proc import wait_for  # noqa: E402
from tests.integration.databases import MySQLAdapter, env  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REPAIR_KEYS = 100
USER, ROLE = "dblog_e2e", "admin"


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
        self.proc = subprocess.Popen([sys.executable, "-m", "airflow", *self.args], env=self.environ,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to the group (the component shuts down cleanly), SIGKILL after a grace."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is our child's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
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
        self.password = secrets.token_urlsafe(12)
        home.mkdir(parents=True, exist_ok=True)
        (home / "passwords.json").write_text(json.dumps({USER: self.password}))
        self.environ = {
            **os.environ,
            **extra_env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:{ROLE}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            # fast turn-around for a test: parse often, schedule often, pick up triggers at once
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        }
        logs = home / "proc-logs"
        logs.mkdir()
        self.procs = {
            "api-server": Proc("api-server", ["api-server", "--port", str(self.port), "--host", "127.0.0.1"],
                               self.environ, logs),
            "scheduler": Proc("scheduler", ["scheduler"], self.environ, logs),
            "dag-processor": Proc("dag-processor", ["dag-processor"], self.environ, logs),
            "triggerer": Proc("triggerer", ["triggerer"], self.environ, logs),
        }
        self._token: Optional[str] = None

    def migrate(self) -> None:
        out = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=self.environ,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]

    def start(self) -> None:
        for p in self.procs.values():
            p.start()

    def stop(self) -> None:
        for name in ("scheduler", "triggerer", "dag-processor", "api-server"):
            self.procs[name].stop()

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.procs.values())

    def assert_alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.proc is not None and not p.alive()]
        if dead:
            raise AssertionError(f"{dead} exited\n{self.tails()}")

    # -- REST ------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Optional[dict] = None, auth: bool = True) -> dict:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(self.base + path, method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read()[:2000]!r}") from None

    def token(self) -> str:
        """The simple auth manager's ``POST /auth/token`` with a configured user's password."""
        if self._token is None:
            self._token = self.request("POST", "/auth/token", {"username": USER, "password": self.password},
                                       auth=False)["access_token"]
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
        except AssertionError:
            return False

    def unpause(self, dag_id: str) -> None:
        assert self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})["is_paused"] is False

    def trigger(self, dag_id: str, conf: dict) -> str:
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_state(self, dag_id: str, task_id: str) -> Optional[str]:
        runs = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1&order_by=-run_after")["dag_runs"]
        if not runs:
            return None
        ti = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/{task_id}")
        return ti["state"]


def pg_super():
    import psycopg2

    c = psycopg2.connect(host=env("DBLOG_PG_HOST"), port=int(env("DBLOG_PG_PORT")), user=env("DBLOG_PG_SUPERUSER"),
                         password=env("DBLOG_PG_SUPERUSER_PASSWORD"), dbname="postgres")
    c.autocommit = True
    return c


@pytest.fixture(scope="module")
def metadata_db():
    """A fresh Airflow metadata database in the services' PostgreSQL, dropped afterwards."""
    name = f"airflow_e2e_{uuid.uuid4().hex[:8]}"
    c = pg_super()
    c.cursor().execute(f"CREATE DATABASE {name}")
    c.close()
    user, password = env("DBLOG_PG_SUPERUSER"), env("DBLOG_PG_SUPERUSER_PASSWORD")
    from urllib.parse import quote

    yield f"postgresql+psycopg2://{quote(user)}:{quote(password, safe='')}@{env('DBLOG_PG_HOST')}:{env('DBLOG_PG_PORT')}/{name}"
    c = pg_super()
    c.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    c.close()


def changelog_keys(lake: str, source_id: str, table: str, op: Optional[str] = None) -> set:
    out = make_output(lake)
    out.open()
    try:
        return {e.key for e in out.scan(source_id, table) if op is None or e.op.value == op}
    except Exception:  # the changelog table does not exist before the first flush
        return set()
    finally:
        out.close()


def insert_accounts(db: MySQLAdapter, ids) -> None:
    c = db.connect()
    try:
        for i in ids:
            db._exec(c, f"INSERT INTO {db.ns}.accounts (id, name) VALUES (%s, %s)", (i, f"n{i}"))
        c.commit()
    finally:
        c.close()


def capture_pids(home: Path) -> list[int]:
    """The capture children the CaptureTrigger started, from its task log lines."""
    pids = []
    for log in (home / "logs" / "dag_id=dblog_capture").rglob("*trigger*"):
        pids += [int(m) for m in re.findall(r"capture session \d+ of source \S+: pid (\d+)", log.read_text(errors="replace"))]
    return pids


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Stack:
    """What the tests share: the running Airflow, the source and the changelog."""

    def __init__(self, af: Airflow, db: MySQLAdapter, source_id: str, lake: str):
        self.af, self.db, self.source_id, self.lake = af, db, source_id, lake
        self.accounts = f"{db.ns}.accounts"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, metadata_db):
    """Airflow's four components on the repo's dags/, the capture DAG running on MariaDB."""
    env("DBLOG_MYSQL_HOST")
    tmp_path = tmp_path_factory.mktemp("airflow-e2e")
    db = MySQLAdapter()
    db.create()
    db.seed(random.Random(5), REPAIR_KEYS + 20)
    source_id = f"e2e_{uuid.uuid4().hex[:8]}"
    lake = f"delta://{tmp_path / 'lake'}"
    dag_env = {
        "DBLOG_SOURCE_CONN_ID": "dblog_source",
        "DBLOG_STATE_CONN_ID": "dblog_state_e2e",
        "AIRFLOW_CONN_DBLOG_SOURCE": json.dumps({
            "conn_type": "mysql", "host": db.host, "port": db.port, "login": db.user, "password": db.password,
            "extra": {"source_id": source_id, "tables": db.tables()}}),
        "AIRFLOW_CONN_DBLOG_STATE_E2E": json.dumps({"conn_type": "dblog_state", "host": str(tmp_path / "state.db")}),
        "DBLOG_CHANGELOG": lake,
        "DBLOG_REPAIR_TABLES": ",".join(db.tables()),
        "DBLOG_CAPTURE_SESSION_SECONDS": "600",
        "DBLOG_CAPTURE_STATUS_INTERVAL": "2",
        "DBLOG_DUMP_POLL_INTERVAL": "0.5",
    }
    af = Airflow(tmp_path / "airflow", metadata_db, dag_env)
    try:
        af.migrate()
        af.start()
        wait_for(af.ready, 90, "the api-server", alive=af.assert_alive, detail=af.tails)
        wait_for(lambda: af.dag_known("dblog_repair_dump") and af.dag_known("dblog_capture"), 90,
                 "the dag-processor to parse dags/", alive=af.assert_alive, detail=af.tails, interval=1)
        af.unpause("dblog_capture")
        af.unpause("dblog_repair_dump")
        st = Stack(af, db, source_id, lake)
        # A first capture starts at the end of the log: write a new row each second until one
        # arrives (the rows written before the child started are, correctly, not captured).
        probe = iter(range(900001, 901000))

        def a_probe_row_arrived() -> bool:
            insert_accounts(db, [next(probe)])
            return any(k[0] > 900000 for k in changelog_keys(lake, source_id, st.accounts, "c"))

        wait_for(a_probe_row_arrived, 120, "the capture to write a row", alive=af.assert_alive,
                 detail=af.tails, interval=1)
        yield st
    finally:
        af.stop()  # every component, also when a test or the set-up failed
        db.drop(source_id)


def test_airflow_end_to_end(stack, capsys):
    af, db, lake, source_id, accounts = stack.af, stack.db, stack.lake, stack.source_id, stack.accounts
    # 1. the capture is one deferred task; the triggerer's child writes the changelog
    assert af.task_state("dblog_capture", "capture") == "deferred"

    # 2. a 100-key repair dump through the REST API
    keys = list(range(1, REPAIR_KEYS + 1))
    conf = {"table": accounts, "keys": "\n".join(map(str, keys)), "chunk_size": 50}
    t0 = time.monotonic()
    run_id = af.trigger("dblog_repair_dump", conf)
    wanted = {(k,) for k in keys}
    wait_for(lambda: wanted <= changelog_keys(lake, source_id, accounts, "r"), 120,
             "the repair dump's rows in the changelog", alive=af.assert_alive, detail=af.tails, interval=0.1)
    elapsed = time.monotonic() - t0
    with capsys.disabled():
        print(f"\n[e2e] REST trigger -> {REPAIR_KEYS} keys durable in the changelog: {elapsed:.2f} s")
    wait_for(lambda: af.run_state("dblog_repair_dump", run_id) in ("success", "failed"), 120,
             "the repair run to finish", alive=af.assert_alive, detail=af.tails, interval=0.5)
    assert af.run_state("dblog_repair_dump", run_id) == "success", af.tails()
    dumped = changelog_keys(lake, source_id, accounts, "r")
    assert dumped == wanted  # exactly the requested keys, no other rows of the table

    # 3. the triggerer stops during the capture and starts again: the capture resumes
    first = capture_pids(af.home)
    assert len(first) == 1, first
    af.procs["triggerer"].stop()
    assert not any(pid_alive(p) for p in first), "the capture child outlived the triggerer"
    insert_accounts(db, range(910001, 910011))  # written while no capture runs
    af.procs["triggerer"].start()
    wait_for(lambda: len(capture_pids(af.home)) == 2, 60, "the trigger to start a new capture child",
             alive=af.assert_alive, detail=af.tails, interval=0.5)
    insert_accounts(db, range(920001, 920011))  # written after the restart
    expected = {(i,) for i in [*range(910001, 910011), *range(920001, 920011)]}
    wait_for(lambda: expected <= changelog_keys(lake, source_id, accounts, "c"), 120,
             "the resumed capture to write the rows", alive=af.assert_alive, detail=af.tails, interval=0.5)
    assert af.task_state("dblog_capture", "capture") == "deferred"  # still the same long-lived task


# -- the Trigger form in a real browser -----------------------------------------------------
SCREENSHOT = REPO / "docs" / "img" / "airflow-repair-form.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1100"]


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extras")
    out = subprocess.run([str(REPO / "scripts" / "airflow-chromium")], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.fail(f"scripts/airflow-chromium could not provide chromium:\n{out.stderr[-2000:]}")
    opts = webdriver.ChromeOptions()
    opts.binary_location = out.stdout.strip()
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        opts.add_argument(flag)
    service = webdriver.ChromeService(executable_path="/usr/bin/chromedriver", log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_trigger_form_in_chromium(stack, browser):
    """Open the Trigger form of dblog_repair_dump, pick the table, type keys, submit: a run
    starts with that conf and its rows reach the changelog. The screenshot goes to docs/img/."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    af, wait = stack.af, WebDriverWait(browser, 30)
    before = {r["dag_run_id"] for r in af.request("GET", "/api/v2/dags/dblog_repair_dump/dagRuns")["dag_runs"]}
    browser.get(af.base + "/api/v2/version")  # same origin first, so the login cookie can be set
    browser.add_cookie({"name": "_token", "value": af.token(), "path": "/"})  # what the login page sets
    browser.get(af.base + "/dags/dblog_repair_dump")

    def button(text: str):
        return [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == text]

    wait.until(lambda d: button("Trigger"))
    button("Trigger")[0].click()
    keys_box = wait.until(ec.element_to_be_clickable((By.NAME, "element_keys")))
    # the table: a select built from DBLOG_REPAIR_TABLES; type to filter, click the option
    combo = browser.find_element(By.XPATH, "//input[@name='element_table']/..//input[@type='text']")

    def pick(name: str) -> None:
        combo.click()
        combo.send_keys(Keys.CONTROL, "a")
        combo.send_keys(name)
        option = wait.until(lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]")
                                       if o.text.strip() == name])
        option[0].click()

    pick(f"{stack.db.ns}.notes")  # away from the default (the first table) and back: the select works
    table = f"{stack.db.ns}.accounts"
    pick(table)
    keys_box.send_keys("101\n102\n103")
    chunk = browser.find_element(By.NAME, "element_chunk_size")
    chunk.send_keys(Keys.CONTROL, "a")
    chunk.send_keys("2")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", keys_box)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))
    button("Trigger")[-1].click()  # the dialog's submit button (the first opens the dialog)

    def new_run():
        runs = af.request("GET", "/api/v2/dags/dblog_repair_dump/dagRuns")["dag_runs"]
        return [r for r in runs if r["dag_run_id"] not in before]

    wait_for(lambda: new_run(), 30, "the run the form triggered", alive=af.assert_alive, detail=af.tails)
    (run,) = new_run()
    assert run["conf"]["table"] == table and run["conf"]["chunk_size"] == 2, run["conf"]
    assert run["conf"]["keys"].split() == ["101", "102", "103"]
    wait_for(lambda: af.run_state("dblog_repair_dump", run["dag_run_id"]) in ("success", "failed"), 120,
             "the form's run to finish", alive=af.assert_alive, detail=af.tails, interval=0.5)
    assert af.run_state("dblog_repair_dump", run["dag_run_id"]) == "success", af.tails()
    assert {(101,), (102,), (103,)} <= changelog_keys(stack.lake, stack.source_id, table, "r")
