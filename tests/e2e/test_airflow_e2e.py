"""A real Airflow, end to end: api-server, scheduler, dag-processor and triggerer as child
processes (LocalExecutor, a fresh metadata database in the services' PostgreSQL), the repo's
dags/ folder, connections from AIRFLOW_CONN_* variables, MariaDB as the source; the stack is
scripts/airflow_stack.py, its settings docker/airflow.env (shared with docker/compose.yaml).

1. ``dblog_capture`` is unpaused: its one task defers and the triggerer runs the capture child.
2. ``dblog_repair_dump`` is triggered through ``POST /api/v2/dags/{id}/dagRuns`` with a conf
   (a 100-key repair dump); the keys must arrive in the changelog and the run must succeed.
   The time from the REST call to the rows being durable in the changelog is printed. Then
   one-key repairs (an integer key, a text key, a composite key), the commonest repair.
3. The triggerer is stopped while the capture runs, rows are written, the triggerer starts
   again: the capture resumes and every written row arrives (nothing lost across the gap).
4. A second triggerer starts; the one running the capture is SIGKILLed (its process group)
   during a whole-table repair dump: the old child exits by itself, the other triggerer runs
   the capture on, the dump finishes, rows written meanwhile arrive once, ``dblog verify``
   finds no difference. The outage is printed.
5. ``dblog_land`` (event mode): a backfill of every table through REST, then the changelog's
   new commits fire the AssetWatcher in the triggerer, dblog_land's SparkSubmitOperator runs
   a real spark-submit, and every typed mirror equals its source table row for row.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
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

REPO = Path(__file__).resolve().parents[2]

from scripts.airflow_stack import (  # noqa: E402
    Airflow,
    changelog_keys,
    conn_env_name,
    dag_env,
    metadata_database,
    pid_alive,
)
from scripts.polling import wait_for  # noqa: E402
from tests.integration.databases import MySQLAdapter, env  # noqa: E402
from tests.support.processes import running  # noqa: E402

pytestmark = pytest.mark.integration

REPAIR_KEYS = 100


@pytest.fixture(scope="module")
def metadata_db():
    """A fresh Airflow metadata database in the services' PostgreSQL, dropped afterwards."""
    with metadata_database(
        env("DBLOG_PG_HOST"),
        int(env("DBLOG_PG_PORT")),
        env("DBLOG_PG_SUPERUSER"),
        env("DBLOG_PG_SUPERUSER_PASSWORD"),
        prefix="airflow_e2e",
    ) as url:
        yield url


def one_key_repairs(db: MySQLAdapter, offset: int) -> list[tuple[str, str, tuple]]:
    """(table, the form's keys text, the key in the changelog): one integer key, one text key
    and one composite key, each alone (a native rendering of the form re-typed these)."""
    c = db.connect()
    try:
        cur = c.cursor()
        cur.execute(f"SELECT uid FROM {db.ns}.notes ORDER BY uid LIMIT 1 OFFSET {offset}")
        (uid,) = cur.fetchone()
        cur.execute(f"SELECT region, order_no FROM {db.ns}.orders ORDER BY order_no LIMIT 1 OFFSET {offset}")
        region, order_no = cur.fetchone()
    finally:
        c.close()
    return [
        (f"{db.ns}.accounts", str(110 + offset), (110 + offset,)),
        (f"{db.ns}.notes", json.dumps(uid), (uid,)),
        (f"{db.ns}.orders", json.dumps([region, order_no]), (region, order_no)),
    ]


def insert_accounts(db: MySQLAdapter, ids) -> None:
    c = db.connect()
    try:
        for i in ids:
            db._exec(c, f"INSERT INTO {db.ns}.accounts (id, name) VALUES (%s, %s)", (i, f"n{i}"))
        c.commit()
    finally:
        c.close()


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
    dag_settings = dag_env(
        source_conn={
            "conn_type": "mysql",
            "host": db.host,
            "port": db.port,
            "login": db.user,
            "password": db.password,
            "extra": {"source_id": source_id, "tables": db.tables()},
        },
        state_conn={"conn_type": "dblog_state", "host": str(tmp_path / "state.db")},
        changelog=lake,
        repair_tables=db.tables(),
    )
    jars = subprocess.run([str(REPO / "scripts" / "spark-jars")], capture_output=True, text=True, timeout=900)
    assert jars.returncode == 0, jars.stderr
    dag_settings.update(  # dblog_land: a local Spark through this venv's spark-submit, the jars resolved once
        {
            conn_env_name("spark_default"): json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "DBLOG_SPARK_JARS": jars.stdout.strip(),
            "DBLOG_LAND_SOURCE": source_id,
            "DBLOG_LAND_MODE": "event",
            "DBLOG_LAND_POLL_INTERVAL": "1",
            "DBLOG_LAND_MIN_INTERVAL": "5",
            "DBLOG_LAND_SCHEDULE": "0 0 1 1 *",  # no cron run in the test's lifetime: only events
            # a quiet capture (no status line to a dead triggerer's pipe, which would also end it):
            # a SIGKILLed triggerer's child must stop through parent_pipe.py alone
            "DBLOG_CAPTURE_STATUS_INTERVAL": "600",
        }
    )
    af = Airflow(tmp_path / "airflow", metadata_db, dag_settings)
    try:
        af.migrate()
        af.start()
        af.wait_ready(("dblog_repair_dump", "dblog_capture"))
        af.unpause("dblog_capture")
        af.unpause("dblog_repair_dump")
        st = Stack(af, db, source_id, lake)
        # A first capture starts at the end of the log: write a new row each second until one
        # arrives (the rows written before the child started are, correctly, not captured).
        probe = iter(range(900001, 901000))

        def a_probe_row_arrived() -> bool:
            insert_accounts(db, [next(probe)])
            return any(k[0] > 900000 for k in changelog_keys(lake, source_id, st.accounts, "c"))

        wait_for(
            a_probe_row_arrived, 120, "the capture to write a row", alive=af.assert_alive, detail=af.tails, interval=1
        )
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
    wait_for(
        lambda: wanted <= changelog_keys(lake, source_id, accounts, "r"),
        120,
        "the repair dump's rows in the changelog",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.1,
    )
    elapsed = time.monotonic() - t0
    with capsys.disabled():
        print(f"\n[e2e] REST trigger -> {REPAIR_KEYS} keys durable in the changelog: {elapsed:.2f} s")
    wait_for(
        lambda: af.run_state("dblog_repair_dump", run_id) in ("success", "failed"),
        120,
        "the repair run to finish",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.5,
    )
    assert af.run_state("dblog_repair_dump", run_id) == "success", af.tails()
    dumped = changelog_keys(lake, source_id, accounts, "r")
    assert dumped == wanted  # exactly the requested keys, no other rows of the table

    # one key alone, of each kind: "2600", '"abc"', '["eu", 7]' in the conf's keys text
    for table, text, key in one_key_repairs(db, 0):
        run_id = af.trigger("dblog_repair_dump", {"table": table, "keys": text})
        assert af.wait_run("dblog_repair_dump", run_id) == "success", (text, af.tails())
        assert changelog_keys(lake, source_id, table, "r") >= {key}, text

    # 3. the triggerer stops during the capture and starts again: the capture resumes
    first = af.capture_pids()
    assert len(first) == 1, first
    af.procs["triggerer"].stop()
    assert not any(pid_alive(p) for p in first), "the capture child outlived the triggerer"
    insert_accounts(db, range(910001, 910011))  # written while no capture runs
    af.procs["triggerer"].start()
    wait_for(
        lambda: len(af.capture_pids()) == 2,
        60,
        "the trigger to start a new capture child",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.5,
    )
    insert_accounts(db, range(920001, 920011))  # written after the restart
    expected = {(i,) for i in [*range(910001, 910011), *range(920001, 920011)]}
    wait_for(
        lambda: expected <= changelog_keys(lake, source_id, accounts, "c"),
        120,
        "the resumed capture to write the rows",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.5,
    )
    assert af.task_state("dblog_capture", "capture") == "deferred"  # still the same long-lived task


# -- the status view: the capture task's link to its page on the API server --------------------
def status_page_link(af) -> str:
    """The capture task's "DBLog status" extra link, as the UI reads it."""
    (run,) = af.request("GET", "/api/v2/dags/dblog_capture/dagRuns")["dag_runs"]
    links = af.request("GET", f"/api/v2/dags/dblog_capture/dagRuns/{run['dag_run_id']}/taskInstances/capture/links")
    return links["extra_links"]["DBLog status"]


def fetch(url: str, token: Optional[str]) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def repair_one_key(stack) -> str:
    """A one-key repair dump through the REST API, done: its dump id (the run's XCom)."""
    af = stack.af
    run_id = af.trigger("dblog_repair_dump", {"table": stack.accounts, "keys": "1", "chunk_size": 1})
    assert af.wait_run("dblog_repair_dump", run_id) == "success", af.tails()
    xcom = af.request("GET", f"/api/v2/dags/dblog_repair_dump/dagRuns/{run_id}/taskInstances/dump/xcomEntries/dump_id")
    return str(xcom["value"]).strip('"')  # the id, whether the API gives it as text or as JSON text


def test_the_capture_task_links_to_its_status_page(stack):
    """The capture task's extra link opens the provider's page on Airflow's API server (the
    plugin's app): the running capture of this source, its stored checkpoint and a repair dump
    done; only for a logged-in user; its JSON is ``dblog status --json``."""
    af, source_id = stack.af, stack.source_id
    dump_id = repair_one_key(stack)
    link = status_page_link(stack.af)
    assert link.startswith(af.base + "/dblog/status?") and f"source_id={source_id}" in link, link
    assert fetch(link, None)[0] == 401  # Airflow does not guard a plugin's app: the page does
    code, page = fetch(link, af.token())
    assert code == 200, page[-2000:]
    assert f'<code id="source">{source_id}</code>' in page and 'data-state="running"' in page, page[-3000:]
    assert f'<tr class="dump" data-status="done"><td>{dump_id}</td>' in page, page[-3000:]
    code, text = fetch(link.replace("/status?", "/status.json?"), af.token())
    status = json.loads(text)
    assert code == 200 and status["source_id"] == source_id and status["capture"]["state"] == "running"
    assert status["checkpoint"] and status["checkpoint"] in page  # the capture's progress, as stored
    assert status["capture"]["pid"] in af.capture_pids()
    assert dump_id in [d["dump_id"] for d in status["dumps"]]
    # a connection that is not a dblog_state one is refused, naming it (the page opens stores only so)
    code, text = fetch(link.replace("state_conn_id=", "state_conn_id=spark_default&x="), af.token())
    assert code == 400 and "spark_default" in text and "dblog_state" in text, text


def test_a_finished_repair_dump_runs_the_downstream_dag_once(stack):
    """dblog_after_dump is scheduled on the changelog asset: the repair dump's asset event,
    which carries the dump's summary, triggers exactly one of its runs, whose task reads it."""
    af = stack.af
    af.wait_ready(("dblog_after_dump",))
    af.unpause("dblog_after_dump")
    dump_id = repair_one_key(stack)

    def runs_with_the_dump() -> list:
        found = []
        for run in af.request("GET", "/api/v2/dags/dblog_after_dump/dagRuns")["dag_runs"]:
            events = af.request("GET", f"/api/v2/dags/dblog_after_dump/dagRuns/{run['dag_run_id']}/upstreamAssetEvents")
            dumps = [(e.get("extra") or {}).get("dblog_dump", {}).get("dump_id") for e in events["asset_events"]]
            if dump_id in dumps:
                found.append(run)
        return found

    wait_for(
        lambda: any(r["state"] == "success" for r in runs_with_the_dump()),
        120,
        "a dblog_after_dump run triggered by the repair dump",
        alive=af.assert_alive,
        detail=af.tails,
        interval=1,
    )
    time.sleep(10)  # a second run for the same event would be queued by now
    (run,) = runs_with_the_dump()
    assert run["run_type"] == "asset_triggered"
    xcom = af.request(
        "GET",
        f"/api/v2/dags/dblog_after_dump/dagRuns/{run['dag_run_id']}/taskInstances/dumps_done/xcomEntries/return_value",
    )
    summaries = json.loads(xcom["value"]) if isinstance(xcom["value"], str) else xcom["value"]
    (mine,) = [d for d in summaries if d["dump_id"] == dump_id]
    assert mine["rows"] == 1 and mine["tables"] == {stack.accounts: 1}


# -- a second triggerer, and the first one SIGKILLed mid-dump --------------------------------
def changelog_counts(lake: str, source_id: str, table: str, op: str) -> dict:
    """How many ``op`` events each key of ``table`` has in the changelog."""
    from airflow_provider_dblog.outputs import make_output

    out = make_output(lake)
    out.open()
    try:
        counts: dict = {}
        for e in out.scan(source_id, table):
            if e.op.value == op:
                counts[e.key] = counts.get(e.key, 0) + 1
        return counts
    finally:
        out.close()


def verify_table(db: MySQLAdapter, source_id: str, lake: str, table: str) -> subprocess.CompletedProcess:
    """``dblog verify`` of one table: the changelog's replay against the source, row for row."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_dblog.cli",
            "verify",
            *("--source-type", "mysql", "--source-id", source_id, "--host", db.host, "--port", str(db.port)),
            *("--user", db.user, "--password-env", "E2E_VERIFY_PASSWORD", "--tables", table),
            *("--output", lake, "--table", table),
        ],
        env={**os.environ, "E2E_VERIFY_PASSWORD": db.password},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_sigkilled_triggerer_hands_its_capture_to_the_other_mid_dump(stack, capsys):
    """Two triggerers; the one running the capture is SIGKILLed (its whole process group, as
    the OOM killer or a node drain would) while a whole-table repair dump runs. Its capture
    child must stop by itself (parent_pipe.py), Airflow must hand the trigger to the other
    triggerer, whose new child resumes from the checkpoint: the dump finishes, every row
    written during the outage arrives once, and ``dblog verify`` finds no difference."""
    af, db, lake, source_id, accounts = stack.af, stack.db, stack.lake, stack.source_id, stack.accounts
    other = af.add_triggerer()
    wait_for(
        lambda: len(af.request("GET", "/api/v2/jobs?job_type=TriggererJob&is_alive=true")["jobs"]) >= 2,
        60,
        "the second triggerer to heartbeat",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.5,
    )
    insert_accounts(db, range(930001, 930401))  # a table of ~550 rows: a dump of ~55 chunks
    before = sum(changelog_counts(lake, source_id, accounts, "r").values())
    run_id = af.trigger("dblog_repair_dump", {"table": accounts, "keys": "", "chunk_size": 10, "delay_ms": 300})
    wait_for(  # the dump is under way: a few chunks are in the changelog
        lambda: sum(changelog_counts(lake, source_id, accounts, "r").values()) >= before + 50,
        120,
        "the dump's first chunks",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.2,
    )
    old_pids = set(af.capture_pids())
    (child,) = [p for p in old_pids if running(p)]  # one capture at a time (its lease)
    host = af.host_of(child)
    assert host is not None and host.startswith("triggerer"), (child, host)
    survivor = other if host != other else "triggerer"
    killed_at = time.monotonic()
    af.procs[host].kill()

    # rows written from the kill on, one every 0.2 s, until the new child captured one
    probes: list[int] = []

    def write_probe() -> None:
        probes.append(940001 + len(probes))
        insert_accounts(db, probes[-1:])

    wait_for(lambda: (write_probe(), not running(child))[1], 30, "the orphaned capture child to exit", interval=0.2)
    child_exited = time.monotonic() - killed_at
    wait_for(
        lambda: (write_probe(), bool(set(af.capture_pids()) - old_pids))[1],
        120,
        "the surviving triggerer to start a new capture child",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.2,
    )
    (new_child,) = set(af.capture_pids()) - old_pids
    new_child_at = time.monotonic() - killed_at
    assert af.host_of(new_child) == survivor, (new_child, af.host_of(new_child), survivor)
    first = probes[-1]
    wait_for(
        lambda: (write_probe(), (first,) in changelog_counts(lake, source_id, accounts, "c"))[1],
        120,
        "the new capture to write a row",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.2,
    )
    outage = time.monotonic() - killed_at
    with capsys.disabled():
        print(
            f"\n[e2e] triggerer SIGKILL: old child gone after {child_exited:.1f} s, new child after "
            f"{new_child_at:.1f} s, first new row durable after {outage:.1f} s"
        )
    assert af.wait_run("dblog_repair_dump", run_id, timeout=300) == "success", af.tails()
    wait_for(
        lambda: {(k,) for k in probes} <= set(changelog_counts(lake, source_id, accounts, "c")),
        120,
        "every row written during the outage",
        alive=af.assert_alive,
        detail=af.tails,
        interval=0.5,
    )
    created = changelog_counts(lake, source_id, accounts, "c")
    assert [k for k in probes if created[(k,)] != 1] == []  # nothing lost, nothing twice
    verified = verify_table(db, source_id, lake, accounts)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert af.task_state("dblog_capture", "capture") == "deferred"  # still the one long-lived task


# -- the Trigger form in a real browser -----------------------------------------------------
# docs/airflow.md's picture of the form; a test run writes it only when asked to
# (DBLOG_DOCS_SCREENSHOTS=1), so that `make test` leaves the checkout as it found it
DOCS_SCREENSHOT = REPO / "docs" / "img" / "airflow-repair-form.png"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1100",
]


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
    service = webdriver.ChromeService(
        executable_path="/usr/bin/chromedriver", log_output=str(tmp_path / "chromedriver.log")
    )
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.soak  # make soak: one of the longest runs (README)
def test_trigger_form_in_chromium(stack, browser, tmp_path):
    """Open the Trigger form of dblog_repair_dump, pick the table, type keys, submit: a run
    starts with that conf and its rows reach the changelog; for three keys, and for one key of
    each kind (integer, text, composite), which the form's native rendering once re-typed. A screenshot of the filled form
    goes to the test's directory (to docs/img/ with DBLOG_DOCS_SCREENSHOTS=1)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    # the React UI re-renders while it loads: an element found a moment ago may be gone
    af, wait = stack.af, WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    before = {r["dag_run_id"] for r in af.request("GET", "/api/v2/dags/dblog_repair_dump/dagRuns")["dag_runs"]}
    browser.get(af.base + "/api/v2/version")  # same origin first, so the login cookie can be set
    browser.add_cookie({"name": "_token", "value": af.token(), "path": "/"})  # what the login page sets

    def button(text: str):
        return [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == text]

    def open_form():
        """The Trigger dialog: its keys box and the table select's text input."""
        browser.get(af.base + "/dags/dblog_repair_dump")
        wait.until(lambda d: button("Trigger"))
        button("Trigger")[0].click()
        keys_box = wait.until(ec.element_to_be_clickable((By.NAME, "element_keys")))
        return keys_box, browser.find_element(By.XPATH, "//input[@name='element_table']/..//input[@type='text']")

    def pick(combo, name: str) -> None:
        """The table: a select built from DBLOG_REPAIR_TABLES; type to filter, click the option."""
        combo.click()
        combo.send_keys(Keys.CONTROL, "a")
        combo.send_keys(name)
        option = wait.until(
            lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, "[role=option]") if o.text.strip() == name]
        )
        option[0].click()

    def new_runs():
        runs = af.request("GET", "/api/v2/dags/dblog_repair_dump/dagRuns")["dag_runs"]
        return [r for r in runs if r["dag_run_id"] not in before]

    # three keys, then one integer key, one text key and one composite key, each alone
    requests = [(f"{stack.db.ns}.accounts", "101\n102\n103", {(101,), (102,), (103,)})]
    requests += [(table, text, {key}) for table, text, key in one_key_repairs(stack.db, 1)]
    for n, (table, text, keys) in enumerate(requests):
        keys_box, combo = open_form()
        if n == 0:
            pick(combo, f"{stack.db.ns}.notes")  # away from the default (the first table) and back
        pick(combo, table)
        keys_box.send_keys(text)
        chunk = browser.find_element(By.NAME, "element_chunk_size")
        chunk.send_keys(Keys.CONTROL, "a")
        chunk.send_keys("2")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", keys_box)
        if n == 0:
            shot = (
                DOCS_SCREENSHOT if os.environ.get("DBLOG_DOCS_SCREENSHOTS") == "1" else tmp_path / DOCS_SCREENSHOT.name
            )
            browser.save_screenshot(str(shot))
        button("Trigger")[-1].click()  # the dialog's submit button (the first opens the dialog)
        wait_for(lambda: new_runs(), 30, "the run the form triggered", alive=af.assert_alive, detail=af.tails)
        (run,) = new_runs()
        before.add(run["dag_run_id"])
        assert run["conf"]["table"] == table and run["conf"]["chunk_size"] == 2, run["conf"]
        assert run["conf"]["keys"].splitlines() == text.splitlines(), run["conf"]
        assert af.wait_run("dblog_repair_dump", run["dag_run_id"]) == "success", (text, af.tails())
        assert keys <= changelog_keys(stack.lake, stack.source_id, table, "r"), text


@pytest.mark.soak  # make soak: the second longest run of make test (214 s), moved to keep it near 35 min
def test_new_commits_land_through_the_asset_watcher_and_mirrors_equal_sources(stack, tmp_path, capsys):
    """Issue 12 parts 2 and 3 in a real Airflow: dblog_backfill (REST) dumps every table; the
    changelog's commits fire ChangelogCommitTrigger in the triggerer (an AssetWatcher), which
    runs dblog_land through SparkSubmitOperator; then every typed mirror equals its source."""
    from tests.integration.capture_proc import write_config

    af, db, lake, source_id = stack.af, stack.db, stack.lake, stack.source_id
    af.wait_ready(("dblog_land", "dblog_backfill"))
    af.unpause("dblog_backfill")
    run_id = af.trigger("dblog_backfill", {})
    assert af.wait_run("dblog_backfill", run_id, timeout=300) == "success", af.tails()
    insert_accounts(db, range(950001, 950006))  # a last write: the landing must carry it too
    wait_for(
        lambda: {(i,) for i in range(950001, 950006)} <= changelog_keys(lake, source_id, stack.accounts, "c"),
        120,
        "the last writes in the changelog",
        alive=af.assert_alive,
        detail=af.tails,
    )
    written = time.time()
    af.unpause("dblog_land")
    fired: list = []  # the watcher's asset events behind the run that landed the last writes

    def landed_after_the_last_write():
        runs = af.request("GET", "/api/v2/dags/dblog_land/dagRuns?order_by=run_after")["dag_runs"]
        done = [
            r
            for r in runs
            if r["state"] == "success"
            and r["run_type"] == "asset_triggered"
            and dt.datetime.fromisoformat(r["start_date"]).timestamp() > written
        ]
        for r in done:  # fired by the watcher (not only by the backfill's changelog asset event)
            events = af.request("GET", f"/api/v2/dags/dblog_land/dagRuns/{r['dag_run_id']}/upstreamAssetEvents")
            # the watcher's asset: dblog://commits/<lake>, named by its URI (assets/dblog.py)
            watched = [e for e in events["asset_events"] if e["uri"].startswith("dblog://commits/")]
            if watched:
                fired.extend(watched)
                return True
        return False

    t0 = time.monotonic()
    wait_for(
        landed_after_the_last_write,
        900,
        "an asset-triggered dblog_land run",
        alive=af.assert_alive,
        detail=af.tails,
        interval=2,
    )
    with capsys.disabled():
        print(f"\n[e2e] last write -> landed by an event-driven dblog_land run: {time.monotonic() - t0:.0f} s")
        print(f"[e2e] the watcher's asset event: {fired[0].get('extra')}")
    runs = af.request("GET", "/api/v2/dags/dblog_land/dagRuns")["dag_runs"]
    assert all(r["state"] in ("success", "running", "queued") for r in runs), runs

    config = write_config(tmp_path / "dblog.toml", db.source_config(source_id), tmp_path / "state.db", lake)
    env = {**os.environ, "DBLOG_SPARK_JARS": af.environ["DBLOG_SPARK_JARS"]}
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_dblog.spark.verify_mirror",
            "--config",
            str(config),
            "--lake",
            lake[len("delta://") :],
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    with capsys.disabled():
        print(check.stdout)
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert check.stdout.count(" 0 mismatches") == len(db.tables()), check.stdout


STATUS_SCREENSHOT = REPO / "docs" / "img" / "airflow-status-view.png"


@pytest.mark.soak  # make soak: chromium, like the trigger form's test
def test_status_page_in_chromium(stack, browser, tmp_path):
    """The status page in a browser logged in to Airflow (the UI's session cookie), reached by
    the capture task's link: it shows the running capture and the repair dumps. A screenshot
    goes to the test's directory (to docs/img/ with DBLOG_DOCS_SCREENSHOTS=1)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    af = stack.af
    dump_id = repair_one_key(stack)
    browser.set_window_size(1200, 1000)
    browser.get(af.base + "/api/v2/version")  # same origin first, so the login cookie can be set
    browser.add_cookie({"name": "_token", "value": af.token(), "path": "/"})
    browser.get(status_page_link(af))
    source = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "source"))
    assert source.text == stack.source_id
    assert browser.find_element(By.ID, "capture").get_attribute("data-state") == "running"
    statuses = {
        r.find_element(By.TAG_NAME, "td").text: r.get_attribute("data-status")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.dump")
    }
    assert statuses.get(dump_id) == "done", statuses
    shot = STATUS_SCREENSHOT if os.environ.get("DBLOG_DOCS_SCREENSHOTS") == "1" else tmp_path / STATUS_SCREENSHOT.name
    browser.save_screenshot(str(shot))
